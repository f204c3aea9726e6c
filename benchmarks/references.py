"""Reference implementations the hub's models are timed against, in the same process: the same timm module in a
bare training loop, and a minimal PyG GAT (PyG's ``examples/gat.py`` in the paper's setup)."""
from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F


class PlainGAT(torch.nn.Module):
    """The minimal PyG GAT (PyG's ``examples/gat.py`` in the paper's setup): the reference for ``gat``.
    ``forward(x (N, in_channels) dense, edge_index (2, E)) -> (N, num_classes)`` logits."""

    def __init__(self, in_channels: int, num_classes: int):
        from torch_geometric.nn import GATConv

        super().__init__()
        self.conv1 = GATConv(in_channels, 8, heads=8, dropout=0.6)
        self.conv2 = GATConv(64, num_classes, heads=1, concat=False, dropout=0.6)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        x = F.elu(self.conv1(F.dropout(x, 0.6, self.training), edge_index))
        return self.conv2(F.dropout(x, 0.6, self.training), edge_index)


def reference_step(family: str, model: torch.nn.Module, batch) -> tuple[str, Callable[[], None]] | None:
    """``(description, train_step)`` of the reference implementation for this family on ``batch``, or None:
    for timm architectures a copy of the same module in a bare loop (``model(x)``, cross-entropy, AdamW: what the
    hub's task and step add), for ``gat`` :class:`PlainGAT` with Adam as in the paper."""
    import timm

    if isinstance(model, timm.models.VisionTransformer | timm.models.CoaT | timm.models.ByobNet | timm.models.ResNet):
        x, y = batch
        reference = copy.deepcopy(model)
        optimizer = torch.optim.AdamW(reference.parameters())

        def bare_step():
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(reference(x), y).backward()
            optimizer.step()

        return "the same timm module, bare loop", bare_step
    if family == "gat":
        graph = batch
        reference = PlainGAT(graph.x.shape[1], model.num_classes)
        x = graph.x.to_dense() if graph.x.layout != torch.strided else graph.x
        optimizer = torch.optim.Adam(reference.parameters(), lr=0.005, weight_decay=5e-4)

        def pyg_step():
            optimizer.zero_grad(set_to_none=True)
            out = reference(x, graph.edge_index)
            F.cross_entropy(out[graph.train_mask], graph.y[graph.train_mask]).backward()
            optimizer.step()

        return "minimal PyG GAT", pyg_step
    return None
