"""The Slot Attention object-discovery autoencoder (Locatello et al., NeurIPS 2020, section 4.1).

A CNN encoder with a soft position embedding turns the image into a grid of features; the core's
:class:`~hub.attention.SlotAttention` binds them to K slots; a spatial-broadcast decoder (Watters et
al., 2019) decodes every slot on its own into an RGB image and an alpha logit per pixel; a softmax over
the slots turns the alphas into masks that mix the slot images into the reconstruction. Trained only
to reconstruct (MSE), the slots come to stand for objects and their masks segment the scene.

timm and torchvision have no such autoencoder and no spatial-broadcast decoder, so the CNNs here are
written out; the attention is the core's. The decoder may decode at a lower resolution than the image
(``broadcast_size * 2 ** len(decoder_channels)``): its RGB and alpha maps are then resized bilinearly
before the mixing, which keeps the CPU entry cheap.

Shapes:
    x: (B, 3, H, W) in [-1, 1] -> reconstruction (B, 3, H, W);
    ``autoencode(x)`` -> dict of ``recon`` (B, 3, H, W), ``slot_images`` (B, K, 3, H, W), ``masks``
    (B, K, H, W) summing to 1 over the slots, ``slots`` (B, K, D), ``attention`` (B, K, h * w) over
    the encoder's grid (the slot attention weights of the last iteration).

>>> model = slot_autoencoder_micro_64()
>>> out = model.autoencode(torch.zeros(2, 3, 64, 64))
>>> out["recon"].shape, out["masks"].shape
(torch.Size([2, 3, 64, 64]), torch.Size([2, 7, 64, 64]))
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from hub.attention import SlotAttention
from hub.core.registry import register_model
from hub.errors import HubError


class SoftPositionEmbed(nn.Module):
    """Adds a learned linear map of the 4-channel grid (y, x, 1 - y, 1 - x) to features ``(B, H, W, D)``."""

    def __init__(self, dim: int, size: int):
        super().__init__()
        ramp = torch.linspace(0.0, 1.0, size)
        y, x = torch.meshgrid(ramp, ramp, indexing="ij")
        self.register_buffer("grid", torch.stack([y, x, 1 - y, 1 - x], dim=-1)[None], persistent=False)
        self.proj = nn.Linear(4, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(self.grid)


class SlotAutoEncoder(nn.Module):
    """Slot Attention autoencoder for unsupervised object discovery.

    Args:
        img_size: input height and width.
        in_chans: input channels (the decoder gives as many, plus an alpha logit per slot).
        num_slots: K (the number of objects it can separate, background included).
        dim_slot: slot width D; the encoder's last width feeds the slot attention.
        num_iterations: slot attention iterations T.
        encoder_channels / encoder_strides: the CNN encoder's widths and strides (kernel ``kernel_size``).
        decoder_channels: widths of the decoder's stride-2 transposed convolutions after the broadcast.
        broadcast_size: side of the grid each slot is broadcast to.
        kernel_size: side of the encoder's and decoder's convolution kernels.
        implicit_grad: detach the slots before the last iteration (see the core's SlotAttention).
    """

    def __init__(self, img_size: int = 64, in_chans: int = 3, num_slots: int = 7, dim_slot: int = 64,
                 num_iterations: int = 3, encoder_channels: tuple[int, ...] = (64, 64, 64, 64),
                 encoder_strides: tuple[int, ...] = (1, 1, 1, 1), decoder_channels: tuple[int, ...] = (64, 64, 64),
                 broadcast_size: int = 8, kernel_size: int = 5, implicit_grad: bool = False):
        super().__init__()
        if len(encoder_channels) != len(encoder_strides):
            raise HubError(f"encoder_channels {encoder_channels} and encoder_strides {encoder_strides} "
                           "differ in length")
        stride = math.prod(encoder_strides)
        decoded = broadcast_size * 2 ** len(decoder_channels)
        if img_size % stride or decoded > img_size or img_size % decoded:
            raise HubError(f"img_size {img_size} must be divisible by the encoder's stride {stride} and by the "
                           f"decoder's output size {decoded} (= broadcast_size * 2 ** len(decoder_channels))")
        self.img_size, self.in_chans = img_size, in_chans
        self.num_slots, self.broadcast_size = num_slots, broadcast_size
        pad = kernel_size // 2
        layers, width = [], in_chans
        for channels, step in zip(encoder_channels, encoder_strides):
            layers += [nn.Conv2d(width, channels, kernel_size, step, pad), nn.ReLU()]
            width = channels
        self.encoder = nn.Sequential(*layers)
        self.encoder_pos = SoftPositionEmbed(width, img_size // stride)
        self.encoder_mlp = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.ReLU(),
                                         nn.Linear(width, width))
        self.slot_attention = SlotAttention(width, num_slots, dim_slot, num_iterations, dim_hidden=2 * dim_slot,
                                            implicit_grad=implicit_grad)
        self.decoder_pos = SoftPositionEmbed(dim_slot, broadcast_size)
        layers, width = [], dim_slot
        for channels in decoder_channels:
            layers += [nn.ConvTranspose2d(width, channels, kernel_size, 2, pad, output_padding=1), nn.ReLU()]
            width = channels
        layers.append(nn.Conv2d(width, in_chans + 1, 3, 1, 1))  # RGB and an alpha logit per pixel
        self.decoder = nn.Sequential(*layers)

    def forward_features(self, x: torch.Tensor, num_slots: int | None = None,
                         generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Slots (B, K, D) and the last iteration's attention (B, K, h * w); ``num_slots`` may differ
        from training's, ``generator`` fixes the slots' initial noise."""
        if x.ndim != 4 or x.shape[1:] != (self.in_chans, self.img_size, self.img_size):
            raise HubError(f"expected images (B, {self.in_chans}, {self.img_size}, {self.img_size}), "
                           f"got {tuple(x.shape)}")
        features = self.encoder(x).permute(0, 2, 3, 1)  # (B, C, h, w) -> (B, h, w, C)
        features = self.encoder_mlp(self.encoder_pos(features)).flatten(1, 2)  # (B, h * w, C)
        return self.slot_attention(features, num_slots=num_slots, generator=generator)

    def decode(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Slots (B, K, D) -> reconstruction (B, C, H, W), slot images (B, K, C, H, W), masks (B, K, H, W)."""
        batch, num_slots, dim = slots.shape
        grid = slots.reshape(batch * num_slots, 1, 1, dim).expand(-1, self.broadcast_size, self.broadcast_size, -1)
        decoded = self.decoder(self.decoder_pos(grid).permute(0, 3, 1, 2))  # (B * K, C + 1, h', w')
        if decoded.shape[-1] != self.img_size:
            decoded = F.interpolate(decoded, size=(self.img_size, self.img_size), mode="bilinear", align_corners=False)
        decoded = decoded.view(batch, num_slots, self.in_chans + 1, self.img_size, self.img_size)
        slot_images, alpha = decoded[:, :, :-1], decoded[:, :, -1]
        masks = alpha.softmax(dim=1)  # the slots compete for every pixel
        return (masks.unsqueeze(2) * slot_images).sum(1), slot_images, masks

    def autoencode(self, x: torch.Tensor, num_slots: int | None = None,
                   generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        slots, attention = self.forward_features(x, num_slots, generator)
        recon, slot_images, masks = self.decode(slots)
        return {"recon": recon, "slot_images": slot_images, "masks": masks, "slots": slots, "attention": attention}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.autoencode(x)["recon"]

    def reset_classifier(self, num_classes: int) -> None:
        raise HubError("the slot autoencoder has no classifier: it learns objects without labels; use its slots "
                       "(forward_features) as features for a classifier of your own")


def _create_slot_autoencoder(img_size: int, **dims) -> SlotAutoEncoder:
    return SlotAutoEncoder(img_size=img_size, **dims)


@register_model(task="object-discovery", classifier=None)
def slot_autoencoder_64(img_size: int = 64, num_slots: int = 7, num_iterations: int = 3,
                        implicit_grad: bool = False) -> SlotAutoEncoder:
    """The paper's sizes for 64x64 scenes (GPU): 4 conv 5x5 layers of 64 at full resolution, slots of 64,
    a broadcast 8x8 decoder with three stride-2 transposed convolutions of 64 up to 64x64."""
    return _create_slot_autoencoder(img_size, num_slots=num_slots, num_iterations=num_iterations,
                                    implicit_grad=implicit_grad)


@register_model(task="object-discovery", classifier=None)
def slot_autoencoder_micro_64(img_size: int = 64, num_slots: int = 7, num_iterations: int = 3,
                              implicit_grad: bool = False) -> SlotAutoEncoder:
    """Sized for CPU training on 64x64 scenes: 3x3 kernels, an encoder of width 32 with two stride-2 layers
    (a 16x16 grid), slots of 64, a decoder of width 32 from 8x8 to 32x32, resized to 64x64 before the
    masks mix the slots."""
    return _create_slot_autoencoder(img_size, num_slots=num_slots, num_iterations=num_iterations,
                                    implicit_grad=implicit_grad, encoder_channels=(32, 32, 32, 32),
                                    encoder_strides=(2, 2, 1, 1), decoder_channels=(32, 32), kernel_size=3)
