"""Self-attention restricted to neighbours: a Transformer block whose tokens (graph nodes) attend only
where a boolean (N, N) adjacency allows.

This is graph attention in the Transformer form (scaled dot-product scores over each node's neighbours,
as in the spatial attention of traffic models such as TESTAM, Lee et al., ICLR 2024, and GMAN), not
GAT's additive scores (see ``hub.attention.graph`` for GAT). Without an adjacency it is plain self-attention
over all nodes. The block is post-norm like the Set Transformer's MAB:
``H = LN(X + MHA(X, X | adj))``, ``out = LN(H + rFF(H))``.

Shapes:
    x: (B, N, dim), adjacency: (N, N) or (B, N, N) bool, True = i may attend to j
    -> (B, N, dim); weights (B, heads, N, N) with ``need_weights``.

>>> block = NeighbourAttention(16, num_heads=4)
>>> block(torch.randn(2, 5, 16), torch.eye(5, dtype=torch.bool)).shape
torch.Size([2, 5, 16])
"""
from __future__ import annotations

import torch
from torch import nn

from hub.attention.functional import MultiHeadAttention, attention
from hub.errors import DataError


class NeighbourAttention(nn.Module):
    """Post-norm self-attention block over nodes, masked by an adjacency (see the module doc).

    Args:
        dim: token width.
        num_heads: attention heads.
        dropout: dropout on the attention weights (training only).
    """

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0):
        super().__init__()
        self.dim, self.num_heads = dim, num_heads
        self.attn = MultiHeadAttention(dim, num_heads, dropout=dropout)
        self.rff = nn.Sequential(nn.Linear(dim, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.norm1 = nn.LayerNorm(dim)
        self.norm2 = nn.LayerNorm(dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for module in (self.attn, self.norm1, self.norm2, self.rff[0], self.rff[2]):
            module.reset_parameters()

    def forward(self, x: torch.Tensor, adjacency: torch.Tensor | None = None, need_weights: bool = False):
        batch, nodes, _ = x.shape
        mask = None
        if adjacency is not None:
            if adjacency.dtype != torch.bool or adjacency.shape[-2:] != (nodes, nodes):
                raise DataError(f"expected a bool adjacency of shape ({nodes}, {nodes}), "
                                f"got {adjacency.dtype} {tuple(adjacency.shape)}")
            mask = adjacency[None, None] if adjacency.ndim == 2 else adjacency[:, None]  # (B|1, 1, N, N)
        mha = self.attn
        q, k, v = (mha.split_heads(proj(x)) for proj in (mha.q_proj, mha.k_proj, mha.v_proj))  # (B, H, N, Dh)
        out, weights = attention(q, k, v, mask, mha.dropout if self.training else 0.0, need_weights)
        out = mha.out_proj(out.transpose(1, 2).reshape(batch, nodes, self.dim))  # (B, H, N, Dh) -> (B, N, D)
        h = self.norm1(x + out)
        h = self.norm2(h + self.rff(h))
        return (h, weights) if need_weights else h

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}"
