"""Table fine-tuning runs end to end on synthetic CSV files (no dataset): bare families, predict, the validated
predictor (model, baseline or blend)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import hub
from hub.core.weights import sha256_bytes
from hub.errors import HubError
from hub.predictor import load_skops
from tabular.io import TabularPreprocessor, read_table
from tests.unit.test_tabular import _frame

FAST = ["trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress"]


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


def test_cli_finetune_bare_family_on_unseen_csv_then_predict(tmp_path, capsys):
    from hub.cli import main

    frame = _frame(300).assign(y=lambda f: np.where(f["age"].fillna(40) > 40, "high", "low"))
    frame.to_csv(tmp_path / "my.csv", index=False)
    frame.drop(columns="y").head(7).to_csv(tmp_path / "rows.csv", index=False)
    assert main(["finetune", "mlp", "--data", str(tmp_path / "my.csv"), "--target", "y", "--output-dir",
                 str(tmp_path / "runs"), "trainer.max_epochs=2", "trainer.accelerator=cpu", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "test/auroc" in out and "HistGradientBoosting on the same split: test/acc" in out
    run = out.split("run folder: ")[1].split()[0]
    kept = json.loads((Path(run) / "metrics.json").read_text())["baseline"]
    assert kept["name"] == "HistGradientBoosting" and kept["metric"] == "test/acc"
    verdict = "is at least as good as HistGradientBoosting" if kept["model_is_better"] else "WARNING: HistGradient"
    assert verdict in out
    baseline_rows = list(csv.DictReader(open(Path(run) / kept["predictions"])))
    assert list(baseline_rows[0]) == ["target", "prediction", "proba_high", "proba_low"]
    accuracy = np.mean([r["target"] == r["prediction"] for r in baseline_rows])
    assert abs(accuracy - kept["test"]["test/acc"]) < 1e-9
    assert main(["predict", run, "--data", str(tmp_path / "rows.csv"), "--out", str(tmp_path / "preds.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "preds.csv")))
    assert len(rows) == 7 and list(rows[0]) == ["row", "prediction", "proba_high", "proba_low", "ood_score", "ood"]
    assert all(abs(float(r["proba_high"]) + float(r["proba_low"]) - 1) < 1e-5 for r in rows)
    assert main(["finetune", "mlp", "--data", str(tmp_path / "my.csv"), "--target", "nope"]) == 2
    assert "target column 'nope' is not in the table" in capsys.readouterr().err


def test_regression_run_names_its_output_after_the_target(tmp_path, capsys):
    from hub.cli import main

    frame = _frame(300).assign(score=lambda f: f["age"].fillna(40) * 1.5 + 0.25)  # not whole numbers: regression
    frame.to_csv(tmp_path / "my.csv", index=False)
    frame.drop(columns="score").head(4).to_csv(tmp_path / "rows.csv", index=False)
    assert main(["finetune", "mlp", "--data", str(tmp_path / "my.csv"), "--target", "score", "--output-dir",
                 str(tmp_path / "runs"), "trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress"]) == 0
    run = capsys.readouterr().out.split("run folder: ")[1].split()[0]
    assert hub.model_card(run).output_names == ["score"]
    assert main(["predict", run, "--data", str(tmp_path / "rows.csv"), "--out", str(tmp_path / "preds.csv")]) == 0
    rows = list(csv.reader(open(tmp_path / "preds.csv")))
    assert rows[0] == ["row", "score", "score_lower_90", "score_upper_90", "ood_score", "ood"] and len(rows) == 5


def test_run_whose_baseline_wins_predicts_with_it_and_refuses_a_tampered_baseline(tmp_path, capsys):
    from hub.deploy.publish import publish
    from tabular.baselines import TRUSTED_TYPES

    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300), "c": rng.choice(["u", "v"], 300)})
    frame["y"] = np.where(frame["a"] > 0.3, "high", "low")  # a step of one column: trees find it, 1 epoch does not
    _finetune(tmp_path, frame, "y", "optimizer.lr=1e-6")
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[1].split()[0])
    entry = json.loads((run / "metrics.json").read_text())["predictor"]
    assert entry["chosen"] == "baseline" and entry["weight"] == 0.0 and "predictor: baseline" in out
    # 300 rows: chosen by 5-fold cross-validation and refitted on every row (issue 68)
    assert entry["metric"] == "cv/nll" and entry["selection"] == "cross-validation"
    assert entry["validation"]["baseline"] < entry["validation"]["model"]
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

    from hub.kinds import baseline_outputs, predict_logits

    rng = np.random.default_rng(1)
    frame = pd.DataFrame({"a": rng.normal(size=300), "b": rng.normal(size=300)})
    frame["score"] = frame["a"] * 2.5 + 0.25 * frame["b"] + 0.1
    _finetune(tmp_path, frame, "score", "--predictor", "blend")
    run = capsys.readouterr().out.split("run folder: ")[1].split()[0]
    entry = json.loads((Path(run) / "metrics.json").read_text())["predictor"]
    assert entry["chosen"] == "blend" and 0 < entry["weight"] < 1 and entry["metric"] == "cv/rmse"
    assert set(entry["test"]) == {"model", "baseline", "blend", "chosen"}
    assert _predict(tmp_path, capsys, run)[0] == 0
    rows = list(csv.DictReader(open(tmp_path / "preds.csv")))
    model = hub.load(run)
    with torch.inference_mode():
        mine = torch.cat([o for _, o in predict_logits(model.pretrained_cfg, model, [tmp_path / "rows.csv"], 256)])
    theirs = baseline_outputs(model.pretrained_cfg, tmp_path / "rows.csv")
    expected = entry["weight"] * mine.reshape(-1).numpy() + (1 - entry["weight"]) * theirs
    np.testing.assert_allclose([float(r["score"]) for r in rows], expected, rtol=1e-4, atol=1e-4)


def test_cli_finetune_carte_on_a_csv_of_strings_numbers_and_empty_cells_then_predict_and_explain(tmp_path, capsys):
    """``attnhub finetune carte --data my.csv --target COL`` (issue 67): CARTE's row graphs of any CSV, a few
    pretraining steps on the background tables, the skrub + HistGradientBoosting baseline beside it, predictions
    with OOD flags on raw rows, the cells' attention as the explanation."""
    from hub.cli import main

    rng = np.random.default_rng(0)
    grapes = rng.choice(["merlot", "pinot noir", "riesling", "syrah"], 240)
    frame = pd.DataFrame({"wine_name": [f"Chateau {g} {y}" for g, y in zip(grapes, rng.integers(2000, 2020, 240))],
                          "grape": grapes, "abv": rng.normal(13, 1, 240).round(1), "country": rng.choice(
                              ["France", "Italy", None], 240)})
    frame["price"] = (frame["abv"] - 13) * 0.3 + np.where(frame["grape"] == "pinot noir", 1.0, 0.0) + 2.5
    frame.loc[[3, 7], "abv"] = np.nan
    frame.to_csv(tmp_path / "my.csv", index=False)
    frame.drop(columns="price").head(5).to_csv(tmp_path / "rows.csv", index=False)
    assert main(["finetune", "carte", "--data", str(tmp_path / "my.csv"), "--target", "price", "--output-dir",
                 str(tmp_path / "runs"), "data.args.pretrain_steps=3", "data.args.embedder=char-ngram-hash",
                 "trainer.max_epochs=2", "trainer.accelerator=cpu", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "skrub TableVectorizer + HistGradientBoosting on the same split: test/rmse" in out
    run = out.split("run folder: ")[1].split()[0]
    card = hub.model_card(run)
    assert card.input_spec["kind"] == "carte_table"
    assert card.input_spec["preprocessor"]["embedder"] == "char-ngram-hash"
    assert card.data["pretrain"]["steps"] == 3 and "breast_cancer" in card.data["pretrain"]["tables"]
    assert main(["predict", run, "--data", str(tmp_path / "rows.csv"), "--out", str(tmp_path / "preds.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "preds.csv")))
    assert len(rows) == 5 and list(rows[0])[:2] == ["row", "price"] and "ood" in rows[0]
    assert all(np.isfinite(float(r["price"])) for r in rows)
    assert main(["explain", run, "1", "--data", str(tmp_path / "rows.csv"), "--out", str(tmp_path / "ex")]) == 0
    record = json.loads(next((tmp_path / "ex").glob("*.json")).read_text())
    assert "centre node" in record["method"] and record["shape"] == [4]
