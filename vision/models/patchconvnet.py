"""PatchConvNet (Touvron et al. 2021, "Augmenting Convolutional networks with attention-based aggregation"; seed 000
#80): a columnar convolutional trunk at one resolution, and the final average pool replaced by a learned aggregation
layer, a class token attending once to the patches (:class:`~hub.attention.AttentionPool`).

The stem is the paper's stack of stride-2 3x3 convolutions (two of them here, patches of 4 pixels: 8x8 patches for
32x32 images; four for the paper's 16-pixel ImageNet patches). Each trunk block is the paper's
``x + gamma * (1x1 -> GELU -> depth-wise 3x3 -> GELU -> squeeze-excitation -> 1x1)(BatchNorm(x))`` with a learned
per-channel layer scale ``gamma``. ``pool="avg"`` is the ablation (the same trunk with a LayerNorm over the mean of
the patches).

Shapes:
    x: (B, C, H, W) -> logits (B, num_classes); ``forward_features`` -> (B, dim, H // 4, W // 4);
    ``attention_maps`` -> {"pool": (B, 1, H // 4, W // 4)}, the class token's attention over the patches.

>>> patchconvnet_micro_32()(torch.zeros(2, 3, 32, 32)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from timm.layers import SqueezeExcite
from torch import nn

from hub.attention import AttentionPool
from hub.core.registry import register_model
from hub.errors import DataError

POOL = ("attention", "avg")


class PatchConvBlock(nn.Module):
    """The paper's trunk block with its layer scale. Shapes: x (B, dim, H, W) -> (B, dim, H, W)."""

    def __init__(self, dim: int, layer_scale: float = 1e-6):
        super().__init__()
        self.norm = nn.BatchNorm2d(dim)
        self.expand = nn.Conv2d(dim, dim, 1)
        self.depthwise = nn.Conv2d(dim, dim, 3, padding=1, groups=dim)
        self.excite = SqueezeExcite(dim, rd_ratio=1 / 4)
        self.project = nn.Conv2d(dim, dim, 1)
        self.gamma = nn.Parameter(torch.full((dim, 1, 1), layer_scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.gelu(self.depthwise(F.gelu(self.expand(self.norm(x)))))
        return x + self.gamma * self.project(self.excite(y))


class PatchConvNet(nn.Module):
    """Stem, ``depth`` blocks of width ``dim`` at one resolution, then attention (or average) pooling and a linear
    classifier.

    Args:
        num_classes: outputs of the classifier.
        in_chans: input channels.
        dim: the trunk's width.
        depth: trunk blocks (the paper's S60: 60 at width 384).
        num_heads: heads of the aggregation layer (the paper: 1).
        stem_layers: stride-2 3x3 convolutions of the stem (the patch side is ``2 ** stem_layers``).
        layer_scale: the blocks' initial layer scale.
        pool: ``attention`` (learned aggregation) or ``avg`` (the ablation).
    """

    def __init__(self, num_classes: int = 10, in_chans: int = 3, dim: int = 192, depth: int = 12, num_heads: int = 1,
                 stem_layers: int = 2, layer_scale: float = 1e-6, pool: Literal["attention", "avg"] = "attention"):
        super().__init__()
        if pool not in POOL:
            raise DataError(f"pool must be one of {POOL}, got {pool!r}")
        self.num_features, self.patch = dim, 2 ** stem_layers
        widths = [dim // 2 ** (stem_layers - 1 - i) for i in range(stem_layers)]  # e.g. dim/2, dim
        stem, channels = [], in_chans
        for i, width in enumerate(widths):
            stem += [nn.Conv2d(channels, width, 3, 2, 1)] + ([nn.GELU()] if i < stem_layers - 1 else [])
            channels = width
        self.stem = nn.Sequential(*stem)
        self.blocks = nn.Sequential(*(PatchConvBlock(dim, layer_scale) for _ in range(depth)))
        self.pool = AttentionPool(dim, num_heads) if pool == "attention" else nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or x.shape[-2] % self.patch or x.shape[-1] % self.patch:
            raise DataError(f"{type(self).__name__} takes (B, C, H, W) images whose sides divide by its patch of "
                            f"{self.patch} pixels, got {tuple(x.shape)}")
        return self.blocks(self.stem(x))  # (B, dim, H / patch, W / patch)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = self.pool(x) if isinstance(self.pool, AttentionPool) else self.pool(x.mean((2, 3)))  # (B, dim)
        return x if pre_logits else self.head(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def reset_classifier(self, num_classes: int) -> None:
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()

    def attention_maps(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The class token's attention over the patches, averaged over heads (empty with ``pool="avg"``).
        Shapes: x (B, C, H, W) -> {"pool": (B, 1, H / patch, W / patch)}."""
        if not isinstance(self.pool, AttentionPool):
            return {}
        features = self.forward_features(x)
        _, weights = self.pool(features, need_weights=True)  # (B, heads, 1, 1 + h * w)
        return {"pool": weights.mean(1)[:, :, 1:].reshape(len(x), 1, *features.shape[-2:])}


@register_model(task="image-classification", classifier="head")
def patchconvnet_s60(num_classes: int = 1000, in_chans: int = 3, pool: str = "attention") -> PatchConvNet:
    """The paper's S60 (width 384, 60 blocks, 16-pixel patches; ImageNet top-1 82.1%): the GPU size."""
    return PatchConvNet(num_classes, in_chans, dim=384, depth=60, stem_layers=4, pool=pool)


@register_model(task="image-classification", classifier="head")
def patchconvnet_small_32(num_classes: int = 10, in_chans: int = 3, pool: str = "attention") -> PatchConvNet:
    """Width 192, 12 blocks, 4-pixel patches for 32x32 images: sized for CPU training."""
    return PatchConvNet(num_classes, in_chans, dim=192, depth=12, stem_layers=2, pool=pool)


@register_model(task="image-classification", classifier="head")
def patchconvnet_micro_32(num_classes: int = 10, in_chans: int = 3, pool: str = "attention") -> PatchConvNet:
    """Width 32, 2 blocks, 4-pixel patches: for tests and quick runs."""
    return PatchConvNet(num_classes, in_chans, dim=32, depth=2, stem_layers=2, pool=pool)
