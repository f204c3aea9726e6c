"""The audio input kind ``"audio"``: a folder of WAV/FLAC files, one sub-folder per class, and audio files to
classify, turned into the log-mel spectrograms the card's ``input_spec`` describes. ``attnhub finetune FAMILY --data
DIR`` trains an audio classifier from scratch on such a folder (the default recipe), and every fine-tune on an audio
folder is set beside logistic regression on MFCC statistics (:mod:`audio.baselines`).

>>> recipe = AudioKind().default_recipe("timbre_attention", "my_clips")
>>> recipe.data.name, recipe.optimizer.lr
('audio_folder', 0.003)
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from audio.baselines import mfcc_baseline_on_run_split, mfcc_cross_validation, mfcc_probabilities
from audio.explain import audio_samples, save_spectrogram_overlay, spectrogram_explanation
from audio.features import model_input
from hub.errors import DataError
from hub.explain import Explanation
from hub.kinds import (
    FOLDER_GROUPS,
    BaselineResult,
    CrossValidation,
    InputForm,
    InputKind,
    KindSpec,
    OODProfile,
    batch_axes,
    grouped_args,
    predict_per_file,
    register_kind,
)
from hub.recipe import (
    DataSection,
    EarlyStoppingSection,
    OptimizerSection,
    Recipe,
    SchedulerSection,
    TrainerSection,
    scratch_recipe,
)
from hub.uncertainty.ood import spectrogram_summary

# How a family trains from scratch on a user's class folders (no recipe file trains on one), per family overridden:
OPTIMIZER = OptimizerSection(name="adamw", lr=1e-3, weight_decay=0.05)  # AdamW at 1e-3 (the transformers'), decay 0.05
LEARNING_RATES = {"timbre_attention": 3e-3}  # one small attention layer learns faster
SCHEDULER = SchedulerSection(name="cosine", warmup_epochs=1)  # one warmup epoch, then cosine decay
# at most 40 epochs, stopped after 8 without a better validation metric; the best epoch tested
TRAINER = TrainerSection(max_epochs=40, early_stopping=EarlyStoppingSection(patience=8), test_checkpoint="best")
MIXUP = 0.2  # the audio folder's mixup of training clips (with its default SpecAugment, time roll and noise)


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
    tasks = ("audio-classification",)
    ood = OODProfile(input_scores=("inputs",), summary=spectrogram_summary)
    input_form = InputForm.FILE_EACH
    options = (FOLDER_GROUPS,)

    def finetune_data(self, card, path: str, groups: str | None = None) -> DataSection:
        """Fine-tuning data keeps the card's frame count, smoothing, trimming and normalisation, which the weights
        were trained on."""
        spec = self.spec(card)
        return DataSection(name="audio_folder", args={"root": str(path), "target_frames": spec.target_frames,
                                                      "mean": spec.mean, "std": spec.std, "lifter": spec.lifter,
                                                      "trim_db": spec.trim_db, "time_fit": spec.time_fit,
                                                      **grouped_args(groups)})

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        return predict_per_file(model, paths, lambda path: model_input(path, card.input_spec), batch_size)

    def read_bytes(self, card, data: bytes, name: str) -> torch.Tensor:
        """An uploaded WAV/FLAC file's bytes -> the spectrogram :meth:`predict` reads from the file (soundfile reads
        a file object as it reads a path)."""
        from io import BytesIO

        import soundfile

        try:
            samples, rate = soundfile.read(BytesIO(data), dtype="float32", always_2d=True)
        except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as err:
            raise DataError(f"cannot read audio {name}: not a readable WAV/FLAC file ({err})") from None
        try:
            return model_input((samples, rate), card.input_spec)
        except DataError as err:  # said of "the waveform": of the upload, by its name
            raise DataError(str(err).replace("the waveform", f"audio file {name}")) from None

    def transform(self, card) -> Callable[[Any], torch.Tensor]:
        """A WAV/FLAC file or a ``(waveform, sample_rate)`` pair (as ``soundfile.read`` returns it) -> the normalised
        ``(num_mel_bins, target_frames)`` log-mel spectrogram (:func:`audio.features.model_input`, as ``predict``)."""
        self.spec(card)
        return partial(model_input, input_spec=card.input_spec)

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """Attention over the spectrogram, or Integrated Gradients (:func:`audio.explain.spectrogram_explanation`)."""
        return spectrogram_explanation(model, inputs["x"], target)

    def explain_samples(self, card, inputs: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        return audio_samples(card, inputs)

    def draw_explanation(self, card, inputs: dict[str, Any], explanation: Explanation, path: Path, title: str) -> None:
        save_spectrogram_overlay(inputs["x"][0], explanation.values, path, title)

    def example_input(self, card, size: int, generator: torch.Generator):
        """``x`` (B, mel bins, frames): normalised log-mel spectrograms."""
        spec = card.input_spec
        return batch_axes({"x": torch.randn(size, spec["num_mel_bins"], spec["target_frames"], generator=generator)})

    def input_spec_of(self, model) -> dict[str, Any] | None:
        """An audio model's ``input_size`` (mel bins, frames), where it has one."""
        if getattr(model, "input_size", None) is None:
            return None
        return {"kind": self.name, "num_mel_bins": model.input_size[0], "target_frames": model.input_size[1]}

    def baseline(self, run_dir) -> BaselineResult | None:
        return mfcc_baseline_on_run_split(run_dir)

    def cross_validation(self, run_dir) -> CrossValidation | None:
        """Folds of an audio folder's clips outside the test split, logistic regression on MFCC statistics out of
        fold, the refit on every clip (:func:`audio.baselines.mfcc_cross_validation`)."""
        return mfcc_cross_validation(run_dir)

    def baseline_outputs(self, card, path: str):
        """The kept logistic regression's class probabilities for the audio file at ``path`` (1, C)."""
        return mfcc_probabilities(card, path)

    def default_recipe(self, family: str, path: str, groups: str | None = None) -> Recipe:
        """The user's class folders as 1 s of log-mels (100 frames, cut or padded) with the audio folder's
        augmentation (SpecAugment, time roll, noise) and mixup; AdamW, cosine schedule, early stopping on
        validation, the best epoch tested (40 epochs at most)."""
        optimizer = OPTIMIZER.replace(lr=LEARNING_RATES.get(family, OPTIMIZER.lr))
        return scratch_recipe(family, DataSection(name="audio_folder", args={"root": str(path), "mixup": MIXUP,
                                                                            **grouped_args(groups)}),
                              optimizer=optimizer, scheduler=SCHEDULER, trainer=TRAINER)
