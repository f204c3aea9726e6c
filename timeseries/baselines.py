"""Classic baselines of the traffic forecasts: the historical average and the last value."""
from __future__ import annotations

import numpy as np

from timeseries.data import STEPS_PER_DAY, LosLoopData


def baseline_forecasts(data: LosLoopData, split: str = "test") -> dict[str, np.ndarray]:
    """Historical average (mean of the training speeds at the same time of day) and last value.

    Shapes: -> {"historical_average": (S, T_out, N), "last_value": (S, T_out, N)}.
    """
    window, _ = data.splits[split]
    train_end = data.splits["train"][0][-1, data.input_steps - 1] + 1
    slots = np.arange(train_end) % STEPS_PER_DAY
    profile = np.stack([data.speed[:train_end][slots == s].mean(0) for s in range(STEPS_PER_DAY)])  # (288, N)
    future = window[:, data.input_steps:]  # (S, T_out) step indices
    last = data.speed[window[:, data.input_steps - 1]]  # (S, N)
    return {"historical_average": profile[future % STEPS_PER_DAY],
            "last_value": np.repeat(last[:, None], data.output_steps, axis=1)}
