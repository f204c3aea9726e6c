"""The audio tasks: classification against soft (mixup) targets, and SSAST's masked patch modelling."""
from __future__ import annotations

import torch
import torch.nn.functional as F
import torchmetrics

from hub.tasks import ClassificationTask, Task, register_task


@register_task("soft-label-classification")
class SoftLabelClassificationTask(ClassificationTask):
    """Classification whose training targets may be soft (mixup): cross-entropy against the target
    distribution; metrics count the target's most probable class."""

    def step(self, model, batch, stage):
        x, y = batch
        logits = model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=self.label_smoothing if stage == "train" else 0.0)
        probs = logits.detach().float().softmax(-1)
        hard = y.argmax(-1) if y.is_floating_point() else y
        return loss, (probs[:, 1] if self.num_classes == 2 else probs), hard


@register_task("masked-patch-modelling")
class MaskedPatchTask(Task):
    """SSAST pretraining: ``nce + mse_weight * mse``; the metric is how often a masked position picks its
    own patch (``acc``). Labels in the batch are not read."""

    def __init__(self, num_classes: int | None = None, mse_weight: float = 10.0):
        self.mse_weight = mse_weight

    def metrics(self) -> torchmetrics.MetricCollection:
        return torchmetrics.MetricCollection({"acc": _PatchPickAccuracy()})

    def step(self, model, batch, stage):
        nce, mse, scores = model.masked_patch_losses(batch[0])
        return nce + self.mse_weight * mse, scores.detach(), None


class _PatchPickAccuracy(torchmetrics.Metric):
    """Share of masked positions whose highest score is their own patch (the diagonal)."""

    def __init__(self):
        super().__init__()
        self.add_state("correct", torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, scores: torch.Tensor, target=None) -> None:
        right = scores.argmax(-1) == torch.arange(scores.shape[-1], device=scores.device)  # (B, M)
        self.correct += right.sum()
        self.total += right.numel()

    def compute(self) -> torch.Tensor:
        return self.correct / self.total.clamp_min(1)
