"""Attention GRU that forecasts a unit's degradation path (the seeds' 002 #20: an attention-based GRU for the
real-time prediction of a semiconductor laser's performance degradation, then its remaining useful life).

The input is the last ``window`` inspections of one unit's degradation measure (e.g. a laser's percent increase in
operating current), equally spaced in time. Each inspection is a GRU step reading [level / scale, increment since the
previous inspection / step_scale]; the last hidden state attends over all states through the core's multi-head
attention, and an MLP head gives the next ``horizon`` increments, kept non-negative by a softplus (a degradation
measure does not heal). The forecast is the last level plus their running sum, so the path is monotone by
construction. :meth:`DegradationGRU.forecast_path` rolls the forecast on, ``horizon`` inspections at a time, for as
long as needed, e.g. until a failure threshold is crossed (:func:`threshold_crossing`).

Shapes:
    x: (B, window, 1) degradation levels (in the data's units, e.g. %) -> forecast (B, horizon), same units.

>>> model = degradation_gru(window=4, horizon=4)
>>> model(torch.rand(2, 4, 1)).shape
torch.Size([2, 4])
"""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hub.attention.functional import MultiHeadAttention
from hub.core.registry import register_model
from timeseries.models.rul_attention import check_windows


class DegradationGRU(nn.Module):
    """GRU over the inspections, attention of the last state over all states, non-negative increments head.

    Args:
        window: inspections per input (T); the first increment is taken as 0 (nothing before the window).
        horizon: inspections forecast per call.
        dim: GRU hidden width.
        num_layers: stacked GRU layers.
        num_heads: heads of the attention over the hidden states.
        dropout: dropout between GRU layers and before the head.
        scale: the level is read divided by it (the failure threshold is a natural choice: 10 for 10%).
        step_scale: the increments are read divided by it, and the head's softplus outputs are multiplied by it
            (a typical increment per inspection, in the data's units).
    """

    def __init__(self, window: int, horizon: int, dim: int, num_layers: int, num_heads: int, dropout: float,
                 scale: float, step_scale: float):
        super().__init__()
        self.window, self.horizon, self.scale, self.step_scale = window, horizon, scale, step_scale
        self.num_features = dim
        self.gru = nn.GRU(2, dim, num_layers=num_layers, batch_first=True, dropout=dropout if num_layers > 1 else 0.0)
        self.attn = MultiHeadAttention(dim, num_heads)
        self.fc = nn.Sequential(nn.Linear(2 * dim, dim), nn.GELU(), nn.Dropout(dropout))
        self.head = nn.Linear(dim, horizon)

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """The GRU's per-step input [level / scale, increment / step_scale]: (B, T, 1) -> (B, T, 2)."""
        check_windows(x, self.window, 1)
        steps = torch.diff(x, dim=1, prepend=x[:, :1])  # (B, T, 1); 0 at the first inspection
        return torch.cat([x / self.scale, steps / self.step_scale], dim=-1)

    def forward_features(self, x: torch.Tensor, need_weights: bool = False):
        """``(B, 2 * dim)`` = [attended context, last state]; with ``need_weights`` also {"time": (B, H, 1, T)}."""
        states, _ = self.gru(self.inputs(x))  # (B, T, D)
        last = states[:, -1:]  # (B, 1, D)
        context, weights = self.attn(last, states, need_weights=need_weights)  # (B, 1, D), (B, H, 1, T)
        features = torch.cat([context[:, 0], last[:, 0]], dim=-1)  # (B, 2D)
        return (features, {"time": weights}) if need_weights else features

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """The next ``horizon`` increments, ``(B, horizon)`` (``pre_logits``: the hidden ``(B, dim)``)."""
        hidden = self.fc(features)
        return hidden if pre_logits else F.softplus(self.head(hidden)) * self.step_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, -1, 0:1] + torch.cumsum(self.forward_head(self.forward_features(x)), dim=1)  # (B, horizon)

    def attention_maps(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The attention of the last state over the window's states: {"time": (B, H, 1, T)}."""
        return self.forward_features(x, need_weights=True)[1]

    def reset_classifier(self, num_outputs: int) -> None:
        """A new head forecasting ``num_outputs`` inspections (a new horizon)."""
        self.horizon = num_outputs
        self.head = nn.Linear(self.num_features, num_outputs)

    @torch.no_grad()
    def forecast_path(self, history: torch.Tensor, steps: int) -> torch.Tensor:
        """Roll the forecast on from ``history`` (B, L >= window, 1): the next ``steps`` levels, (B, steps)."""
        path = history
        while path.shape[1] < history.shape[1] + steps:
            path = torch.cat([path, self(path[:, -self.window:])[..., None]], dim=1)
        return path[:, history.shape[1]:history.shape[1] + steps, 0]

    def extra_repr(self) -> str:
        return f"window={self.window}, horizon={self.horizon}, scale={self.scale}, step_scale={self.step_scale}"


def threshold_crossing(times: np.ndarray, path: np.ndarray, threshold: float) -> float:
    """The first time a path reaches ``threshold``, interpolated linearly between the inspections that bracket it;
    ``inf`` if it never does. ``times`` and ``path`` are (L,), ``times`` increasing.

    >>> threshold_crossing(np.array([0.0, 250.0, 500.0]), np.array([0.0, 6.0, 12.0]), 10.0)
    416.6666666666667
    """
    above = np.nonzero(path >= threshold)[0]
    if not len(above):
        return float("inf")
    i = int(above[0])
    if i == 0:
        return float(times[0])
    fraction = (threshold - path[i - 1]) / (path[i] - path[i - 1])
    return float(times[i - 1] + fraction * (times[i] - times[i - 1]))


@register_model(task="degradation-forecast", classifier="head")
def degradation_gru(window: int = 4, horizon: int = 4, dim: int = 32, num_layers: int = 1, num_heads: int = 4,
                    dropout: float = 0.0, scale: float = 10.0, step_scale: float = 0.5) -> DegradationGRU:
    """Attention-GRU degradation-path forecaster (laser current increase; monotone forecasts)."""
    return DegradationGRU(window, horizon, dim, num_layers, num_heads, dropout, scale, step_scale)
