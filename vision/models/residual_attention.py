"""Residual Attention Network (Wang et al., CVPR 2017, "Residual Attention Network for Image Classification"; seed
000 #108), in the paper's CIFAR layout.

A stem convolution, then three stages at 32, 16 and 8 pixels (for 32x32 inputs), each a pre-activation bottleneck
residual unit (stride 2 from the second stage on) followed by ``modules[i]`` attention modules, then three residual
units, BN-ReLU and the pool and classifier. An attention module (the paper's p = 1, t = 2, r = 1) is ``p`` units, then
a trunk of ``t`` units and a soft-mask branch, combined by attention residual learning ``(1 + M(x)) * T(x)``, then
``p`` units. The soft-mask branch is bottom-up top-down: max-pool and ``r`` units down to its lowest resolution
(``mask_depths[i]`` poolings: 2, 1 and 1 in the paper's stages at 32, 16 and 8 pixels), a skip connection at every
level but the lowest, ``r`` units and bilinear up-sampling back, then BN-ReLU-1x1-BN-ReLU-1x1 and a sigmoid.
Attention-56 has one module a stage (``modules=(1, 1, 1)``), Attention-92 ``(1, 2, 3)``.

``combine`` is the ablation of the paper's Table 1 and 3: ``residual`` ``(1 + M) * T`` (the paper's), ``naive``
``M * T`` (naive attention learning, the paper's NAL) or ``trunk`` (no mask branch: the same trunk only).

Shapes:
    x: (B, C, H, W) -> logits (B, num_classes); ``forward_features`` -> (B, num_features, H // 4, W // 4);
    ``attention_maps`` -> each module's mask averaged over channels, {"stages.i.j": (B, 1, h, w)}.

>>> residual_attention_micro_32()(torch.zeros(2, 3, 32, 32)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from hub.attention import AttentionPool
from hub.core.registry import register_model
from hub.errors import DataError
from vision.tta import augmented_logits, check_tta

COMBINE = ("residual", "naive", "trunk")
POOL = ("avg", "attention")


class PreActBottleneck(nn.Module):
    """Pre-activation bottleneck residual unit (He et al. 2016): BN-ReLU-1x1, BN-ReLU-3x3 (``stride``), BN-ReLU-1x1 to
    ``out_channels``, with a 1x1 projection shortcut when the shape changes.

    Shapes: x (B, C_in, H, W) -> (B, C_out, H / stride, W / stride)."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        mid = out_channels // 4
        self.norm1, self.conv1 = nn.BatchNorm2d(in_channels), nn.Conv2d(in_channels, mid, 1, bias=False)
        self.norm2, self.conv2 = nn.BatchNorm2d(mid), nn.Conv2d(mid, mid, 3, stride, 1, bias=False)
        self.norm3, self.conv3 = nn.BatchNorm2d(mid), nn.Conv2d(mid, out_channels, 1, bias=False)
        self.shortcut = (nn.Conv2d(in_channels, out_channels, 1, stride, bias=False)
                         if stride != 1 or in_channels != out_channels else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.norm1(x))
        shortcut = x if self.shortcut is None else self.shortcut(pre)
        out = self.conv1(pre)
        out = self.conv2(F.relu(self.norm2(out)))
        out = self.conv3(F.relu(self.norm3(out)))
        return out + shortcut


def _units(channels: int, count: int) -> nn.Sequential:
    return nn.Sequential(*(PreActBottleneck(channels, channels) for _ in range(count)))


class SoftMaskBranch(nn.Module):
    """One level of the bottom-up top-down mask: max-pool, ``r`` units, the next level plus a skip connection (above
    the lowest level), ``r`` units, bilinear up-sampling to the input's size.

    Shapes: x (B, C, H, W) -> (B, C, H, W)."""

    def __init__(self, channels: int, depth: int, r: int):
        super().__init__()
        self.down, self.up = _units(channels, r), _units(channels, r)
        self.skip = PreActBottleneck(channels, channels) if depth > 1 else None
        self.inner = SoftMaskBranch(channels, depth - 1, r) if depth > 1 else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.down(F.max_pool2d(x, 3, 2, 1))
        if self.inner is not None:
            y = self.inner(y) + self.skip(y)
        return F.interpolate(self.up(y), size=x.shape[-2:], mode="bilinear", align_corners=False)


class AttentionModule(nn.Module):
    """``p`` units, then trunk ``T`` (``t`` units) and mask ``M`` combined as ``combine`` says, then ``p`` units.

    Args:
        channels: width in and out.
        mask_depth: max-poolings of the soft-mask branch (its lowest resolution is the input's / 2**depth).
        p, t, r: the paper's hyper-parameters (units before and after, in the trunk, between poolings).
        combine: ``residual`` ``(1 + M) * T``, ``naive`` ``M * T`` or ``trunk`` (``T``; no mask branch).

    Shapes: x (B, C, H, W) -> (B, C, H, W)."""

    def __init__(self, channels: int, mask_depth: int, p: int = 1, t: int = 2, r: int = 1,
                 combine: Literal["residual", "naive", "trunk"] = "residual"):
        super().__init__()
        self.combine = combine
        self.pre, self.trunk, self.post = _units(channels, p), _units(channels, t), _units(channels, p)
        self.mask = None if combine == "trunk" else nn.Sequential(
            SoftMaskBranch(channels, mask_depth, r),
            nn.BatchNorm2d(channels), nn.ReLU(), nn.Conv2d(channels, channels, 1, bias=False),
            nn.BatchNorm2d(channels), nn.ReLU(), nn.Conv2d(channels, channels, 1), nn.Sigmoid())

    def soft_mask(self, x: torch.Tensor) -> torch.Tensor | None:
        """The mask ``M`` in (0, 1) of the module's input ``x`` after its ``p`` units, or None without a branch.
        Shapes: (B, C, H, W) -> (B, C, H, W)."""
        return None if self.mask is None else self.mask(self.pre(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        trunk = self.trunk(x)
        if self.mask is None:
            return self.post(trunk)
        mask = self.mask(x)
        return self.post((1 + mask) * trunk if self.combine == "residual" else mask * trunk)


class ResidualAttentionNet(nn.Module):
    """The network of the module's docstring.

    Args:
        num_classes: outputs of the classifier.
        in_chans: input channels.
        stem: channels of the stem convolution.
        stem_pool: follow the stem with BN-ReLU and a 2x2 max-pool, so the stages run at half the resolution (16, 8
            and 4 pixels for 32x32 inputs): a quarter of the cost, which is what makes CPU training fit.
        widths: output channels of the three stages (bottleneck units: a quarter of it inside).
        modules: attention modules per stage (Attention-56: 1, 1, 1; Attention-92: 1, 2, 3).
        mask_depths: max-poolings of each stage's soft-mask branches.
        final_width: channels of the three residual units after the last stage.
        combine: how trunk and mask combine (``COMBINE``; the ablation).
        pool: ``avg`` (the paper's) or ``attention``: PatchConvNet's learned aggregation
            (:class:`~hub.attention.AttentionPool`) in place of the average pool.
        tta: test-time augmentation in eval mode (:mod:`vision.tta`): ``none`` (the paper's), ``flip`` or
            ``flip_translate`` (airbench's).
    """

    def __init__(self, num_classes: int = 10, in_chans: int = 3, stem: int = 32, stem_pool: bool = False,
                 widths: tuple[int, int, int] = (128, 256, 512), modules: tuple[int, int, int] = (1, 1, 1),
                 mask_depths: tuple[int, int, int] = (2, 1, 1), final_width: int = 1024,
                 combine: Literal["residual", "naive", "trunk"] = "residual",
                 pool: Literal["avg", "attention"] = "avg", tta: str = "none"):
        super().__init__()
        self.tta = check_tta(tta)
        if combine not in COMBINE or pool not in POOL:
            raise DataError(f"combine must be one of {COMBINE} and pool one of {POOL}, got {combine!r}, {pool!r}")
        self.num_features = final_width
        self.stem = nn.Conv2d(in_chans, stem, 3, padding=1, bias=False)
        if stem_pool:
            self.stem = nn.Sequential(self.stem, nn.BatchNorm2d(stem), nn.ReLU(), nn.MaxPool2d(2))
        stages, channels = [], stem
        for i, (width, count, depth) in enumerate(zip(widths, modules, mask_depths)):
            stages.append(nn.Sequential(PreActBottleneck(channels, width, stride=1 if i == 0 else 2),
                                        *(AttentionModule(width, depth, combine=combine) for _ in range(count))))
            channels = width
        self.stages = nn.Sequential(*stages)
        self.final = nn.Sequential(PreActBottleneck(channels, final_width, stride=1), _units(final_width, 2),
                                   nn.BatchNorm2d(final_width), nn.ReLU())
        self.pool = AttentionPool(final_width) if pool == "attention" else None
        self.head = nn.Linear(final_width, num_classes)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() != 4 or min(x.shape[-2:]) < 8:
            raise DataError(f"{type(self).__name__} takes (B, C, H, W) images of at least 8x8 pixels, got "
                            f"{tuple(x.shape)}")
        return self.final(self.stages(self.stem(x)))  # (B, final_width, H // 4, W // 4), H // 8 with stem_pool

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = x.mean((2, 3)) if self.pool is None else self.pool(x)  # (B, C, h, w) -> (B, C)
        return x if pre_logits else self.head(x)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._logits(x) if self.training else augmented_logits(self._logits, x, self.tta)

    def reset_classifier(self, num_classes: int) -> None:
        self.head = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()

    def attention_maps(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each attention module's soft mask averaged over channels (and, with attention pooling, the class token's
        attention over the last map as ``pool``). Shapes: x (B, C, H, W) -> {"stages.i.j": (B, 1, h, w), ...}."""
        maps: dict[str, torch.Tensor] = {}
        hooks = [module.register_forward_hook(
            lambda m, inputs, out, key=name: maps.__setitem__(key, m.soft_mask(inputs[0]).mean(1, keepdim=True)))
            for name, module in self.named_modules() if isinstance(module, AttentionModule) and module.mask is not None]
        try:
            features = self.forward_features(x)
        finally:
            for hook in hooks:
                hook.remove()
        if self.pool is not None:
            _, weights = self.pool(features, need_weights=True)  # (B, heads, 1, 1 + h * w)
            maps["pool"] = weights.mean(1)[:, :, 1:].reshape(len(x), 1, *features.shape[-2:])
        return maps


def _build(num_classes: int, in_chans: int, combine: str, pool: str, tta: str, **layout) -> ResidualAttentionNet:
    return ResidualAttentionNet(num_classes, in_chans, combine=combine, pool=pool, tta=tta, **layout)


@register_model(task="image-classification", classifier="head")
def residual_attention_56_32(num_classes: int = 10, in_chans: int = 3, combine: str = "residual",
                             pool: str = "avg", tta: str = "none") -> ResidualAttentionNet:
    """Attention-56 in the paper's CIFAR layout (widths 128/256/512, 1024 before the pool; one module a stage): the
    GPU recipe's network (``recipes/vision/residual_attention_56_cifar10_gpu.yaml``)."""
    return _build(num_classes, in_chans, combine, pool, tta, stem=32, widths=(128, 256, 512), modules=(1, 1, 1),
                  final_width=1024)


@register_model(task="image-classification", classifier="head")
def residual_attention_92_32(num_classes: int = 10, in_chans: int = 3, combine: str = "residual",
                             pool: str = "avg", tta: str = "none") -> ResidualAttentionNet:
    """Attention-92 in the paper's CIFAR layout (modules 1/2/3 a stage; CIFAR-10 test error 4.99% in the paper)."""
    return _build(num_classes, in_chans, combine, pool, tta, stem=32, widths=(128, 256, 512), modules=(1, 2, 3),
                  final_width=1024)


@register_model(task="image-classification", classifier="head")
def residual_attention_small_32(num_classes: int = 10, in_chans: int = 3, combine: str = "residual",
                                pool: str = "avg", tta: str = "none") -> ResidualAttentionNet:
    """Attention-56's layout at three quarters of the width (96/192/384, 768 before the pool) with a max-pooled stem
    (stages at 16, 8 and 4 pixels), sized for CPU training: a training step costs a sixth of the paper's layout at
    this width."""
    return _build(num_classes, in_chans, combine, pool, tta, stem=32, stem_pool=True, widths=(96, 192, 384),
                  modules=(1, 1, 1), final_width=768)


@register_model(task="image-classification", classifier="head")
def residual_attention_micro_32(num_classes: int = 10, in_chans: int = 3, combine: str = "residual",
                                pool: str = "avg", tta: str = "none") -> ResidualAttentionNet:
    """Attention-56's layout at an eighth of the width (16/32/64, 128 before the pool), for tests and quick runs."""
    return _build(num_classes, in_chans, combine, pool, tta, stem=16, widths=(16, 32, 64), modules=(1, 1, 1),
                  final_width=128)
