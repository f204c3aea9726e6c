"""airbench's network (Jordan 2024, "94% on CIFAR-10 in 3.29 Seconds on a Single GPU"; :mod:`vision.models.airbench`)
with CBAM attention (Woo et al., ECCV 2018) closing every block: ``conv 3x3 -> max-pool 2 -> BN -> GELU -> conv 3x3 ->
BN -> GELU``, then CBAM (the core's :class:`~hub.attention.cbam.CBAM`: channel, then spatial attention) multiplies the
block's output.

Shapes:
    x: (B, C, H, W) -> logits (B, num_classes); ``forward_features`` -> (B, num_features, H // 8, W // 8) for even
    H, W (the whitening conv takes one pixel off each side).

>>> airbench_cbam_micro_32()(torch.zeros(2, 3, 32, 32)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from hub.attention.cbam import CBAM
from hub.core.registry import register_model
from vision.models.airbench import AirbenchNet, BiasOnlyBatchNorm, DiracConv


class ConvGroup(nn.Module):
    """``conv -> max-pool 2 -> BN -> GELU -> conv -> BN -> GELU``, then CBAM.

    Shapes: x (B, C_in, H, W) -> (B, C_out, H // 2, W // 2)."""

    def __init__(self, in_channels: int, out_channels: int, reduction: int):
        super().__init__()
        self.conv1, self.norm1 = DiracConv(in_channels, out_channels), BiasOnlyBatchNorm(out_channels)
        self.conv2, self.norm2 = DiracConv(out_channels, out_channels), BiasOnlyBatchNorm(out_channels)
        self.cbam = CBAM(out_channels, reduction)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.norm1(F.max_pool2d(self.conv1(x), 2)))
        x = F.gelu(self.norm2(self.conv2(x)))
        return self.cbam(x)


class AirbenchCBAM(AirbenchNet):
    """airbench94's network with CBAM after every block.

    Args:
        num_classes: outputs of the classifier.
        in_chans: input channels.
        widths: output channels of the three blocks.
        reduction: CBAM's channel-MLP reduction ratio.
        logit_scale: the logits' factor (airbench: 1/9).
        tta, global_pool: test-time augmentation in eval mode, and the pool (``max`` or ``attention``)
            (:class:`~vision.models.airbench.AirbenchNet`).
    """

    def __init__(self, num_classes: int = 10, in_chans: int = 3, widths: tuple[int, int, int] = (64, 256, 256),
                 reduction: int = 16, logit_scale: float = 1 / 9,
                 tta: Literal["none", "flip", "flip_translate"] = "flip_translate",
                 global_pool: Literal["max", "attention"] = "max"):
        super().__init__(partial(ConvGroup, reduction=reduction), num_classes, in_chans, widths, logit_scale, tta,
                         global_pool)

    def attention_maps(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each block's CBAM spatial map. Shapes: x (B, C, H, W) -> {"blocks.0": (B, 1, h0, w0), ...}."""
        maps: dict[str, torch.Tensor] = {}
        hooks = [block.cbam.spatial.register_forward_hook(lambda m, i, out, key=f"blocks.{k}": maps.__setitem__(key,
                                                                                                                out))
                 for k, block in enumerate(self.blocks)]
        try:
            self.forward_features(x)
        finally:
            for hook in hooks:
                hook.remove()
        return maps


@register_model(task="image-classification", classifier="head")
def airbench_cbam_32(num_classes: int = 10, in_chans: int = 3, reduction: int = 16,
                     tta: str = "flip_translate", global_pool: str = "max") -> AirbenchCBAM:
    """airbench94's widths (64/256/256) with CBAM, for 32x32 images: trains on 2 CPU cores (recipe
    ``recipes/vision/airbench_cbam_cifar10.yaml``)."""
    return AirbenchCBAM(num_classes, in_chans, (64, 256, 256), reduction, tta=tta, global_pool=global_pool)


@register_model(task="image-classification", classifier="head")
def airbench_cbam_micro_32(num_classes: int = 10, in_chans: int = 3, reduction: int = 8,
                           tta: str = "flip_translate", global_pool: str = "max") -> AirbenchCBAM:
    """A quarter of the width (16/64/64), for tests and quick runs."""
    return AirbenchCBAM(num_classes, in_chans, (16, 64, 64), reduction, tta=tta, global_pool=global_pool)
