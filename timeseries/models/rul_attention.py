"""Multi-parametric attention for remaining useful life: self-attention over time *and* over sensors.

The seeds' ForeNet (002 #3, "multi-parametric attention-based DL approach that bypasses feature
engineering", forecasting RUL over a forward window) and the dual time/sensor attention of MTSTAN-like
models on C-MAPSS. Two branches read the same scaled window:

* time branch: each cycle is a token (its S sensor values embedded, plus a learned position);
* sensor branch: each sensor is a token (its T-cycle trace embedded, plus a learned sensor identity);

each runs ``depth`` attention blocks of the core (``MAB(x, x)``, i.e. the Set Transformer's SAB with
weights available) and is pooled by attention (``PMA``, one seed). The two pooled vectors go through an
MLP and a linear head forecasting the RUL at the last cycle and the next ``horizon - 1`` cycles.

Shapes:
    x: (B, window, num_sensors) min-max scaled -> RUL forecast (B, horizon), in cycles.

>>> model = rul_attention(num_sensors=14, window=30, horizon=10)
>>> model(torch.zeros(2, 30, 14)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

import torch
from torch import nn

from hub.attention.set_transformer import MAB, PMA
from hub.core.registry import register_model
from hub.errors import DataError


def check_windows(x: torch.Tensor, window: int, num_sensors: int) -> None:
    """Raise :class:`DataError` unless ``x`` is a finite (B, window, num_sensors) float tensor."""
    if x.ndim != 3 or tuple(x.shape[1:]) != (window, num_sensors):
        raise DataError(f"expected sensor windows of shape (batch, {window}, {num_sensors}), got {tuple(x.shape)}")
    if not torch.compiler.is_exporting() and not torch.isfinite(x).all():  # a graph cannot hold the check
        bad = (~torch.isfinite(x)).nonzero()[0].tolist()
        raise DataError(f"sensor windows hold NaN or inf (first at batch {bad[0]}, cycle {bad[1]}, sensor {bad[2]}); "
                        "fill or drop those readings first")


class RULForecaster(nn.Module):
    """The part every RUL model shares: a (B, 2 * dim) feature vector -> MLP -> an RUL forecast head.

    Subclasses build their encoder and define ``forward_features(x, need_weights=False)``.

    Args:
        num_sensors: sensors per cycle (S).
        window: cycles per window (T).
        horizon: forecast length; output 0 is the RUL at the window's last cycle.
        dim: feature width.
        dropout: dropout before the head.
        rul_scale: the head predicts RUL / rul_scale (targets near 1 train better than raw cycles).
    """

    def __init__(self, num_sensors: int, window: int, horizon: int, dim: int, dropout: float, rul_scale: float):
        super().__init__()
        self.num_sensors, self.window, self.horizon = num_sensors, window, horizon
        self.rul_scale = rul_scale
        self.num_features = dim
        self.fc = nn.Sequential(nn.Linear(2 * dim, dim), nn.GELU(), nn.Dropout(dropout))
        self.head = nn.Linear(dim, horizon)

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        hidden = self.fc(features)  # (B, D)
        return hidden if pre_logits else self.head(hidden) * self.rul_scale  # (B, horizon), in cycles

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def attention_maps(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The model's attention weights for each window (see ``forward_features``)."""
        return self.forward_features(x, need_weights=True)[1]

    def reset_classifier(self, num_outputs: int) -> None:
        """A new head forecasting ``num_outputs`` RUL values (a new horizon)."""
        self.horizon = num_outputs
        self.head = nn.Linear(self.num_features, num_outputs)

    def extra_repr(self) -> str:
        return (f"num_sensors={self.num_sensors}, window={self.window}, horizon={self.horizon}, "
                f"rul_scale={self.rul_scale}")


class RULAttention(RULForecaster):
    """Time and sensor self-attention branches, attention pooling, and an RUL forecast head.

    Args:
        num_sensors: sensors per cycle (S).
        window: cycles per window (T).
        horizon: forecast length; output 0 is the RUL at the window's last cycle.
        dim: token width of both branches.
        num_heads: attention heads.
        depth: attention blocks per branch.
        dropout: dropout before the head.
        rul_scale: the head predicts RUL / rul_scale (targets near 1 train better than raw cycles).
    """

    def __init__(self, num_sensors: int, window: int, horizon: int, dim: int, num_heads: int, depth: int,
                 dropout: float, rul_scale: float):
        super().__init__(num_sensors, window, horizon, dim, dropout, rul_scale)
        self.time_embed = nn.Linear(num_sensors, dim)
        self.time_pos = nn.Parameter(torch.zeros(1, window, dim))
        self.sensor_embed = nn.Linear(window, dim)
        self.sensor_id = nn.Parameter(torch.zeros(1, num_sensors, dim))
        self.time_blocks = nn.ModuleList(MAB(dim, dim, dim, num_heads) for _ in range(depth))
        self.sensor_blocks = nn.ModuleList(MAB(dim, dim, dim, num_heads) for _ in range(depth))
        self.time_pool = PMA(dim, num_seeds=1, num_heads=num_heads)
        self.sensor_pool = PMA(dim, num_seeds=1, num_heads=num_heads)
        nn.init.trunc_normal_(self.time_pos, std=0.02)
        nn.init.trunc_normal_(self.sensor_id, std=0.02)

    @staticmethod
    def _branch(tokens, blocks, pool, weights: dict | None, name: str) -> torch.Tensor:
        if weights is None:  # the fused SDPA path
            for block in blocks:
                tokens = block(tokens, tokens)  # (B, N, D)
            return pool(tokens)[:, 0]  # (B, 1, D) -> (B, D)
        for i, block in enumerate(blocks):
            tokens, weights[f"{name}_{i}"] = block(tokens, tokens, need_weights=True)  # (B, N, D), (B, H, N, N)
        pooled, weights[f"{name}_pool"] = pool(tokens, need_weights=True)  # (B, 1, D), (B, H, 1, N)
        return pooled[:, 0]  # (B, D)

    def forward_features(self, x: torch.Tensor, need_weights: bool = False):
        """Pooled time and sensor vectors ``(B, 2 * dim)``; with ``need_weights`` also a dict of attention
        maps: ``time_i`` (B, H, T, T), ``sensor_i`` (B, H, S, S), ``time_pool`` (B, H, 1, T),
        ``sensor_pool`` (B, H, 1, S)."""
        check_windows(x, self.window, self.num_sensors)
        weights = {} if need_weights else None
        time_tokens = self.time_embed(x) + self.time_pos  # (B, T, D)
        sensor_tokens = self.sensor_embed(x.transpose(1, 2)) + self.sensor_id  # (B, T, S) -> (B, S, T) -> (B, S, D)
        features = torch.cat([self._branch(time_tokens, self.time_blocks, self.time_pool, weights, "time"),
                              self._branch(sensor_tokens, self.sensor_blocks, self.sensor_pool, weights, "sensor")],
                             dim=-1)  # (B, 2D)
        return (features, weights) if need_weights else features


@register_model(task="rul-regression", classifier="head")
def rul_attention(num_sensors: int = 14, window: int = 30, horizon: int = 10, dim: int = 32, num_heads: int = 4,
                  depth: int = 1, dropout: float = 0.1, rul_scale: float = 125.0) -> RULAttention:
    """RUL forecaster with multi-head attention over cycles and over sensors (ForeNet-style)."""
    return RULAttention(num_sensors, window, horizon, dim, num_heads, depth, dropout, rul_scale)
