"""A run's predictor (hub.predictor): the choice among model, baseline and blend uses the validation split alone
(a trap whose test split favours the baseline), ties go to the model; a table run whose baseline wins predicts
with the baseline, a forced blend predicts the blend; the saved baseline is refused when tampered with or when it
holds a type outside the kind's allow-list; publish carries the baseline file and its sha256."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import hub
from hub.errors import HubError
from hub.kinds import PredictorData
from hub.predictor import choose, load_skops, predictor_entry
from hub.weights import sha256_bytes

FAST = ["trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress"]


def _data(labels_val, labels_test, model_val, model_test, baseline_val, baseline_test, task="classification"):
    return PredictorData(task, {"val": np.asarray(labels_val), "test": np.asarray(labels_test)},
                         {"val": np.asarray(model_val), "test": np.asarray(model_test)},
                         {"val": np.asarray(baseline_val), "test": np.asarray(baseline_test)},
                         save=lambda run_dir: Path(run_dir))


def test_choice_uses_the_validation_split_only():
    right, wrong = [[0.8, 0.2], [0.3, 0.7]], [[0.3, 0.7], [0.8, 0.2]]  # for labels [0, 1]
    # validation favours the model, test favours the baseline: a choice that saw the test labels would take it
    data = _data([0, 1], [0, 1], right, wrong, wrong, right)
    entry = predictor_entry(data)
    assert entry["chosen"] == "model" and entry["weight"] == 1.0 and entry["metric"] == "val/acc"
    assert entry["validation"]["model"] == 1.0 and entry["validation"]["baseline"] == 0.0
    assert entry["test"]["baseline"]["test/acc"] == 1.0 and entry["test"]["chosen"]["test/acc"] == 0.0
    # the mirror image: validation favours the baseline, the baseline is kept
    assert predictor_entry(_data([0, 1], [0, 1], wrong, right, right, wrong))["chosen"] == "baseline"
    # regression: the same trap on RMSE
    data = _data([0.0, 1.0], [0.0, 1.0], [0.0, 1.0], [5.0, -4.0], [5.0, -4.0], [0.0, 1.0], task="regression")
    entry = predictor_entry(data)
    assert entry["chosen"] == "model" and entry["test"]["baseline"]["test/rmse"] == 0.0


def test_ties_go_to_the_model_and_a_forced_blend_takes_its_best_inner_weight():
    labels, outputs = np.array([0, 1, 1]), np.array([[0.9, 0.1], [0.2, 0.8], [0.4, 0.6]])
    tied = choose("classification", labels, outputs, outputs.copy())
    assert (tied.chosen, tied.weight) == ("model", 1.0)
    values, truth = np.array([1.0, 2.0, 3.0]), np.array([2.0, 3.0, 4.0])
    forced = choose("regression", truth, values, values + 2.0, asked="blend")  # the blend at 0.5 is exact
    assert (forced.chosen, forced.weight, forced.validation["blend"]) == ("blend", 0.5, 0.0)
    assert choose("regression", truth, values, values + 2.0).chosen == "blend"
    with pytest.raises(HubError, match="unknown predictor"):
        choose("regression", truth, values, values, asked="best")


def _finetune(tmp_path, frame, target, *extra):
    from hub.cli import main

    frame.to_csv(tmp_path / "my.csv", index=False)
    frame.drop(columns=target).head(9).to_csv(tmp_path / "rows.csv", index=False)
    assert main(["finetune", "mlp", "--data", str(tmp_path / "my.csv"), "--target", target, "--output-dir",
                 str(tmp_path / "runs"), *FAST, *extra]) == 0


def _predict(tmp_path, capsys, run):
    from hub.cli import main

    code = main(["predict", run, "--data", str(tmp_path / "rows.csv"), "--out", str(tmp_path / "preds.csv")])
    return code, capsys.readouterr()


def test_run_whose_baseline_wins_predicts_with_it_and_refuses_a_tampered_baseline(tmp_path, capsys):
    from hub.publish import publish
    from tabular.baselines import TRUSTED_TYPES
    from tabular.io import TabularPreprocessor, read_table

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300), "c": rng.choice(["u", "v"], 300)})
    frame["y"] = np.where(frame["a"] > 0.3, "high", "low")  # a step of one column: trees find it, 1 epoch does not
    _finetune(tmp_path, frame, "y", "optimizer.lr=1e-6")
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[1].split()[0])
    entry = json.loads((run / "metrics.json").read_text())["predictor"]
    assert entry["chosen"] == "baseline" and entry["weight"] == 0.0 and "predictor: baseline" in out
    assert entry["validation"]["baseline"] > entry["validation"]["model"]
    card = hub.model_card(str(run))
    assert card.predictor["baseline"] == {"name": "HistGradientBoosting", "file": "baseline.skops",
                                          "sha256": sha256_bytes((run / "baseline.skops").read_bytes())}
    code, _ = _predict(tmp_path, capsys, str(run))
    assert code == 0
    rows = list(csv.DictReader(open(tmp_path / "preds.csv")))
    assert list(rows[0]) == ["row", "prediction", "proba_high", "proba_low", "ood_score", "ood"] and len(rows) == 9
    estimator = load_skops(run / "baseline.skops", card.predictor["baseline"]["sha256"], TRUSTED_TYPES)
    pre = TabularPreprocessor.from_dict(card.input_spec["preprocessor"])
    expected = estimator.predict_proba(np.concatenate(pre.transform(read_table(tmp_path / "rows.csv")), 1))
    np.testing.assert_allclose([[float(r["proba_high"]), float(r["proba_low"])] for r in rows], expected, atol=1e-6)
    assert [r["prediction"] for r in rows] == np.where(frame["a"].head(9) > 0.3, "high", "low").tolist()

    # publish carries the baseline beside the weights, named after the tag, with its sha256
    card_path = publish([str(run)], "mlp.steps", dest=str(tmp_path / "shipped"))
    shipped = json.loads(card_path.read_text())["predictor"]["baseline"]
    assert shipped["file"] == "mlp.steps.baseline.skops"
    assert sha256_bytes((tmp_path / "shipped" / shipped["file"]).read_bytes()) == shipped["sha256"]

    # a type outside the allow-list is refused, naming it
    with pytest.raises(HubError, match="TreePredictor"):
        load_skops(run / "baseline.skops", card.predictor["baseline"]["sha256"], trusted=())
    # a tampered baseline is refused, naming the file and both hashes
    data = bytearray((run / "baseline.skops").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (run / "baseline.skops").write_bytes(bytes(data))
    code, captured = _predict(tmp_path, capsys, str(run))
    assert code == 2
    assert str(run / "baseline.skops") in captured.err and card.predictor["baseline"]["sha256"] in captured.err
    assert sha256_bytes(bytes(data)) in captured.err


def test_forced_blend_on_a_regression_predicts_the_blend(tmp_path, capsys):
    import torch

    from hub.kinds import baseline_outputs, predict_logits

    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300)})
    frame["score"] = frame["a"] * 2.5 + 0.25 * frame["b"] + 0.1
    _finetune(tmp_path, frame, "score", "--predictor", "blend")
    run = capsys.readouterr().out.split("run folder: ")[1].split()[0]
    entry = json.loads((Path(run) / "metrics.json").read_text())["predictor"]
    assert entry["chosen"] == "blend" and 0 < entry["weight"] < 1 and entry["metric"] == "val/rmse"
    assert set(entry["test"]) == {"model", "baseline", "blend", "chosen"}
    assert _predict(tmp_path, capsys, run)[0] == 0
    rows = list(csv.DictReader(open(tmp_path / "preds.csv")))
    model = hub.load(run)
    with torch.inference_mode():
        mine = torch.cat([o for _, o in predict_logits(model.pretrained_cfg, model, [tmp_path / "rows.csv"], 256)])
    theirs = baseline_outputs(model.pretrained_cfg, tmp_path / "rows.csv")
    expected = entry["weight"] * mine.reshape(-1).numpy() + (1 - entry["weight"]) * theirs
    np.testing.assert_allclose([float(r["score"]) for r in rows], expected, rtol=1e-4, atol=1e-4)
