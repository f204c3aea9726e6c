"""Attention rollout (Abnar & Zuidema, *Quantifying Attention Flow in Transformers*, ACL 2020) for timm-style
transformers, shared by the image ViTs (``vision.explain``) and the audio spectrogram transformers
(``audio.explain``, ``audio.models.ast``).

:func:`vit_attention` captures every block's attention matrix; :func:`attention_rollout` multiplies them into a
map from the class token to the patches.

>>> attentions = vit_attention(model, images)  # L x (B, heads, N, N)
>>> attention_rollout(attentions, model.num_prefix_tokens, model.patch_embed.grid_size).shape  # (B, gh, gw)
"""
from __future__ import annotations

import torch
from torch import nn

from hub.errors import HubError


def vit_attention(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The attention matrix of every block, by forward hooks on timm's (unfused) attention dropout.

    ``model`` is a timm-style transformer: ``model.blocks`` whose ``attn`` has ``fused_attn`` and ``attn_drop``
    (timm's ``VisionTransformer``, AST).

    Shapes: x: the model's input, e.g. (B, C, H, W) -> per block (B, heads, N, N), N = prefix tokens + patches.
    """
    blocks = list(getattr(model, "blocks", []))
    if not blocks or not all(hasattr(getattr(b, "attn", None), "attn_drop") and hasattr(b.attn, "fused_attn")
                             for b in blocks):
        raise HubError(f"cannot capture attention of {type(model).__name__}: expected a timm-style transformer "
                       "whose blocks have attn.fused_attn and attn.attn_drop")
    captured: list[torch.Tensor] = []
    hooks, fused = [], []
    for block in blocks:
        fused.append(block.attn.fused_attn)
        block.attn.fused_attn = False  # the fused kernel never materialises the weights
        hooks.append(block.attn.attn_drop.register_forward_hook(lambda m, inp, out: captured.append(inp[0].detach())))
    try:
        with torch.no_grad():
            model(x)
    finally:
        for block, was_fused, hook in zip(blocks, fused, hooks):
            block.attn.fused_attn = was_fused
            hook.remove()
    return captured


def attention_rollout(attentions: list[torch.Tensor], num_prefix_tokens: int, grid: tuple[int, int]) -> torch.Tensor:
    """Rollout: head-averaged attention plus identity (the residual), row-normalised, multiplied over
    the blocks; the class token's row over the patches is the map (without a class token, e.g. a pooled CCT: the
    mean row, how much each patch reaches all tokens).

    Shapes: attentions: L x (B, heads, N, N) -> (B, grid_h, grid_w), each map scaled to [0, 1].
    """
    rollout = None
    for attention in attentions:
        mixed = attention.mean(1)  # (B, N, N)
        mixed = mixed + torch.eye(mixed.shape[-1], dtype=mixed.dtype, device=mixed.device)
        mixed = mixed / mixed.sum(-1, keepdim=True)
        rollout = mixed if rollout is None else mixed @ rollout
    cls_to_patches = rollout[:, 0, num_prefix_tokens:] if num_prefix_tokens else rollout.mean(1)  # (B, N - prefix)
    maps = cls_to_patches.reshape(-1, *grid)  # (B, N - prefix) -> (B, gh, gw)
    low = maps.flatten(1).min(-1).values.view(-1, 1, 1)
    high = maps.flatten(1).max(-1).values.view(-1, 1, 1)
    return (maps - low) / (high - low).clamp_min(1e-12)
