"""Vision families: shapes, gradients to every parameter, head reset, tiny overfit, input checks, maps."""
import numpy as np
import pytest
import torch

import hub
from hub.errors import DataError, HubError
from hub.testing import assert_overfits, params_without_grad

SMALL = ["vit_micro_patch4_32", "coat_lite_micro_32", "resnet_cbam_micro_32", "halonet_micro_32",
         "airbench_cbam_micro_32", "airbench_halo_micro_32", "cct_2_3x2_32", "residual_attention_micro_32",
         "patchconvnet_micro_32"]


LARGE = ["vit_tiny_patch4_32", "coat_lite_tiny_32", "resnet_cbam18_32", "airbench_cbam_32", "airbench_halo_32",
         "cct_7_3x1_32", "residual_attention_small_32", "patchconvnet_small_32"]


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
    # airbench's logits are scaled by 1/9: a larger step moves them as far
    assert_overfits(model, lambda: torch.nn.functional.cross_entropy(model(x), y),
                    lr=1e-2 if name.startswith("airbench") else 2e-3)


def test_airbench_whitening_from_data_and_test_time_augmentation():
    """initialize_from_data makes the whitening conv's 2x2 patch responses uncorrelated with unit variance (its
    first half); eval mode averages the logits of the image and its mirror (tta=flip)."""
    torch.manual_seed(0)
    images = torch.randn(64, 3, 16, 16) @ torch.randn(16, 16) * 0.3  # correlated pixels
    model = hub.create_model("airbench_cbam_micro_32", tta="flip")
    model.initialize_from_data(images)
    responses = torch.nn.functional.conv2d(images, model.whiten_weight[:12]).permute(1, 0, 2, 3).flatten(1)
    covariance = responses @ responses.T / responses.shape[1]  # about the origin, as the filters were computed
    assert torch.allclose(covariance, torch.eye(12), atol=0.05)
    model.eval()
    x = torch.randn(2, 3, 32, 32)
    logits = model.forward_head(model.forward_features(x)), model.forward_head(model.forward_features(x.flip(-1)))
    assert torch.allclose(model(x), 0.5 * (logits[0] + logits[1]), atol=1e-5)
    model.tta = "flip_translate"  # airbench's level 2: half the mirrored pair, a quarter each one-pixel shift's pair
    for x in (x, torch.randn(40, 3, 32, 32)):  # the views in one call (a small batch), or one call each
        padded = torch.nn.functional.pad(x, (1, 1, 1, 1), mode="reflect")
        pairs = [0.5 * (model.forward_head(model.forward_features(v)) + model.forward_head(model.forward_features(
            v.flip(-1)))) for v in (x, padded[..., :32, :32], padded[..., 2:, 2:])]
        assert torch.allclose(model(x), 0.5 * pairs[0] + 0.25 * (pairs[1] + pairs[2]), atol=1e-5)
    with pytest.raises(DataError, match="tta must be one of"):
        hub.create_model("airbench_cbam_micro_32", tta="many")


def test_padded_halo_attention_sees_its_block_and_halo_only():
    """On a 7x7 map (padded to 8x8: four 4x4 blocks, each attending to itself and a halo of 1 pixel) a change at
    (5, 5) reaches the bottom-right block's outputs alone; one at (4, 4), in every block's halo, reaches all four
    blocks. The output keeps the input's size."""
    from vision.models.airbench_halo import PaddedHaloAttn

    torch.manual_seed(0)
    attn = PaddedHaloAttn(16, num_heads=2, block_size=4, halo_size=1).eval()
    x = torch.randn(1, 16, 7, 7)
    assert attn(x).shape == (1, 16, 7, 7)

    def moved(row: int, col: int) -> torch.Tensor:  # (7, 7): outputs changed by a change of x at (row, col)
        changed = x.clone()
        changed[..., row, col] += 1.0
        return (attn(changed) - attn(x)).abs().sum(1)[0] > 1e-6

    inner = moved(5, 5)
    assert inner[4:, 4:].all() and not inner[:4].any() and not inner[:, :4].any()
    edge = moved(4, 4)
    assert edge[:4, :4].any() and edge[:4, 4:].any() and edge[4:, :4].any() and edge[4:, 4:].all()


def test_halonet_input_size_error_says_what_it_needs():
    model = hub.create_model("halonet_micro_32")
    with pytest.raises(DataError, match="multiples of 32.*28x28.*32x32"):
        model(torch.randn(1, 3, 28, 28))


def test_cbam_and_attention_pool_maps():
    from vision.models.resnet_cbam import attention_maps

    model = hub.create_model("resnet_cbam_micro_32", global_pool="attention").eval()
    maps = attention_maps(model, torch.randn(2, 3, 32, 32))
    assert set(maps) == {"layer1.0", "layer2.0", "layer3.0", "layer4.0", "pool"}
    for key, value in maps.items():
        assert value.min() >= 0 and value.max() <= 1, key
    total = maps["pool"].flatten(1).sum(-1)  # the positions' share; the rest is the class token's own
    assert ((total > 0) & (total <= 1 + 1e-6)).all()
    model.reset_classifier(4)
    assert type(model.global_pool).__name__ == "AttentionPool"


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
    assert sorted(p.name for p in (tmp_path / "test").iterdir()) == sorted(
        f"test{i}_explain.{suffix}" for i in range(4) for suffix in ("png", "npy", "json"))


@pytest.mark.parametrize("channels,augment", [(1, "light"), (3, "randaugment")])
def test_image_folder_is_decoded_once_and_augmented_a_seeded_batch_at_a_time(tmp_path, monkeypatch, channels, augment):
    """An image folder's splits are resident uint8 tensors; its training batches are augmented (not the plain
    normalised images), the same for the same (seed, epoch), different in the next epoch; a bad preset fails early."""
    from PIL import Image

    from vision.data import image_folder

    monkeypatch.setenv("HUB_CACHE", str(tmp_path / "cache"))
    generator = np.random.default_rng(0)
    for label in ("a", "b"):
        (tmp_path / "data" / label).mkdir(parents=True)
        for i in range(10):
            Image.fromarray(generator.integers(0, 255, (20, 24, 3), dtype=np.uint8)).save(
                tmp_path / "data" / label / f"{i}.png")
    mean, std = [0.5] * channels, [0.25] * channels
    data = image_folder(str(tmp_path / "data"), 16, 16, channels, mean, std, augment=augment, seed=3, batch_size=64)
    data.setup()
    assert data.train_set.images.dtype == torch.uint8 and data.train_set.images.shape[1:] == (channels, 16, 16)
    (x, y), = data.train_dataloader()
    (plain, plain_y), = data.train_set.batches(64, shuffle=True, seed=3)  # the same order, unaugmented
    (again, _), = data.train_dataloader()
    assert torch.equal(y, plain_y) and torch.equal(x, again) and not torch.allclose(x, plain, atol=1e-3)
    loader = data.train_dataloader()
    loader.sampler.set_epoch(1)
    assert not torch.equal(next(iter(loader))[0], x)
    with pytest.raises(DataError, match="augment must be one of"):
        image_folder(str(tmp_path / "data"), 16, 16, channels, mean, std, augment="heavy")


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


@pytest.mark.parametrize("combine", ["residual", "naive", "trunk"])
def test_residual_attention_ablations_train_and_map(combine):
    """Each way of combining trunk and mask (the paper's ablation) reaches every parameter; the maps are the masks, in
    (0, 1), one per module at its stage's resolution; with attention pooling, the pool's map sums to at most 1."""
    torch.manual_seed(0)
    model = hub.create_model("residual_attention_micro_32", combine=combine, pool="attention", num_classes=4)
    x = torch.randn(2, 3, 32, 32)
    model(x).sum().backward()
    assert not params_without_grad(model)
    maps = model.eval().attention_maps(x)
    masks = {k: v for k, v in maps.items() if k != "pool"}
    if combine == "trunk":
        assert not masks
    else:
        assert {k: tuple(v.shape) for k, v in masks.items()} == {
            "stages.0.1": (2, 1, 32, 32), "stages.1.1": (2, 1, 16, 16), "stages.2.1": (2, 1, 8, 8)}
        assert all(((v > 0) & (v < 1)).all() for v in masks.values())
    assert maps["pool"].shape == (2, 1, 8, 8) and (maps["pool"].sum((2, 3)) <= 1 + 1e-5).all()


def test_residual_attention_test_time_augmentation_is_the_shared_one():
    """``tta`` (vision.tta, airbench's): eval mode with ``flip`` is the mean of the image's and its mirror's logits;
    training mode and ``none`` are the network's own; a bad name is refused."""
    torch.manual_seed(0)
    model = hub.create_model("residual_attention_micro_32", tta="flip").eval()
    x = torch.randn(3, 3, 32, 32)
    plain = model._logits(x), model._logits(x.flip(-1))
    torch.testing.assert_close(model(x), 0.5 * (plain[0] + plain[1]))
    model.tta = "none"
    torch.testing.assert_close(model(x), plain[0])
    with pytest.raises(DataError, match="tta must be one of"):
        hub.create_model("residual_attention_micro_32", tta="many")


class _ConstantMask(torch.nn.Module):
    def __init__(self, value: float):
        super().__init__()
        self.value = value

    def forward(self, x):
        return torch.full_like(x, self.value)


def test_attention_residual_learning_with_a_zero_mask_is_the_trunk():
    """(1 + M) * T with M = 0 is the trunk's output exactly; M * T (naive) with M = 1 is the same, and a mask in
    between scales the trunk's features, never zeroes them under residual learning."""
    from vision.models.residual_attention import AttentionModule

    torch.manual_seed(0)
    x = torch.randn(2, 16, 8, 8)
    for combine, constant in (("residual", 0.0), ("naive", 1.0)):
        module = AttentionModule(16, mask_depth=1, combine=combine).eval()
        trunk_only = module.post(module.trunk(module.pre(x)))
        module.mask = _ConstantMask(constant)
        torch.testing.assert_close(module(x), trunk_only)
    module = AttentionModule(16, mask_depth=1).eval()
    trunk = module.trunk(module.pre(x))
    mask = module.soft_mask(x)
    torch.testing.assert_close(module(x), module.post((1 + mask) * trunk))


def test_patchconvnet_pool_map_and_average_ablation():
    torch.manual_seed(0)
    model = hub.create_model("patchconvnet_micro_32").eval()
    maps = model.attention_maps(torch.randn(2, 3, 32, 32))
    assert maps["pool"].shape == (2, 1, 8, 8) and (maps["pool"] > 0).all()
    assert hub.create_model("patchconvnet_micro_32", pool="avg").attention_maps(torch.randn(1, 3, 32, 32)) == {}
    with pytest.raises(DataError, match="divide by its patch of 4"):
        model(torch.randn(1, 3, 30, 30))
    with pytest.raises(DataError, match="pool must be one of"):
        hub.create_model("patchconvnet_micro_32", pool="max")


@pytest.mark.parametrize("name, args, method", [
    ("patchconvnet_micro_32", {}, "learned aggregation"),
    ("residual_attention_micro_32", {"pool": "attention"}, "learned aggregation"),
    ("residual_attention_micro_32", {}, "soft mask of the last attention module"),
    ("residual_attention_micro_32", {"combine": "trunk"}, "Integrated Gradients")])
def test_seeded_vision_families_explain_with_their_own_attention(name, args, method):
    from vision.explain import image_explanation

    torch.manual_seed(0)
    found = image_explanation(hub.create_model(name, **args), torch.randn(1, 3, 32, 32))
    assert found.method.startswith(method) and found.values.shape == (32, 32)
    assert np.isfinite(found.values).all() and found.values.std() > 0


@pytest.mark.parametrize("family", ["airbench_cbam_micro_32", "airbench_halo_micro_32", "resnet_cbam_micro_32",
                                    "halonet_micro_32"])
def test_cnn_families_offer_the_attention_pool_head(family):
    """``global_pool="attention"`` puts PatchConvNet's learned aggregation in place of the family's pool: the logits
    and gradients go through it, a new classifier keeps it, and explain draws its class token's attention."""
    from hub.attention import AttentionPool
    from vision.explain import attention_map

    torch.manual_seed(0)
    model = hub.create_model(family, num_classes=3, global_pool="attention")
    pools = [m for m in model.modules() if isinstance(m, AttentionPool)]
    assert len(pools) == 1
    x = torch.randn(2, 3, 32, 32)
    model(x).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in pools[0].parameters())
    model.reset_classifier(5)
    assert [m for m in model.modules() if isinstance(m, AttentionPool)] == pools
    model.eval()
    assert model(x).shape == (2, 5)
    maps, method = attention_map(model, x)
    assert maps.shape == (2, 32, 32) and method.startswith("learned aggregation")
    with pytest.raises(DataError, match="global_pool must be"):
        hub.create_model(family, global_pool="gem")
