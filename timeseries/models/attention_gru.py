"""Attention-based GRU for remaining useful life (the seeds' 002 #20: an attention GRU for degradation
prediction and attention-based RUL estimation of semiconductor lasers).

A GRU reads the window; its last hidden state queries all hidden states through the core's multi-head
attention, and the attended context with the last state feeds an MLP and a linear RUL forecast head.

Shapes:
    x: (B, window, num_sensors) -> RUL forecast (B, horizon), in cycles.

>>> model = rul_attention_gru(num_sensors=14, window=30, horizon=10)
>>> model(torch.zeros(2, 30, 14)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

import torch
from torch import nn

from hub.attention.functional import MultiHeadAttention
from hub.core.registry import register_model
from timeseries.models.rul_attention import RULForecaster, check_windows


class AttentionGRU(RULForecaster):
    """GRU encoder, attention of the last state over all states, RUL forecast head.

    Args:
        num_sensors, window, horizon, rul_scale: as :class:`timeseries.models.rul_attention.RULAttention`.
        dim: GRU hidden width.
        num_layers: stacked GRU layers.
        num_heads: heads of the attention over the hidden states.
        dropout: dropout between GRU layers and before the head.
    """

    def __init__(self, num_sensors: int, window: int, horizon: int, dim: int, num_layers: int, num_heads: int,
                 dropout: float, rul_scale: float):
        super().__init__(num_sensors, window, horizon, dim, dropout, rul_scale)
        self.gru = nn.GRU(num_sensors, dim, num_layers=num_layers, batch_first=True,
                          dropout=dropout if num_layers > 1 else 0.0)
        self.attn = MultiHeadAttention(dim, num_heads)

    def forward_features(self, x: torch.Tensor, need_weights: bool = False):
        """``(B, 2 * dim)`` = [attended context, last state]; with ``need_weights`` also {"time": (B, H, 1, T)}."""
        check_windows(x, self.window, self.num_sensors)
        states, _ = self.gru(x)  # (B, T, D)
        last = states[:, -1:]  # (B, 1, D)
        context, weights = self.attn(last, states, need_weights=need_weights)  # (B, 1, D), (B, H, 1, T)
        features = torch.cat([context[:, 0], last[:, 0]], dim=-1)  # (B, 2D)
        return (features, {"time": weights}) if need_weights else features


@register_model(task="rul-regression", classifier="head")
def rul_attention_gru(num_sensors: int = 14, window: int = 30, horizon: int = 10, dim: int = 32, num_layers: int = 2,
                      num_heads: int = 4, dropout: float = 0.1, rul_scale: float = 125.0) -> AttentionGRU:
    """Attention-GRU RUL forecaster (attention of the last GRU state over the window's states)."""
    return AttentionGRU(num_sensors, window, horizon, dim, num_layers, num_heads, dropout, rul_scale)
