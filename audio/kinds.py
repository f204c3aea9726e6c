"""The audio input kind ``"audio"``: a folder of WAV/FLAC files, one sub-folder per class, and audio files to
classify, turned into the log-mel spectrograms the card's ``input_spec`` describes."""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import torch

from audio.features import model_input
from hub.adapters import register_finetune_adapter, register_predict_adapter


@register_finetune_adapter("audio")
def audio_folder_section(card, path: str) -> dict[str, Any]:
    """Fine-tuning data keeps the card's frame count, smoothing, trimming and normalisation, which the weights
    were trained on."""
    spec = card.input_spec
    return {"name": "audio_folder", "args": {"root": str(path), "target_frames": spec["target_frames"],
                                             "mean": spec["mean"], "std": spec["std"], "lifter": spec.get("lifter"),
                                             "trim_db": spec.get("trim_db"), "time_fit": spec.get("time_fit", "cut")}}


@register_predict_adapter("audio")
def audio_logits(card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
    names, inputs = [], []
    for path in paths:
        names.append(str(path))
        inputs.append(model_input(path, card.input_spec))
        if len(names) == batch_size:
            yield names, model(torch.stack(inputs))
            names, inputs = [], []
    if names:
        yield names, model(torch.stack(inputs))
