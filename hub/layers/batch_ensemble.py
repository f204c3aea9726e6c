"""BatchEnsemble layers (Wen et al., ICLR 2020) in the style of TabM (Gorishniy et al., ICLR 2025): ``k``
ensemble members share one weight and each has its own rank-1 adapters, bias and head. Used by the TabM
MLP and by the ICU model TFCAM's summary layer.

Shapes:
    LinearBatchEnsemble: (B, k, dim_in) -> (B, k, dim_out)
    MemberHeads: (B, k, dim) -> (B, k, num_classes)

>>> LinearBatchEnsemble(6, 4, k=3, random_signs=True)(torch.randn(2, 3, 6)).shape
torch.Size([2, 3, 4])
"""
from __future__ import annotations

import math

import torch
from torch import nn


class LinearBatchEnsemble(nn.Module):
    """k members sharing ``weight`` (in, out), each with its own ``r`` (k, in), ``s`` (k, out) and bias:
    ``y_i = ((x_i * r_i) W) * s_i + b_i``. ``random_signs`` starts ``r`` at random signs (so the members differ
    from the first step; TabM does this in the first layer), else at 1.

    Args:
        dim_in: input width.
        dim_out: output width.
        k: ensemble members.
        random_signs: start ``r`` at random +-1 (True) or at 1 (False).

    Shapes: (B, k, in) -> (B, k, out)
    """

    def __init__(self, dim_in: int, dim_out: int, k: int, random_signs: bool):
        super().__init__()
        self.dim_in, self.dim_out, self.k, self.random_signs = dim_in, dim_out, k, random_signs
        self.weight = nn.Parameter(torch.empty(dim_in, dim_out))
        self.r = nn.Parameter(torch.empty(k, dim_in))
        self.s = nn.Parameter(torch.empty(k, dim_out))
        self.bias = nn.Parameter(torch.empty(k, dim_out))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1 / math.sqrt(self.dim_in)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)
        nn.init.ones_(self.s)
        if self.random_signs:
            self.r.data.copy_(torch.randint(0, 2, self.r.shape).float() * 2 - 1)
        else:
            nn.init.ones_(self.r)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.r) @ self.weight * self.s + self.bias  # (B, k, in) -> (B, k, out)

    def extra_repr(self) -> str:
        return f"dim_in={self.dim_in}, dim_out={self.dim_out}, k={self.k}"


class MemberHeads(nn.Module):
    """One linear head per member. Shapes: (B, k, D) -> (B, k, num_classes)"""

    def __init__(self, dim: int, num_classes: int, k: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(k, dim, num_classes))
        self.bias = nn.Parameter(torch.zeros(k, num_classes))
        nn.init.uniform_(self.weight, -1 / math.sqrt(dim), 1 / math.sqrt(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bkd,kdc->bkc", x, self.weight) + self.bias
