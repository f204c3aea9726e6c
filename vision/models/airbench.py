"""The network of airbench (Jordan 2024, "94% on CIFAR-10 in 3.29 Seconds on a Single GPU"), a convolutional network
designed for speed, with its three blocks given by the family: :mod:`vision.models.airbench_cbam` (CBAM closing each
block) and :mod:`vision.models.airbench_halo` (halo attention as each block's second layer).

From airbench94 (credited, re-implemented: airbench is a training script, not a library): a first 2x2 convolution
that whitens the input patches, fixed after being computed from the training images' patch covariance
(:meth:`AirbenchNet.initialize_from_data`, called by training before the first step); three blocks at widths
64/256/256 that halve the map; convolutions initialised as identities on their first input channels (Dirac);
BatchNorm without a scale (a bias only); a global max-pool and a bias-free linear classifier whose logits are scaled
by 1/9; test-time augmentation in eval mode (:mod:`vision.tta`: the mean of the logits of the image and its mirror,
and of both shifted by one pixel up-left and down-right). The training side (label smoothing, the norm biases'
larger learning rate, lookahead, batch flips and translations) is the recipe's.

Shapes:
    x: (B, C, H, W) -> logits (B, num_classes); ``forward_features`` -> (B, num_features, H // 8, W // 8) for even
    H, W (the whitening conv takes one pixel off each side).
"""
from __future__ import annotations

from typing import Callable, Literal

import torch
import torch.nn.functional as F
from torch import nn

from hub.attention import AttentionPool
from hub.errors import DataError
from vision.tta import augmented_logits, check_tta


class BiasOnlyBatchNorm(nn.BatchNorm2d):
    """BatchNorm whose scale is fixed at 1: a learned bias only (airbench). airbench's momentum 0.6 is PyTorch's
    0.4; its epsilon 1e-12."""

    def __init__(self, channels: int, momentum: float = 0.4, eps: float = 1e-12):
        super().__init__(channels, eps=eps, momentum=momentum, affine=False)
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.bias.view(1, -1, 1, 1)


class DiracConv(nn.Conv2d):
    """A 3x3 'same' convolution without bias, its first ``in_channels`` filters initialised as identities."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__(in_channels, out_channels, 3, padding=1, bias=False)

    def reset_parameters(self) -> None:
        super().reset_parameters()
        identity = self.weight.data[: min(self.in_channels, self.out_channels)]
        nn.init.dirac_(identity)


class AirbenchNet(nn.Module):
    """airbench94's network around three blocks made by ``block_fn``.

    Args:
        block_fn: ``block_fn(in_channels, out_channels)`` -> a module mapping (B, C_in, H, W) to
            (B, C_out, H // 2, W // 2).
        num_classes: outputs of the classifier.
        in_chans: input channels C; the whitening conv has ``2 * 4 * C`` filters (each whitened 2x2 patch direction
            and its negative).
        widths: output channels of the three blocks.
        logit_scale: the logits' factor (airbench: 1/9).
        tta: test-time augmentation in eval mode: ``none``, ``flip`` (mean of the image's and its mirror's logits)
            or ``flip_translate`` (airbench's level 2: half that, half the same for one-pixel shifts both ways).
        global_pool: ``max`` (airbench's global max-pool) or ``attention`` (PatchConvNet's learned aggregation,
            :class:`hub.attention.AttentionPool`).
    """

    def __init__(self, block_fn: Callable[[int, int], nn.Module], num_classes: int = 10, in_chans: int = 3,
                 widths: tuple[int, int, int] = (64, 256, 256), logit_scale: float = 1 / 9,
                 tta: Literal["none", "flip", "flip_translate"] = "flip_translate",
                 global_pool: Literal["max", "attention"] = "max"):
        super().__init__()
        check_tta(tta)
        if global_pool not in ("max", "attention"):
            raise DataError(f"global_pool must be 'max' (airbench's) or 'attention', got {global_pool!r}")
        self.tta, self.logit_scale, self.num_features = tta, logit_scale, widths[-1]
        whiten_channels = 2 * 4 * in_chans
        # fixed (a buffer): computed from the data by initialize_from_data; its bias is learned
        self.register_buffer("whiten_weight", torch.zeros(whiten_channels, in_chans, 2, 2))
        self.whiten_bias = nn.Parameter(torch.zeros(whiten_channels))
        channels = (whiten_channels, *widths)
        self.blocks = nn.Sequential(*(block_fn(channels[i], channels[i + 1]) for i in range(3)))
        self.pool = AttentionPool(widths[-1]) if global_pool == "attention" else None
        self.head = nn.Linear(widths[-1], num_classes, bias=False)
        nn.init.dirac_(self.whiten_weight[: in_chans])  # a usable start before initialize_from_data

    @torch.no_grad()
    def initialize_from_data(self, images: torch.Tensor, eps: float = 5e-4) -> None:
        """Set the whitening filters from normalised training images (N, C, H, W): the eigenvectors of their 2x2
        patches' covariance scaled by ``1 / sqrt(eigenvalue + eps)``, and their negatives (airbench)."""
        c = images.shape[1]
        patches = images.float().unfold(2, 2, 1).unfold(3, 2, 1)  # (N, C, H-1, W-1, 2, 2)
        patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(-1, c * 4)  # (N * positions, C * 2 * 2)
        covariance = patches.T @ patches / len(patches)
        eigenvalues, eigenvectors = torch.linalg.eigh(covariance)  # ascending
        filters = (eigenvectors.T / torch.sqrt(eigenvalues + eps)[:, None]).reshape(c * 4, c, 2, 2)
        self.whiten_weight.copy_(torch.cat([filters, -filters]).to(self.whiten_weight))

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] % 2 or x.shape[-2] % 2 or min(x.shape[-2:]) < 16:
            raise DataError(f"{type(self).__name__} takes even image sides of at least 16 pixels, got "
                            f"{x.shape[-2]}x{x.shape[-1]}")
        x = F.gelu(F.conv2d(x, self.whiten_weight.to(x.dtype), self.whiten_bias))  # (B, 8C, H - 1, W - 1)
        return self.blocks(x)  # (B, widths[-1], (H - 1) // 8, (W - 1) // 8)

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        x = x.amax(dim=(2, 3)) if self.pool is None else self.pool(x)  # (B, C, h, w) -> (B, C)
        return x if pre_logits else self.head(x) * self.logit_scale

    def reset_classifier(self, num_classes: int) -> None:
        self.head = nn.Linear(self.num_features, num_classes, bias=False) if num_classes > 0 else nn.Identity()

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._logits(x) if self.training else augmented_logits(self._logits, x, self.tta)
