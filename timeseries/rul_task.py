"""The ``rul-regression`` task: RUL forecasts trained with MSE, scored by RMSE and the NASA score.

Batches are ``(x, y)`` with y (B, horizon): the RUL at the window's last cycle and the next
``horizon - 1`` cycles. The loss is the MSE over the whole forecast; the metrics use the RUL *now*
(column 0), which is what the C-MAPSS literature reports.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import torchmetrics

from hub.errors import DataError
from hub.tasks import RegressionTask, register_task


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
