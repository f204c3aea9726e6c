"""HaloNets: blocked local self-attention (Vaswani et al., CVPR 2021) configured from timm's ByobNet.

Each attention layer splits the feature map into ``block_size`` x ``block_size`` blocks that attend
to their block plus a ``halo`` of neighbouring pixels. timm's layer asserts with an empty message
when a feature map is not divisible by the block size; :class:`HaloNet` checks the input size first
and says what it needs. The small-image entry uses a stride-2 stem and 4x4 blocks with a halo of 1,
so its attention stages see 16, 8 and 4 pixel maps on a 32x32 input.

Shapes:
    x: (B, C, H, W), H and W multiples of ``input_multiple`` -> logits (B, num_classes).

>>> halonet_micro_32()(torch.zeros(2, 3, 32, 32)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

import torch
from timm.models.byobnet import ByoBlockCfg, ByobNet, ByoModelCfg
from torch import nn

from hub.attention import GLOBAL_POOLS, AttentionPool
from hub.core.registry import register_model
from hub.errors import DataError


class HaloNet(ByobNet):
    """timm's ByobNet with an input-size check in front of its halo attention stages, and ``global_pool`` ``avg``
    or ``attention`` (PatchConvNet's learned aggregation, :class:`hub.attention.AttentionPool`, in the head)."""

    def __init__(self, cfg: ByoModelCfg, input_multiple: int, global_pool: str = "avg", **kwargs):
        if global_pool not in GLOBAL_POOLS:
            raise DataError(f"global_pool must be one of {GLOBAL_POOLS}, got {global_pool!r}")
        super().__init__(cfg, **kwargs)
        self.input_multiple = input_multiple
        if global_pool == "attention":
            self.head.global_pool = AttentionPool(self.num_features)

    def reset_classifier(self, num_classes: int, global_pool: str | None = None) -> None:
        if not isinstance(self.head.global_pool, AttentionPool):
            return super().reset_classifier(num_classes, global_pool)
        self.num_classes = num_classes  # timm's head.reset asks the pool for its feat_mult, which this one lacks
        self.head.fc = nn.Linear(self.num_features, num_classes) if num_classes > 0 else nn.Identity()

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        height, width = x.shape[-2:]
        if height % self.input_multiple or width % self.input_multiple:
            fit = (max(1, round(height / self.input_multiple)) * self.input_multiple,
                   max(1, round(width / self.input_multiple)) * self.input_multiple)
            raise DataError(f"{type(self).__name__} needs height and width that are multiples of "
                            f"{self.input_multiple} (its halo blocks must tile every feature map), got "
                            f"{height}x{width}; resize to e.g. {fit[0]}x{fit[1]}")
        return super().forward_features(x)


@register_model(task="image-classification", classifier="head.fc")
def halonet_micro_32(num_classes: int = 10, in_chans: int = 3, drop_path_rate: float = 0.0,
                     global_pool: str = "avg") -> HaloNet:
    """Bottleneck stage then three halo-attention stages (128/256/512 wide), 4x4 blocks, halo 1."""
    cfg = ByoModelCfg(
        blocks=(
            ByoBlockCfg(type="bottle", d=1, c=64, s=1, gs=0, br=0.25),
            ByoBlockCfg(type="self_attn", d=1, c=128, s=2, gs=0, br=0.25),
            ByoBlockCfg(type="self_attn", d=1, c=256, s=2, gs=0, br=0.25),
            ByoBlockCfg(type="self_attn", d=1, c=512, s=2, gs=0, br=0.25),
        ),
        stem_chs=32, stem_type="3x3", stem_pool=None,
        self_attn_layer="halo", self_attn_kwargs=dict(block_size=4, halo_size=1),
    )
    # stem /2, then halo stages read maps at /2, /4 and /8 that 4x4 blocks must tile: inputs of 32k pixels
    return HaloNet(cfg, input_multiple=32, global_pool=global_pool, num_classes=num_classes, in_chans=in_chans,
                   drop_path_rate=drop_path_rate)
