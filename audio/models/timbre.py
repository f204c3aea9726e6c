"""Instrument-timbre classifier: log-mel frames, one 8-head self-attention layer, a dense head.

After the seeds' timbre paper (an attention network with 8 heads and a dense output network on log-mel
magnitude spectrograms, 20 orchestral instrument classes, "as few parameters as possible"). Each
frame's mel vector is projected to ``embed_dim`` and given a learned position; one multi-head
self-attention layer of the shared core (residual + LayerNorm) mixes the frames; the time-averaged
frames go through a two-layer dense head. The attention weights are returned on request, for the
kind of weight analysis the paper makes.

Shapes:
    x: (B, F, T) -> logits (B, num_classes); ``forward_features`` -> frames (B, T, D);
    ``forward(x, return_attention=True)`` -> (logits, [(B, heads, T, T)]).

>>> model = timbre_attention()
>>> model(torch.zeros(2, 128, 100)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

import torch
from torch import nn

from hub.attention import MultiHeadAttention
from hub.core.registry import register_model
from hub.errors import DataError


class TimbreAttention(nn.Module):
    """Log-mel frames -> linear embedding + learned positions -> one self-attention layer -> time mean -> dense head.

    Args:
        num_classes: classes (default 10).
        num_mel_bins: mel bins F of the input (default 128).
        target_frames: frames T of the input; fixed, as the positions are learned per frame (default 100).
        embed_dim: width of each frame's embedding (default 64).
        num_heads: attention heads (default 8, as the paper).
        hidden_dim: width of the dense layer before the head (default 128).
        dropout: dropout on the attention weights and after the dense layer (default 0.1).

    Shapes: x (B, num_mel_bins, target_frames) -> logits (B, num_classes)"""

    def __init__(self, num_classes: int = 10, num_mel_bins: int = 128, target_frames: int = 100,
                 embed_dim: int = 64, num_heads: int = 8, hidden_dim: int = 128, dropout: float = 0.1):
        super().__init__()
        self.num_classes, self.num_features = num_classes, hidden_dim
        self.input_size = (num_mel_bins, target_frames)
        self.frame_embed = nn.Linear(num_mel_bins, embed_dim)
        self.pos_embed = nn.Parameter(torch.randn(1, target_frames, embed_dim) * 0.02)
        self.attn = MultiHeadAttention(embed_dim, num_heads, dropout=dropout)
        self.norm = nn.LayerNorm(embed_dim)
        self.dense = nn.Sequential(nn.Linear(embed_dim, hidden_dim), nn.ReLU(), nn.Dropout(dropout))
        self.head = nn.Linear(hidden_dim, num_classes)

    def _attend(self, x: torch.Tensor, need_weights: bool):
        if x.ndim != 3 or tuple(x.shape[1:]) != self.input_size:
            raise DataError(f"expected log-mel inputs of shape (batch, {self.input_size[0]} bins, "
                            f"{self.input_size[1]} frames), got {tuple(x.shape)}")
        frames = self.frame_embed(x.transpose(1, 2)) + self.pos_embed  # (B, F, T) -> (B, T, D)
        mixed, weights = self.attn(frames, need_weights=need_weights)
        return self.norm(frames + mixed), weights

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self._attend(x, need_weights=False)[0]

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        pooled = self.dense(x.mean(1))  # (B, T, D) -> (B, hidden)
        return pooled if pre_logits else self.head(pooled)

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        features, weights = self._attend(x, need_weights=return_attention)
        logits = self.forward_head(features)
        return (logits, [weights]) if return_attention else logits

    def reset_classifier(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes)


@register_model(task="audio-classification")
def timbre_attention(num_classes: int = 10, target_frames: int = 100, embed_dim: int = 64,
                     dropout: float = 0.1) -> TimbreAttention:
    """Log-mel frames, one 8-head self-attention layer, a dense head (the seeds' timbre classifier)."""
    return TimbreAttention(num_classes=num_classes, target_frames=target_frames, embed_dim=embed_dim,
                           num_heads=8, hidden_dim=128, dropout=dropout)
