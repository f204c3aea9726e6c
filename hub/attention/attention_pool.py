"""Attention-based aggregation (Touvron et al. 2021, "Augmenting Convolutional networks with attention-based
aggregation", PatchConvNet; seed 000 #80): a learned class token attends once to the feature map's tokens and to
itself, replacing the global average pool. Its attention row says which positions decided the class.

The block is the core's :class:`~hub.attention.cross_attention.CrossAttention` (pre-norm attention, then a residual
MLP) with the class token as the single query and ``[class token, tokens]`` as the context, followed by a LayerNorm,
as in the paper's "learned aggregation" layer. timm's ``AttentionPoolLatent`` is close but attends to the tokens only
and has no residual through the latent, so the paper's layer is built here from the core's block.

Shapes:
    x: (B, N, dim) tokens, or (B, dim, H, W) maps (flattened to N = H * W tokens)
    -> pooled (B, dim), and with ``need_weights`` the class token's attention (B, heads, 1 + N): index 0 is the
    class token itself, then the tokens in row-major order.

>>> pool = AttentionPool(16, num_heads=2)
>>> pool(torch.randn(2, 16, 4, 4)).shape
torch.Size([2, 16])
"""
from __future__ import annotations

import torch
from torch import nn

from hub.attention.cross_attention import CrossAttention

# ``global_pool`` of the hub's CNN families (as timm names it): their average (airbench: max) pool, or this layer
GLOBAL_POOLS = ("avg", "attention")


class AttentionPool(nn.Module):
    """A learned class token that attends to ``[itself, tokens]``, then a residual MLP and a LayerNorm.

    Args:
        dim: token width (channels of a feature map).
        num_heads: attention heads; ``dim`` must divide by it.
        mlp_ratio: hidden width of the residual MLP as a multiple of ``dim`` (0 drops it).
        dropout: dropout on the attention weights and the MLP.
    """

    def __init__(self, dim: int, num_heads: int = 1, mlp_ratio: float = 3.0, dropout: float = 0.0):
        super().__init__()
        self.dim, self.num_heads = dim, num_heads
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.block = CrossAttention(dim, dim, num_heads, mlp_ratio, dropout)
        self.norm = nn.LayerNorm(dim)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.block.reset_parameters()
        self.norm.reset_parameters()

    def forward(self, x: torch.Tensor, need_weights: bool = False):
        if x.dim() == 4:
            x = x.flatten(2).transpose(1, 2)  # (B, dim, H, W) -> (B, H * W, dim)
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, dim)
        pooled, weights = self.block(cls, torch.cat([cls, x], dim=1), need_weights=need_weights)
        pooled = self.norm(pooled[:, 0])  # (B, dim)
        return (pooled, weights) if need_weights else pooled

    def extra_repr(self) -> str:
        return f"dim={self.dim}, num_heads={self.num_heads}"
