"""Cross-attention fusion of two modalities, as in the survival-fusion papers of the hub's seeds
(MaxViT features + dual cross-attention; BioFusionNet's co-dual-cross-attention; PULSE's
multi-head cross-attention between sensor streams).

:class:`CrossAttention` lets the tokens of modality A attend to the tokens of modality B (a pre-norm
transformer block: attention, then an MLP, both residual). :class:`DualCrossAttention` runs it in
both directions, pools each side over its present tokens and fuses the two by concatenation or by a
learned gate.

Missing modality: a sample without modality B has an all-False ``b_mask`` row (its B tokens may
hold anything, e.g. zeros). Its attention update is then zero, so A's tokens pass through the
residual path unchanged by B, and the gated fusion uses A alone; the output stays finite.
"""
from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from hub.attention.functional import MultiHeadAttention


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean over the present tokens: (B, L, D), (B, L) -> (B, D); zero for a sample with none."""
    if mask is None:
        return x.mean(1)
    weights = mask.to(x.dtype).unsqueeze(-1)  # (B, L, 1)
    return (x * weights).sum(1) / weights.sum(1).clamp_min(1.0)


class CrossAttention(nn.Module):
    """Tokens of one modality attend to the tokens of another (multi-head, pre-norm, residual).

    Args:
        dim: width of the query tokens (and of the output).
        dim_context: width of the context tokens.
        num_heads: attention heads.
        mlp_ratio: hidden width of the residual MLP as a multiple of ``dim``; 0 drops the MLP.
        dropout: dropout on the attention weights and the MLP.

    Shapes:
        x: (B, Lq, dim), context: (B, Lk, dim_context), context_mask: (B, Lk) bool, True = present
        -> (out (B, Lq, dim), weights (B, num_heads, Lq, Lk) with ``need_weights``, else None),
        a pair like :class:`~hub.attention.functional.MultiHeadAttention`.

    >>> layer = CrossAttention(32, dim_context=16, num_heads=4)
    >>> layer(torch.randn(2, 10, 32), torch.randn(2, 7, 16))[0].shape
    torch.Size([2, 10, 32])
    """

    def __init__(self, dim: int, dim_context: int, num_heads: int = 8, mlp_ratio: float = 2.0, dropout: float = 0.0):
        super().__init__()
        self.dim, self.dim_context, self.num_heads, self.mlp_ratio = dim, dim_context, num_heads, mlp_ratio
        self.norm_query = nn.LayerNorm(dim)
        self.norm_context = nn.LayerNorm(dim_context)
        self.attn = MultiHeadAttention(dim, num_heads, dim_kv=dim_context, dropout=dropout)
        hidden = int(dim * mlp_ratio)
        self.mlp = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, dim), nn.Dropout(dropout)) if hidden else None

    def reset_parameters(self) -> None:
        for module in (self.norm_query, self.norm_context, self.attn, *(self.mlp or ())):
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()

    def forward(self, x: torch.Tensor, context: torch.Tensor, context_mask: torch.Tensor | None = None,
                need_weights: bool = False):
        attended, weights = self.attn(self.norm_query(x), self.norm_context(context), context_mask, need_weights)
        x = x + attended  # zero update for a sample whose context is absent
        if self.mlp is not None:
            x = x + self.mlp(x)
        return x, weights

    def extra_repr(self) -> str:
        return f"dim={self.dim}, dim_context={self.dim_context}, num_heads={self.num_heads}, mlp_ratio={self.mlp_ratio}"


class DualCrossAttention(nn.Module):
    """Co-attention: A attends to B and B attends to A, each side is pooled, then the two are fused.

    Args:
        dim_a, dim_b: token widths of the two modalities (each projected to ``dim``).
        dim: common width.
        num_heads: attention heads in each direction.
        fusion: ``"concat"`` (output ``2 * dim``) or ``"gate"`` (``g * a + (1 - g) * b`` with
            ``g = sigmoid(W [a; b])``, output ``dim``; ``g`` is 1 when B is absent, 0 when A is).
        mlp_ratio, dropout: as in :class:`CrossAttention`.

    Shapes:
        a: (B, La, dim_a), b: (B, Lb, dim_b), a_mask: (B, La), b_mask: (B, Lb) bool, True = present
        -> (B, num_features), and with ``need_weights`` a dict ``{"a_to_b": (B, H, La, Lb),
        "b_to_a": (B, H, Lb, La)}``.

    >>> fuse = DualCrossAttention(32, 8, dim=16, num_heads=4, fusion="gate")
    >>> fuse(torch.randn(2, 49, 32), torch.randn(2, 5, 8)).shape
    torch.Size([2, 16])
    """

    def __init__(self, dim_a: int, dim_b: int, dim: int, num_heads: int = 8,
                 fusion: Literal["concat", "gate"] = "concat", mlp_ratio: float = 2.0, dropout: float = 0.0):
        super().__init__()
        if fusion not in ("concat", "gate"):
            raise ValueError(f"fusion must be 'concat' or 'gate', got {fusion!r}")
        self.dim_a, self.dim_b, self.dim, self.fusion = dim_a, dim_b, dim, fusion
        self.num_features = 2 * dim if fusion == "concat" else dim
        self.proj_a = nn.Linear(dim_a, dim)
        self.proj_b = nn.Linear(dim_b, dim)
        self.a_to_b = CrossAttention(dim, dim, num_heads, mlp_ratio, dropout)
        self.b_to_a = CrossAttention(dim, dim, num_heads, mlp_ratio, dropout)
        self.gate = nn.Linear(2 * dim, dim) if fusion == "gate" else None

    def reset_parameters(self) -> None:
        for module in (self.proj_a, self.proj_b, self.a_to_b, self.b_to_a, self.gate):
            if module is not None:
                module.reset_parameters()

    def forward(self, a: torch.Tensor, b: torch.Tensor, a_mask: torch.Tensor | None = None,
                b_mask: torch.Tensor | None = None, need_weights: bool = False):
        a, b = self.proj_a(a), self.proj_b(b)  # (B, La, dim), (B, Lb, dim)
        a_out, a_weights = self.a_to_b(a, b, b_mask, need_weights)  # (B, La, dim), (B, H, La, Lb)
        b_out, b_weights = self.b_to_a(b, a, a_mask, need_weights)  # (B, Lb, dim), (B, H, Lb, La)
        pooled_a, pooled_b = masked_mean(a_out, a_mask), masked_mean(b_out, b_mask)  # (B, dim) each
        if self.gate is None:
            fused = torch.cat([pooled_a, pooled_b], dim=-1)  # (B, 2 * dim)
        else:
            gate = torch.sigmoid(self.gate(torch.cat([pooled_a, pooled_b], dim=-1)))  # (B, dim)
            if b_mask is not None:
                gate = torch.where(b_mask.any(-1, keepdim=True), gate, torch.ones_like(gate))
            if a_mask is not None:
                gate = torch.where(a_mask.any(-1, keepdim=True), gate, torch.zeros_like(gate))
            fused = gate * pooled_a + (1 - gate) * pooled_b
        return (fused, {"a_to_b": a_weights, "b_to_a": b_weights}) if need_weights else fused

    def extra_repr(self) -> str:
        return f"dim_a={self.dim_a}, dim_b={self.dim_b}, dim={self.dim}, fusion={self.fusion!r}"
