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


def test_sensor_transform_scales_a_units_last_window_and_names_bad_rows():
    import pandas as pd

    card = hub.model_card("rul_attention.fd001")
    spec, prepare = card.input_spec, hub.transforms("rul_attention.fd001")
    rows = pd.DataFrame({"cycle": range(1, 41), **{s: [low] * 40 for s, low in zip(spec["sensors"], spec["min"])}})
    rows.loc[39, spec["sensors"]] = spec["max"]  # the last cycle at the training max: ones
    window = prepare(rows.assign(setting1=0.0))  # other columns are ignored
    assert window.shape == (30, 14) and window[:-1].abs().max() == 0 and torch.allclose(window[-1], torch.ones(14))
    with pytest.raises(DataError, match=r"lack the column\(s\) \['s21'\]"):
        prepare(rows.drop(columns="s21"))
    with pytest.raises(DataError, match="20 cycles, fewer than the model's window of 30"):
        prepare(rows[:20])
    with pytest.raises(DataError, match="'cycle' must go up by 1"):
        prepare(rows.iloc[::-1])


def test_traffic_transform_needs_timestamps_and_adds_the_time_of_day():
    import pandas as pd

    card = hub.model_card("testam.los_loop")
    mean, std, prepare = card.input_spec["mean"], card.input_spec["std"], hub.transforms("testam.los_loop")
    speeds = np.full((14, 207), 60.0)
    speeds[-1, 0] = np.nan  # a missing reading: 0 mph, as in training
    stamps = pd.date_range("2024-05-01 05:50", periods=14, freq="5min")  # the last 12 rows start at 06:00
    x = prepare(speeds, times=stamps)
    assert x.shape == (12, 207, 2) and x[0, 0, 1] == 0.25 and x[-1, 0, 1] == pytest.approx(0.25 + 11 / 288)
    assert x[0, 5, 0] == pytest.approx((60 - mean) / std) and x[-1, 0, 0] == pytest.approx(-mean / std)
    assert torch.equal(prepare(pd.DataFrame(speeds, index=stamps)), x)
    with pytest.raises(DataError, match="timestamps"):
        prepare(speeds)
    with pytest.raises(DataError, match="3 sensors but testam.los_loop takes 207"):
        prepare(speeds[:, :3], times=stamps)
    with pytest.raises(DataError, match="equally spaced"):
        prepare(speeds, times=stamps.append(stamps[-1:] + pd.Timedelta("5min")).delete(1))  # a gap


def test_survival_transform_standardises_rows_and_masks_empty_genes():
    import pandas as pd

    card = hub.model_card("survival_fusion.metabric")
    spec, prepare = card.input_spec, hub.transforms("survival_fusion.metabric")
    rows = pd.DataFrame([spec["mean"], [v + s for v, s in zip(spec["mean"], spec["std"])]],
                        columns=spec["genes"] + spec["clinical"])
    rows.loc[1, "EGFR"] = np.nan  # not measured for this patient
    inputs = prepare(rows.assign(time=1.0, event=1))
    assert torch.allclose(inputs["clinical"], torch.tensor([[0.0] * 5, [1.0] * 5]))
    assert inputs["genes"].tolist() == [[0.0] * 4, [1.0, 0.0, 1.0, 1.0]]
    assert inputs["gene_mask"].tolist() == [[True] * 4, [True, False, True, True]]
    with pytest.raises(DataError, match=r"expected an \(N, 9\) array"):
        prepare(np.zeros((2, 8)))
    with pytest.raises(DataError, match=r"missing columns \['age'\]"):
        prepare(rows.drop(columns="age"))


def test_icu_transform_reads_a_record_file_into_the_hourly_grid(tmp_path):
    from medical.icu_data import VARIABLES

    prepare = hub.transforms("tfcam.physionet2012")
    record = tmp_path / "140001.txt"
    record.write_text("Time,Parameter,Value\n00:00,RecordID,140001\n00:00,Age,70\n00:00,Gender,1\n00:00,Height,-1\n"
                      "00:00,ICUType,2\n00:00,Weight,80\n00:30,HR,100\n02:10,HR,80\n")
    inputs = prepare(record)
    hr = VARIABLES.index("HR")
    assert inputs["values"].shape == inputs["mask"].shape == (48, 37) and inputs["static"].shape == (9,)
    assert inputs["mask"][:, hr].nonzero().flatten().tolist() == [0, 2] and inputs["mask"].sum() == 2
    assert inputs["values"][1, hr] == inputs["values"][0, hr] != inputs["values"][2, hr]  # carried forward
    assert inputs["static"][4:].tolist() == [0, 1, 0, 0, 1]  # ICU type 2 one-hot, height missing
    (tmp_path / "other.txt").write_text("a,b\n1,2\n")
    with pytest.raises(DataError, match="expected a PhysioNet 2012 record"):
        prepare(tmp_path / "other.txt")
