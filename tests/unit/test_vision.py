"""Vision families: shapes, gradients to every parameter, head reset, tiny overfit, input checks, maps."""
import numpy as np
import pytest
import torch

import hub
from hub.errors import DataError, HubError
from hub.testing import assert_overfits, params_without_grad

SMALL = ["vit_micro_patch4_32", "coat_lite_micro_32", "resnet_cbam_micro_32", "halonet_micro_32"]


LARGE = ["vit_tiny_patch4_32", "coat_lite_tiny_32", "resnet_cbam18_32"]


@pytest.mark.parametrize("name", SMALL + LARGE)
def test_forward_backward_reset(name):
    torch.manual_seed(0)
    model = hub.create_model(name, num_classes=7)
    x = torch.randn(2, 3, 32, 32)
    out = model(x)
    assert out.shape == (2, 7) and torch.isfinite(out).all()
    out.sum().backward()
    assert not params_without_grad(model)
    assert model.forward_head(model.forward_features(x), pre_logits=True).shape == (2, model.num_features)
    model.reset_classifier(3)
    assert model(x).shape == (2, 3)


@pytest.mark.parametrize("name", SMALL)
def test_overfits_eight_images(name):
    torch.manual_seed(0)
    model = hub.create_model(name, num_classes=8)
    x, y = torch.randn(8, 3, 32, 32), torch.arange(8)
    assert_overfits(model, lambda: torch.nn.functional.cross_entropy(model(x), y))


def test_halonet_input_size_error_says_what_it_needs():
    model = hub.create_model("halonet_micro_32")
    with pytest.raises(DataError, match="multiples of 32.*28x28.*32x32"):
        model(torch.randn(1, 3, 28, 28))


def test_cbam_and_attention_pool_maps():
    from vision.models.resnet_cbam import attention_maps

    model = hub.create_model("resnet_cbam_micro_32", attention_pool=True).eval()
    maps = attention_maps(model, torch.randn(2, 3, 32, 32))
    assert set(maps) == {"layer1.0", "layer2.0", "layer3.0", "layer4.0", "pool"}
    for key, value in maps.items():
        assert value.min() >= 0 and value.max() <= 1, key
    torch.testing.assert_close(maps["pool"].flatten(1).sum(-1), torch.ones(2))
    model.reset_classifier(4)
    assert type(model.global_pool).__name__ == "AttentionPool2d"


def test_vit_rollout_and_explain_cli(tmp_path, capsys):
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    from hub.cli import main
    from hub.explain import attention_rollout, vit_attention

    model = hub.load("vit_digits.sklearn")
    attentions = vit_attention(model, torch.randn(2, 1, 8, 8))
    assert len(attentions) == 4 and attentions[0].shape == (2, 4, 17, 17)
    torch.testing.assert_close(attentions[0].sum(-1), torch.ones(2, 4, 17))
    assert all(block.attn.fused_attn == model.blocks[0].attn.fused_attn for block in model.blocks)
    maps = attention_rollout(attentions, 1, (4, 4))
    assert maps.shape == (2, 4, 4) and maps.min() >= 0 and maps.max() <= 1
    with pytest.raises(HubError, match="cannot capture attention of Linear: expected a timm-style transformer"):
        vit_attention(torch.nn.Linear(2, 2), torch.zeros(1, 2))
    path = tmp_path / "seven.png"
    Image.fromarray(np.round(load_digits().images[7] * 255 / 16).astype(np.uint8), mode="L").save(path)
    assert main(["explain", "vit_digits.sklearn", str(path), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "seven_explain.png").stat().st_size > 1000
    assert main(["explain", "vit_digits.sklearn", "--out", str(tmp_path / "test")]) == 0  # no files: the test split
    assert sorted(p.name for p in (tmp_path / "test").iterdir()) == [f"test{i}_explain.png" for i in range(4)]


@pytest.mark.parametrize("channels,augment", [(1, "light"), (3, "light"), (3, "randaugment"), (1, "randaugment")])
def test_image_folder_training_augmentation_is_timms_and_seeded(tmp_path, channels, augment):
    """Training images go through timm's transform; an item is the same for the same (seed, epoch, index)
    whatever the global RNG state, and differs across epochs; the global RNGs are left untouched."""
    import random

    from PIL import Image

    from vision.data import image_folder

    generator = np.random.default_rng(0)
    for label in ("a", "b"):
        (tmp_path / label).mkdir()
        for i in range(10):
            Image.fromarray(generator.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(tmp_path / label / f"{i}.png")
    mean, std = [0.5] * channels, [0.25] * channels
    data = image_folder(str(tmp_path), 16, 16, channels, mean, std, augment=augment, seed=3)
    data.setup()
    assert "RandomResizedCrop" in repr(data.train_set.transform)
    torch.manual_seed(1)
    random.seed(1)
    first, label = data.train_set[(2, 0)]
    state, py_state = torch.get_rng_state(), random.getstate()
    torch.manual_seed(99)
    again, _ = data.train_set[(2, 0)]
    torch.set_rng_state(state)
    assert first.shape == (channels, 16, 16) and torch.equal(first, again)
    assert not torch.equal(first, data.train_set[(2, 1)][0])
    assert torch.equal(torch.get_rng_state(), state) and random.getstate() == py_state
    with pytest.raises(DataError, match="augment must be one of"):
        image_folder(str(tmp_path), 16, 16, channels, mean, std, augment="heavy")


def _stripe_folder(root, counts: dict[str, int], size: int = 20):
    """Class folders of grey PNGs as a user holds them: ``root/<split>/<class>/*.png`` for each ``split: n``
    of ``counts``; class ``horizontal`` has horizontal stripes, ``vertical`` vertical ones, both noisy."""
    from PIL import Image

    rng = np.random.default_rng(0)
    stripes = (np.arange(size) // 2 % 2 * 160).astype(np.float64)
    for split, n in counts.items():
        for label, pattern in (("horizontal", np.tile(stripes[:, None], (1, size))),
                               ("vertical", np.tile(stripes[None, :], (size, 1)))):
            (root / split / label).mkdir(parents=True)
            for i in range(n):
                image = np.clip(pattern + rng.normal(0, 30, pattern.shape) + 40, 0, 255).astype(np.uint8)
                Image.fromarray(image).save(root / split / label / f"{label}{i}.png")
    return root


def test_cli_finetune_bare_family_on_class_folders_with_a_test_folder(tmp_path, capsys):
    import csv
    import json
    from pathlib import Path

    from hub.cli import main

    root = _stripe_folder(tmp_path / "stripes", {"train": 10, "test": 6})  # no val/: a part of train/
    assert main(["finetune", "resnet_cbam_micro_32", "--data", str(root), "--output-dir", str(tmp_path / "runs"),
                 "trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress"]) == 0
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[1].split()[0])
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


def test_image_folder_splits_and_errors_before_training(tmp_path, capsys):
    from hub.cli import main
    from vision.data import image_folder

    root = _stripe_folder(tmp_path / "three", {"train": 10, "val": 3, "test": 4})
    data = image_folder(str(root), 8, 8, 1, [0.5], [0.5])
    data.setup()
    assert data.info["sizes"] == [20, 6, 8]  # the user's own val/ and test/
    carved = image_folder(str(_stripe_folder(tmp_path / "one", {"train": 20})), 8, 8, 1, [0.5], [0.5])
    carved.setup()
    train, val, test = carved.info["sizes"]
    assert train == 28 and val + test == 12 and min(val, test) >= 2  # val and test: stratified parts of train/
    (root / "test" / "diagonal").mkdir()
    (root / "test" / "vertical").rename(root / "test" / "diagonal" / "v")
    assert main(["finetune", "vit_digits", "--data", str(root), "--output-dir", str(tmp_path / "runs")]) == 2
    assert "test has classes ['diagonal', 'horizontal'] but" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # refused before a run folder was made
