"""Audio Spectrogram Transformer (AST; Gong, Chung & Glass, Interspeech 2021) on timm's ViT blocks.

A log-mel spectrogram is cut into 16x16 patches that overlap (stride 10 in frequency and time) by a
Conv2d, a [CLS] and a distillation token are prepended, learned positional embeddings cover the
patch grid, timm ``Block``s follow, and the head reads the average of the two tokens. For users who
are online, :func:`adapt_deit_state_dict` turns ImageNet DeiT weights into AST weights as the paper
does: the RGB patch kernel summed to one channel, the 2-D positional embedding cut (or interpolated)
to the AST patch grid.

Shapes:
    x: (B, F, T) normalised log-mel (F = 128 bins, T = ``target_frames``) -> logits (B, num_classes);
    ``forward_features`` -> tokens (B, 2 + N, D), N = grid_f * grid_t;
    ``forward(x, return_attention=True)`` -> (logits, [(B, heads, 2 + N, 2 + N)] per block).

>>> model = ast_tiny()
>>> model(torch.zeros(2, 128, 100)).shape
torch.Size([2, 10])
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from timm.layers import trunc_normal_
from timm.models.vision_transformer import Block
from torch import nn

from hub.core.registry import register_model
from hub.errors import DataError, HubError
from hub.explain import vit_attention  # hooks on timm's attention, shared with the ViTs


class AudioSpectrogramTransformer(nn.Module):
    """AST: overlapping patch embedding, [CLS] + distillation tokens, ViT blocks, averaged-token head.

    Args:
        num_classes: classes (default 10; 0: no head, the pooled features are returned).
        num_mel_bins: mel bins F of the input (default 128).
        target_frames: frames T of the input (default 100); with ``num_mel_bins`` it fixes the patch grid.
        patch_size: side of the square patches (default 16); the input must hold at least one.
        fstride: patch stride along frequency (default 10: patches overlap by 6 bins).
        tstride: patch stride along time (default 10).
        embed_dim: token width (default 192).
        depth: Transformer blocks (default 4).
        num_heads: attention heads per block (default 3).
        mlp_ratio: MLP hidden width as a multiple of ``embed_dim`` (default 4).
        drop_rate: dropout after the positional embedding, in the blocks' projections and before the head (default 0).
        drop_path_rate: stochastic depth of the last block, rising linearly from 0 over the blocks (default 0).

    Shapes: x (B, num_mel_bins, target_frames) -> logits (B, num_classes)"""

    num_prefix_tokens = 2

    def __init__(self, num_classes: int = 10, num_mel_bins: int = 128, target_frames: int = 100,
                 patch_size: int = 16, fstride: int = 10, tstride: int = 10, embed_dim: int = 192, depth: int = 4,
                 num_heads: int = 3, mlp_ratio: float = 4.0, drop_rate: float = 0.0, drop_path_rate: float = 0.0):
        super().__init__()
        if num_mel_bins < patch_size or target_frames < patch_size:
            raise HubError(f"spectrograms of {num_mel_bins} bins x {target_frames} frames are smaller than one "
                           f"{patch_size}x{patch_size} patch")
        self.num_classes, self.num_features = num_classes, embed_dim
        self.input_size = (num_mel_bins, target_frames)
        self.grid = ((num_mel_bins - patch_size) // fstride + 1, (target_frames - patch_size) // tstride + 1)
        self.patch_embed = nn.Conv2d(1, embed_dim, patch_size, stride=(fstride, tstride))
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.dist_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 2 + self.grid[0] * self.grid[1], embed_dim))
        self.pos_drop = nn.Dropout(drop_rate)
        rates = [drop_path_rate * i / max(depth - 1, 1) for i in range(depth)]  # linear, as timm
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads, mlp_ratio, qkv_bias=True, proj_drop=drop_rate,
                                            drop_path=rate) for rate in rates])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        self.head_drop = nn.Dropout(drop_rate)
        self.head = nn.Linear(embed_dim, num_classes) if num_classes else nn.Identity()
        for param in (self.cls_token, self.dist_token, self.pos_embed):
            trunc_normal_(param, std=0.02)
        self.apply(_init_linear)

    def patchify(self, x: torch.Tensor) -> torch.Tensor:
        """Shapes: x: (B, F, T) -> patch tokens (B, N, D)."""
        if x.ndim != 3 or tuple(x.shape[1:]) != self.input_size:
            raise DataError(f"expected spectrograms of shape (batch, {self.input_size[0]} bins, {self.input_size[1]} "
                            f"frames), got {tuple(x.shape)}")
        tokens = self.patch_embed(x.unsqueeze(1))  # (B, 1, F, T) -> (B, D, gf, gt)
        return tokens.flatten(2).transpose(1, 2)  # (B, D, gf, gt) -> (B, N, D)

    def encode(self, patches: torch.Tensor) -> torch.Tensor:
        """Prefix tokens, positions, blocks and the final norm. Shapes: (B, N, D) -> (B, 2 + N, D)."""
        prefix = torch.cat([self.cls_token, self.dist_token], 1).expand(patches.shape[0], -1, -1)  # (B, 2, D)
        tokens = self.pos_drop(torch.cat([prefix, patches], 1) + self.pos_embed)
        return self.norm(self.blocks(tokens))

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        return self.encode(self.patchify(x))

    def forward_head(self, x: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        pooled = self.head_drop((x[:, 0] + x[:, 1]) / 2)  # average of [CLS] and distillation tokens, as AST
        return pooled if pre_logits else self.head(pooled)

    def forward(self, x: torch.Tensor, return_attention: bool = False):
        if return_attention:
            attentions = vit_attention(self, x)
            with torch.no_grad():
                return self.forward_head(self.forward_features(x)), attentions
        return self.forward_head(self.forward_features(x))

    def reset_classifier(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.head = nn.Linear(self.num_features, num_classes) if num_classes else nn.Identity()
        _init_linear(self.head)


def _init_linear(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        trunc_normal_(module.weight, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


def _fit_axis(grid: torch.Tensor, size: int, dim: int) -> torch.Tensor:
    """Cut the centre of a positional grid along ``dim`` (AST's way), or interpolate when it is too short."""
    have = grid.shape[dim]
    if size <= have:
        start = (have - size) // 2
        return grid.narrow(dim, start, size)
    target = list(grid.shape[-2:])
    target[dim - 2] = size
    return F.interpolate(grid, size=tuple(target), mode="bilinear", align_corners=False)


def adapt_deit_state_dict(deit_state: dict[str, torch.Tensor], model: AudioSpectrogramTransformer
                          ) -> dict[str, torch.Tensor]:
    """ImageNet DeiT/ViT weights (timm names) as an AST state dict for ``model`` (the head left out).

    The RGB patch kernel (D, 3, p, p) is summed to (D, 1, p, p); the 2-D positional embedding of the
    image grid is cut at the centre (or interpolated) to the AST grid; a ViT without a distillation
    token lends its [CLS] token and position to both prefix tokens.
    """
    width = model.num_features
    if deit_state["cls_token"].shape[-1] != width:
        raise HubError(f"DeiT width {deit_state['cls_token'].shape[-1]} does not match the AST width {width}")
    prefix = 2 if "dist_token" in deit_state else 1
    pos = deit_state["pos_embed"]  # (1, prefix + S * S, D)
    side = int(round((pos.shape[1] - prefix) ** 0.5))
    grid = pos[:, prefix:].transpose(1, 2).reshape(1, width, side, side)  # (1, S*S, D) -> (1, D, S, S)
    grid = _fit_axis(_fit_axis(grid, model.grid[0], 2), model.grid[1], 3)  # (1, D, gf, gt)
    pos_prefix = pos[:, :prefix] if prefix == 2 else pos[:, :1].repeat(1, 2, 1)  # (1, 2, D)
    out = {k: v for k, v in deit_state.items() if k.startswith(("blocks.", "norm."))}
    out.update({
        # (D, 3, p, p) -> (D, 1, p, p)
        "patch_embed.weight": deit_state["patch_embed.proj.weight"].sum(1, keepdim=True),
        "patch_embed.bias": deit_state["patch_embed.proj.bias"],
        "cls_token": deit_state["cls_token"],
        "dist_token": deit_state.get("dist_token", deit_state["cls_token"]),
        "pos_embed": torch.cat([pos_prefix, grid.flatten(2).transpose(1, 2)], 1),  # (1, 2 + gf * gt, D)
    })
    return out


def load_deit(model: AudioSpectrogramTransformer, arch: str) -> AudioSpectrogramTransformer:
    """Initialise ``model`` from timm's ImageNet weights of ``arch`` (downloaded once; a clear
    ``OfflineError`` when offline with a cold cache)."""
    from hub.models import load

    deit = load(f"timm/{arch}", pretrained=True)
    missing, unexpected = model.load_state_dict(adapt_deit_state_dict(deit.state_dict(), model), strict=False)
    if unexpected or any(not k.startswith("head.") for k in missing):
        raise HubError(f"{arch} does not fit this AST: missing {missing}, unexpected {unexpected}")
    return model


def _create_ast(imagenet_arch: str | None = None, **kwargs) -> AudioSpectrogramTransformer:
    model = AudioSpectrogramTransformer(**kwargs)
    return load_deit(model, imagenet_arch) if imagenet_arch else model


@register_model(task="audio-classification")
def ast_tiny(num_classes: int = 10, target_frames: int = 100, drop_rate: float = 0.0,
             drop_path_rate: float = 0.1) -> AudioSpectrogramTransformer:
    """AST sized for CPU training: width 128, depth 4, 4 heads, 16x16 patches with stride 10."""
    return _create_ast(num_classes=num_classes, target_frames=target_frames, drop_rate=drop_rate,
                       drop_path_rate=drop_path_rate, embed_dim=128, depth=4, num_heads=4)


@register_model(task="audio-classification")
def ast_deit_tiny(num_classes: int = 10, target_frames: int = 100, drop_rate: float = 0.0,
                  drop_path_rate: float = 0.1, imagenet_init: bool = False) -> AudioSpectrogramTransformer:
    """AST with DeiT-Tiny dimensions (width 192, depth 12, 3 heads); ``imagenet_init`` loads DeiT-Tiny weights."""
    return _create_ast("deit_tiny_distilled_patch16_224" if imagenet_init else None, num_classes=num_classes,
                       target_frames=target_frames, drop_rate=drop_rate, drop_path_rate=drop_path_rate,
                       embed_dim=192, depth=12, num_heads=3)


@register_model(task="audio-classification")
def ast_base(num_classes: int = 527, target_frames: int = 1024, drop_rate: float = 0.0,
             drop_path_rate: float = 0.0, imagenet_init: bool = False) -> AudioSpectrogramTransformer:
    """The paper's AST (width 768, depth 12, 12 heads, 10.24 s clips); ``imagenet_init`` loads DeiT-B/384 weights."""
    return _create_ast("deit_base_distilled_patch16_384" if imagenet_init else None, num_classes=num_classes,
                       target_frames=target_frames, drop_rate=drop_rate, drop_path_rate=drop_path_rate,
                       embed_dim=768, depth=12, num_heads=12)
