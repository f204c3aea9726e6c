"""Graph attention networks for node classification: GAT, GATv2 and the conjoint-attention CAT.

The paper's transductive setup (Veličković et al., ICLR 2018): dropout on the input features, a
multi-head attention layer with ELU, dropout again, and an output attention layer (a single head on
Cora and CiteSeer), with dropout ``p`` on the attention weights of both layers. The input dropout
draws its mask over the nonzero entries of sparse bag-of-words features only
(:func:`hub.attention.graph.sparse_input_dropout`). CAT (He et al., NeurIPS 2021) is the same
network with conjoint attention layers; its structural interventions are computed once per graph
and cached.

Shapes:
    x: (N, in_channels) dense or sparse CSR, edge_index: (2, E) -> logits (N, num_classes);
    ``forward_features`` -> (N, heads * hidden); ``attention`` -> per layer (edge_index, alpha (E', heads)).

>>> model = gat(in_channels=16, num_classes=3)
>>> model(torch.randn(5, 16), torch.tensor([[0, 1, 2], [1, 2, 3]])).shape
torch.Size([5, 3])
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hub.attention.graph import CATLayer, GATLayer, conjoint_structure, sparse_input_dropout
from hub.core.registry import register_model


class GraphAttentionNet(nn.Module):
    """Two attention layers over the graph: ``heads`` x ``hidden`` with ELU, then ``out_heads`` averaged.

    Args:
        in_channels: node feature width.
        num_classes: node classes (the output layer's width).
        hidden: output width of each head of the first layer.
        heads: heads of the first layer, concatenated (``heads * hidden`` features).
        out_heads: heads of the output layer, averaged.
        dropout: dropout on the input features (over the stored entries when sparse), on the hidden features
            and on the attention weights of both layers.
        layer: ``"gat"``, ``"gatv2"``, ``"cat_implicit"`` or ``"cat_explicit"`` (CAT's two variants).
        num_clusters: spectral embedding size for CAT's cluster structure (default 16; unused by GAT and GATv2).

    Shapes: x (N, in_channels) dense or sparse CSR, edge_index (2, E) -> logits (N, num_classes)"""

    def __init__(self, in_channels: int, num_classes: int, hidden: int, heads: int, out_heads: int,
                 dropout: float, layer: str, num_clusters: int = 16):
        super().__init__()
        self.in_channels, self.hidden, self.heads, self.out_heads = in_channels, hidden, heads, out_heads
        self.dropout, self.layer, self.num_clusters = dropout, layer, num_clusters
        self.num_classes = num_classes
        self.num_features = heads * hidden
        self.conv = self._layer(in_channels, hidden, heads, concat=True)
        self.head = self._layer(self.num_features, num_classes, out_heads, concat=False)
        self._structure_key: tuple | None = None
        self._structure: tuple[torch.Tensor, torch.Tensor] | None = None

    def _layer(self, in_channels: int, out_channels: int, heads: int, concat: bool) -> nn.Module:
        if self.layer.startswith("cat_"):
            return CATLayer(in_channels, out_channels, heads, concat, self.dropout,
                            variant=self.layer.removeprefix("cat_"))
        return GATLayer(in_channels, out_channels, heads, concat, self.dropout, v2=self.layer == "gatv2")

    def _graph(self, edge_index: torch.Tensor, num_nodes: int) -> tuple[torch.Tensor, dict]:
        """The edges the layers see and their extra inputs: CAT's cached structural interventions."""
        if not isinstance(self.conv, CATLayer):
            return edge_index, {}
        weights = torch.arange(1, edge_index.shape[1] + 1, device=edge_index.device)
        key = (num_nodes, edge_index.shape[1], str(edge_index.device),
               int((edge_index[0] * weights).sum()), int((edge_index[1] * weights).sum()))
        if key != self._structure_key:  # a new graph: compute its structure once, outside the GNN
            self._structure = conjoint_structure(edge_index, num_nodes, self.num_clusters)
            self._structure_key = key
        edges, structure = self._structure
        return edges, {"structure": structure}

    def forward_features(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        edges, extra = self._graph(edge_index, x.shape[0])
        x = sparse_input_dropout(x, self.dropout, self.training)
        return F.elu(self.conv(x, edges, **extra))  # (N, heads * hidden)

    def forward_head(self, h: torch.Tensor, edge_index: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if pre_logits:
            return h
        edges, extra = self._graph(edge_index, h.shape[0])
        return self.head(F.dropout(h, self.dropout, self.training), edges, **extra)  # (N, num_classes)

    def forward(self, x: torch.Tensor, edge_index: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x, edge_index), edge_index)

    @torch.no_grad()
    def attention(self, x: torch.Tensor, edge_index: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Edge attention weights of both layers: ``[(edge_index (2, E'), alpha (E', heads)), ...]``."""
        edges, extra = self._graph(edge_index, x.shape[0])
        h, first = self.conv(sparse_input_dropout(x, self.dropout, self.training), edges, **extra,
                             return_attention=True)
        _, second = self.head(F.dropout(F.elu(h), self.dropout, self.training), edges, **extra,
                              return_attention=True)
        return [first, second]

    def reset_classifier(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.head = self._layer(self.num_features, num_classes, self.out_heads, concat=False)


def _create(in_channels: int, num_classes: int, hidden: int, heads: int, out_heads: int, dropout: float,
            layer: str, num_clusters: int = 16) -> GraphAttentionNet:
    return GraphAttentionNet(in_channels, num_classes, hidden, heads, out_heads, dropout, layer, num_clusters)


@register_model(task="node-classification")
def gat(in_channels: int = 1433, num_classes: int = 7, hidden: int = 8, heads: int = 8, out_heads: int = 1,
        dropout: float = 0.6) -> GraphAttentionNet:
    """GAT (Veličković et al., ICLR 2018), transductive setup: 8 heads x 8 hidden, ELU, one output head."""
    return _create(in_channels, num_classes, hidden, heads, out_heads, dropout, layer="gat")


@register_model(task="node-classification")
def gatv2(in_channels: int = 1433, num_classes: int = 7, hidden: int = 8, heads: int = 8, out_heads: int = 1,
          dropout: float = 0.6) -> GraphAttentionNet:
    """GATv2 (Brody et al., ICLR 2022) in GAT's transductive setup."""
    return _create(in_channels, num_classes, hidden, heads, out_heads, dropout, layer="gatv2")


@register_model(task="node-classification")
def cat(in_channels: int = 1433, num_classes: int = 7, hidden: int = 8, heads: int = 8, out_heads: int = 1,
        dropout: float = 0.6, variant: str = "implicit", num_clusters: int = 16) -> GraphAttentionNet:
    """CAT, graph conjoint attention (He et al., NeurIPS 2021): GAT's setup with conjoint attention layers."""
    if variant not in ("implicit", "explicit"):
        raise ValueError(f"cat variant must be 'implicit' or 'explicit', got {variant!r}")
    return _create(in_channels, num_classes, hidden, heads, out_heads, dropout, f"cat_{variant}", num_clusters)
