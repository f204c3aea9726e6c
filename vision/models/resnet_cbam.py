"""ResNets with CBAM (Woo et al., ECCV 2018) and an optional attention-pooling head.

The ResNet is timm's; the core's :func:`hub.attention.cbam.insert_cbam` puts CBAM on the residual
branch of every block. For 32x32 inputs the stem is the CIFAR one (a 3x3 stride-1 convolution, no
max pooling), so the four stages see 32, 16, 8 and 4 pixel maps. ``global_pool="attention"`` replaces
global average pooling by PatchConvNet's learned aggregation (:class:`hub.attention.AttentionPool`: a class
token attends over the spatial positions).

Shapes:
    x: (B, C, H, W) -> logits (B, num_classes); ``forward_features`` -> (B, num_features, H/8, W/8) for the
    32x32 entries.

>>> resnet_cbam18_32(global_pool="attention")(torch.zeros(2, 3, 32, 32)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

import torch
from timm.models.resnet import BasicBlock, ResNet
from torch import nn

from hub.attention import GLOBAL_POOLS, AttentionPool
from hub.attention.cbam import CBAM, insert_cbam
from hub.core.registry import register_model
from hub.errors import DataError


class ResNetCBAM(ResNet):
    """timm's ResNet whose ``reset_classifier`` keeps an attention pool (timm's would rebuild average pooling)."""

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        if not isinstance(self.global_pool, AttentionPool):
            return super().reset_classifier(num_classes, global_pool or "avg")
        self.num_classes = num_classes
        self.fc = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()


def attention_maps(model: nn.Module, x: torch.Tensor) -> dict[str, torch.Tensor]:
    """The spatial CBAM map of every block (and the pooling attention), by name.

    Shapes: x: (B, C, H, W) -> {"layer1.0": (B, 1, h, w), ..., "pool": (B, 1, h4, w4)}.
    """
    maps: dict[str, torch.Tensor] = {}
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, CBAM):
            block = name.rsplit(".", 2)[0]  # "layer1.0.bn2.1" -> "layer1.0"
            hooks.append(module.spatial.register_forward_hook(lambda m, i, out, key=block: maps.__setitem__(key, out)))
    try:
        features = model.forward_features(x)
        if isinstance(model.global_pool, AttentionPool):
            _, weights = model.global_pool(features, need_weights=True)  # (B, heads, 1, 1 + h*w)
            maps["pool"] = weights.mean(1)[:, :, 1:].reshape(x.shape[0], 1, *features.shape[-2:])
    finally:
        for hook in hooks:
            hook.remove()
    return maps


def _create_resnet_cbam(layers: tuple[int, ...], channels: tuple[int, ...], num_classes: int, in_chans: int,
                        small_input: bool, global_pool: str, reduction: int) -> ResNet:
    if global_pool not in GLOBAL_POOLS:
        raise DataError(f"global_pool must be one of {GLOBAL_POOLS}, got {global_pool!r}")
    model = ResNetCBAM(BasicBlock, list(layers), channels=channels, num_classes=num_classes, in_chans=in_chans)
    if small_input:
        model.conv1 = nn.Conv2d(in_chans, model.conv1.out_channels, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    insert_cbam(model, reduction=reduction)
    if global_pool == "attention":
        model.global_pool = AttentionPool(model.num_features)
    return model


@register_model(task="image-classification", classifier="fc")
def resnet_cbam18_32(num_classes: int = 10, in_chans: int = 3, global_pool: str = "avg",
                     reduction: int = 16) -> ResNet:
    """ResNet-18 + CBAM with the CIFAR stem, for 32x32 images."""
    return _create_resnet_cbam((2, 2, 2, 2), (64, 128, 256, 512), num_classes, in_chans, True, global_pool,
                               reduction)


@register_model(task="image-classification", classifier="fc")
def resnet_cbam_micro_32(num_classes: int = 10, in_chans: int = 3, global_pool: str = "avg",
                         reduction: int = 8) -> ResNet:
    """A ResNet-10 at half width (32/64/128/256) + CBAM with the CIFAR stem, sized for CPU training."""
    return _create_resnet_cbam((1, 1, 1, 1), (32, 64, 128, 256), num_classes, in_chans, True, global_pool,
                               reduction)


@register_model(task="image-classification", classifier="fc")
def resnet_cbam18(num_classes: int = 1000, in_chans: int = 3, global_pool: str = "avg",
                  reduction: int = 16) -> ResNet:
    """ResNet-18 + CBAM with the ImageNet stem (7x7 stride 2 and max pooling)."""
    return _create_resnet_cbam((2, 2, 2, 2), (64, 128, 256, 512), num_classes, in_chans, False, global_pool,
                               reduction)
