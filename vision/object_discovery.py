"""Object discovery: the task that trains a slot autoencoder by reconstruction, its metric (foreground
ARI, as the Slot Attention paper scores its masks), and the figure of scene, reconstruction and slots.

>>> metric = ForegroundARI()
>>> metric.update(torch.tensor([[[0, 5, 5, 7]]]), torch.tensor([[[0, 1, 1, 2]]]))
>>> float(metric.compute())
1.0
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import torchmetrics

from hub.adapters import register_explain_adapter
from hub.plotting import save_figure
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

    def metrics(self) -> torchmetrics.MetricCollection:
        return torchmetrics.MetricCollection({"fg_ari": ForegroundARI()})

    def step(self, model, batch, stage):
        images, masks = batch
        generator = None if stage == "train" else torch.Generator(images.device).manual_seed(0)
        out = model.autoencode(images, generator=generator)
        return F.mse_loss(out["recon"], images), out["masks"].detach().argmax(1), masks

    def batch_size(self, batch) -> int:
        return len(batch[0])


def _shown(image: torch.Tensor) -> np.ndarray:
    return ((image.detach().float().clamp(-1, 1) + 1) / 2).permute(1, 2, 0).cpu().numpy()


def save_slot_figure(image: torch.Tensor, out: dict[str, torch.Tensor], path: str | Path, title: str = "") -> None:
    """Scene, reconstruction, segmentation (argmax of the masks) and each slot's image times its mask, for
    one item of ``model.autoencode``'s output (``out`` with the batch dimension removed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    masks = out["masks"]  # (K, H, W)
    num_slots = masks.shape[0]
    fig, axes = plt.subplots(1, 3 + num_slots, figsize=(1.6 * (3 + num_slots), 2.0))
    axes[0].imshow(_shown(image))
    axes[0].set_title("scene", fontsize=7)
    axes[1].imshow(_shown(out["recon"]))
    axes[1].set_title("reconstruction", fontsize=7)
    axes[2].imshow(masks.argmax(0).cpu().numpy(), cmap="tab10", vmin=0, vmax=9, interpolation="nearest")
    axes[2].set_title("segments", fontsize=7)
    white = torch.ones_like(image)
    for k in range(num_slots):
        mask = masks[k].unsqueeze(0)
        axes[3 + k].imshow(_shown(out["slot_images"][k] * mask + white * (1 - mask)))
        axes[3 + k].set_title(f"slot {k} ({float(mask.mean()):.0%})", fontsize=7)
    for ax in axes:
        ax.axis("off")
    fig.suptitle(title, fontsize=8)
    save_figure(fig, path, dpi=110, bbox_inches="tight")


@register_explain_adapter("scene")
def explain_scenes(card, model, inputs: list[str], out_dir: Path):
    """``attnhub explain NAME [IMAGE...]``: per image, the scene, its reconstruction and the slots' masks;
    without files, the first four test scenes of the card's data, titled with their foreground ARI."""
    from vision.datasets import read_image

    if inputs:
        samples = [(Path(f).stem, Path(f).name, read_image(f, card.input_spec), None) for f in inputs]
    else:
        from hub.training import card_data

        test_set = card_data(card).test_set
        samples = [(f"scene{i}", f"test scene {i}", *test_set[i]) for i in range(min(4, len(test_set)))]
    model.eval()
    for stem, title, image, mask in samples:
        with torch.no_grad():
            out = model.autoencode(image.unsqueeze(0), generator=torch.Generator().manual_seed(0))
        if mask is not None:
            metric = ForegroundARI()
            metric.update(out["masks"].argmax(1), mask.unsqueeze(0))
            title = f"{title}: FG-ARI {float(metric.compute()):.2f}"
        path = Path(out_dir) / f"{stem}_slots.png"
        save_slot_figure(image, {k: v[0] for k, v in out.items()}, path, title)
        yield path
