"""Tasks: how a batch becomes a loss, predictions and targets, and which metrics are kept.

The dataset names its task; domains add tasks of their own with :func:`register_task`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch
import torch.nn.functional as F

from hub.core.registry import Registry

if TYPE_CHECKING:
    import torchmetrics

TASKS: Registry[Callable[..., "Task"]] = Registry("task")


def register_task(name: str):
    return TASKS.decorator(name)


def create_task(name: str, **kwargs) -> "Task":
    if name not in TASKS:  # a loaded model's domain registered its families only
        from hub.core.registry import import_domains
        import_domains()
    return TASKS.get(name)(**kwargs)


def call_model(model: torch.nn.Module, x) -> torch.Tensor:
    """``model(**x)`` for a dict of named inputs (e.g. a table's ``x_num``, ``x_cat``), else ``model(x)``."""
    return model(**x) if isinstance(x, dict) else model(x)


class Task:
    """Base class. ``monitor``/``mode`` pick the best checkpoint; ``step`` returns (loss, preds, target).
    ``metrics_in_training = False`` skips the metrics on training batches (the loss is still logged), for
    metrics that cost much next to a step. ``missing_target``: a target value that marks a missing reading."""

    monitor = "val/loss"
    mode = "min"
    metrics_in_training = True
    missing_target: float | None = None  # a target value that marks no reading: left out of prediction intervals

    def metrics(self) -> torchmetrics.MetricCollection:
        raise NotImplementedError

    def step(self, model: torch.nn.Module, batch, stage: str):
        raise NotImplementedError

    def batch_size(self, batch) -> int:
        return len(batch[1])


@register_task("classification")
class ClassificationTask(Task):
    """Cross-entropy over ``(x, y)`` batches; accuracy and macro F1 (accuracy, AUROC and AUPRC for 2 classes).
    Logits (B, k, C) of k ensemble members are trained each on its own (mean of their losses) and predict
    by their mean probability."""

    monitor = "val/acc"
    mode = "max"

    def __init__(self, num_classes: int, label_smoothing: float = 0.0):
        self.num_classes = num_classes
        self.label_smoothing = label_smoothing

    def metrics(self) -> torchmetrics.MetricCollection:
        import torchmetrics  # training and evaluation only: predicting imports none of it

        if self.num_classes == 2:  # preds are the positive class's probability
            return torchmetrics.MetricCollection({"acc": torchmetrics.Accuracy(task="binary"),
                                                  "auroc": torchmetrics.AUROC(task="binary"),
                                                  "auprc": torchmetrics.AveragePrecision(task="binary")})
        return torchmetrics.MetricCollection({
            "acc": torchmetrics.Accuracy(task="multiclass", num_classes=self.num_classes),
            "f1": torchmetrics.F1Score(task="multiclass", num_classes=self.num_classes, average="macro"),
        })

    def step(self, model, batch, stage):
        x, y = batch
        logits = call_model(model, x)
        smoothing = self.label_smoothing if stage == "train" else 0.0
        if logits.ndim == 3:  # (B, k, C): k ensemble members (TabM in training), each with its own loss
            loss = F.cross_entropy(logits.flatten(0, 1), y.repeat_interleave(logits.shape[1]),
                                   label_smoothing=smoothing)
            probs = logits.detach().float().softmax(-1).mean(1)  # the ensemble's prediction
            return loss, (probs[:, 1] if self.num_classes == 2 else probs), y
        loss = F.cross_entropy(logits, y, label_smoothing=smoothing)
        probs = logits.detach().float().softmax(-1)
        return loss, (probs[:, 1] if self.num_classes == 2 else probs), y


@register_task("regression")
class RegressionTask(Task):
    """Mean squared error on standardised targets; RMSE and MAE. Outputs (B, k, 1) of k ensemble members
    are trained each on its own (mean of their losses) and predict by their mean."""

    monitor = "val/rmse"
    mode = "min"

    def __init__(self, num_classes: int | None = None):
        pass

    def metrics(self) -> torchmetrics.MetricCollection:
        import torchmetrics  # training and evaluation only: predicting imports none of it

        return torchmetrics.MetricCollection({
            "rmse": torchmetrics.MeanSquaredError(squared=False),
            "mae": torchmetrics.MeanAbsoluteError(),
        })

    def step(self, model, batch, stage):
        x, y = batch
        pred = call_model(model, x).squeeze(-1)  # (B,) or (B, k) for k ensemble members
        if pred.ndim == 2:
            return F.mse_loss(pred, y[:, None].expand_as(pred)), pred.detach().mean(1), y
        return F.mse_loss(pred, y), pred.detach(), y
