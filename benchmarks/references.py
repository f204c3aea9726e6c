"""Reference implementations the hub's models are timed against, in the same process: the same timm module in a
bare training loop, and a minimal PyG GAT (PyG's ``examples/gat.py`` in the paper's setup) fed the same input as
ours, dense and sparse CSR."""
from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F

from hub.attention.graph import sparse_input_dropout


class PlainGAT(torch.nn.Module):
    """The minimal PyG GAT (PyG's ``examples/gat.py`` in the paper's setup): the reference for ``gat``.
    ``forward(x (N, in_channels) dense or sparse CSR, edge_index (2, E)) -> (N, num_classes)`` logits.

    PyG's ``GATConv`` takes a sparse CSR ``x`` (its linear map is a sparse-dense product), but the example's
    ``F.dropout`` does not (no sparse kernel for ``bernoulli_``): a sparse ``x`` is dropped over its stored
    entries as ours is (:func:`hub.attention.graph.sparse_input_dropout`; plain ``F.dropout`` for a dense ``x``)."""

    def __init__(self, in_channels: int, num_classes: int):
        from torch_geometric.nn import GATConv

        super().__init__()
        self.conv1 = GATConv(in_channels, 8, heads=8, dropout=0.6)
        self.conv2 = GATConv(64, num_classes, heads=1, concat=False, dropout=0.6)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = F.elu(self.conv1(sparse_input_dropout(x, 0.6, self.training), edge_index))
        return self.conv2(F.dropout(x, 0.6, self.training), edge_index)


Step = Callable[[], None]


def reference_steps(family: str, model: torch.nn.Module, batch,
                    step_on: Callable[[object], Step]) -> list[tuple[str, Step | None, Step]]:
    """``[(description, our step or None, reference step)]``: the comparisons of this family with its reference
    implementation, each pair fed the same batch; ``step_on(batch)`` makes our training step on another form of
    the batch, None is our step on ``batch`` itself. For timm architectures a copy of the same module in a bare
    loop (``model(x)``, cross-entropy, AdamW: what the hub's task and step add); for ``gat`` :class:`PlainGAT` with
    Adam as in the paper, fed sparse CSR features (as the recipe's data gives ours) and dense features, against
    ours on each. Empty for other families."""
    import timm

    if isinstance(model, timm.models.VisionTransformer | timm.models.CoaT | timm.models.ByobNet | timm.models.ResNet):
        x, y = batch
        reference = copy.deepcopy(model)
        optimizer = torch.optim.AdamW(reference.parameters())

        def bare_step():
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(reference(x), y).backward()
            optimizer.step()

        return [("the same timm module, bare loop", None, bare_step)]
    if family == "gat":
        reference = PlainGAT(batch.x.shape[1], model.num_classes)
        optimizer = torch.optim.Adam(reference.parameters(), lr=0.005, weight_decay=5e-4)

        def pyg_step(graph) -> Callable[[], None]:
            def step():
                optimizer.zero_grad(set_to_none=True)
                out = reference(graph.x, graph.edge_index)
                F.cross_entropy(out[graph.train_mask], graph.y[graph.train_mask]).backward()
                optimizer.step()
            return step

        comparisons = []
        for layout, name in ((torch.sparse_csr, "sparse CSR"), (torch.strided, "dense")):
            graph = batch.clone()
            if batch.x.layout != layout:
                graph.x = batch.x.to_sparse_csr() if layout == torch.sparse_csr else batch.x.to_dense()
            ours = None if batch.x.layout == layout else step_on(graph)
            comparisons.append((f"minimal PyG GAT, {name} input", ours, pyg_step(graph)))
        return comparisons
    return []
