"""The classical baseline of an image classifier trained on a user's image folder: logistic regression on the
pixels (:func:`hub.classical.logistic_regression_baseline`), each image read as the model reads it (its
``input_spec``: grey or RGB, resized to the model's input size, normalised), fitted on the run's own training split
(no augmentation) and scored on its test split. With the run's model's probabilities beside it, ``finetune`` chooses
the run's predictor among model, baseline and blend (:mod:`hub.predictor`); the kept regression predicts a file's
probabilities from its pixels (:func:`pixel_probabilities`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hub.classical import folder_cross_validation, kept_linear, linear_probabilities, logistic_regression_baseline
from hub.kinds import BaselineResult, CrossValidation
from hub.predictor import model_outputs, probabilities
from vision.io import read_image

BASELINE_NAME = "logistic regression on pixels"


def pixels(files: list[Path], spec: dict) -> np.ndarray:
    """The images as rows of pixels. Shapes: -> (N, C * H * W)"""
    return torch.stack([read_image(f, spec) for f in files]).flatten(1).numpy()


def pixel_probabilities(card, path: str) -> np.ndarray:
    """The class probabilities of the logistic regression kept with ``card`` for the image file at ``path``, read
    as the model reads it. Shapes: -> (1, C)."""
    return linear_probabilities(kept_linear(card), pixels([Path(path)], card.input_spec))


def pixel_baseline_on_run_split(run_dir) -> BaselineResult | None:
    """Logistic regression on the pixels of the run's split, with the run's model's probabilities (its best
    weights, calibrated as ``predict`` gives them) on the validation and test images; None for a run whose data is
    not an image folder."""
    from hub.models import load
    from hub.recipe import load_recipe
    from hub.run.train import build_data

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    if recipe.data.name != "image_folder":
        return None
    data = build_data(recipe)
    sets = {"train": data.train_set, "val": data.val_set, "test": data.test_set}
    features = {s: pixels(d.files, data.input_spec) for s, d in sets.items()}
    labels = {s: np.asarray(d.labels) for s, d in sets.items()}
    ids = [Path(f).relative_to(data.root).as_posix() for f in data.test_set.files]
    model = load(str(run_dir))
    ours = {s: probabilities(model, model_outputs(model, sets[s])) for s in ("val", "test")}
    return logistic_regression_baseline(BASELINE_NAME, features, labels, data.label_names, ids, "file",
                                        recipe.seed, model_probabilities=ours)


def pixel_cross_validation(run_dir) -> CrossValidation | None:
    """The choice by folds of a run on an image folder, with logistic regression on the pixels
    (:func:`hub.classical.folder_cross_validation`); None for other image data."""
    from hub.core.registry import model_card

    spec = model_card(Path(run_dir)).input_spec
    return folder_cross_validation(run_dir, BASELINE_NAME, lambda files: pixels(files, spec))
