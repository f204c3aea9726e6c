"""Temperature scaling, calibration error and the trust score (hub.uncertainty.calibration), and `attnhub calibrate`."""
import csv
import json
import shutil

import numpy as np
import torch

import hub
from hub.cli import main
from hub.uncertainty.calibration import TrustScore, calibration_error, choose_temperature, fit_temperature


def test_fit_temperature_recovers_the_temperature_that_made_the_labels():
    generator = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(8000, 5, generator=generator)
    labels = torch.multinomial((logits / 2.5).softmax(1), 1, generator=generator).squeeze(1)  # the truth is T = 2.5
    temperature = fit_temperature(logits, labels)
    assert abs(temperature - 2.5) < 0.15
    assert (calibration_error((logits / temperature).softmax(1), labels)
            < 0.5 * calibration_error(logits.softmax(1), labels))


def _ece_raising_logits():
    """Two-class logits and labels whose NLL-fitted temperature raises the expected calibration error: 900 items at
    margin 4, all right (confidence 0.98: a little underconfident), and 100 at margin 8, 60% right (confidence
    0.9997: far overconfident). Softening for the second group's sake (T about 1.7) makes the first group's 0.98
    fall to about 0.91 while it stays 100% right."""
    logits = torch.zeros(1000, 2)
    logits[:900, 0], logits[900:, 0] = 4.0, 8.0
    labels = torch.zeros(1000, dtype=torch.long)
    labels[900:940] = 1
    return logits, labels


def test_the_temperature_rule_rejects_a_fitted_temperature_that_raises_validation_ece():
    logits, labels = _ece_raising_logits()
    fitted = fit_temperature(logits, labels)
    assert fitted > 1.2  # NLL asks for softer probabilities ...
    assert calibration_error((logits / fitted).softmax(1), labels) > calibration_error(logits.softmax(1), labels)
    assert choose_temperature(logits, labels) == (1.0, {"rejected_temperature": fitted})  # ... and ECE says no
    generator = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(4000, 5, generator=generator)
    labels = torch.multinomial((logits / 2.5).softmax(1), 1, generator=generator).squeeze(1)
    assert choose_temperature(logits, labels) == (fit_temperature(logits, labels), {})  # a temperature that helps


def test_calibrate_keeps_the_temperature_rule_of_training(tmp_path, monkeypatch):
    """`attnhub calibrate` decides the temperature by the rule the end of training uses
    (:func:`hub.uncertainty.conformal.fit_temperature_figures`): on logits whose fitted temperature raises the
    validation ECE it keeps 1.0 in the run's card and records the rejected one. Trains nothing and reads no data:
    the model's outputs are the synthetic logits."""
    import hub.models
    import hub.recipe
    from hub.uncertainty import calibration
    from hub.uncertainty.conformal import fit_temperature_figures

    logits, labels = _ece_raising_logits()
    card = hub.model_card("vit_digits.sklearn")
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(card.local_file.with_suffix(".json"), run / "card.json")
    data = type("Data", (), {"setup": lambda self, stage: None, "val_dataloader": lambda self: "val",
                             "test_dataloader": lambda self: "test"})()
    monkeypatch.setattr(hub.recipe, "card_data", lambda card, overrides=None: data)
    monkeypatch.setattr(hub.models, "load_from_card", lambda card: torch.nn.Identity())
    monkeypatch.setattr(calibration, "model_outputs", lambda model, loader, split, progress=True: (
        logits, logits, labels))
    result = calibration.calibrate(str(run), progress=False)
    training = fit_temperature_figures(logits, labels, logits, labels)
    assert result["temperature"] == training["temperature"] == 1.0
    assert result["rejected_temperature"] == training["rejected_temperature"] > 1.2
    assert result["test_ece_calibrated"] == result["test_ece"]  # nothing applied, nothing changed
    kept = json.loads((run / "card.json").read_text())["calibration"]
    assert kept["temperature"] == 1.0 and kept["rejected_temperature"] == result["rejected_temperature"]


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
