"""The classical baseline of an audio classifier trained on a user's audio folder: logistic regression
(:func:`hub.classical.logistic_regression_baseline`) on each clip's MFCC statistics, the mean and the standard
deviation over time of every coefficient (torchaudio's ``MFCC``: 20 coefficients of 40 mel bands, 25 ms windows,
10 ms hop), fitted on the run's own training split and scored on its test split. Clips are read as the models read
them (mono, 16 kHz, scaled to unit RMS, so the recording level does not count). With the run's model's probabilities
beside it, ``finetune`` chooses the run's predictor among model, baseline and blend (:mod:`hub.predictor`); the kept
regression predicts a clip's probabilities from its MFCC statistics (:func:`mfcc_probabilities`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from audio.features import SAMPLE_RATE, read_audio
from hub.classical import folder_cross_validation, kept_linear, linear_probabilities, logistic_regression_baseline
from hub.kinds import BaselineResult, CrossValidation
from hub.predictor import model_outputs, probabilities

BASELINE_NAME = "logistic regression on MFCC statistics"
NUM_MFCC = 20


def mfcc_statistics(files: list[Path]) -> np.ndarray:
    """Each clip's MFCC mean and std over time. Shapes: -> (N, 2 * NUM_MFCC)"""
    import torchaudio

    mfcc = torchaudio.transforms.MFCC(SAMPLE_RATE, NUM_MFCC, melkwargs={"n_fft": 400, "hop_length": 160,
                                                                         "n_mels": 40})
    rows = []
    for path in files:
        wave = read_audio(path)
        wave = (wave - wave.mean()) / wave.pow(2).mean().sqrt().clamp_min(1e-8)  # (samples,), unit RMS
        coefficients = mfcc(wave)  # (NUM_MFCC, frames)
        rows.append(torch.cat([coefficients.mean(1), coefficients.std(1, correction=0)]))
    return torch.stack(rows).numpy()


def mfcc_probabilities(card, path: str) -> np.ndarray:
    """The class probabilities of the logistic regression kept with ``card`` for the audio file at ``path``.
    Shapes: -> (1, C)."""
    return linear_probabilities(kept_linear(card), mfcc_statistics([Path(path)]))


def mfcc_baseline_on_run_split(run_dir) -> BaselineResult | None:
    """Logistic regression on MFCC statistics of the run's split, with the run's model's probabilities (its best
    weights, calibrated as ``predict`` gives them) on the validation and test clips; None for a run whose data is
    not an audio folder."""
    from hub.core.registry import get_dataset_entry
    from hub.models import load
    from hub.recipe import load_recipe

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    if recipe.data.name != "audio_folder":
        return None
    data = get_dataset_entry(recipe.data.name).builder(**recipe.data.args)
    splits, classes = data.split_items()  # the run's split
    features = {s: mfcc_statistics([f for f, _ in items]) for s, items in splits.items()}
    labels = {s: np.array([label for _, label in items]) for s, items in splits.items()}
    ids = [Path(f).relative_to(data.root).as_posix() for f, _ in splits["test"]]
    data.setup()  # the spectrograms of the same split, in the same order, for the model
    model = load(str(run_dir))
    ours = {s: probabilities(model, model_outputs(model, getattr(data, f"{s}_set"))) for s in ("val", "test")}
    return logistic_regression_baseline(BASELINE_NAME, features, labels, classes, ids, "file", recipe.seed,
                                        model_probabilities=ours)


def mfcc_cross_validation(run_dir) -> CrossValidation | None:
    """The choice by folds of a run on an audio folder, with logistic regression on MFCC statistics
    (:func:`hub.classical.folder_cross_validation`); None for other audio data (FSDD's speaker split)."""
    return folder_cross_validation(run_dir, BASELINE_NAME, mfcc_statistics)
