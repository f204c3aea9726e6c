"""TabM (Gorishniy et al., *TabM: Advancing Tabular Deep Learning with Parameter-Efficient Ensembling*,
ICLR 2025): one MLP that holds ``k`` ensemble members in BatchEnsemble style. Every linear layer keeps one
shared weight ``W`` and per-member adapters: ``y_i = ((x_i * r_i) W) * s_i + b_i``; the first layer's ``r``
starts with random signs (so the members differ from the first step), the others at 1. Each member has its
own head. The members are trained as independent models (the task averages their k losses) and the
prediction is the mean of their k predictions (probabilities for classification).

Shapes:
    x_num (B, F), x_cat (B, C) -> training: member logits (B, k, num_classes);
    eval: ensemble logits (B, num_classes) = log of the mean member probabilities (regression: mean value)

>>> tabm(num_numeric=3, num_classes=2, k=4).eval()(torch.randn(5, 3)).shape
torch.Size([5, 2])
"""
from __future__ import annotations

import math

import torch
from torch import nn

from hub.core.registry import register_model
from hub.layers.batch_ensemble import LinearBatchEnsemble, MemberHeads
from tabular.models.layers import CategoricalEmbeddings, flat_inputs


class TabM(nn.Module):
    """TabM: an MLP of ``depth`` BatchEnsemble blocks holding ``k`` members, with one head per member (see the module).

    Args:
        num_numeric: number of numeric features F.
        cat_cardinalities: number of codes of each categorical column (its length is C; may be empty).
        num_classes: classes (1 for regression).
        hidden: width of every block.
        depth: number of Linear (BatchEnsemble) -> ReLU -> Dropout blocks.
        k: ensemble members; training returns each member's logits, evaluation their mean prediction.
        cat_dim: embedding width of each categorical column.
        dropout: dropout after each block.

    Shapes: x_num (B, F), x_cat (B, C) -> training (B, k, num_classes); eval (B, num_classes)"""

    def __init__(self, num_numeric: int, cat_cardinalities: list[int], num_classes: int, hidden: int, depth: int,
                 k: int, cat_dim: int, dropout: float):
        super().__init__()
        self.num_numeric, self.k, self.num_classes = num_numeric, k, num_classes
        self.cat_embed = CategoricalEmbeddings(cat_cardinalities, cat_dim)
        widths = [num_numeric + len(cat_cardinalities) * cat_dim] + [hidden] * depth
        self.blocks = nn.Sequential(*(nn.Sequential(LinearBatchEnsemble(a, b, k, random_signs=i == 0), nn.ReLU(),
                                                    nn.Dropout(dropout))
                                      for i, (a, b) in enumerate(zip(widths[:-1], widths[1:]))))
        self.num_features = hidden
        self.reset_classifier(num_classes)

    def reset_classifier(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.head = MemberHeads(self.num_features, num_classes, self.k)

    def forward_features(self, x_num: torch.Tensor, x_cat: torch.Tensor | None = None) -> torch.Tensor:
        x = flat_inputs(x_num, x_cat, self.num_numeric, self.cat_embed)  # (B, D)
        return self.blocks(x[:, None].expand(-1, self.k, -1))  # (B, D) -> (B, k, D) -> (B, k, hidden)

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if pre_logits:
            return features
        members = self.head(features)  # (B, k, classes)
        if self.training:
            return members
        if self.num_classes == 1:
            return members.mean(1)  # (B, 1)
        return members.log_softmax(-1).logsumexp(1) - math.log(self.k)  # log mean probability, (B, classes)

    def forward(self, x_num: torch.Tensor, x_cat: torch.Tensor | None = None,
                index: torch.Tensor | None = None) -> torch.Tensor:
        """``index`` (training rows' ids, used by TabR's retrieval) is accepted for the shared batch format."""
        return self.forward_head(self.forward_features(x_num, x_cat))


@register_model(task="tabular")
def tabm(num_numeric: int = 8, cat_cardinalities: list[int] = (), num_classes: int = 2, hidden: int = 256,
         depth: int = 3, k: int = 32, cat_dim: int = 8, dropout: float = 0.1) -> TabM:
    """TabM: a BatchEnsemble MLP of k members, prediction = mean of the members."""
    return TabM(num_numeric, list(cat_cardinalities), num_classes, hidden, depth, k, cat_dim, dropout)
