"""ResNets with CBAM (Woo et al., ECCV 2018) and an optional attention-pooling head.

The ResNet is timm's; the core's :func:`hub.attention.cbam.insert_cbam` puts CBAM on the residual
branch of every block. For 32x32 inputs the stem is the CIFAR one (a 3x3 stride-1 convolution, no
max pooling), so the four stages see 32, 16, 8 and 4 pixel maps. ``attention_pool=True`` replaces
global average pooling by a learned attention aggregation: one learned query attends over the
spatial positions (the core's PMA with a single seed).

Shapes:
    x: (B, C, H, W) -> logits (B, num_classes); ``forward_features`` -> (B, num_features, H/8, W/8) for the
    32x32 entries.

>>> resnet_cbam18_32(attention_pool=True)(torch.zeros(2, 3, 32, 32)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

import torch
from timm.models.resnet import BasicBlock, ResNet
from torch import nn

from hub.attention.cbam import CBAM, insert_cbam
from hub.attention.set_transformer import PMA
from hub.core.registry import register_model


class AttentionPool2d(nn.Module):
    """A learned query attends over the positions of a feature map (PMA with one seed).

    Shapes:
        x: (B, C, H, W) -> (B, C); with ``need_weights`` also (B, num_heads, 1, H*W).
    """

    def __init__(self, channels: int, num_heads: int = 8):
        super().__init__()
        self.pma = PMA(channels, num_seeds=1, num_heads=num_heads)

    def forward(self, x: torch.Tensor, need_weights: bool = False):
        tokens = x.flatten(2).transpose(1, 2)  # (B, C, H, W) -> (B, H*W, C)
        pooled, weights = self.pma(tokens, need_weights=True) if need_weights else (self.pma(tokens), None)
        pooled = pooled.squeeze(1)  # (B, 1, C) -> (B, C)
        return (pooled, weights) if need_weights else pooled


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
        if isinstance(model.global_pool, AttentionPool2d):
            _, weights = model.global_pool(features, need_weights=True)  # (B, heads, 1, h*w)
            maps["pool"] = weights.mean(1).reshape(x.shape[0], 1, *features.shape[-2:])
    finally:
        for hook in hooks:
            hook.remove()
    return maps


def _create_resnet_cbam(layers: tuple[int, ...], channels: tuple[int, ...], num_classes: int, in_chans: int,
                        small_input: bool, attention_pool: bool, reduction: int) -> ResNet:
    model = ResNet(BasicBlock, list(layers), channels=channels, num_classes=num_classes, in_chans=in_chans)
    if small_input:
        model.conv1 = nn.Conv2d(in_chans, model.conv1.out_channels, 3, stride=1, padding=1, bias=False)
        model.maxpool = nn.Identity()
    insert_cbam(model, reduction=reduction)
    if attention_pool:
        model.global_pool = AttentionPool2d(model.num_features)
        # timm's reset_classifier would rebuild average pooling; keep the attention pool and swap the fc only.
        model.reset_classifier = lambda n, global_pool=None: setattr(
            model, "fc", nn.Linear(model.num_features, n) if n > 0 else nn.Identity())
    return model


@register_model(task="image-classification", classifier="fc")
def resnet_cbam18_32(num_classes: int = 10, in_chans: int = 3, attention_pool: bool = False,
                     reduction: int = 16) -> ResNet:
    """ResNet-18 + CBAM with the CIFAR stem, for 32x32 images."""
    return _create_resnet_cbam((2, 2, 2, 2), (64, 128, 256, 512), num_classes, in_chans, True, attention_pool,
                               reduction)


@register_model(task="image-classification", classifier="fc")
def resnet_cbam_micro_32(num_classes: int = 10, in_chans: int = 3, attention_pool: bool = False,
                         reduction: int = 8) -> ResNet:
    """A ResNet-10 at half width (32/64/128/256) + CBAM with the CIFAR stem, sized for CPU training."""
    return _create_resnet_cbam((1, 1, 1, 1), (32, 64, 128, 256), num_classes, in_chans, True, attention_pool,
                               reduction)


@register_model(task="image-classification", classifier="fc")
def resnet_cbam18(num_classes: int = 1000, in_chans: int = 3, attention_pool: bool = False,
                  reduction: int = 16) -> ResNet:
    """ResNet-18 + CBAM with the ImageNet stem (7x7 stride 2 and max pooling)."""
    return _create_resnet_cbam((2, 2, 2, 2), (64, 128, 256, 512), num_classes, in_chans, False, attention_pool,
                               reduction)
