"""PULSE: heart rate from wrist PPG fused with the accelerometer by temporal convolutions and multi-head
cross-attention (the seeds' 002 #36, whose abstract reports a 7.56% lower MAE than the previous best on PPG-DaLiA).
Built from the abstract's description, with a spectral read-out and tracking of our choosing (not the paper's):

* one temporal-convolution encoder per sensor (PPG: 2 channels, accelerometer: 3), a few dilated 1-D convolutions
  over the window's samples (a learned filter bank, no pooling);
* each encoder's channels, and the sensor's raw channels, are read as spectra: the magnitude of their Hann-tapered
  DFT at ``num_bins`` heart rates from ``min_bpm`` to ``max_bpm`` (a fixed linear map, exported like any matmul),
  each spectrum scaled by its largest value; a convolution over frequency and a learned embedding of each bin's
  heart rate make one token per heart-rate bin;
* the PPG's bin tokens (queries) attend to the accelerometer's bin tokens (keys and values) through the shared
  core's :class:`~hub.attention.CrossAttention` (multi-head, pre-norm, residual); the weights say which motion
  frequencies each candidate heart rate was compared with, and are the explanation (``attention_maps``);
* a self-attention block over the fused PPG tokens (harmonics and neighbouring bins), then a linear head scores each
  bin: ``bin_logits`` (B, num_bins); the regression output is the heart rate of their softmax's mean, in BPM.

Training (task ``heart-rate``) uses the bins: cross-entropy against a Gaussian of ``label_sigma`` BPM around the
reference heart rate (``loss``). Over a recording, :func:`timeseries.signals.track` follows the bins' distribution
window to window (a causal HMM filter); ``attnhub predict`` and the benchmark report tracked figures beside the
per-window ones.

Shapes:
    x: (B, 5, T) prepared windows (:mod:`timeseries.signals`: PPG 1-2, accelerometer x, y, z at 25 Hz, T = 200)
    -> (B, 1) heart rate in BPM.

>>> model = pulse()
>>> model(torch.randn(2, 5, 200)).shape
torch.Size([2, 1])
"""
from __future__ import annotations

import math

import torch
from torch import nn

from hub.attention import CrossAttention
from hub.core.registry import register_model
from hub.errors import DataError


class TemporalEncoder(nn.Module):
    """Dilated temporal convolutions over one sensor's channels: (B, C, T) -> (B, dim, T).

    Args:
        in_channels: the sensor's channels (C).
        dim: channels of every convolution's output.
        depth: convolutions, dilated 1, 2, 4, ...
        kernel_size: their (odd) kernel; padding keeps T."""

    def __init__(self, in_channels: int, dim: int, depth: int, kernel_size: int):
        super().__init__()
        layers, width = [], in_channels
        for i in range(depth):
            dilation = 2 ** i
            layers += [nn.Conv1d(width, dim, kernel_size, padding=dilation * (kernel_size // 2), dilation=dilation),
                       nn.BatchNorm1d(dim), nn.GELU()]
            width = dim
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SpectralTokens(nn.Module):
    """A sensor's raw channels and encoder channels as one token per heart-rate bin.

    The DFT is a fixed pair of (T, F) cosine/sine buffers: ``torch.fft`` evaluates only its own grid and does not
    export to ONNX, a matmul does both.

    Args:
        channels: channels read as spectra (C).
        dim: token width.
        samples: samples per window (T).
        rate: their sampling rate in Hz.
        bpm: the heart rates (F,) at which the DFT is evaluated.

    Shapes: signals (B, C, T) -> (B, F, dim)."""

    def __init__(self, channels: int, dim: int, samples: int, rate: float, bpm: torch.Tensor):
        super().__init__()
        t = torch.arange(samples, dtype=torch.float64) / rate
        phase = 2 * math.pi * t[:, None] * (bpm[None].double() / 60.0)  # (T, F)
        taper = torch.hann_window(samples, periodic=False, dtype=torch.float64)[:, None]
        self.register_buffer("cos", (taper * torch.cos(phase)).float(), persistent=False)
        self.register_buffer("sin", (taper * torch.sin(phase)).float(), persistent=False)
        self.mix = nn.Conv1d(channels, dim, kernel_size=5, padding=2)
        self.norm = nn.LayerNorm(dim)

    def forward(self, signals: torch.Tensor) -> torch.Tensor:
        power = (signals @ self.cos) ** 2 + (signals @ self.sin) ** 2  # (B, C, F)
        magnitude = (power + 1e-8).sqrt()
        magnitude = magnitude / magnitude.amax(-1, keepdim=True)  # each spectrum's peak is 1
        return self.norm(self.mix(magnitude).transpose(1, 2))  # (B, F, dim)


class Pulse(nn.Module):
    """PPG and accelerometer encoders, cross-attention of the PPG's heart-rate bins to the accelerometer's, a
    self-attention block, and a per-bin head (module doc).

    Args:
        samples: samples per window (T; 8 s at 25 Hz).
        rate: the windows' sampling rate in Hz.
        dim: width of the encoders and tokens.
        depth: temporal convolutions per encoder (dilations 1, 2, 4, ...).
        kernel_size: their kernel.
        num_heads: heads of the cross- and self-attention.
        min_bpm, max_bpm, num_bins: the heart-rate bins (evenly spaced, inclusive).
        label_sigma: BPM, the width of the Gaussian training target over the bins.
        dropout: on the attention weights and MLPs.
    """

    def __init__(self, samples: int, rate: float, dim: int, depth: int, kernel_size: int, num_heads: int,
                 min_bpm: float, max_bpm: float, num_bins: int, label_sigma: float, dropout: float):
        super().__init__()
        self.samples, self.rate, self.label_sigma = samples, rate, label_sigma
        self.register_buffer("bpm", torch.linspace(min_bpm, max_bpm, num_bins), persistent=False)
        self.ppg_encoder = TemporalEncoder(2, dim, depth, kernel_size)
        self.acc_encoder = TemporalEncoder(3, dim, depth, kernel_size)
        self.ppg_tokens = SpectralTokens(2 + dim, dim, samples, rate, self.bpm)
        self.acc_tokens = SpectralTokens(3 + dim, dim, samples, rate, self.bpm)
        self.bin_embedding = nn.Parameter(torch.zeros(num_bins, dim))
        nn.init.trunc_normal_(self.bin_embedding, std=0.02)
        self.cross = CrossAttention(dim, dim, num_heads, mlp_ratio=2.0, dropout=dropout)
        self.mix = CrossAttention(dim, dim, num_heads, mlp_ratio=2.0, dropout=dropout)  # self-attention: x to x
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 1)
        self.num_features = dim

    def check(self, x: torch.Tensor) -> None:
        if x.ndim != 3 or x.shape[1] != 5 or x.shape[2] != self.samples:
            raise DataError(f"expected prepared windows of shape (batch, 5, {self.samples}) (PPG 1-2, accelerometer "
                            f"x, y, z at {self.rate:g} Hz; timeseries.signals.prepare_windows), got {tuple(x.shape)}")

    def forward_features(self, x: torch.Tensor, need_weights: bool = False):
        """Fused PPG bin tokens ``(B, F, dim)``; with ``need_weights`` also {"cross": (B, H, F, F), "self": ...}."""
        self.check(x)
        ppg, acc = x[:, :2], x[:, 2:]
        ppg_tokens = self.ppg_tokens(torch.cat([ppg, self.ppg_encoder(ppg)], 1)) + self.bin_embedding  # (B, F, D)
        acc_tokens = self.acc_tokens(torch.cat([acc, self.acc_encoder(acc)], 1)) + self.bin_embedding  # (B, F, D)
        fused, cross = self.cross(ppg_tokens, acc_tokens, need_weights=need_weights)  # (B, F, D), (B, H, F, F)
        fused, mixed = self.mix(fused, fused, need_weights=need_weights)
        features = self.norm(fused)
        return (features, {"cross": cross, "self": mixed}) if need_weights else features

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        """Bin logits ``(B, F)`` (``pre_logits``: the tokens pooled, ``(B, dim)``)."""
        return features.mean(1) if pre_logits else self.head(features)[..., 0]

    def bin_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Scores of the heart-rate bins ``self.bpm``: (B, 5, T) -> (B, F)."""
        return self.forward_head(self.forward_features(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.bin_logits(x).softmax(-1) @ self.bpm)[:, None]  # (B, 1) BPM

    def loss(self, x: torch.Tensor, bpm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-entropy of the bins against a Gaussian of ``label_sigma`` around ``bpm`` (B,): (loss, BPM (B,))."""
        logits = self.bin_logits(x)  # (B, F)
        target = torch.softmax(-0.5 * ((self.bpm[None] - bpm[:, None]) / self.label_sigma) ** 2, -1)
        loss = torch.sum(-target * logits.log_softmax(-1), -1).mean()
        return loss, logits.softmax(-1) @ self.bpm

    def attention_maps(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """The PPG bins' attention over the accelerometer's bins: {"cross": (B, H, F, F), "self": (B, H, F, F)}."""
        return self.forward_features(x, need_weights=True)[1]

    def reset_classifier(self, num_outputs: int = 1) -> None:
        """A new per-bin head (the output stays one heart rate)."""
        if num_outputs != 1:
            raise DataError(f"pulse predicts one heart rate per window, not {num_outputs} outputs")
        self.head = nn.Linear(self.num_features, 1)

    def extra_repr(self) -> str:
        return (f"samples={self.samples}, rate={self.rate:g}, bins={len(self.bpm)} "
                f"({float(self.bpm[0]):g}-{float(self.bpm[-1]):g} BPM), label_sigma={self.label_sigma:g}")


@register_model(task="heart-rate", classifier="head")
def pulse(samples: int = 200, rate: float = 25.0, dim: int = 24, depth: int = 3, kernel_size: int = 7,
          num_heads: int = 4, min_bpm: float = 40.0, max_bpm: float = 200.0, num_bins: int = 81,
          label_sigma: float = 3.0, dropout: float = 0.1) -> Pulse:
    """PULSE: PPG and accelerometer temporal-convolution encoders fused by cross-attention; heart rate in BPM."""
    return Pulse(samples, rate, dim, depth, kernel_size, num_heads, min_bpm, max_bpm, num_bins, label_sigma, dropout)
