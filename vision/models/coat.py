"""Co-Scale Conv-Attentional Image Transformers (CoaT-Lite; Xu et al., ICCV 2021) configured from timm.

timm's ``CoaT`` is used as it is; the entries here size it for small images: a first patch size of
2 gives token grids of 16, 8, 4 and 2 on a 32x32 input (the 224-pixel models use 4: 56 to 7).
timm sizes stages 2-4 for a first patch size of 4, so the model is built for an image twice as
large and its first patch embedding is replaced by a patch-2 one for the real size.
The conv-attention splits its 8 heads over convolutional relative position windows 3/5/7 (2/3/3
heads), so every width must divide by 8.

Shapes:
    x: (B, C, H, W) -> logits (B, num_classes); ``forward_features`` -> (B, 1 + N, D) tokens of the last stage.

>>> coat_lite_micro_32()(torch.zeros(2, 3, 32, 32)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

from timm.layers import PatchEmbed
from timm.models.coat import CoaT
from torch import nn

from hub.core.registry import register_model


def _create_coat_lite(num_classes: int, in_chans: int, img_size: int, drop_path_rate: float,
                      embed_dims: tuple[int, int, int, int], mlp_ratios: tuple[float, float, float, float]) -> CoaT:
    model = CoaT(img_size=2 * img_size, patch_size=4, in_chans=in_chans, num_classes=num_classes,
                 embed_dims=embed_dims, serial_depths=(2, 2, 2, 2), parallel_depth=0, num_heads=8,
                 mlp_ratios=mlp_ratios, drop_path_rate=drop_path_rate)
    model.patch_embed1 = PatchEmbed(img_size=img_size, patch_size=2, in_chans=in_chans, embed_dim=embed_dims[0],
                                    norm_layer=nn.LayerNorm)
    return model


@register_model(task="image-classification")
def coat_lite_micro_32(num_classes: int = 10, in_chans: int = 3, img_size: int = 32,
                       drop_path_rate: float = 0.1) -> CoaT:
    """CoaT-Lite at half of Tiny's widths (32/64/128/160) for 32x32 images and CPU training."""
    return _create_coat_lite(num_classes, in_chans, img_size, drop_path_rate, (32, 64, 128, 160), (4, 4, 4, 4))


@register_model(task="image-classification")
def coat_lite_tiny_32(num_classes: int = 10, in_chans: int = 3, img_size: int = 32,
                      drop_path_rate: float = 0.1) -> CoaT:
    """CoaT-Lite Tiny's widths (64/128/256/320, MLP ratios 8/8/4/4) for 32x32 images."""
    return _create_coat_lite(num_classes, in_chans, img_size, drop_path_rate, (64, 128, 256, 320), (8, 8, 4, 4))
