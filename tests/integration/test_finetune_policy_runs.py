"""The fine-tune policy on a mid-size image folder (issue 50): ``--policy auto`` must not fall below the full fine-tune
at the card's learning rate (the previous default) by more than the test split's noise. The folder: scikit-learn's
8x8 digits (shipped with scikit-learn, no dataset to fetch) turned a quarter turn, so that the task is new to
``vit_digits.sklearn`` and a linear probe on its features is not enough: 100 images per class to train (auto's
mid-size rule: the probe, LP-FT and the full fine-tune at the recipe's rate), the other 797 to test."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from hub.finetune import finetune

pytestmark = pytest.mark.slow


def _rotated_digits(root: Path, per_class: int = 100) -> Path:
    from sklearn.datasets import load_digits

    digits = load_digits()
    seen = dict.fromkeys(range(10), 0)
    for i, (image, label) in enumerate(zip(digits.images, digits.target)):
        split = "train" if seen[label] < per_class else "test"
        seen[label] += 1
        folder = root / split / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.rot90(image * 255 / 16).astype(np.uint8)).save(folder / f"{i}.png")
    return root


def test_auto_on_a_mid_size_folder_is_not_below_the_full_fine_tune_at_the_recipe_rate(tmp_path):
    root = _rotated_digits(tmp_path / "digits")
    run_dir, _ = finetune("vit_digits.sklearn", str(root), ["trainer.accelerator=cpu", "seed=0"],
                          str(tmp_path / "runs"), progress=False, policy="auto", cv_folds=0)
    policy = json.loads((run_dir / "metrics.json").read_text())["policy"]
    assert set(policy["candidates"]) == {"linear-probe", "lp-ft", "full-recipe-lr"}  # the mid-size rule
    test = {p: json.loads((run_dir.parent / c["run"] / "metrics.json").read_text())["test"]["test/acc"]
            for p, c in policy["candidates"].items()}
    full, kept = test["full-recipe-lr"], test[policy["chosen"]]
    noise = 2 * math.sqrt(full * (1 - full) / 797)  # two standard errors of a test accuracy on 797 images
    assert kept >= full - noise, (policy["chosen"], test)
    assert test["full-recipe-lr"] > test["linear-probe"]  # the task is new: the probe alone does not do it
