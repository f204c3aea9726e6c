"""Attention rollout (Abnar & Zuidema, *Quantifying Attention Flow in Transformers*, ACL 2020) for timm-style
transformers, shared by the image ViTs (``vision.explain``) and the audio spectrogram transformers
(``audio.explain``, ``audio.models.ast``).

:func:`vit_attention` captures every block's attention matrix; :func:`attention_rollout` multiplies them into a
map from the class token to the patches.

>>> attentions = vit_attention(model, images)  # L x (B, heads, N, N)
>>> attention_rollout(attentions, model.num_prefix_tokens, model.patch_embed.grid_size).shape  # (B, gh, gw)

Beside them, what every domain's explainer shares: :class:`Explanation` (a map and the method that drew it, the
numbers of ``attnhub explain``), :func:`integrated_gradients` (Captum's, the attribution a family falls back to where
its own attention does not say what decided the output), and the model randomisation test of Adebayo et al.
(NeurIPS 2018): :func:`randomized_copy`, :func:`sanity_failure`.
"""
from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
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


@dataclass
class Explanation:
    """One input's explanation: the map and what drew it, the numbers behind ``attnhub explain``'s figure.

    Args:
        values: the map; its shape depends on the input: (H, W) over an image, (F, T) over a spectrogram, (L, K) over
            a node's neighbours, (C,) over a table's columns, ...
        method: the method that drew it, named in the figure's title.
        target: the class explained (None for a regression or an unsupervised model).
        probability: the model's probability of ``target``.
        output: the model's output explained where it is not a class (a risk, an RUL).
        labels: names of the map's last axis where a figure names them (columns, neighbours, variables).
        axes: what each axis of the map runs over (e.g. ``("input step", "sensor")``), where a figure names them.
        extra: what the kind's figure needs beyond the map (not written).
        details: more numbers for the JSON record (JSON types only).
    """

    values: np.ndarray
    method: str
    target: int | None = None
    probability: float | None = None
    output: float | None = None
    labels: list[str] | None = None
    axes: tuple[str, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)

    def record(self, input_name: str, family: str, label_names: list[str] | None = None) -> dict[str, Any]:
        """The JSON object written beside the figure."""
        names = label_names or []
        return {"method": self.method, "target": self.target,
                "target_name": names[self.target] if self.target is not None and self.target < len(names) else None,
                "probability": self.probability, "output": self.output, "input": input_name, "family": family,
                "shape": list(self.values.shape), "labels": self.labels,
                "axes": list(self.axes) if self.axes else None, **self.details}


def scaled(values: torch.Tensor) -> torch.Tensor:
    """Each map of a batch scaled to [0, 1] (a constant map to 0). Shapes: (B, ...) -> (B, ...)."""
    flat = values.flatten(1)
    low, high = flat.min(-1).values, flat.max(-1).values
    shape = (-1,) + (1,) * (values.dim() - 1)
    return (values - low.view(shape)) / (high - low).clamp_min(1e-12).view(shape)


def integrated_gradients(forward: Callable[..., torch.Tensor], inputs: tuple[torch.Tensor, ...],
                         target: int | None, steps: int = 32, fixed: tuple = ()) -> tuple[torch.Tensor, ...]:
    """Captum's Integrated Gradients (Sundararajan et al., ICML 2017) from an all-zero baseline: the attribution of
    each input element to ``forward``'s output ``target`` (a class; None: a single output per item); ``fixed``
    are further arguments of ``forward`` that are not attributed (masks), passed after ``inputs``.

    Shapes: inputs: tensors (B, ...) -> attributions of the same shapes.
    """
    from captum.attr import IntegratedGradients

    attributions = IntegratedGradients(forward).attribute(inputs, target=target, n_steps=steps,
                                                          internal_batch_size=steps,
                                                          additional_forward_args=fixed or None)
    return tuple(a.detach() for a in attributions)


def randomized_copy(model: nn.Module, seed: int = 0) -> nn.Module:
    """A copy of ``model`` with every parameter redrawn at random, keeping each tensor's mean and spread: the model
    randomisation test of Adebayo et al., *Sanity checks for saliency maps* (NeurIPS 2018), where an explanation
    that does not change when the weights are random does not explain what the model learned."""
    copy = deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in copy.parameters():
            if param.is_floating_point() and param.numel():
                spread = param.std() if param.numel() > 1 else param.abs()
                noise = torch.randn(param.shape, generator=generator).to(param)
                param.copy_(param.mean() + spread.clamp_min(1e-2) * noise)
    return copy


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two maps of one shape (flattened)."""
    from scipy.stats import spearmanr

    return float(spearmanr(np.ravel(a), np.ravel(b)).statistic)


def sanity_failure(originals: list[np.ndarray], randomized: list[np.ndarray], threshold: float) -> str | None:
    """What is wrong with a method's maps under the randomisation test, or None: a NaN or constant map, or a mean rank
    correlation between the maps of the trained and of the randomised model (one pair per input) above
    ``threshold``: the maps do not depend on the weights. Several inputs, as one map's correlation is noisy where the
    map is a coarse grid drawn large (CoaT's 2 x 2 last stage, a few cycles)."""
    for name, maps in (("the map", originals), ("the randomised model's map", randomized)):
        for values in maps:
            if not np.isfinite(values).all():
                return f"{name} has NaN or infinite values"
            if np.ptp(values) == 0:
                return f"{name} is constant"
    rhos = [rank_correlation(a, b) for a, b in zip(originals, randomized)]
    if np.mean(rhos) > threshold:
        return (f"the map barely changes when the weights are randomised: mean Spearman rank correlation "
                f"{np.mean(rhos):.2f} > {threshold} (per input: {', '.join(f'{r:.2f}' for r in rhos)})")
    return None


def class_target(logits: torch.Tensor, target: int | None) -> tuple[int, float]:
    """The class to explain (``target``, else the top class) and its probability. Shapes: logits: (1, C)."""
    probs = logits.detach().float().softmax(-1)[0]
    if target is not None and not 0 <= target < probs.numel():
        raise HubError(f"class {target} does not exist: the model has classes 0-{probs.numel() - 1}")
    chosen = int(probs.argmax()) if target is None else int(target)
    return chosen, float(probs[chosen])
