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


def test_memory_tokens_learn_the_new_task_and_keep_the_source_task(tmp_path, capsys):
    """``--policy memory`` through training (issue 66): the kept run learns the rotated digits above chance, its
    saved weights rebuild the memory-token wrapper, every source logit equals the tag's, and ``predict --task both``
    prints both tasks' classes for each file."""
    import torch

    import hub
    from hub.cli import main
    from hub.kinds import kind_of

    root = _rotated_digits(tmp_path / "digits", per_class=30)
    run_dir, _ = finetune("vit_digits.sklearn", str(root), ["trainer.accelerator=cpu", "seed=0",
                                                            "trainer.max_epochs=10"],
                          str(tmp_path / "runs"), progress=False, policy="memory", memory_tokens=2, predictor="model")
    summary = json.loads((run_dir / "metrics.json").read_text())
    assert summary["policy"]["chosen"] == "memory" and summary["test"]["test/acc"] > 0.2  # chance: 0.1
    card = hub.model_card(run_dir)
    assert card.memory_tokens["source"] == "vit_digits.sklearn" and card.memory_tokens["tokens_per_layer"] == 2
    files = sorted(str(p) for p in (root / "test").rglob("*.png"))[:64]
    x = torch.stack([kind_of(card).transform(card)(f) for f in files])
    with torch.inference_mode():
        source, _ = hub.load(run_dir).forward_both(x)
        assert torch.equal(source, hub.load("vit_digits.sklearn")(x))
    capsys.readouterr()
    assert main(["predict", str(run_dir), *files[:2], "--task", "both", "--no-progress"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all(len(line.split()) >= 1 + 4 * 3 for line in lines)  # new and source top-3
