"""GRU baseline for traffic forecasting: one GRU shared by all sensors reads each sensor's 12 input steps
(speed and time of day) and a linear layer maps its last state to the 12 output steps. No spatial
modelling; the baseline the TESTAM and T-GCN papers compare against.

Shapes:
    x: (B, T_in, N, 2) -> forecast (B, T_out, N) in mph.

>>> model = traffic_gru(num_nodes=5)
>>> model(torch.zeros(2, 12, 5, 2)).shape
torch.Size([2, 12, 5])
"""
from __future__ import annotations

import torch
from torch import nn

from hub.core.registry import register_model
from timeseries.models.testam import check_traffic_input


class TrafficGRU(nn.Module):
    """One GRU shared by all sensors over each sensor's input steps, a linear map of its last state to the forecast.

    Args:
        num_nodes: sensors N.
        input_steps: T_in, the steps read per sensor.
        output_steps: T_out, the steps forecast.
        dim: GRU hidden width.
        speed_mean: training speed mean; outputs are de-standardised with it, so they are in the data's unit.
        speed_std: training speed std, likewise.

    Shapes: x (B, T_in, N, 2) = [z-scored speed, time of day] -> forecast (B, T_out, N)"""

    def __init__(self, num_nodes: int, input_steps: int, output_steps: int, dim: int, speed_mean: float,
                 speed_std: float):
        super().__init__()
        self.num_nodes, self.input_steps, self.output_steps = num_nodes, input_steps, output_steps
        self.speed_mean, self.speed_std = speed_mean, speed_std
        self.gru = nn.GRU(2, dim, batch_first=True)
        self.num_features = dim
        self.head = nn.Linear(dim, output_steps)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        check_traffic_input(x, self.input_steps, self.num_nodes)
        batch = x.shape[0]
        seq = x.permute(0, 2, 1, 3).reshape(batch * self.num_nodes, self.input_steps, 2)  # (B*N, T, 2)
        return self.gru(seq)[1][-1].reshape(batch, self.num_nodes, -1)  # (B, N, D)

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if pre_logits:
            return features
        # (B, N, T_out) -> (B, T_out, N)
        return (self.head(features) * self.speed_std + self.speed_mean).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def reset_classifier(self, num_outputs: int) -> None:
        self.output_steps = num_outputs
        self.head = nn.Linear(self.num_features, num_outputs)


@register_model(task="traffic-forecast", classifier="head")
def traffic_gru(num_nodes: int = 207, input_steps: int = 12, output_steps: int = 12, dim: int = 32,
                speed_mean: float = 0.0, speed_std: float = 1.0) -> TrafficGRU:
    """GRU baseline shared across sensors (no graph)."""
    return TrafficGRU(num_nodes, input_steps, output_steps, dim, speed_mean, speed_std)
