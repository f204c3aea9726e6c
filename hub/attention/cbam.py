"""CBAM: Convolutional Block Attention Module (Woo et al., ECCV 2018).

Channel attention ``Mc = σ(MLP(AvgPool(F)) + MLP(MaxPool(F)))`` (one MLP shared by both pooled
descriptors, hidden width ``C / reduction``), then spatial attention
``Ms = σ(conv7x7([mean_c(F); max_c(F)]))``: ``F' = Mc ⊗ F``, ``F'' = Ms ⊗ F'``.

:func:`insert_cbam` puts CBAM into every residual block of a timm or torchvision ResNet where the
paper does, on the residual branch before the addition: the block's last BatchNorm (``bn2`` of a
BasicBlock, ``bn3`` of a Bottleneck) becomes ``Sequential(bn, CBAM)``. Load pretrained ResNet weights
before inserting (the BN's keys gain a ``.0``). The maps of an inserted CBAM can be read with a
forward hook on its ``channel`` / ``spatial`` submodules, whose outputs are the maps.
"""
from __future__ import annotations

import torch
from torch import nn


class ChannelAttention(nn.Module):
    """The channel map ``σ(MLP(avg) + MLP(max))`` of a feature map.

    Shapes:
        x: (B, C, H, W) -> map (B, C, 1, 1) in [0, 1].

    >>> ChannelAttention(64, reduction=16)(torch.randn(2, 64, 8, 8)).shape
    torch.Size([2, 64, 1, 1])
    """

    def __init__(self, channels: int, reduction: int = 16):
        super().__init__()
        self.channels, self.reduction = channels, reduction
        hidden = max(1, channels // reduction)
        self.mlp = nn.Sequential(nn.Conv2d(channels, hidden, 1), nn.ReLU(), nn.Conv2d(hidden, channels, 1))

    def reset_parameters(self) -> None:
        self.mlp[0].reset_parameters()
        self.mlp[2].reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        avg = x.mean(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
        peak = x.amax(dim=(2, 3), keepdim=True)  # (B, C, 1, 1)
        return torch.sigmoid(self.mlp(avg) + self.mlp(peak))

    def extra_repr(self) -> str:
        return f"channels={self.channels}, reduction={self.reduction}"


class SpatialAttention(nn.Module):
    """The spatial map ``σ(conv([mean_c; max_c]))`` of a feature map.

    Shapes:
        x: (B, C, H, W) -> map (B, 1, H, W) in [0, 1].

    >>> SpatialAttention()(torch.randn(2, 64, 8, 8)).shape
    torch.Size([2, 1, 8, 8])
    """

    def __init__(self, kernel_size: int = 7):
        super().__init__()
        self.kernel_size = kernel_size
        self.conv = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2, bias=False)

    def reset_parameters(self) -> None:
        self.conv.reset_parameters()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = torch.cat([x.mean(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)], dim=1)  # (B, 2, H, W)
        return torch.sigmoid(self.conv(pooled))

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}"


class CBAM(nn.Module):
    """Channel then spatial attention, applied multiplicatively.

    Args:
        channels: C.
        reduction: channel MLP reduction ratio r (hidden width ``C // r``).
        kernel_size: spatial convolution size.

    Shapes:
        x: (B, C, H, W) -> (B, C, H, W); with ``need_weights`` also the maps
        (channel (B, C, 1, 1), spatial (B, 1, H, W)).

    >>> out, (channel_map, spatial_map) = CBAM(64)(torch.randn(2, 64, 8, 8), need_weights=True)
    >>> out.shape, channel_map.shape, spatial_map.shape
    (torch.Size([2, 64, 8, 8]), torch.Size([2, 64, 1, 1]), torch.Size([2, 1, 8, 8]))
    """

    def __init__(self, channels: int, reduction: int = 16, kernel_size: int = 7):
        super().__init__()
        self.channel = ChannelAttention(channels, reduction)
        self.spatial = SpatialAttention(kernel_size)

    def reset_parameters(self) -> None:
        self.channel.reset_parameters()
        self.spatial.reset_parameters()

    def forward(self, x: torch.Tensor, need_weights: bool = False):
        channel_map = self.channel(x)
        x = x * channel_map
        spatial_map = self.spatial(x)
        x = x * spatial_map
        return (x, (channel_map, spatial_map)) if need_weights else x


def _residual_blocks() -> dict[type, str]:
    """ResNet block classes of torchvision and timm -> the name of their last BatchNorm."""
    from timm.models import resnet as timm_resnet
    from torchvision.models import resnet as tv_resnet

    return {tv_resnet.BasicBlock: "bn2", tv_resnet.Bottleneck: "bn3",
            timm_resnet.BasicBlock: "bn2", timm_resnet.Bottleneck: "bn3"}


def insert_cbam(resnet: nn.Module, reduction: int = 16, kernel_size: int = 7) -> nn.Module:
    """Insert CBAM after the last BatchNorm of every residual block (before the addition), in place.

    Works on timm and torchvision ResNets (BasicBlock and Bottleneck); returns the same model.

    >>> import torchvision
    >>> model = insert_cbam(torchvision.models.resnet18(num_classes=10))
    >>> sum(isinstance(m, CBAM) for m in model.modules())
    8
    """
    last_norm = _residual_blocks()
    blocks = [m for m in resnet.modules() if type(m) in last_norm]
    if not blocks:
        raise TypeError(f"insert_cbam expected a timm or torchvision ResNet with BasicBlock/Bottleneck blocks, "
                        f"found none in {type(resnet).__name__}")
    for block in blocks:
        name = last_norm[type(block)]
        norm = getattr(block, name)
        if not isinstance(norm, nn.BatchNorm2d):
            raise TypeError(f"expected {type(block).__name__}.{name} to be a BatchNorm2d, got {type(norm).__name__} "
                            "(is CBAM inserted already?)")
        setattr(block, name, nn.Sequential(norm, CBAM(norm.num_features, reduction, kernel_size)))
    return resnet
