"""Scaled dot-product and multi-head attention shared by every layer of the core.

:func:`attention` runs ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels on GPU)
unless the weights are asked for; then it computes the same math explicitly. Masks are boolean
with ``True`` = attend (a present token). A query row whose keys are all masked (an empty set, an
absent modality) gets a zero output and zero weights instead of SDPA's NaN.

Shapes:
    q: (B, H, Lq, Dh), k: (B, H, Lk, Dh), v: (B, H, Lk, Dv),
    mask: bool, broadcastable to (B, H, Lq, Lk) -> out (B, H, Lq, Dv), weights (B, H, Lq, Lk) or None.

>>> q = k = v = torch.randn(2, 4, 5, 8)
>>> attention(q, k, v)[0].shape
torch.Size([2, 4, 5, 8])
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hub.errors import DataError


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
              dropout_p: float = 0.0, need_weights: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(q kᵀ / √Dh) v over the keys, with a boolean mask (``True`` = attend)."""
    if k.shape[-2] == 0:  # no keys at all (an empty set): nothing to attend to
        out = q.new_zeros(*q.shape[:-1], v.shape[-1])
        return out, (q.new_zeros(*q.shape[:-1], 0) if need_weights else None)
    has_key = None
    if mask is not None:
        has_key = mask.any(-1, keepdim=True)  # (B, H|1, Lq|1, 1)
        mask = mask | ~has_key  # an all-masked row attends everywhere, then is zeroed below
    if need_weights:
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, Lq, Lk)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = scores.softmax(-1)
        if has_key is not None:
            weights = weights * has_key
        out = F.dropout(weights, dropout_p) @ v  # (B, H, Lq, Dv)
        return out, weights
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)  # (B, H, Lq, Dv)
    if has_key is not None:
        out = out * has_key
    return out, None


def key_padding_mask(key_mask: torch.Tensor | None, batch: int, length: int, name: str = "key_mask"
                     ) -> torch.Tensor | None:
    """A ``(B, Lk)`` presence mask as ``(B, 1, 1, Lk)`` for :func:`attention`, checked against the keys."""
    if key_mask is None:
        return None
    if key_mask.dtype != torch.bool or tuple(key_mask.shape) != (batch, length):
        raise DataError(f"expected {name} of dtype bool and shape {(batch, length)} (True = present), "
                        f"got {key_mask.dtype} {tuple(key_mask.shape)}")
    return key_mask[:, None, None, :]  # (B, 1, 1, Lk)


class MultiHeadAttention(nn.Module):
    """Multi-head attention (Vaswani et al., 2017) with separate query and key/value widths.

    Args:
        dim: query width (and output width unless ``dim_out`` is given).
        dim_kv: key/value token width (default ``dim``).
        num_heads: heads; ``dim_attn`` must divide by it.
        dim_attn: width of the projected queries/keys/values (default ``dim``).
        dim_out: output width (default ``dim``).
        dropout: dropout on the attention weights (training only).
        bias: biases in the projections.

    Shapes:
        query: (B, Lq, dim), context: (B, Lk, dim_kv) (default: the query, self-attention),
        key_mask: (B, Lk) bool, True = present; attn_mask: bool broadcastable to (B, num_heads, Lq, Lk),
        True = may attend (e.g. an adjacency as (B|1, 1, Lq, Lk)); both masks combine with AND
        -> out (B, Lq, dim_out), weights (B, num_heads, Lq, Lk) when ``need_weights`` else None.

    >>> mha = MultiHeadAttention(16, num_heads=4, dim_kv=8)
    >>> mha(torch.randn(2, 5, 16), torch.randn(2, 7, 8))[0].shape
    torch.Size([2, 5, 16])
    """

    def __init__(self, dim: int, num_heads: int, dim_kv: int | None = None, dim_attn: int | None = None,
                 dim_out: int | None = None, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.dim, self.num_heads = dim, num_heads
        self.dim_kv, self.dim_attn, self.dim_out = dim_kv or dim, dim_attn or dim, dim_out or dim
        if self.dim_attn % num_heads:
            raise ValueError(f"dim_attn={self.dim_attn} must be divisible by num_heads={num_heads}")
        self.dropout = dropout
        self.q_proj = nn.Linear(dim, self.dim_attn, bias=bias)
        self.k_proj = nn.Linear(self.dim_kv, self.dim_attn, bias=bias)
        self.v_proj = nn.Linear(self.dim_kv, self.dim_attn, bias=bias)
        self.out_proj = nn.Linear(self.dim_attn, self.dim_out, bias=bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        for linear in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(linear.weight)
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        # (B, L, D) -> (B, H, L, D / H)
        return x.view(batch, length, self.num_heads, self.dim_attn // self.num_heads).transpose(1, 2)

    def forward(self, query: torch.Tensor, context: torch.Tensor | None = None, key_mask: torch.Tensor | None = None,
                need_weights: bool = False, attn_mask: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        context = query if context is None else context
        mask = key_padding_mask(key_mask, context.shape[0], context.shape[1])  # (B, 1, 1, Lk) or None
        if attn_mask is not None:  # bool, broadcastable to (B, H, Lq, Lk), True = may attend
            mask = attn_mask if mask is None else mask & attn_mask
        q = self.split_heads(self.q_proj(query))  # (B, H, Lq, Dh)
        k = self.split_heads(self.k_proj(context))  # (B, H, Lk, Dh)
        v = self.split_heads(self.v_proj(context))  # (B, H, Lk, Dh)
        out, weights = attention(q, k, v, mask, self.dropout if self.training else 0.0, need_weights)
        out = out.transpose(1, 2).reshape(query.shape[0], query.shape[1], self.dim_attn)  # (B, H, Lq, Dh) -> (B, Lq, D)
        return self.out_proj(out), weights

    def extra_repr(self) -> str:
        return (f"dim={self.dim}, num_heads={self.num_heads}, dim_kv={self.dim_kv}, dim_attn={self.dim_attn}, "
                f"dim_out={self.dim_out}, dropout={self.dropout}")
