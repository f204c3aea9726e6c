"""Object discovery: the task that trains a slot autoencoder by reconstruction, its metric (foreground
ARI, as the Slot Attention paper scores its masks), the figure of scene, reconstruction and slots, and the
user's folder of unlabelled images for ``attnhub finetune slot_autoencoder_micro_64.shapes --data DIR``.

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

from hub.adapters import register_explain_adapter, register_finetune_adapter
from hub.data import HubDataModule
from hub.errors import DataError
from hub.plotting import save_figure
from hub.registry import register_dataset
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
        from hub.run.evaluate import card_data

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


class SceneFolderData(HubDataModule):
    """A user's folder of unlabelled images (searched recursively) for fine-tuning a slot autoencoder by
    reconstruction: resized to ``size`` x ``size`` RGB in [-1, 1] (the model's input), split at random by
    ``split_seed`` into train/val/test. Items are ``(image, 0)``: there are no instance masks, so the task
    scores nothing and the epoch is picked on the validation reconstruction loss."""

    task = "object_discovery"

    def __init__(self, root: str, size: int = 64, batch_size: int = 32, num_workers: int = 0, seed: int = 0,
                 split_seed: int = 0, val_fraction: float = 0.1, test_fraction: float = 0.1):
        super().__init__(batch_size, num_workers, seed)
        from vision.datasets import image_spec

        self.root, self.size = Path(root), size
        self.split_seed, self.val_fraction, self.test_fraction = split_seed, val_fraction, test_fraction
        self.input_spec = {**image_spec(size, size, 3, [0.5] * 3, [0.5] * 3), "kind": "scene"}

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        from vision.datasets import IMAGE_SUFFIXES, ImageFiles, read_image

        if not self.root.is_dir():
            raise DataError(f"image folder {self.root} does not exist or is not a folder")
        files = sorted(f for f in self.root.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES)
        num_val, num_test = (max(1, round(len(files) * f)) for f in (self.val_fraction, self.test_fraction))
        if len(files) < num_val + num_test + 2:
            raise DataError(f"{self.root} holds {len(files)} images ({', '.join(IMAGE_SUFFIXES)}); fine-tuning a slot "
                            f"autoencoder needs at least {num_val + num_test + 2} (train, val and test)")
        read_image(files[0], self.input_spec)  # fail now, not mid-epoch, on an unreadable first file
        order = np.random.default_rng(self.split_seed).permutation(len(files))
        parts = np.split(order, [len(files) - num_val - num_test, len(files) - num_test])
        self.train_set, self.val_set, self.test_set = (
            ImageFiles([files[i] for i in part], [0] * len(part), self.input_spec) for part in parts)
        self.info = {"source": str(self.root), "license": "the user's data",
                     "sizes": [len(part) for part in parts]}

    def task_args(self):
        return {"scored": False}

    def model_args(self):
        return {"img_size": self.size}


@register_dataset(task="object_discovery")
def scene_folder(root: str, size: int = 64, batch_size: int = 32, num_workers: int = 0, seed: int = 0,
                 split_seed: int = 0, val_fraction: float = 0.1, test_fraction: float = 0.1) -> SceneFolderData:
    """A folder of unlabelled images for slot autoencoders, split at random into train/val/test."""
    return SceneFolderData(root, size, batch_size, num_workers, seed, split_seed, val_fraction, test_fraction)


@register_finetune_adapter("scene")
def scene_folder_section(card, path: str) -> dict:
    """``attnhub finetune slot_autoencoder_micro_64.shapes --data DIR``: DIR's images, at the card's size."""
    return {"name": "scene_folder", "args": {"root": str(path), "size": card.input_spec["height"]}}
