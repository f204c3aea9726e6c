"""Explanations as maps over the input image: attention rollout for ViTs (Abnar & Zuidema, ACL 2020; in
:mod:`hub.explain`) and CBAM spatial / attention-pooling maps for CBAM ResNets, drawn as overlays; for slot
autoencoders, the figure of scene, reconstruction and slots.

>>> model = hub.load("vit_digits.sklearn")
>>> explain_image(model, torch.zeros(1, 1, 8, 8)).shape
torch.Size([1, 8, 8])
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer

from hub.attention.cbam import CBAM
from hub.errors import HubError
from hub.explain import attention_rollout, vit_attention
from hub.plotting import save_figure
from vision.io import read_image


def explain_image(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A [0, 1] map per image at the input resolution: ViT rollout, or the mean CBAM spatial map.

    Shapes: x: (B, C, H, W) -> (B, H, W).
    """
    model.eval()
    if isinstance(model, VisionTransformer):
        grid = model.patch_embed.grid_size
        maps = attention_rollout(vit_attention(model, x), model.num_prefix_tokens, tuple(grid))
    elif any(isinstance(m, CBAM) for m in model.modules()):
        from vision.models.resnet_cbam import attention_maps

        with torch.no_grad():
            found = attention_maps(model, x)
        maps = torch.stack([F.interpolate(m, size=x.shape[-2:], mode="bilinear").squeeze(1) for m in found.values()])
        maps = maps.mean(0)
    else:
        raise HubError(f"no explanation method for {type(model).__name__}: expected a ViT or a CBAM ResNet")
    return F.interpolate(maps.unsqueeze(1), size=x.shape[-2:], mode="bilinear").squeeze(1)  # (B, H, W)


def save_overlay(image: torch.Tensor, heatmap: torch.Tensor, path: str | Path, title: str = "") -> None:
    """Draw ``heatmap`` (H, W) in [0, 1] over ``image`` (C, H, W, any range) into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = image.float()
    shown = (shown - shown.min()) / (shown.max() - shown.min()).clamp_min(1e-12)
    fig, axes = plt.subplots(1, 2, figsize=(5, 2.6))
    picture = shown[0] if shown.shape[0] == 1 else shown.permute(1, 2, 0)
    axes[0].imshow(picture, cmap="gray" if shown.shape[0] == 1 else None)
    axes[1].imshow(picture, cmap="gray" if shown.shape[0] == 1 else None)
    axes[1].imshow(heatmap, cmap="jet", alpha=0.5, vmin=0, vmax=1)
    for ax in axes:
        ax.axis("off")
    fig.suptitle(title, fontsize=8)
    save_figure(fig, path, dpi=100, bbox_inches="tight")


def explain_image_files(card, model, inputs: list[str], out_dir: Path):
    """``attnhub explain NAME [IMAGE...]``: one overlay per image, titled with the predicted class; without
    files, the first four images of the card's test split (titled with their true class too)."""
    if inputs:
        samples = [(Path(file).stem, Path(file).name, read_image(file, card.input_spec)) for file in inputs]
    else:
        from hub.run.evaluate import card_data

        test_set = card_data(card).test_set
        names = card.label_names or [str(i) for i in range(10_000)]
        samples = [(f"test{i}", f"test item {i}, true {names[int(test_set[i][1])]}", test_set[i][0])
                   for i in range(min(4, len(test_set)))]
    for stem, title, image in samples:
        heatmap = explain_image(model, image.unsqueeze(0))[0]
        with torch.no_grad():
            probs = model(image.unsqueeze(0)).softmax(-1)[0]
        label = card.label_names[int(probs.argmax())] if card.label_names else str(int(probs.argmax()))
        path = Path(out_dir) / f"{stem}_explain.png"
        save_overlay(image, heatmap, path, f"{title}: {label} ({float(probs.max()):.2f})")
        yield path


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


def explain_scenes(card, model, inputs: list[str], out_dir: Path):
    """``attnhub explain NAME [IMAGE...]``: per image, the scene, its reconstruction and the slots' masks;
    without files, the first four test scenes of the card's data, titled with their foreground ARI."""
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
            from vision.tasks import ForegroundARI  # a metric: torchmetrics, not imported to predict

            metric = ForegroundARI()
            metric.update(out["masks"].argmax(1), mask.unsqueeze(0))
            title = f"{title}: FG-ARI {float(metric.compute()):.2f}"
        path = Path(out_dir) / f"{stem}_slots.png"
        save_slot_figure(image, {k: v[0] for k, v in out.items()}, path, title)
        yield path
