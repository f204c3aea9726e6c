"""A GRU with observation masks over ICU stays: the recurrent baseline for TFCAM on PhysioNet 2012.

Each hour's input is the carried-forward values and the observation mask side by side (the simplest
form of GRU-D's idea: the network sees which values are fresh); the last hidden state and the
admission descriptors go through a linear head.

Shapes:
    values, mask: (B, T, F), static: (B, S) -> logits (B, num_classes).

>>> icu_gru(num_variables=37, num_static=9)(torch.zeros(2, 48, 37), torch.ones(2, 48, 37, dtype=torch.bool),
...                                          torch.zeros(2, 9)).shape
torch.Size([2, 2])
"""
from __future__ import annotations

import torch
from torch import nn

from hub.core.registry import register_model
from medical.models.tfcam import check_stays


class MaskedGRU(nn.Module):
    """A GRU over each hour's [values, observation mask], its last state with the descriptors through a linear head.

    Args:
        num_variables: time-series variables F.
        num_static: admission descriptors S, joined to the last hidden state.
        num_classes: classes.
        hidden: GRU hidden width.
        dropout: dropout before the head.

    Shapes: values, mask (B, T, F), static (B, S) -> logits (B, num_classes)"""

    def __init__(self, num_variables: int, num_static: int, num_classes: int, hidden: int, dropout: float):
        super().__init__()
        self.num_variables, self.num_static = num_variables, num_static
        self.gru = nn.GRU(2 * num_variables, hidden, batch_first=True)
        self.num_features = hidden + num_static
        self.dropout = nn.Dropout(dropout)
        self.reset_classifier(num_classes)

    def reset_classifier(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes)

    def forward_features(self, values: torch.Tensor, mask: torch.Tensor, static: torch.Tensor) -> torch.Tensor:
        check_stays(values, mask, static, self.num_variables, self.num_static)
        _, last = self.gru(torch.cat([values, mask.to(values.dtype)], -1))  # (1, B, hidden)
        return torch.cat([last[0], static], -1)  # (B, hidden + S)

    def forward(self, values: torch.Tensor, mask: torch.Tensor, static: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(self.forward_features(values, mask, static)))


@register_model(task="classification")
def icu_gru(num_variables: int = 37, num_static: int = 9, num_classes: int = 2, hidden: int = 64,
            dropout: float = 0.2) -> MaskedGRU:
    """GRU over [values, observation mask] per hour, with the admission descriptors at the head."""
    return MaskedGRU(num_variables, num_static, num_classes, hidden, dropout)
