"""``hub.transforms(name)``: the preprocessing a tag's weights expect, from the public raw form of its data.
Raw data through it reproduces the card's test metric (of the shipped weights: the card's first seed)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import hub
from hub.errors import DataError


def assert_reproduces(card, metric: str, value: float, tolerance: float = 1e-3) -> None:
    """``value`` of ``metric`` equals the shipped weights' test metric (the card's first value) within the card's
    std over seeds, or ``tolerance`` when that is smaller."""
    shipped, std = card.metrics[metric]["values"][0], card.metrics[metric]["std"]
    assert abs(value - shipped) <= max(std, tolerance), f"{card.name} {metric}: {value:.4f} vs card {shipped:.4f}"


def test_raw_digit_images_reproduce_the_vit_digits_card():
    from sklearn.datasets import load_digits

    from hub.data import stratified_split

    name = "vit_digits.sklearn"
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    digits = load_digits()
    _, _, test = stratified_split(digits.target, (0.7, 0.1, 0.2), card.data["args"]["split_seed"])
    # the raw form: 8-bit grey images, as an image file holds them (load_digits' 0-16 counts scaled to 0-255)
    images = [np.round(digits.images[i] * 255 / 16).astype(np.uint8) for i in test]
    with torch.no_grad():
        predicted = model(torch.stack([prepare(image) for image in images])).argmax(1).numpy()
    assert_reproduces(card, "test/acc", float((predicted == digits.target[test]).mean()))


def test_image_transform_takes_files_pil_and_arrays_alike(tmp_path):
    from PIL import Image

    prepare = hub.transforms("vit_digits.sklearn")
    array = np.random.default_rng(0).integers(0, 256, (16, 16), dtype=np.uint8)  # another size: resized
    Image.fromarray(array).save(tmp_path / "x.png")
    from_file, from_pil, from_array = (prepare(x) for x in (tmp_path / "x.png", Image.fromarray(array), array))
    assert from_file.shape == (1, 8, 8) and torch.equal(from_file, from_pil) and torch.equal(from_pil, from_array)
    assert torch.allclose(prepare(np.full((8, 8), 255, np.uint8)), torch.ones(1, 8, 8))  # (1 - 0.5) / 0.5
    with pytest.raises(DataError, match="uint8"):
        prepare(np.zeros((8, 8), np.float32))
    with pytest.raises(DataError, match="got list"):
        prepare([[0]])
