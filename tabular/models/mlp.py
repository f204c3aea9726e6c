"""MLP baseline for tables: numerics and categorical embeddings concatenated, then ``depth`` blocks of
Linear -> ReLU -> Dropout and a linear head (the "MLP" of Gorishniy et al., *Revisiting Deep Learning
Models for Tabular Data*, NeurIPS 2021, and the baseline of the TabR and TabM papers).

Shapes:
    x_num (B, F), x_cat (B, C) int64 -> logits (B, num_classes) (regression: num_classes = 1)

>>> model = mlp(num_numeric=3, cat_cardinalities=[4], num_classes=2)
>>> model(torch.randn(5, 3), torch.zeros(5, 1, dtype=torch.long)).shape
torch.Size([5, 2])
"""
from __future__ import annotations

import torch
from torch import nn

from hub.core.registry import register_model
from tabular.models.layers import CategoricalEmbeddings, LinearHeadModel, flat_inputs


class TabularMLP(LinearHeadModel):
    """MLP over the numerics and categorical embeddings, concatenated (see the module).

    Args:
        num_numeric: number of numeric features F.
        cat_cardinalities: number of codes of each categorical column (its length is C; may be empty).
        num_classes: outputs of the head (1 for regression).
        hidden: width of every block.
        depth: number of Linear -> ReLU -> Dropout blocks.
        cat_dim: embedding width of each categorical column.
        dropout: dropout after each block.

    Shapes: x_num (B, F), x_cat (B, C) int64 -> logits (B, num_classes)"""

    def __init__(self, num_numeric: int, cat_cardinalities: list[int], num_classes: int, hidden: int, depth: int,
                 cat_dim: int, dropout: float):
        super().__init__()
        self.num_numeric = num_numeric
        self.cat_embed = CategoricalEmbeddings(cat_cardinalities, cat_dim)
        widths = [num_numeric + len(cat_cardinalities) * cat_dim] + [hidden] * depth
        self.blocks = nn.Sequential(*(nn.Sequential(nn.Linear(a, b), nn.ReLU(), nn.Dropout(dropout))
                                      for a, b in zip(widths[:-1], widths[1:])))
        self.num_features = widths[-1]
        self.head = nn.Linear(self.num_features, num_classes)

    def forward_features(self, x_num: torch.Tensor, x_cat: torch.Tensor | None = None) -> torch.Tensor:
        return self.blocks(flat_inputs(x_num, x_cat, self.num_numeric, self.cat_embed))  # (B, hidden)


@register_model(task="tabular")
def mlp(num_numeric: int = 8, cat_cardinalities: list[int] = (), num_classes: int = 2, hidden: int = 256,
        depth: int = 3, cat_dim: int = 8, dropout: float = 0.1) -> TabularMLP:
    """MLP baseline over numerics and categorical embeddings."""
    return TabularMLP(num_numeric, list(cat_cardinalities), num_classes, hidden, depth, cat_dim, dropout)
