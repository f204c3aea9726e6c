"""Graph classification: GAT node encoder, Set Transformer PMA readout (Lee et al., ICML 2019), linear head.

The node embeddings of each graph form a set; PMA's learned seeds attend over it (pooling by
multihead attention, invariant to the node order), and the pooled seeds are classified. Shown on
generated graphs (``graph_families``): telling Erdős–Rényi graphs from Barabási–Albert graphs of
the same size and mean degree, which differ in their degree distribution only.

Shapes:
    x: (N, in_channels), edge_index: (2, E), batch: (N,) graph of each node -> logits (B, num_classes);
    ``forward_features`` -> (B, num_seeds * heads * hidden).

>>> model = gat_pma(in_channels=2, num_classes=2)
>>> model(torch.randn(6, 2), torch.tensor([[0, 1, 3], [1, 2, 4]]), torch.tensor([0, 0, 0, 1, 1, 1])).shape
torch.Size([2, 2])
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.utils import to_dense_batch

from hub.attention.graph import GATLayer
from hub.attention.set_transformer import PMA
from hub.core.registry import register_model


class GATSetClassifier(nn.Module):
    """``num_layers`` GAT layers (ELU) -> PMA with ``num_seeds`` seeds over each graph's nodes -> linear.

    Args:
        in_channels: node feature width.
        num_classes: graph classes.
        hidden: output width of each GAT head.
        heads: GAT heads per layer, concatenated (node embeddings of width ``heads * hidden``).
        num_layers: GAT layers.
        num_seeds: PMA's learned seeds; the pooled seeds are flattened to ``num_seeds * heads * hidden`` features.
        pma_heads: attention heads of the PMA readout (must divide ``heads * hidden``).
        dropout: dropout on each GAT layer's input, on its attention weights and on the pooled features before
            the head.

    Shapes: x (N, in_channels), edge_index (2, E), batch (N,) -> logits (B, num_classes)"""

    def __init__(self, in_channels: int, num_classes: int, hidden: int, heads: int, num_layers: int,
                 num_seeds: int, pma_heads: int, dropout: float):
        super().__init__()
        dim = heads * hidden
        self.dropout = dropout
        self.convs = nn.ModuleList(GATLayer(in_channels if i == 0 else dim, hidden, heads, dropout=dropout)
                                   for i in range(num_layers))
        self.pool = PMA(dim, num_seeds, pma_heads)
        self.num_features = num_seeds * dim
        self.head = nn.Linear(self.num_features, num_classes)

    def _nodes(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        for conv in self.convs:
            x = F.elu(conv(F.dropout(x, self.dropout, self.training), edge_index))
        return x  # (N, heads * hidden)

    def forward_features(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor | None = None):
        batch = torch.zeros(x.shape[0], dtype=torch.long, device=x.device) if batch is None else batch
        dense, mask = to_dense_batch(self._nodes(x, edge_index), batch)  # (B, N_max, dim), (B, N_max)
        return self.pool(dense, mask).flatten(1)  # (B, num_seeds * dim)

    def pool_attention(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        """The PMA pooling's attention on each node of one graph, mean over heads and seeds. Shapes: -> (N,)."""
        _, weights = self.pool(self._nodes(x, edge_index)[None], None, need_weights=True)  # (1, H, seeds, N)
        return weights.mean((1, 2))[0]

    def forward_head(self, z: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return z if pre_logits else self.head(F.dropout(z, self.dropout, self.training))

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor | None = None):
        return self.forward_head(self.forward_features(x, edge_index, batch))

    @torch.no_grad()
    def attention(self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor | None = None) -> dict:
        """``{"edges": [(edge_index, alpha (E', heads)) per GAT layer], "pool": (B, H, num_seeds, N_max)}``."""
        batch = torch.zeros(x.shape[0], dtype=torch.long, device=x.device) if batch is None else batch
        edges = []
        for conv in self.convs:
            x, weights = conv(F.dropout(x, self.dropout, self.training), edge_index, return_attention=True)
            x = F.elu(x)
            edges.append(weights)
        dense, mask = to_dense_batch(x, batch)
        _, pool = self.pool(dense, mask, need_weights=True)
        return {"edges": edges, "pool": pool}

    def reset_classifier(self, num_classes: int) -> None:
        self.head = nn.Linear(self.num_features, num_classes)


@register_model(task="graph-classification")
def gat_pma(in_channels: int = 2, num_classes: int = 2, hidden: int = 8, heads: int = 4, num_layers: int = 2,
            num_seeds: int = 1, pma_heads: int = 4, dropout: float = 0.0) -> GATSetClassifier:
    """GAT node encoder with a Set Transformer PMA readout, for graph classification."""
    return GATSetClassifier(in_channels, num_classes, hidden, heads, num_layers, num_seeds, pma_heads, dropout)


# ---- generated graph families ---------------------------------------------------------------------------
