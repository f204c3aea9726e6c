"""Self-Supervised AST (SSAST; Gong, Lai, Chung & Glass, AAAI 2022): masked spectrogram patch modelling.

An AST whose patches do not overlap (stride 16, so a masked patch cannot be read off its neighbours)
learns from unlabelled audio: a random subset of patches is replaced by a learned mask embedding,
and from each masked position's output the model (1) picks its own patch among all the masked
patches of the clip (discriminative, InfoNCE) and (2) reconstructs it (generative, MSE). The
classifier is then fine-tuned (``model.init_from`` a pretraining run).

Shapes:
    x: (B, F, T) -> logits (B, num_classes); ``masked_patch_losses(x)`` -> (nce, mse, scores (B, M, M)),
    M = ``num_masked`` masked patches per clip.

>>> model = ssast_tiny()
>>> [v.shape for v in model.masked_patch_losses(torch.randn(2, 128, 100))][2]
torch.Size([2, 16, 16])
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from audio.models.ast import AudioSpectrogramTransformer
from hub.core.registry import register_model


class SSAST(AudioSpectrogramTransformer):
    """AST with SSAST's pretext heads: a mask embedding and two MLPs (patch scores, reconstruction)."""

    def __init__(self, num_masked: int = 16, **kwargs):
        super().__init__(**kwargs)
        patch = self.patch_embed.kernel_size[0] * self.patch_embed.kernel_size[1]
        if num_masked >= self.grid[0] * self.grid[1]:
            raise ValueError(f"num_masked={num_masked} must be below the {self.grid[0] * self.grid[1]} patches")
        self.num_masked = num_masked
        self.mask_embed = nn.Parameter(torch.zeros(1, 1, self.num_features))
        nn.init.xavier_normal_(self.mask_embed)
        self.disc_head = nn.Sequential(nn.Linear(self.num_features, self.num_features), nn.ReLU(),
                                       nn.Linear(self.num_features, patch))
        self.gen_head = nn.Sequential(nn.Linear(self.num_features, self.num_features), nn.ReLU(),
                                      nn.Linear(self.num_features, patch))

    def input_patches(self, x: torch.Tensor) -> torch.Tensor:
        """The raw spectrogram patches the tokens see. Shapes: (B, F, T) -> (B, N, p * p)."""
        kernel, stride = self.patch_embed.kernel_size, self.patch_embed.stride
        return F.unfold(x.unsqueeze(1), kernel, stride=stride).transpose(1, 2)  # (B, p*p, N) -> (B, N, p*p)

    def masked_patch_losses(self, x: torch.Tensor):
        """InfoNCE over the masked patches of each clip and MSE reconstruction of them.

        Shapes: x: (B, F, T) -> nce (), mse (), scores (B, M, M): row i scores prediction i against
        every masked patch j of its clip; the diagonal is the right answer.
        """
        tokens = self.patchify(x)  # (B, N, D)
        targets = self.input_patches(x)  # (B, N, p*p)
        batch, num = tokens.shape[:2]
        masked = torch.rand(batch, num, device=x.device).argsort(-1)[:, : self.num_masked]  # (B, M)
        keep = torch.ones(batch, num, 1, device=x.device)
        keep.scatter_(1, masked.unsqueeze(-1), 0.0)
        tokens = tokens * keep + self.mask_embed * (1 - keep)
        out = self.encode(tokens)[:, self.num_prefix_tokens:]  # (B, N, D)
        picked = out.gather(1, masked.unsqueeze(-1).expand(-1, -1, out.shape[-1]))  # (B, M, D)
        truth = targets.gather(1, masked.unsqueeze(-1).expand(-1, -1, targets.shape[-1]))  # (B, M, p*p)
        scores = self.disc_head(picked) @ truth.transpose(1, 2)  # (B, M, M)
        labels = torch.arange(self.num_masked, device=x.device).expand(batch, -1)  # (B, M)
        nce = F.cross_entropy(scores.transpose(1, 2), labels)  # classes on dim 1
        mse = F.mse_loss(self.gen_head(picked), truth)
        return nce, mse, scores


@register_model(task="audio-classification")
def ssast_tiny(num_classes: int = 10, target_frames: int = 100, num_masked: int = 16, drop_rate: float = 0.0,
               drop_path_rate: float = 0.1) -> SSAST:
    """SSAST sized for CPU: ast_tiny's width 128, depth 4, 4 heads, non-overlapping 16x16 patches."""
    return SSAST(num_masked=num_masked, num_classes=num_classes, target_frames=target_frames, fstride=16,
                 tstride=16, embed_dim=128, depth=4, num_heads=4, drop_rate=drop_rate, drop_path_rate=drop_path_rate)


@register_model(task="audio-classification")
def ssast_base(num_classes: int = 527, target_frames: int = 1024, num_masked: int = 400, drop_rate: float = 0.0,
               drop_path_rate: float = 0.0) -> SSAST:
    """The paper's SSAST-Base (patch): width 768, depth 12, 12 heads, 400 masked 16x16 patches of 10.24 s clips."""
    return SSAST(num_masked=num_masked, num_classes=num_classes, target_frames=target_frames, fstride=16,
                 tstride=16, embed_dim=768, depth=12, num_heads=12, drop_rate=drop_rate, drop_path_rate=drop_path_rate)
