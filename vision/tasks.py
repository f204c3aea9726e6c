"""Object discovery: the task that trains a slot autoencoder by reconstruction and its metric (foreground
ARI, as the Slot Attention paper scores its masks).

>>> metric = ForegroundARI()
>>> metric.update(torch.tensor([[[0, 5, 5, 7]]]), torch.tensor([[[0, 1, 1, 2]]]))
>>> float(metric.compute())
1.0
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
import torchmetrics

from hub.tasks import Task, register_task


class ForegroundARI(torchmetrics.Metric):
    """Adjusted Rand index between predicted and true segmentations on each image's foreground pixels
    (true label > 0), averaged over images: the paper's FG-ARI. Each image is scored by scikit-learn's
    ``adjusted_rand_score``; images with no foreground pixel are skipped.

    update: preds (B, H, W) predicted segment per pixel, target (B, H, W) true instance (0 = background).
    """

    higher_is_better = True
    full_state_update = False

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.add_state("total", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        from sklearn.metrics import adjusted_rand_score

        for pred, true in zip(preds.flatten(1).cpu().numpy(), target.flatten(1).cpu().numpy()):
            foreground = true > 0
            if foreground.any():
                self.total += adjusted_rand_score(true[foreground], pred[foreground])
                self.count += 1

    def compute(self) -> torch.Tensor:
        return (self.total / self.count.clamp_min(1)).float()


@register_task("object_discovery")
class ObjectDiscoveryTask(Task):
    """Reconstruction (MSE) of ``(images, instance masks)`` batches; the masks only score the slots'
    segmentation (argmax over the slots' masks) by foreground ARI. Validation and test draw the slots'
    initial noise from a fixed seed, so their scores repeat. ARI is not computed on training batches: scoring
    a batch with scikit-learn takes about a third of a CPU training step."""

    monitor = "val/fg_ari"
    mode = "max"
    metrics_in_training = False

    def __init__(self, scored: bool = True):
        """``scored=False``: the data has no instance masks (a user's unlabelled images); nothing is scored and
        the epoch is picked on ``val/loss``."""
        self.scored = scored
        if not scored:
            self.monitor, self.mode = "val/loss", "min"

    def metrics(self) -> torchmetrics.MetricCollection:
        return torchmetrics.MetricCollection({"fg_ari": ForegroundARI()} if self.scored else {})

    def step(self, model, batch, stage):
        images, masks = batch
        generator = None if stage == "train" else torch.Generator(images.device).manual_seed(0)
        out = model.autoencode(images, generator=generator)
        return F.mse_loss(out["recon"], images), out["masks"].detach().argmax(1), masks

    def batch_size(self, batch) -> int:
        return len(batch[0])
