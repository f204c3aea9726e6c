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


def test_audio_transform_takes_files_and_waveform_pairs_alike(tmp_path):
    import soundfile

    prepare = hub.transforms("ast_tiny.fsdd")
    wave = np.clip(0.1 * np.random.default_rng(0).standard_normal(4000), -1, 1).astype(np.float32)  # 0.5 s at 8 kHz
    soundfile.write(tmp_path / "x.wav", wave, 8000, subtype="FLOAT")
    from_file = prepare(tmp_path / "x.wav")
    assert from_file.shape == (128, 64) and torch.isfinite(from_file).all()  # (num_mel_bins, target_frames)
    assert torch.equal(prepare(soundfile.read(tmp_path / "x.wav")), from_file)  # soundfile's (float64, rate) pair
    assert torch.equal(prepare((torch.from_numpy(wave), 8000)), from_file)
    assert torch.equal(prepare((np.stack([wave, wave], 1), 8000)), from_file)  # (samples, channels): averaged
    pcm = prepare((np.round(wave * 32767).astype(np.int16), 8000))  # integer PCM, scaled as soundfile reads it
    torch.testing.assert_close(pcm, from_file, atol=1e-2, rtol=0)
    with pytest.raises(DataError, match="sample rate .* positive integer"):
        prepare((wave, 0))
    with pytest.raises(DataError, match=r"audio file path or a \(waveform, sample_rate\) pair, got ndarray"):
        prepare(wave)
    with pytest.raises(DataError, match=r"\(samples,\) or \(samples, channels\) array.*shape \(2, 3, 4\)"):
        prepare((np.zeros((2, 3, 4), np.float32), 8000))
    with pytest.raises(DataError, match="the waveform is silent"):
        prepare((np.zeros(8000), 8000))


def test_graph_transform_row_normalises_as_the_training_did():
    from torch_geometric.data import Data

    name = "gat.cora"
    model, prepare = hub.load(name), hub.transforms(name)
    counts = torch.zeros(3, 1433)
    counts[0, :4], counts[1, 10], counts[2, [5, 7]] = 1.0, 3.0, 2.0  # bag-of-words counts, as Planetoid loads them
    edges = torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])
    inputs = prepare(Data(x=counts, edge_index=edges))
    assert sorted(inputs) == ["edge_index", "x"] and torch.equal(inputs["edge_index"], edges)
    x = inputs["x"].to_dense()  # sparse CSR: bag-of-words are mostly zero
    torch.testing.assert_close(x.sum(1), torch.ones(3))
    assert x[0, 0] == 0.25 and x[1, 10] == 1.0 and x[2, 5] == 0.5
    with torch.no_grad():
        assert model(**inputs).shape == (3, 7)
    with pytest.raises(DataError, match=r"node features x of shape \(num_nodes, 1433\), got \(3, 5\)"):
        prepare(Data(x=torch.ones(3, 5), edge_index=edges))
    with pytest.raises(DataError, match="torch_geometric Data graph.*got Tensor"):
        prepare(counts)


@pytest.mark.slow
def test_generated_scenes_as_image_arrays_reproduce_the_slot_autoencoder_card():
    """The shapes scenes are generated (``vision.shapes``): their raw form is the image as a file holds it, 8-bit
    RGB; the card's test split is its generated test scenes, scored in its batches with the slots' initial noise
    seeded per batch (:class:`vision.tasks.ObjectDiscoveryTask`)."""
    from vision.shapes import MultiShapes
    from vision.tasks import ForegroundARI

    name = "slot_autoencoder_micro_64.shapes"
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    args = card.data["args"]
    scenes, ari = MultiShapes(args["test_size"], "test"), ForegroundARI()
    for start in range(0, len(scenes), args["batch_size"]):
        batch = [scenes[i] for i in range(start, min(start + args["batch_size"], len(scenes)))]
        # (3, H, W) in [-1, 1] -> (H, W, 3) uint8, the scene as an image file holds it
        images = [np.round((image.permute(1, 2, 0).numpy() + 1) * 127.5).astype(np.uint8) for image, _ in batch]
        with torch.no_grad():
            out = model.autoencode(torch.stack([prepare(image) for image in images]),
                                   generator=torch.Generator().manual_seed(0))
        ari.update(out["masks"].argmax(1), torch.stack([mask for _, mask in batch]))
    assert_reproduces(card, "test/fg_ari", float(ari.compute()))
