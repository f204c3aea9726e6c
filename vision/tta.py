"""Test-time augmentation of an image classifier's logits in eval mode (airbench's, Jordan 2024): ``flip`` averages
the logits of each image and its mirror; ``flip_translate`` (airbench's level 2) takes half of that and a quarter
each of the same for the image shifted by one pixel up-left and down-right (reflect-padded). Families take it as
their ``tta`` argument (airbench's networks, the Residual Attention Network).

Shapes: x (B, C, H, W) -> logits (B, num_classes).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from hub.errors import DataError

TTA = ("none", "flip", "flip_translate")
# batches smaller than this run their views in one model call (a request served alone, predict's few files)
JOINT_VIEWS_BELOW = 32


def check_tta(tta: str) -> str:
    """``tta`` if it is one of :data:`TTA`, else a DataError naming them."""
    if tta not in TTA:
        raise DataError(f"tta must be one of {TTA}, got {tta!r}")
    return tta


def augmented_logits(logits: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, tta: str) -> torch.Tensor:
    """``logits(x)`` averaged over the views of ``tta`` (see the module).

    Args:
        logits: the network's logits of a batch, (B, C, H, W) -> (B, num_classes).
        x: the images.
        tta: one of :data:`TTA`.
    """
    if tta == "none":
        return logits(x)
    views = [x]
    if tta == "flip_translate":
        h, w = x.shape[-2:]
        padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
        views += [padded[..., :h, :w], padded[..., 2:, 2:]]
    views += [view.flip(-1) for view in views]
    # one call below JOINT_VIEWS_BELOW images: a batch of 1 runs as a batch of 6, 2.4x less CPU than six calls (a
    # large batch gains nothing and would hold six times the activations); not while exporting, whose batch is
    # symbolic (the branch would fix it to the example's)
    tracing = torch.compiler.is_compiling() or torch.compiler.is_exporting()
    if not tracing and len(x) < JOINT_VIEWS_BELOW:
        stacked = logits(torch.cat(views)).unflatten(0, (len(views), -1))  # (views, B, classes)
    else:
        stacked = torch.stack([logits(view) for view in views])
    mirrored = 0.5 * (stacked[: len(views) // 2] + stacked[len(views) // 2:])  # image i with its mirror
    return mirrored[0] if tta == "flip" else 0.5 * mirrored[0] + 0.25 * (mirrored[1] + mirrored[2])
