"""The quickstart chain: recipe -> run -> shipped weights -> load -> predict from PNG files -> fine-tune."""
import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import hub
from hub.cli import main
from hub.errors import DataError
from hub.run.evaluate import evaluate
from hub.run.train import train
from hub.testing import assert_overfits, params_without_grad


def _write_digit_pngs(folder, indices):
    from sklearn.datasets import load_digits

    digits = load_digits()
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in indices:
        path = folder / f"digit{i}_label{digits.target[i]}.png"
        Image.fromarray(np.round(digits.images[i] * 255 / 16).astype(np.uint8), mode="L").save(path)
        paths.append((path, int(digits.target[i])))
    return paths


def test_vit_digits_forward_backward_and_reset_classifier():
    model = hub.create_model("vit_digits")
    x = torch.randn(4, 1, 8, 8)
    out = model(x)
    assert out.shape == (4, 10) and torch.isfinite(out).all()
    out.sum().backward()
    assert not params_without_grad(model)
    assert model.forward_features(x).shape == (4, 17, 64)
    model.reset_classifier(3)
    assert model(x).shape == (4, 3)


def test_vit_digits_overfits_eight_samples():
    torch.manual_seed(0)
    model = hub.create_model("vit_digits", drop_path_rate=0.0)
    x, y = torch.randn(8, 1, 8, 8), torch.arange(8)
    assert_overfits(model, lambda: torch.nn.functional.cross_entropy(model(x), y), steps=80, lr=3e-3)


def test_quickstart_recipe_short_schedule_learns(repo, tmp_path):
    run = train(str(repo / "recipes" / "quickstart.yaml"),
                ["trainer.max_epochs=12", "scheduler.warmup_epochs=1", "data.args.max_shift=0",
                 f"output_dir={tmp_path}"],
                progress=False)
    card = hub.model_card(str(run))
    assert card.metrics["test/acc"]["mean"] > 0.5  # chance is 0.1


def test_shipped_weights_reach_their_card():
    card = hub.model_card("vit_digits.sklearn")
    metrics = evaluate("vit_digits.sklearn", progress=False)
    assert metrics["test/acc"] >= 0.97
    assert abs(metrics["test/acc"] - card.metrics["test/acc"]["values"][0]) < 1e-6


def test_predict_from_png_files(tmp_path, capsys):
    from sklearn.datasets import load_digits

    test_index = np.arange(len(load_digits().target))[-40:]
    files = _write_digit_pngs(tmp_path / "pngs", test_index)
    out_csv = tmp_path / "preds.csv"
    assert main(["predict", "vit_digits.sklearn", *[str(p) for p, _ in files], "--top-k", "2",
                 "--out", str(out_csv), "--no-progress"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(files)
    correct = sum(line.split()[1] == str(label) for line, (_, label) in zip(lines, files))
    assert correct >= 0.9 * len(files)
    rows = list(csv.reader(out_csv.open()))
    assert rows[0] == ["file", "class_1", "prob_1", "class_2", "prob_2", "ood_score", "ood"]
    assert len(rows) == len(files) + 1
    assert sum(row[-1] == "True" for row in rows[1:]) <= 0.1 * len(files)  # held-out digits: in distribution


def test_predict_bad_file_names_it(tmp_path, capsys):
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not an image")
    assert main(["predict", "vit_digits.sklearn", str(bad), "--no-progress"]) == 2
    assert str(bad) in capsys.readouterr().err


def test_input_files_may_follow_options(tmp_path, capsys):
    from PIL import Image

    files = []
    for i in range(2):
        files.append(tmp_path / f"{i}.png")
        Image.new("L", (8, 8), color=40 * i).save(files[-1])
    assert main(["predict", "vit_digits.sklearn", "--no-progress", "--out", str(tmp_path / "p.csv"),
                 *map(str, files)]) == 0
    assert [line.split()[0] for line in capsys.readouterr().out.splitlines()] == list(map(str, files))
    with pytest.raises(SystemExit):
        main(["predict", "vit_digits.sklearn", "--bogus", str(files[0])])


def test_finetune_on_an_image_folder(tmp_path, capsys):
    root = tmp_path / "folder"
    for label in (0, 1, 7):
        from sklearn.datasets import load_digits

        target = load_digits().target
        for path, _ in _write_digit_pngs(root / f"class_{label}", np.flatnonzero(target == label)[:20]):
            pass
    code = main(["finetune", "vit_digits.sklearn", "--data", str(root), "--output-dir", str(tmp_path / "runs"),
                 "trainer.max_epochs=2", "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[1].split()[0])
    card = hub.model_card(str(run))
    assert card.label_names == ["class_0", "class_1", "class_7"]
    assert card.model_args["num_classes"] == 3
    trainer = card.recipe["resolved"]["trainer"]  # small-data defaults: early stopping on val/loss, no weight EMA
    assert trainer["ema_decay"] is None and trainer["early_stopping"]["patience"] == 5 and trainer["max_epochs"] == 2
    assert trainer["monitor"] == "val/loss" and trainer["max_minutes"] == 30.0 and trainer["min_epochs"] == 0
    # --policy auto: below 50 training images per class, a linear probe and LP-FT (a full fine-tune started from
    # that probe), each in its own folder, their budgets said before training; the better on validation is kept
    choice = json.loads((run / "metrics.json").read_text())["policy"]
    assert choice["asked"] == "auto" and list(choice["candidates"]) == ["linear-probe", "lp-ft"]
    assert choice["rule"]["classes"] == 3 and choice["rule"]["per_class"] < 50
    plan = out.split("fine-tune policy auto: ")[1]
    assert "\n  lp-ft: at most 2 epochs or 30 minutes; stops after 5 epochs without progress on val/loss" in plan
    assert f"fine-tune policy: {choice['chosen']}" in out
    assert all(c["epochs"] == 2 and c["run"] in out for c in choice["candidates"].values())
    values = {p: c["value"] for p, c in choice["candidates"].items()}
    assert {c["metric"] for c in choice["candidates"].values()} == {"val/loss"}  # the recipe's monitor
    assert values[choice["chosen"]] == min(values.values())
    assert run.name == choice["candidates"][choice["chosen"]]["run"]
    probe, full = (run.parent / choice["candidates"][p]["run"] for p in ("linear-probe", "lp-ft"))
    assert probe != full
    assert hub.model_card(str(probe)).recipe["resolved"]["model"]["init_from"] == "vit_digits.sklearn"
    resolved = hub.model_card(str(full)).recipe["resolved"]
    assert resolved["optimizer"]["layer_decay"] == 0.75 and resolved["optimizer"]["backbone_lr_scale"] == 0.1
    assert resolved["model"]["init_from"] == probe.name and not resolved["model"]["freeze_backbone"]  # no path
    pretrained, probed = hub.load("vit_digits.sklearn").state_dict(), hub.load(str(probe)).state_dict()
    assert all(torch.equal(v, pretrained[k]) for k, v in probed.items() if not k.startswith("head."))
    assert not torch.equal(hub.load(str(full)).state_dict()["blocks.0.attn.qkv.weight"],
                           pretrained["blocks.0.attn.qkv.weight"])


@pytest.mark.parametrize("layout, message", [
    ("empty_class", "hold no images"),
    ("single_class", "single class"),
    ("no_folders", "no class folders"),
])
def test_image_folder_bad_input(tmp_path, layout, message):
    from vision.data import image_folder

    root = tmp_path / layout
    root.mkdir()
    if layout in ("empty_class", "single_class"):
        _write_digit_pngs(root / "a", range(10))
    if layout == "empty_class":
        (root / "b").mkdir()
    with pytest.raises(DataError, match=message):
        image_folder(str(root), 8, 8, 1, [0.5], [0.5]).setup()
