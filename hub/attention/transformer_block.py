"""The Transformer block of the tabular families (Vaswani et al., 2017): multi-head self-attention and a
feed-forward network, each in a residual branch, with the LayerNorm after the sum (post-norm, TabTransformer's) or
before the branch (pre-norm, CARTE's). ViT-style families use timm's ``Block``; this one takes the key and
attention masks that timm's does not (a row's missing cells, CARTE's star graph).

Shapes:
    x: (B, L, dim), key_mask: (B, L) bool (True = present), attn_mask: bool broadcastable to (B, heads, L, L)
    -> (B, L, dim); with ``need_weights`` also the attention (B, heads, L, L).

>>> TransformerBlock(16, num_heads=4)(torch.randn(2, 5, 16)).shape
torch.Size([2, 5, 16])
"""
from __future__ import annotations

import torch
from torch import nn

from hub.attention.functional import MultiHeadAttention


class TransformerBlock(nn.Module):
    """Post-norm ``x = LN(x + MHA(x)); x = LN(x + FFN(x))``, or with ``norm_first``
    ``x = x + MHA(LN(x)); x = x + FFN(LN(x))``.

    Args:
        dim: token width.
        num_heads: attention heads (must divide ``dim``).
        dropout: on the attention weights, inside the feed-forward network and on both residual branches.
        ffn_ratio: the feed-forward network's hidden width as a multiple of ``dim``.
        norm_first: pre-norm (LayerNorm before each branch) instead of post-norm.
    """

    def __init__(self, dim: int, num_heads: int, dropout: float = 0.0, ffn_ratio: int = 4, norm_first: bool = False):
        super().__init__()
        self.norm_first = norm_first
        self.attn = MultiHeadAttention(dim, num_heads, dropout=dropout)
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_ratio * dim), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(ffn_ratio * dim, dim))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None,
                need_weights: bool = False):
        if self.norm_first:
            out, weights = self.attn(self.norm1(x), key_mask=key_mask, need_weights=need_weights, attn_mask=attn_mask)
            x = x + self.dropout(out)
            x = x + self.dropout(self.ffn(self.norm2(x)))
        else:
            out, weights = self.attn(x, key_mask=key_mask, need_weights=need_weights, attn_mask=attn_mask)
            x = self.norm1(x + self.dropout(out))
            x = self.norm2(x + self.dropout(self.ffn(x)))
        return (x, weights) if need_weights else x

    def extra_repr(self) -> str:
        return f"norm_first={self.norm_first}"
