"""The audio input kind ``"audio"``: a folder of WAV/FLAC files, one sub-folder per class, and audio files to
classify, turned into the log-mel spectrograms the card's ``input_spec`` describes."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from audio.explain import explain_audio_files
from audio.features import model_input
from hub.kinds import InputKind, KindSpec, predict_per_file, register_kind


@dataclass(frozen=True)
class AudioSpec(KindSpec):
    """A spectrogram model's input (:func:`audio.features.audio_spec`): log-mels of ``num_mel_bins`` at
    ``sample_rate``, fitted to ``target_frames`` (``time_fit``), normalised with the training ``mean`` and ``std``."""

    sample_rate: int
    num_mel_bins: int
    target_frames: int
    mean: float
    std: float
    lifter: int | None = None
    trim_db: float | None = None
    time_fit: str = "cut"


@register_kind
class AudioKind(InputKind):
    """Audio files and folders of class sub-folders of WAV/FLAC files."""

    name, domain, Spec = "audio", "audio", AudioSpec

    def finetune_data(self, card, path: str) -> dict[str, Any]:
        """Fine-tuning data keeps the card's frame count, smoothing, trimming and normalisation, which the weights
        were trained on."""
        spec = self.spec(card)
        return {"name": "audio_folder", "args": {"root": str(path), "target_frames": spec.target_frames,
                                                 "mean": spec.mean, "std": spec.std, "lifter": spec.lifter,
                                                 "trim_db": spec.trim_db, "time_fit": spec.time_fit}}

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        return predict_per_file(model, paths, lambda path: model_input(path, card.input_spec), batch_size)

    def transform(self, card) -> Callable[[Any], torch.Tensor]:
        """A WAV/FLAC file or a ``(waveform, sample_rate)`` pair (as ``soundfile.read`` returns it) -> the normalised
        ``(num_mel_bins, target_frames)`` log-mel spectrogram (:func:`audio.features.model_input`, as ``predict``)."""
        self.spec(card)
        return partial(model_input, input_spec=card.input_spec)

    def explain(self, card, model, inputs: list[str], out_dir: Path) -> Iterator[Path]:
        return explain_audio_files(card, model, inputs, out_dir)
