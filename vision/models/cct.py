"""Compact Convolutional Transformers (Hassani et al. 2021, "Escaping the Big Data Paradigm with Compact
Transformers"): a Vision Transformer whose tokens come from a small convolutional tokenizer instead of patches, and
whose classifier reads an attention pooling of the tokens instead of a class token, so that it learns CIFAR-sized
data from scratch (CCT-7/3x1: 94-96% on CIFAR-10 in the paper).

The transformer is timm's ``VisionTransformer``; the tokenizer enters as timm's ``HybridEmbed`` (a CNN feature map
embedding, as in timm's hybrid ViTs) over :class:`ConvTokenizer`, and the pooling is timm's attention pooling
(``global_pool="map"``: a learned query attends over the tokens, where CCT's SeqPool weights them by a softmax of a
linear score), so rollout maps, layer-wise decay and export work as for the other ViTs. Name ``cct_L_KxN_32``:
``L`` transformer layers, a tokenizer of ``N`` convolutions of ``K`` x ``K``, for 32x32 images.

Shapes:
    x: (B, C, H, W) -> logits (B, num_classes); ``forward_features`` -> tokens (B, H * W / 4**N, D).

>>> cct_2_3x2_32()(torch.zeros(2, 3, 32, 32)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

from functools import partial

from timm.layers import HybridEmbed
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from hub.core.registry import register_model


class ConvTokenizer(nn.Sequential):
    """CCT's tokenizer: ``layers`` x (conv ``kernel`` x ``kernel`` -> ReLU -> max-pool 3, stride 2), the last
    convolution giving ``channels[-1]`` features per token.

    Args:
        in_chans: input channels.
        channels: output channels of each convolution (its length is the number of layers).
        kernel: the convolutions' side.

    Shapes: x (B, in_chans, H, W) -> (B, channels[-1], H / 2**layers, W / 2**layers)."""

    def __init__(self, in_chans: int, channels: tuple[int, ...], kernel: int = 3):
        layers: list[nn.Module] = []
        for c_in, c_out in zip((in_chans, *channels[:-1]), channels):
            layers += [nn.Conv2d(c_in, c_out, kernel, padding=kernel // 2, bias=False), nn.ReLU(inplace=True),
                       nn.MaxPool2d(3, stride=2, padding=1)]
        super().__init__(*layers)
        for module in self.modules():
            if isinstance(module, nn.Conv2d):
                nn.init.kaiming_normal_(module.weight)


def _create_cct(num_classes: int, in_chans: int, img_size: int, depth: int, embed_dim: int, num_heads: int,
                mlp_ratio: float, tokenizer_channels: tuple[int, ...], drop_path_rate: float) -> VisionTransformer:
    tokenizer = ConvTokenizer(in_chans, tokenizer_channels)
    # proj=False: the tokenizer's last convolution already gives embed_dim features per token, as in CCT
    embed = partial(HybridEmbed, backbone=tokenizer, proj=tokenizer_channels[-1] != embed_dim)
    return VisionTransformer(img_size=img_size, patch_size=1, in_chans=in_chans, num_classes=num_classes,
                             embed_dim=embed_dim, depth=depth, num_heads=num_heads, mlp_ratio=mlp_ratio,
                             class_token=False, global_pool="map", embed_layer=embed, drop_path_rate=drop_path_rate)


@register_model(task="image-classification")
def cct_2_3x2_32(num_classes: int = 10, in_chans: int = 3, img_size: int = 32,
                 drop_path_rate: float = 0.0) -> VisionTransformer:
    """CCT-2/3x2 for 32x32 images: two 3x3 convolutions (64, 128 channels; 64 tokens), 2 layers of width 128,
    2 heads, MLP ratio 1 (0.4M parameters)."""
    return _create_cct(num_classes, in_chans, img_size, 2, 128, 2, 1.0, (64, 128), drop_path_rate)


@register_model(task="image-classification")
def cct_4_3x2_32(num_classes: int = 10, in_chans: int = 3, img_size: int = 32,
                 drop_path_rate: float = 0.1) -> VisionTransformer:
    """CCT-4/3x2 for 32x32 images: the tokenizer of CCT-2/3x2, 4 layers of width 128, 2 heads, MLP ratio 1; sized
    to train on 2 CPU cores."""
    return _create_cct(num_classes, in_chans, img_size, 4, 128, 2, 1.0, (64, 128), drop_path_rate)


@register_model(task="image-classification")
def cct_7_3x1_32(num_classes: int = 10, in_chans: int = 3, img_size: int = 32,
                 drop_path_rate: float = 0.1) -> VisionTransformer:
    """CCT-7/3x1 for 32x32 images: one 3x3 convolution (256 channels; 256 tokens), 7 layers of width 256, 4 heads,
    MLP ratio 2 (4.3M parameters with the attention pooling; the paper's: 3.8M): its CIFAR-10 model, for GPU."""
    return _create_cct(num_classes, in_chans, img_size, 7, 256, 4, 2.0, (256,), drop_path_rate)


@register_model(task="image-classification")
def cct_digits(num_classes: int = 10, in_chans: int = 1, img_size: int = 8,
               drop_path_rate: float = 0.0) -> VisionTransformer:
    """CCT for 8x8 grey digits (the quickstart's): a 3x3 conv and max-pool make 16 tokens; 2 layers of width 64.

    The convolution has 64 channels; 2 heads, MLP ratio 2 (0.1M parameters)."""
    return _create_cct(num_classes, in_chans, img_size, 2, 64, 2, 2.0, (64,), drop_path_rate)
