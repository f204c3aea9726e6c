"""Temperature scaling, calibration error and the trust score (hub.calibration), and `attnhub calibrate`."""
import csv
import json
import shutil

import numpy as np
import torch

import hub
from hub.calibration import TrustScore, calibration_error, fit_temperature
from hub.cli import main


def test_fit_temperature_recovers_the_temperature_that_made_the_labels():
    generator = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(8000, 5, generator=generator)
    labels = torch.multinomial((logits / 2.5).softmax(1), 1, generator=generator).squeeze(1)  # the truth is T = 2.5
    temperature = fit_temperature(logits, labels)
    assert abs(temperature - 2.5) < 0.15
    assert (calibration_error((logits / temperature).softmax(1), labels)
            < 0.5 * calibration_error(logits.softmax(1), labels))


def test_trust_score_matches_brute_force_distances():
    rng = np.random.default_rng(0)
    reference, labels = rng.normal(size=(60, 4)), rng.integers(0, 3, 60)
    queries, predicted = rng.normal(size=(20, 4)), rng.integers(0, 3, 20)
    scores = TrustScore().fit(reference, labels).score(queries, predicted)
    distance = np.linalg.norm(queries[:, None] - reference[None], axis=-1)  # (20, 60)
    nearest = np.stack([distance[:, labels == c].min(1) for c in range(3)], 1)
    expected = [min(nearest[i, c] for c in range(3) if c != p) / nearest[i, p] for i, p in enumerate(predicted)]
    np.testing.assert_allclose(scores, expected, rtol=1e-9)


def test_trust_score_density_filter_drops_outliers():
    rng = np.random.default_rng(1)
    class0 = rng.normal(0, 0.1, size=(30, 2))
    class1 = np.vstack([rng.normal(5, 0.1, size=(30, 2)), [[0.5, 0.0]]])  # one class-1 outlier inside class 0
    reference, labels = np.vstack([class0, class1]), np.array([0] * 30 + [1] * 31)
    query = np.array([[0.45, 0.0]])
    plain = TrustScore().fit(reference, labels).score(query, np.array([0]))[0]
    filtered = TrustScore(alpha=0.05).fit(reference, labels).score(query, np.array([0]))[0]
    assert plain < 1 < filtered  # the outlier made class 0 look untrustworthy here


def _png(path, value):
    from PIL import Image

    Image.fromarray(np.full((8, 8), value, np.uint8), mode="L").save(path)
    return str(path)


def _top_probability(csv_path):
    return [float(row["prob_1"]) for row in csv.DictReader(open(csv_path))], \
        [row["class_1"] for row in csv.DictReader(open(csv_path))]


def test_calibrate_a_run_folder_then_predict_uses_the_temperature(tmp_path, capsys):
    card = hub.model_card("vit_digits.sklearn")
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(card.local_file, run / card.file)
    shutil.copy(card.local_file.with_suffix(".json"), run / "card.json")  # a run folder holding the same model
    assert main(["calibrate", str(run), "--no-progress"]) == 0
    report = capsys.readouterr().out
    assert "temperature:" in report and "test_ece_calibrated:" in report and "trust_score_auroc_for_correct:" in report
    calibration = json.loads((run / "card.json").read_text())["calibration"]
    assert calibration["temperature"] > 0 and calibration["temperature"] != 1.0
    assert calibration["val_nll_calibrated"] < calibration["val_nll"]  # the fitted temperature beats T = 1 where fitted
    assert calibration["trust_score_auroc_for_correct"] > 0.5  # the trust score ranks correct predictions higher

    files = [_png(tmp_path / f"{v}.png", v) for v in (0, 90, 200)]
    assert main(["predict", "vit_digits.sklearn", *files, "--out", str(tmp_path / "raw.csv"), "--no-progress"]) == 0
    assert main(["predict", str(run), *files, "--out", str(tmp_path / "cal.csv"), "--no-progress"]) == 0
    raw, raw_classes = _top_probability(tmp_path / "raw.csv")
    cal, cal_classes = _top_probability(tmp_path / "cal.csv")
    assert raw_classes == cal_classes  # temperature never changes the predicted class
    softer = calibration["temperature"] > 1
    assert all((c < r) == softer for r, c in zip(raw, cal) if 1e-4 < r < 1 - 1e-4)
