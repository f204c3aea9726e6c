"""Attention over the time-frequency plane, drawn over the spectrogram.

For the top class (``--target`` another class: Integrated Gradients from Captum, as the attention is the same for
every class). For AST/SSAST: attention rollout (Abnar & Zuidema, ACL 2020) from the [CLS] token to the patches,
spread back over the bins and frames each patch covers (overlapping patches are averaged). For the
timbre classifier: the attention each frame receives, averaged over heads and queries, for every bin.

>>> model = ast_tiny()
>>> explain_spectrogram(model, torch.zeros(1, 128, 100)).shape
torch.Size([1, 128, 100])
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import torch
import torch.nn.functional as F

from audio.models.ast import AudioSpectrogramTransformer
from audio.models.timbre import TimbreAttention
from hub.errors import DataError, HubError
from hub.explain import Explanation, attention_rollout, class_target, integrated_gradients, scaled, vit_attention
from hub.plotting import save_figure


def _patches_to_plane(maps: torch.Tensor, model: AudioSpectrogramTransformer) -> torch.Tensor:
    """Each patch's weight over the bins and frames it covers, averaged where patches overlap.

    Shapes: maps: (B, gf, gt) -> (B, F, T)
    """
    conv = model.patch_embed
    ones = torch.ones(1, 1, *conv.kernel_size)
    size = model.input_size
    spread = F.conv_transpose2d(maps.unsqueeze(1), ones, stride=conv.stride)  # (B, 1, F', T'), F' <= F
    cover = F.conv_transpose2d(torch.ones_like(maps[:1]).unsqueeze(1), ones, stride=conv.stride)
    plane = spread / cover.clamp_min(1)
    plane = F.pad(plane, (0, size[1] - plane.shape[-1], 0, size[0] - plane.shape[-2]))  # uncovered edge: 0
    return plane.squeeze(1)


def explain_spectrogram(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A [0, 1] relevance map per spectrogram. Shapes: x: (B, F, T) -> (B, F, T)."""
    model.eval()
    if isinstance(model, AudioSpectrogramTransformer):
        maps = attention_rollout(vit_attention(model, x), model.num_prefix_tokens, model.grid)  # (B, gf, gt)
        return _patches_to_plane(maps, model)
    if isinstance(model, TimbreAttention):
        with torch.no_grad():
            weights = model(x, return_attention=True)[1][0]  # (B, heads, T, T)
        received = weights.mean((1, 2))  # (B, T)
        low, high = received.min(-1, keepdim=True).values, received.max(-1, keepdim=True).values
        received = (received - low) / (high - low).clamp_min(1e-12)
        return received.unsqueeze(1).expand(-1, x.shape[1], -1)  # (B, T) -> (B, F, T)
    raise HubError(f"no spectrogram explanation for {type(model).__name__}: expected an AST/SSAST or timbre model")


def save_spectrogram_overlay(spec: torch.Tensor, heatmap, path: str | Path, title: str = "") -> None:
    """Draw ``heatmap`` (F, T) in [0, 1] over the spectrogram ``spec`` (F, T), low frequencies at the bottom."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(8, 3), sharey=True)
    for ax in axes:
        ax.imshow(spec, origin="lower", aspect="auto", cmap="magma")
        ax.set_xlabel("frame (10 ms)")
    axes[0].set_ylabel("mel bin")
    axes[1].imshow(heatmap, origin="lower", aspect="auto", cmap="viridis", alpha=0.55, vmin=0, vmax=1)
    fig.suptitle(title, fontsize=8)
    save_figure(fig, path, dpi=100, bbox_inches="tight")


def spectrogram_explanation(model: torch.nn.Module, x: torch.Tensor, target: int | None = None) -> Explanation:
    """What decided the class of one clip: the attention over the spectrogram (:func:`explain_spectrogram`) for the
    top class; Integrated Gradients (Captum) for a class asked by ``target`` (the attention is the same for every
    class). Shapes: x: (1, F, T) -> values (F, T) in [0, 1]."""
    model.eval()
    with torch.no_grad():
        chosen, probability = class_target(model(x), target)
    if target is None:
        method = ("attention rollout over the spectrogram patches" if isinstance(model, AudioSpectrogramTransformer)
                  else "attention each frame receives, mean over heads and queries")
        return Explanation(explain_spectrogram(model, x)[0].numpy(), method, chosen, probability,
                           axes=("mel bin", "frame"))
    maps = scaled(integrated_gradients(model, (x,), chosen)[0].abs())
    return Explanation(maps[0].numpy(), "Integrated Gradients (Captum) for the class asked; the attention is the same "
                       "for every class", chosen, probability, axes=("mel bin", "frame"))


def audio_samples(card, inputs: list[str]) -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    """``(name, {"x": (1, F, T)})``: each audio file's log-mel spectrogram."""
    from audio.features import model_input

    if not inputs:
        raise DataError(f"give the audio files to explain, e.g. attnhub explain {card.name} clip.wav")
    for file in inputs:
        yield Path(file).stem, {"x": model_input(file, card.input_spec)[None]}
