"""airbench's network (Jordan 2024; :mod:`vision.models.airbench`) with halo attention (Vaswani et al., CVPR 2021,
"Scaling Local Self-Attention for Parameter Efficient Visual Backbones") as the second layer of every block:
``conv 3x3 -> max-pool 2 -> BN -> GELU -> x + halo attention(x) -> BN -> GELU``.

HaloNet replaces a ResNet's 3x3 convolutions by blocked local self-attention: the map is cut into ``block_size`` x
``block_size`` blocks, each attending to itself plus a ``halo`` of neighbouring pixels, with relative position
logits (timm's :class:`~timm.layers.halo_attn.HaloAttn`). Here it takes the place of airbench's second 3x3
convolution, on a residual path so that a block starts near the identity as airbench's Dirac-initialised
convolution does; the first convolution of each block (it downsamples) stays, as in HaloNet's hybrid models that
keep convolutions before the attention stages. Maps whose side is not a multiple of the block size (airbench's
31, 15, 7 and 3 pixels on a 32x32 input) are zero-padded on the bottom and right before the attention and cropped
after it.

Shapes:
    x: (B, C, H, W) -> logits (B, num_classes); ``forward_features`` -> (B, num_features, H // 8, W // 8) for even
    H, W.

>>> airbench_halo_micro_32()(torch.zeros(2, 3, 32, 32)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F
from timm.layers.halo_attn import HaloAttn
from torch import nn

from hub.core.registry import register_model
from vision.models.airbench import AirbenchNet, BiasOnlyBatchNorm, DiracConv


class PaddedHaloAttn(HaloAttn):
    """timm's HaloAttn on any map size: zero-pads the bottom and right to a multiple of ``block_size`` (timm's layer
    asserts divisibility) and crops its output back.

    Shapes: x (B, C, H, W) -> (B, C, H, W)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        padded = F.pad(x, (0, -width % self.block_size, 0, -height % self.block_size))
        return super().forward(padded)[..., :height, :width]


class HaloGroup(nn.Module):
    """``conv -> max-pool 2 -> BN -> GELU -> x + halo attention(x) -> BN -> GELU``.

    Args:
        in_channels, out_channels: the block's input and output channels.
        head_dim: channels per attention head (``out_channels // head_dim`` heads, at least one).
        block_size, halo_size: the attention's blocks and their halo, in pixels.

    Shapes: x (B, C_in, H, W) -> (B, C_out, H // 2, W // 2)."""

    def __init__(self, in_channels: int, out_channels: int, head_dim: int, block_size: int, halo_size: int):
        super().__init__()
        self.conv1, self.norm1 = DiracConv(in_channels, out_channels), BiasOnlyBatchNorm(out_channels)
        self.attn = PaddedHaloAttn(out_channels, num_heads=max(1, out_channels // head_dim), block_size=block_size,
                                   halo_size=halo_size)
        self.norm2 = BiasOnlyBatchNorm(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.norm1(F.max_pool2d(self.conv1(x), 2)))
        return F.gelu(self.norm2(x + self.attn(x)))


class AirbenchHalo(AirbenchNet):
    """airbench94's network with halo attention in every block.

    Args:
        num_classes: outputs of the classifier.
        in_chans: input channels.
        widths: output channels of the three blocks.
        head_dim: channels per attention head.
        block_size, halo_size: the attention's blocks and their halo, in pixels.
        logit_scale: the logits' factor (airbench: 1/9).
        tta, global_pool: test-time augmentation in eval mode, and the pool (``max`` or ``attention``)
            (:class:`~vision.models.airbench.AirbenchNet`).
    """

    def __init__(self, num_classes: int = 10, in_chans: int = 3, widths: tuple[int, int, int] = (64, 256, 256),
                 head_dim: int = 32, block_size: int = 4, halo_size: int = 1, logit_scale: float = 1 / 9,
                 tta: Literal["none", "flip", "flip_translate"] = "flip_translate",
                 global_pool: Literal["max", "attention"] = "max"):
        block_fn = partial(HaloGroup, head_dim=head_dim, block_size=block_size, halo_size=halo_size)
        super().__init__(block_fn, num_classes, in_chans, widths, logit_scale, tta,
                         global_pool)


@register_model(task="image-classification", classifier="head")
def airbench_halo_32(num_classes: int = 10, in_chans: int = 3, tta: str = "flip_translate",
                     global_pool: str = "max") -> AirbenchHalo:
    """airbench94's widths (64/256/256) with halo attention: 4x4 blocks, a halo of 1, heads of 32 channels.

    For 32x32 images; trains on 2 CPU cores (recipe ``recipes/vision/airbench_halo_cifar10.yaml``)."""
    return AirbenchHalo(num_classes, in_chans, (64, 256, 256), tta=tta, global_pool=global_pool)


@register_model(task="image-classification", classifier="head")
def airbench_halo_micro_32(num_classes: int = 10, in_chans: int = 3, tta: str = "flip_translate",
                           global_pool: str = "max") -> AirbenchHalo:
    """A quarter of the width (16/64/64), heads of 16 channels, for tests and quick runs."""
    return AirbenchHalo(num_classes, in_chans, (16, 64, 64), head_dim=16, tta=tta, global_pool=global_pool)
