"""Attention over the time-frequency plane, drawn over the spectrogram.

For AST/SSAST: attention rollout (Abnar & Zuidema, ACL 2020) from the [CLS] token to the patches,
spread back over the bins and frames each patch covers (overlapping patches are averaged). For the
timbre classifier: the attention each frame receives, averaged over heads and queries, for every bin.

>>> model = ast_tiny()
>>> explain_spectrogram(model, torch.zeros(1, 128, 100)).shape
torch.Size([1, 128, 100])
"""
from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from audio.models.ast import AudioSpectrogramTransformer
from audio.models.timbre import TimbreAttention
from hub.errors import DataError, HubError
from hub.explain import attention_rollout, vit_attention
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


def save_spectrogram_overlay(spec: torch.Tensor, heatmap: torch.Tensor, path: str | Path, title: str = "") -> None:
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


def explain_audio_files(card, model, inputs: list[str], out_dir: Path):
    """``attnhub explain NAME CLIP...``: the attention over each clip's spectrogram, titled with the class."""
    from audio.features import model_input

    if not inputs:
        raise DataError(f"give the audio files to explain, e.g. attnhub explain {card.name} clip.wav")
    for file in inputs:
        x = model_input(file, card.input_spec)  # (F, T)
        heatmap = explain_spectrogram(model, x[None])[0]
        with torch.no_grad():
            probs = model(x[None]).softmax(-1)[0]
        label = card.label_names[int(probs.argmax())] if card.label_names else str(int(probs.argmax()))
        path = Path(out_dir) / f"{Path(file).stem}_explain.png"
        save_spectrogram_overlay(x, heatmap, path, f"{Path(file).name}: {label} ({float(probs.max()):.2f})")
        yield path
