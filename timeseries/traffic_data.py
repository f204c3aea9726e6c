"""Traffic speed forecasting data: Los-loop (T-GCN) and the METR-LA / PEMS-BAY road graphs (DCRNN).

Los-loop: 207 loop detectors of Los Angeles highways, 2016 five-minute steps (7 days), with a weighted
road adjacency (Zhao et al., T-GCN, IEEE T-ITS 2019). Samples are 12 steps in, 12 steps out, split
chronologically 70/10/20 over the samples (as DCRNN and the TESTAM paper do). Inputs are z-scored with
the training mean/std and carry the time of day; targets stay in mph.

Batches: x (B, 12, N, 2) = [z-scored speed, time of day in [0, 1)], y (B, 12, N) mph.
Metrics (task ``traffic-forecast``): MAE, RMSE and MAPE at 15, 30 and 60 minutes (steps 3, 6, 12) and MAE
over all steps, with zero targets masked, as the traffic literature does.

Road graphs (Los-loop, METR-LA, PEMS-BAY, a user's CSV) are read by :mod:`timeseries.road_graph`.
"""
from __future__ import annotations

import numpy as np
import torch
import torchmetrics
from torch.utils.data import TensorDataset

from hub.data import HubDataModule, data_dir
from hub.errors import DataError, DatasetUnavailable
from hub.registry import register_dataset
from hub.tasks import Task, register_task
from hub.weights import read_verified

STEPS_PER_DAY = 288  # five-minute steps
HORIZONS = {"15": 3, "30": 6, "60": 12}  # minutes -> output step (1-based)
LOS_SPEED_SHA256 = "7b732d86ae32b2930595becba28aff39dacbfb2197e250fc0332e1744ce2cbf4"


def masked_errors(pred: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
    """Sums of absolute, squared and relative errors over targets != 0, and their count."""
    mask = target != 0
    diff = (pred - target)[mask]
    return {"abs": diff.abs().sum(), "sq": diff.square().sum(), "rel": (diff.abs() / target[mask].abs()).sum(),
            "count": mask.sum()}


class MaskedForecastError(torchmetrics.Metric):
    """``mae``, ``rmse`` or ``mape`` (in %) at one output step (1-based) or over all steps (``step=None``),
    ignoring zero targets (missing readings in the traffic datasets)."""

    full_state_update = False
    higher_is_better = False

    def __init__(self, kind: str, step: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.kind, self.step = kind, step
        for name in ("abs", "sq", "rel", "count"):
            self.add_state(name, default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        if self.step is not None:
            preds, target = preds[:, self.step - 1], target[:, self.step - 1]  # (B, N)
        for name, value in masked_errors(preds.double(), target.double()).items():
            setattr(self, name, getattr(self, name) + value)

    def compute(self) -> torch.Tensor:
        count = self.count.clamp(min=1)
        return {"mae": self.abs / count, "rmse": (self.sq / count).sqrt(), "mape": 100 * self.rel / count}[self.kind]


def masked_mae(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    mask = (target != 0).float()
    return ((pred - target).abs() * mask).sum() / mask.sum().clamp(min=1)


@register_task("traffic-forecast")
class TrafficForecastTask(Task):
    """Masked MAE loss (or the model's own ``loss(x, y)``, e.g. TESTAM's experts + router); masked MAE/RMSE/MAPE
    at 15/30/60 minutes."""

    monitor = "val/mae"
    mode = "min"
    missing_target = 0.0  # no reading

    def __init__(self, num_classes: int | None = None):
        pass

    def metrics(self) -> torchmetrics.MetricCollection:
        metrics = {"mae": MaskedForecastError("mae")}
        for minutes, step in HORIZONS.items():
            for kind in ("mae", "rmse", "mape"):
                metrics[f"{kind}_{minutes}"] = MaskedForecastError(kind, step)
        return torchmetrics.MetricCollection(metrics)

    def step(self, model, batch, stage):
        x, y = batch  # (B, T, N, 2), (B, T, N)
        if hasattr(model, "loss"):
            loss, pred = model.loss(x, y)
        else:
            pred = model(x)
            loss = masked_mae(pred, y)
        return loss, pred.detach(), y


def forecast_output_names(output_steps: int, step_seconds: int) -> list[str]:
    """Names of the forecast outputs, by lead time: ``speed_5min``, ``speed_10min``, ... for five-minute steps
    (``speed_30s``, ... when a step is not a whole number of minutes)."""
    if step_seconds % 60 == 0:
        return [f"speed_{h * step_seconds // 60}min" for h in range(1, output_steps + 1)]
    return [f"speed_{h * step_seconds}s" for h in range(1, output_steps + 1)]


class TrafficSeriesData(HubDataModule):
    """Speeds (T, N) as ``input_steps``-in / ``output_steps``-out samples, split chronologically; subclasses
    :meth:`load` the speeds, the time of day of each step and the road graph (see the module doc)."""

    task = "traffic-forecast"

    def __init__(self, input_steps: int = 12, output_steps: int = 12, val_fraction: float = 0.1,
                 test_fraction: float = 0.2, batch_size: int = 32, num_workers: int = 0, seed: int = 0):
        super().__init__(batch_size, num_workers, seed)
        self.input_steps, self.output_steps = input_steps, output_steps
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.mean = self.std = 0.0
        self.graph = ""
        self.splits: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # raw windows for the baselines

    def load(self) -> tuple[np.ndarray, np.ndarray, str, dict]:
        """-> speed (T, N) float32 (0 = missing reading), time of day (T,) in [0, 1), road graph (a name of
        :data:`timeseries.road_graph.GRAPH_FILES` or an adjacency CSV path), info for the card."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        speed, time_of_day, self.graph, info = self.load()
        total = self.input_steps + self.output_steps
        starts = np.arange(len(speed) - total + 1)
        n_test, n_val = round(len(starts) * self.test_fraction), round(len(starts) * self.val_fraction)
        if len(starts) - n_val - n_test < 1 or n_val < 1 or n_test < 1:
            raise DataError(f"{info['source']}: {len(speed)} time steps make {max(len(starts), 0)} samples of "
                            f"{self.input_steps} + {self.output_steps} steps, too few for a train/val/test split; "
                            "expected several days of readings")
        parts = {"train": starts[:len(starts) - n_val - n_test],
                 "val": starts[len(starts) - n_val - n_test:len(starts) - n_test],
                 "test": starts[len(starts) - n_test:]}
        train_end = parts["train"][-1] + self.input_steps  # speeds seen as inputs of training samples
        self.mean, self.std = float(speed[:train_end].mean()), float(speed[:train_end].std())
        features = np.stack([(speed - self.mean) / self.std, np.broadcast_to(time_of_day[:, None], speed.shape)], -1)
        for name, idx in parts.items():
            window = idx[:, None] + np.arange(total)[None, :]  # (S, T_in + T_out) step indices
            x = features[window[:, :self.input_steps]].astype(np.float32)  # (S, T_in, N, 2)
            y = speed[window[:, self.input_steps:]]  # (S, T_out, N)
            self.splits[name] = (window, y)
            setattr(self, f"{name}_set", TensorDataset(torch.from_numpy(x), torch.from_numpy(y)))
        self.speed = speed
        self.input_spec = {"kind": "traffic_series", "input_steps": self.input_steps, "output_steps": self.output_steps,
                           "num_nodes": speed.shape[1], "graph": self.graph, "mean": self.mean, "std": self.std,
                           **info.pop("spec", {})}
        self.info = {**info, "samples": [len(v) for v in parts.values()]}
        day_fraction = float(time_of_day[1] - time_of_day[0]) % 1.0  # one step, as a fraction of a day
        self.output_names = forecast_output_names(self.output_steps, round(day_fraction * 86400) or 86400)

    def model_args(self):
        return {"num_nodes": self.speed.shape[1], "input_steps": self.input_steps, "output_steps": self.output_steps,
                "speed_mean": self.mean, "speed_std": self.std, "graph": self.graph}


class LosLoopData(TrafficSeriesData):
    """Los-loop speeds (see the module doc)."""

    def load(self):
        path = data_dir() / "los_loop" / "los_speed.csv"
        if not path.is_file():
            raise DatasetUnavailable("los_loop", f"{path} not found; put Los-loop there (see its PROVENANCE.md) or "
                                                 "set HUB_DATA_DIR")
        lines = read_verified(path, LOS_SPEED_SHA256).decode().splitlines()
        speed = np.loadtxt(lines[1:], delimiter=",", dtype=np.float32)  # (T, N), header = sensor ids
        time_of_day = np.arange(len(speed)) % STEPS_PER_DAY / STEPS_PER_DAY
        return speed, time_of_day, "los_loop", {
            "source": "Los-loop (T-GCN, Zhao et al. 2019; METR-LA sensors, Jagadish et al. 2014)",
            "license": "none stated for the data (T-GCN-PyTorch code is MIT)"}


@register_dataset(task="traffic-forecast")
def los_loop(input_steps: int = 12, output_steps: int = 12, val_fraction: float = 0.1, test_fraction: float = 0.2,
             batch_size: int = 32, num_workers: int = 0, seed: int = 0) -> LosLoopData:
    """Los-loop speeds (207 sensors, 7 days, 5 min), 12 steps in / 12 out, chronological 70/10/20."""
    return LosLoopData(input_steps, output_steps, val_fraction, test_fraction, batch_size, num_workers, seed)


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
