"""The quickstart chain without training: the recipe's model and schedule beside the digits tag's, shipped weights ->
load -> predict from PNG files (the runs, the quickstart in full and a fine-tune:
tests/integration/test_training_runs.py)."""
import csv

import numpy as np
import pytest
import torch
from PIL import Image

import hub
from hub.cli import main
from hub.errors import DataError
from hub.run.evaluate import evaluate
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


def test_cct_digits_forward_backward_and_overfit():
    """The quickstart's model: 16 tokens from its convolutional tokenizer, gradients to every parameter, and it
    overfits eight digits."""
    torch.manual_seed(0)
    model = hub.create_model("cct_digits")
    x, y = torch.randn(8, 1, 8, 8), torch.arange(8)
    out = model(x)
    assert out.shape == (8, 10) and torch.isfinite(out).all()
    out.sum().backward()
    assert not params_without_grad(model)
    assert model.forward_features(x).shape == (8, 16, 64)
    assert_overfits(model, lambda: torch.nn.functional.cross_entropy(model(x), y), steps=80, lr=3e-3)


def test_quickstart_takes_a_fifth_of_the_steps_of_the_digits_tags_recipe(repo):
    """The quickstart's claims that hold without training (its accuracy and wall time are checked by
    tests/integration/test_training_runs.py): on the digits tag's data, a fifth of the optimiser steps of the tag's
    150-epoch recipe, 6 validations instead of 150, the last of them on the tested last epoch, whose weights are an
    average; and the file that the card of vit_digits.sklearn names (what ``attnhub reproduce`` trains) is the recipe
    it was trained with."""
    import math

    from hub.recipe import Recipe, load_recipe

    card = hub.model_card("vit_digits.sklearn")
    train_items = card.data["sizes"][0]
    quick, tag = load_recipe(repo / "recipes" / "quickstart.yaml"), load_recipe(repo / card.recipe["path"])

    def steps(recipe):
        return recipe.trainer.max_epochs * math.ceil(train_items / recipe.data.args["batch_size"])

    assert (steps(tag), steps(quick)) == (3000, 600)
    validations = [r.trainer.max_epochs // r.trainer.check_val_every_n_epoch for r in (tag, quick)]
    assert validations == [150, 6] and quick.trainer.max_epochs % quick.trainer.check_val_every_n_epoch == 0
    assert quick.trainer.test_checkpoint == "last" and quick.trainer.ema_decay is not None
    assert quick.trainer.num_threads == 1 and tag.trainer.num_threads is None  # the card's recipe as it was
    assert (quick.model.name, tag.model.name) == ("cct_digits", "vit_digits") and quick.data.name == tag.data.name
    assert tag.to_dict() == {**Recipe.model_validate(card.recipe["resolved"]).to_dict(), "name": tag.name}


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


def test_a_run_sets_its_intra_op_threads_and_gives_them_back():
    """``trainer.num_threads`` (the quickstart's 1: at 2 threads on a CPU busy with other work its 60 epochs took
    72-104 s, at one 38 s) holds for the run alone."""
    from hub.run.train import intra_op_threads

    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with intra_op_threads(1):
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with intra_op_threads(None):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
