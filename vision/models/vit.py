"""Vision Transformers (Dosovitskiy et al., ICLR 2021) configured from timm.

The architecture is timm's ``VisionTransformer``; this file only lists dimensions for hub entries,
including sizes for small images.

Shapes:
    x: (B, C, H, W) -> logits (B, num_classes); ``forward_features`` -> tokens (B, 1 + N, D).

>>> model = vit_digits()
>>> model(torch.zeros(2, 1, 8, 8)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

from timm.models.vision_transformer import VisionTransformer

from hub.core.registry import register_model


def _create_vit(num_classes: int, drop_rate: float, drop_path_rate: float, **dims) -> VisionTransformer:
    return VisionTransformer(num_classes=num_classes, drop_rate=drop_rate, drop_path_rate=drop_path_rate,
                             class_token=True, global_pool="token", **dims)


@register_model(task="image-classification")
def vit_micro_patch4_32(num_classes: int = 10, in_chans: int = 3, img_size: int = 32, drop_rate: float = 0.0,
                        drop_path_rate: float = 0.1) -> VisionTransformer:
    """ViT for 32x32 images sized for CPU training: 4x4 patches (64 tokens), width 128, depth 6, 4 heads."""
    return _create_vit(num_classes, drop_rate, drop_path_rate, img_size=img_size, patch_size=4, in_chans=in_chans,
                       embed_dim=128, depth=6, num_heads=4, mlp_ratio=2.0)


@register_model(task="image-classification")
def vit_tiny_patch4_32(num_classes: int = 10, in_chans: int = 3, img_size: int = 32, drop_rate: float = 0.0,
                       drop_path_rate: float = 0.1) -> VisionTransformer:
    """DeiT-Tiny dimensions for 32x32 images: 4x4 patches, width 192, depth 12, 3 heads."""
    return _create_vit(num_classes, drop_rate, drop_path_rate, img_size=img_size, patch_size=4, in_chans=in_chans,
                       embed_dim=192, depth=12, num_heads=3, mlp_ratio=4.0)


@register_model(task="image-classification")
def vit_digits(num_classes: int = 10, drop_rate: float = 0.0, drop_path_rate: float = 0.1) -> VisionTransformer:
    """ViT for 8x8 grey digits: 2x2 patches (16 tokens), width 64, depth 4, 4 heads."""
    return _create_vit(num_classes, drop_rate, drop_path_rate, img_size=8, patch_size=2, in_chans=1,
                       embed_dim=64, depth=4, num_heads=4, mlp_ratio=2.0)


