"""Vision training and fine-tuning runs end to end on generated images (no dataset): a bare family on class folders,
the slot autoencoder recipe, tag and bare family on unlabelled scenes."""
import re

import numpy as np
import pytest

import hub
from hub.run.evaluate import evaluate
from tests.unit.test_vision import _stripe_folder
from vision.shapes import render_scene


def _write_scenes(folder, count: int, size: int = 48) -> None:
    """``count`` generated scenes as PNG files of another size than the model's, in two sub-folders."""
    from PIL import Image

    for i in range(count):
        image, _ = render_scene(np.random.default_rng(i), size)
        (folder / f"part{i % 2}").mkdir(parents=True, exist_ok=True)
        Image.fromarray((image.transpose(1, 2, 0) * 255).astype(np.uint8)).save(folder / f"part{i % 2}" / f"{i}.png")


def test_cli_finetune_bare_family_on_class_folders_with_a_test_folder(tmp_path, capsys):
    import csv
    import json
    from pathlib import Path

    from hub.cli import main

    root = _stripe_folder(tmp_path / "stripes", {"train": 10, "test": 6})  # no val/: a part of train/
    assert main(["finetune", "resnet_cbam_micro_32", "--data", str(root), "--output-dir", str(tmp_path / "runs"),
                 "--cv-folds", "3", "trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress"]) == 0
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[-1].split()[0])
    # issue 68: below 5,000 images the predictor is chosen on 3 folds of the 20 images outside test/, then refitted
    assert "3 fold runs of the model and one refit on every labelled item" in out
    entry = json.loads((run / "metrics.json").read_text())["predictor"]
    assert entry["selection"] == "cross-validation" and entry["folds"] == 3 and entry["items"] == 20
    assert entry["figures"]["test"].startswith("held out") and len(entry["refit"]["folds"]) == 3
    assert "refit: true" in (run / "recipe.yaml").read_text()
    data = hub.model_card(str(run)).data
    assert data["sizes"][0] == 32 and "refit: every item trains" in data["split"]  # the 12 of test/ included
    assert main(["predict", str(run), str(next(root.glob("test/vertical/*.png"))), "--no-progress"]) == 0
    assert "vertical" in capsys.readouterr().out
    card = hub.model_card(str(run))
    assert card.label_names == ["horizontal", "vertical"] and card.input_spec["height"] == 32
    assert card.model_args["in_chans"] == 3
    kept = json.loads((run / "metrics.json").read_text())["baseline"]
    assert kept["name"].startswith("logistic regression on pixels") and kept["metric"] == "test/acc"
    assert list(kept["test"]) == ["test/acc", "test/auroc", "test/auprc"]
    assert kept["test"]["test/acc"] == 1.0  # the stripes' direction is plain in the pixels
    verdict = "is at least as good as logistic regression" if kept["model_is_better"] else "WARNING: logistic"
    assert verdict in out and "logistic regression on pixels (C=" in out
    rows = list(csv.DictReader(open(run / kept["predictions"])))
    assert sorted(r["file"] for r in rows) == sorted(p.relative_to(root).as_posix() for p in root.glob("test/*/*"))
    assert list(rows[0]) == ["file", "target", "prediction", "proba_horizontal", "proba_vertical"]


def test_recipe_trains_and_explain_draws_slots(tmp_path):
    from hub.cli import main
    from hub.run.train import train

    run = train("recipes/vision/slot_autoencoder_micro_shapes.yaml",
                    ["trainer.max_epochs=1", "data.args.train_size=64", "data.args.val_size=16",
                     "data.args.test_size=16", "data.args.batch_size=16", f"output_dir={tmp_path}"], progress=False)
    card = hub.model_card(str(run))
    assert card.input_spec["kind"] == "scene"
    # the card's metric is that of its weights on its test scenes, evaluated again
    assert evaluate(str(run), progress=False)["test/fg_ari"] == pytest.approx(card.metrics["test/fg_ari"]["mean"],
                                                                              abs=1e-6)
    header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "val/fg_ari" in header and "train/loss" in header and "train/fg_ari" not in header  # not scored in training
    assert main(["explain", str(run), "--out", str(tmp_path / "fig")]) == 0
    assert len(list((tmp_path / "fig").glob("scene*_explain.png"))) == 4


def test_finetune_on_a_folder_of_unlabelled_images(tmp_path, capsys):
    """The shipped slot autoencoder fine-tunes on a user's images (any size, in sub-folders): nothing to score,
    so the epoch is picked on val/loss; too few images or a missing folder fail before training."""
    from hub.cli import main

    _write_scenes(tmp_path / "scenes", 12)
    assert main(["finetune", "slot_autoencoder_micro_64.shapes", "--data", str(tmp_path / "scenes"), "--no-progress",
                 "--output-dir", str(tmp_path / "runs"), "trainer.max_epochs=1", "data.args.batch_size=4"]) == 0
    run = next((tmp_path / "runs").glob("*/*"))
    header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    assert "val/loss" in header and not any("fg_ari" in column for column in header)
    summary = (run / "metrics.json").read_text()
    assert '"monitor": "val/loss"' in summary and '"test/loss"' in summary
    assert hub.model_card(str(run)).input_spec["kind"] == "scene"

    _write_scenes(tmp_path / "few", 3)
    for folder, message in (("few", "holds 3 images .* needs at least 4"), ("missing", "does not exist")):
        assert main(["finetune", "slot_autoencoder_micro_64.shapes", "--data", str(tmp_path / folder), "--no-progress",
                     "--output-dir", str(tmp_path / "runs2")]) != 0
        assert re.search(message, capsys.readouterr().err)
    assert not (tmp_path / "runs2").exists()  # failed before a run folder was made


def test_bare_family_trains_from_scratch_on_unlabelled_images(tmp_path, capsys):
    import json

    from hub.cli import main

    _write_scenes(tmp_path / "scenes", 12)
    assert main(["finetune", "slot_autoencoder_micro_64", "--data", str(tmp_path / "scenes"), "--no-progress",
                 "--output-dir", str(tmp_path / "runs"), "trainer.max_epochs=1", "trainer.accelerator=cpu",
                 "data.args.batch_size=4"]) == 0
    run = next((tmp_path / "runs").glob("*/*"))
    card = hub.model_card(str(run))
    assert card.recipe["resolved"]["model"]["init_from"] is None and card.input_spec["height"] == 64
    summary = json.loads((run / "metrics.json").read_text())
    assert "test/loss" in summary["test"] and "baseline" not in summary  # no supervised metric, no baseline
