"""Feature embeddings shared by the tabular models (no attention here: that lives in ``hub.attention``; the
periodic numerical embedding, shared with medical, is :class:`hub.layers.PeriodicEmbeddings`).

- :class:`CategoricalEmbeddings`: one learned vector per (column, category code), one table with offsets.
- :func:`flat_inputs`: numerics and flattened categorical embeddings side by side (the MLP-style input).

Shapes:
    CategoricalEmbeddings: x_cat (B, C) int64 -> (B, C, dim)

>>> CategoricalEmbeddings([4, 3], 8)(torch.tensor([[0, 2], [3, 1]])).shape
torch.Size([2, 2, 8])
"""
from __future__ import annotations

import math

import torch
from torch import nn

from hub.errors import DataError


class LinearHeadModel(nn.Module):
    """The shared tail of tabular models whose head is one linear layer on ``forward_features``: subclasses set
    ``num_features`` and ``head`` and define ``forward_features(x_num, x_cat)``."""

    num_features: int
    head: nn.Linear

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        return features if pre_logits else self.head(features)

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor | None = None,
                index: torch.Tensor | None = None) -> torch.Tensor:
        """``index`` (training rows' ids, used by TabR's retrieval) is accepted for the shared batch format."""
        return self.forward_head(self.forward_features(x_num, x_cat))

    def reset_classifier(self, num_classes: int) -> None:
        self.head = nn.Linear(self.num_features, num_classes)


class CategoricalEmbeddings(nn.Module):
    def __init__(self, cardinalities: list[int], dim: int):
        super().__init__()
        self.cardinalities = list(cardinalities)
        offsets = torch.tensor([0, *self.cardinalities[:-1]], dtype=torch.long).cumsum(0) if cardinalities else \
            torch.zeros(0, dtype=torch.long)
        self.register_buffer("offsets", offsets, persistent=False)
        self.dim = dim
        self.embed = nn.Embedding(sum(self.cardinalities), dim) if cardinalities else None  # none: no parameters
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.embed is not None:
            nn.init.uniform_(self.embed.weight, -1 / math.sqrt(self.dim), 1 / math.sqrt(self.dim))

    def forward(self, x_cat: torch.Tensor) -> torch.Tensor:
        if x_cat.shape[-1] != len(self.cardinalities):
            raise DataError(f"expected {len(self.cardinalities)} categorical columns, got {x_cat.shape[-1]}")
        if self.embed is None:
            return x_cat.new_zeros(*x_cat.shape, self.dim, dtype=torch.float32)  # (B, 0, dim)
        return self.embed(x_cat.long() + self.offsets)  # (B, C) -> (B, C, dim)

    def extra_repr(self) -> str:
        return f"cardinalities={self.cardinalities}, dim={self.dim}"


def check_numeric(x_num: torch.Tensor, expected: int) -> None:
    if x_num.shape[-1] != expected:
        raise DataError(f"expected {expected} numeric columns (missing indicators included), got {x_num.shape[-1]}")


def flat_inputs(x_num: torch.Tensor, x_cat: torch.Tensor | None, num_numeric: int,
                embeddings: CategoricalEmbeddings) -> torch.Tensor:
    """``(B, F + C * dim)``: the numerics, then each categorical column's embedding."""
    check_numeric(x_num, num_numeric)
    if x_cat is None:
        x_cat = x_num.new_zeros(x_num.shape[0], 0, dtype=torch.long)
    return torch.cat([x_num, embeddings(x_cat).flatten(1)], -1)  # (B, C, dim) -> (B, C * dim)
