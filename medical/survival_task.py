"""The ``survival`` task: risk models trained with a Cox loss, scored by Harrell's and Uno's C-index.

Batches are ``(inputs, target)``: ``inputs`` a dict of model inputs (``clinical``, ``genes``,
``gene_mask``, ``tiles``, ``tiles_mask``), ``target`` (B, 2) holding time and event. The model returns
one risk score (log hazard ratio) per patient. Checkpoints are picked on the validation Harrell's C.
"""
from __future__ import annotations

import numpy as np
import torch
import torchmetrics

from hub.errors import DataError
from hub.tasks import Task, register_task
from medical.losses import cox_loss, pairwise_order_loss, weighted_cox_loss
from medical.survival_metrics import harrell_c, uno_c


class ConcordanceIndex(torchmetrics.Metric):
    """Harrell's C (``train_time`` None) or Uno's C over the epoch, computed by scikit-survival."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, train_time: list[float] | None = None, train_event: list[float] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.train_time, self.train_event = train_time, train_event
        self.add_state("risk", default=[], dist_reduce_fx="cat")
        self.add_state("target", default=[], dist_reduce_fx="cat")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        self.risk.append(preds.detach().float().reshape(-1))
        self.target.append(target.detach().float().reshape(-1, 2))

    def compute(self) -> torch.Tensor:
        risk = torchmetrics.utilities.dim_zero_cat(self.risk).cpu().numpy()
        target = torchmetrics.utilities.dim_zero_cat(self.target).cpu().numpy()
        time, event = target[:, 0], target[:, 1]
        if event.sum() == 0:
            return torch.tensor(float("nan"))
        if self.train_time is None:
            return torch.tensor(harrell_c(time, event, risk))
        return torch.tensor(uno_c(np.asarray(self.train_time), np.asarray(self.train_event), time, event, risk))


@register_task("survival")
class SurvivalTask(Task):
    """Cox partial likelihood (Efron or Breslow ties) or the weighted Cox loss, plus ``rank_weight`` times the
    pairwise ordering loss (:func:`medical.losses.pairwise_order_loss`) when it is above 0; Harrell's and Uno's C."""

    monitor = "val/cindex"
    mode = "max"

    def __init__(self, loss: str = "efron", train_time: list[float] | None = None,
                 train_event: list[float] | None = None, num_classes: int | None = None, rank_weight: float = 0.0):
        if loss not in ("efron", "breslow", "weighted"):
            raise DataError(f"survival loss must be 'efron', 'breslow' or 'weighted', got {loss!r}")
        if not rank_weight >= 0:
            raise DataError(f"survival rank_weight must be >= 0 (0: the Cox loss alone), got {rank_weight!r}")
        self.loss, self.train_time, self.train_event, self.rank_weight = loss, train_time, train_event, rank_weight

    def metrics(self) -> torchmetrics.MetricCollection:
        metrics = {"cindex": ConcordanceIndex()}  # Harrell's C
        if self.train_time is not None:
            metrics["uno_c"] = ConcordanceIndex(self.train_time, self.train_event)
        return torchmetrics.MetricCollection(metrics)

    def step(self, model, batch, stage):
        inputs, target = batch  # dict of (B, ...) tensors, (B, 2)
        risk = model(**inputs).reshape(-1)  # (B,)
        time, event = target[:, 0], target[:, 1]
        if self.loss == "weighted":
            loss = weighted_cox_loss(risk, time, event)
        else:
            loss = cox_loss(risk, time, event, ties=self.loss)
        if self.rank_weight:
            loss = loss + self.rank_weight * pairwise_order_loss(risk, time, event)
        return loss, risk.detach(), target
