"""The time-series tasks.

The ``rul-regression`` task: RUL forecasts trained with MSE, scored by RMSE and the NASA score.

Batches are ``(x, y)`` with y (B, horizon): the RUL at the window's last cycle and the next
``horizon - 1`` cycles. The loss is the MSE over the whole forecast; the metrics use the RUL *now*
(column 0), which is what the C-MAPSS literature reports.

The ``degradation-forecast`` task: a degradation measure's next inspections (e.g. a laser's current increase),
trained with MSE, scored by RMSE and MAE over all forecast inspections.

The ``heart-rate`` task: one heart rate per PPG window (BPM), scored by MAE and RMSE.

The ``traffic-forecast`` task: masked MAE, RMSE and MAPE at 15, 30 and 60 minutes (steps 3, 6, 12) and MAE
over all steps, with zero targets masked, as the traffic literature does.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import torchmetrics

from hub.errors import DataError
from hub.tasks import RegressionTask, Task, register_task


def nasa_score_terms(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-sample NASA score: ``exp(-d / 13) - 1`` if early (d < 0), ``exp(d / 10) - 1`` if late, d = pred - true.

    >>> nasa_score_terms(torch.tensor([10.0, 13.0]), torch.tensor([0.0, 26.0]))
    tensor([1.7183, 1.7183])
    """
    d = pred.double() - target.double()
    return torch.where(d < 0, torch.exp(-d / 13.0) - 1.0, torch.exp(d / 10.0) - 1.0)


class NASAScore(torchmetrics.Metric):
    """The asymmetric scoring function of the PHM08 challenge (Saxena et al., PHM 2008): the *sum* over
    engines of :func:`nasa_score_terms`, so late predictions cost more than early ones.

    No metrics library (torchmetrics, scikit-learn) has it, hence this class.
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_state("total", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        if preds.shape != target.shape:
            raise DataError(f"NASAScore expects preds and target of one shape, got {tuple(preds.shape)} "
                            f"and {tuple(target.shape)}")
        self.total += nasa_score_terms(preds, target).sum()

    def compute(self) -> torch.Tensor:
        return self.total


@register_task("rul-regression")
class RULRegressionTask(RegressionTask):
    """MSE on the RUL forecast; RMSE, MAE and NASA score of the RUL at the last cycle."""

    def metrics(self) -> torchmetrics.MetricCollection:
        collection = super().metrics()
        collection.add_metrics({"score": NASAScore()})
        return collection

    def step(self, model, batch, stage):
        x, y = batch  # (B, T, S), (B, horizon)
        pred = model(x)  # (B, horizon)
        if pred.shape != y.shape:
            raise DataError(f"the model forecasts {tuple(pred.shape[1:])} RUL values per window but the data has "
                            f"{tuple(y.shape[1:])}; set the model's horizon to the data's")
        return F.mse_loss(pred, y), pred[:, 0].detach(), y[:, 0]


@register_task("degradation-forecast")
class DegradationForecastTask(RegressionTask):
    """MSE on a degradation path's forecast (B, horizon); RMSE and MAE over every forecast inspection, in the
    measure's units (e.g. % current increase)."""

    def step(self, model, batch, stage):
        x, y = batch  # (B, window, 1), (B, horizon)
        pred = model(x)  # (B, horizon)
        if pred.shape != y.shape:
            raise DataError(f"the model forecasts {tuple(pred.shape[1:])} inspections per window but the data has "
                            f"{tuple(y.shape[1:])}; set the model's horizon to the data's")
        return F.mse_loss(pred, y), pred.detach().flatten(), y.flatten()


HORIZONS = {"15": 3, "30": 6, "60": 12}  # minutes -> output step (1-based)


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


@register_task("heart-rate")
class HeartRateTask(RegressionTask):
    """Heart rate per window in BPM, scored by MAE (what the PPG literature reports) and RMSE. The loss is the
    family's own ``loss(x, bpm)`` where it defines one (``pulse``: cross-entropy over its heart-rate bins), else the
    L1 loss of its output."""

    monitor = "val/mae"

    def step(self, model, batch, stage):
        x, y = batch  # (B, 5, T), (B,) BPM
        if hasattr(model, "loss"):
            loss, pred = model.loss(x, y)
        else:
            pred = model(x)[:, 0]
            loss = F.l1_loss(pred, y)
        return loss, pred.detach(), y
