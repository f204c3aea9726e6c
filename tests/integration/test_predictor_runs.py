"""The validated predictor (hub.predictor) of the kinds beyond tables, end to end on tiny synthetic data (one epoch,
no dataset): a survival run and a RUL run whose baseline wins predict with it, and refuse it once tampered with;
publish carries CoxPH's arrays and reproduce chooses CoxPH again; a forced blend predicts the blend (survival: of
rank-normalised risks; images: of probabilities)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import hub
from hub.cli import main
from hub.core.weights import sha256_bytes
from hub.errors import HubError

FAST = ["trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress"]
FROZEN = ["optimizer.lr=1e-7"]  # one epoch that barely moves the model: the baseline wins


def _run_folder(out: str) -> Path:
    return Path(out.split("run folder: ")[1].split()[0])


def _survival_table(path: Path, noise: float, n: int = 300, seed: int = 0) -> pd.DataFrame:
    """Patients whose follow-up time falls with ``x1`` (exactly, without ``noise``; ``x2`` tells nothing), every
    event observed."""
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"x1": rng.normal(size=n), "x2": rng.normal(size=n)})
    frame["week"] = 20 * np.exp(-1.5 * frame["x1"] + noise * rng.normal(size=n))
    frame["arrest"] = 1
    frame.to_csv(path, index=False)
    return frame


def _sensor_folder(root: Path, units: int = 10, seed: int = 0) -> Path:
    """Run-to-failure units, a CSV each: ``temp`` falls linearly to failure (its last value tells the RUL),
    ``noise`` tells nothing."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True)
    for unit in range(units):
        cycles = int(rng.integers(45, 80))
        rul = np.arange(cycles - 1, -1, -1.0)
        pd.DataFrame({"cycle": np.arange(1, cycles + 1), "temp": 500 + 0.5 * rul,
                      "noise": rng.normal(10, 1, cycles)}).to_csv(root / f"engine_{unit}.csv", index=False)
    return root


def _tamper(path: Path) -> str:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return sha256_bytes(bytes(data))


def test_survival_run_whose_coxph_wins_predicts_with_it_and_refuses_it_tampered(tmp_path, capsys):
    from hub.deploy.publish import publish
    from hub.predictor import load_arrays
    from medical.baselines import COX_ARRAYS

    frame = _survival_table(tmp_path / "t.csv", noise=0.0)  # times in the order of x1: CoxPH's C is near 1
    frame[["x1", "x2"]].head(6).to_csv(tmp_path / "new.csv", index=False)
    assert main(["finetune", "deepsurv_mlp", "--data", str(tmp_path / "t.csv"), "--time", "week", "--event",
                 "arrest", "--output-dir", str(tmp_path / "runs"), "--cv-folds", "0", *FAST, *FROZEN]) == 0
    out = capsys.readouterr().out
    run = _run_folder(out)
    entry = json.loads((run / "metrics.json").read_text())["predictor"]
    assert entry["chosen"] == "baseline" and entry["metric"] == "val/cindex" and "predictor: baseline" in out
    assert entry["validation"]["baseline"] > 0.95 > entry["validation"]["model"]
    card = hub.model_card(str(run))
    assert card.predictor["baseline"] == {"name": "CoxPH", "file": "baseline.safetensors",
                                          "sha256": sha256_bytes((run / "baseline.safetensors").read_bytes())}
    assert main(["predict", str(run), str(tmp_path / "new.csv"), "--out", str(tmp_path / "risk.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "risk.csv")))
    assert list(rows[0])[:2] == ["file", "risk"] and len(rows) == 6
    arrays = load_arrays(run / "baseline.safetensors", card.predictor["baseline"]["sha256"], COX_ARRAYS)
    z = (frame[["x1", "x2"]].head(6).to_numpy() - card.input_spec["mean"]) / card.input_spec["std"]
    expected = z @ arrays["coef"]  # CoxPH's linear predictor on the standardised covariates
    np.testing.assert_allclose([float(r["risk"]) for r in rows], expected, rtol=1e-5, atol=1e-6)

    card_path = publish([str(run)], "deepsurv_mlp.steps", dest=str(tmp_path / "shipped"))
    shipped = json.loads(card_path.read_text())["predictor"]["baseline"]
    assert shipped["file"] == "deepsurv_mlp.steps.baseline.safetensors"
    assert sha256_bytes((tmp_path / "shipped" / shipped["file"]).read_bytes()) == shipped["sha256"]

    from hub.reproduction import reproduce  # the run retrained: CoxPH fitted again and chosen again, as on the card
    with pytest.raises(HubError, match=r"its publisher's own data \(data.args.path=<data>/t.csv\)"):
        reproduce(str(run), output_dir=str(tmp_path / "again"), progress=False)  # the card keeps no machine path
    report = reproduce(str(run), [0], [f"data.args.path={tmp_path / 't.csv'}"], str(tmp_path / "again"),
                       progress=False)
    assert report["card_predictor"] == "baseline" and report["runs"][0]["predictor"]["chosen"] == "baseline"
    again = report["metrics"]["predictor:test/cindex"]
    assert again["card"]["mean"] == entry["test"]["chosen"]["test/cindex"] and again["within"]
    assert report["all_within"]

    capsys.readouterr()  # CoxPH's rank-normalised blend has no exported form: export names it, --model-only works
    assert main(["export", str(run), "--format", "onnx", "--out", str(tmp_path / "onnx")]) == 2
    err = capsys.readouterr().err
    assert "the baseline of" in err and "(CoxPH, inputs of kind 'survival_table')" in err and "--model-only" in err
    assert main(["export", str(run), "--format", "onnx", "--out", str(tmp_path / "onnx"), "--model-only"]) == 0

    tampered = _tamper(run / "baseline.safetensors")
    capsys.readouterr()
    assert main(["predict", str(run), str(tmp_path / "new.csv")]) == 2
    err = capsys.readouterr().err
    assert str(run / "baseline.safetensors") in err and card.predictor["baseline"]["sha256"] in err
    assert tampered in err


def test_forced_survival_blend_predicts_the_blend_of_rank_normalised_risks(tmp_path, capsys):
    from hub.kinds import kind_of, predict_logits
    from hub.predictor import load_arrays
    from medical.baselines import ranked_blend

    frame = _survival_table(tmp_path / "t.csv", noise=0.5)
    frame[["x1", "x2"]].head(8).to_csv(tmp_path / "new.csv", index=False)
    assert main(["finetune", "deepsurv_mlp", "--data", str(tmp_path / "t.csv"), "--time", "week", "--event",
                 "arrest", "--output-dir", str(tmp_path / "runs"), "--predictor", "blend", *FAST]) == 0
    run = _run_folder(capsys.readouterr().out)
    entry = json.loads((run / "metrics.json").read_text())["predictor"]
    assert entry["chosen"] == "blend" and 0 < entry["weight"] < 1 and entry["weight"] == entry["blend_weight"]
    assert main(["predict", str(run), str(tmp_path / "new.csv"), "--out", str(tmp_path / "risk.csv")]) == 0
    got = [float(r["risk"]) for r in csv.DictReader(open(tmp_path / "risk.csv"))]
    model = hub.load(str(run))
    card = model.pretrained_cfg
    with torch.inference_mode():
        ((_, ours),) = list(predict_logits(card, model, [str(tmp_path / "new.csv")], 64))
    theirs = kind_of(card).baseline_outputs(card, str(tmp_path / "new.csv"))
    # a small table: chosen by folds (issue 68), the baseline CoxPH or the random survival forest
    arrays = load_arrays(run / "baseline.safetensors", card.predictor["baseline"]["sha256"],
                         ("model_reference", "baseline_reference"))
    expected = ranked_blend(arrays, entry["weight"], ours.double().numpy(), theirs.numpy())
    assert np.all((expected > 0) & (expected < 1))
    np.testing.assert_allclose(got, expected, atol=2e-6)


def test_rul_run_whose_baseline_wins_predicts_with_it_and_refuses_it_tampered(tmp_path, capsys):
    from hub.kinds import kind_of
    from hub.predictor import load_skops
    from timeseries.baselines import TRUSTED_TYPES, rul_forecast

    folder = _sensor_folder(tmp_path / "units", units=10)
    assert main(["finetune", "rul_attention", "--data", str(folder), "--output-dir", str(tmp_path / "runs"),
                 "--cv-folds", "0", *FAST, *FROZEN]) == 0
    out = capsys.readouterr().out
    run = _run_folder(out)
    entry = json.loads((run / "metrics.json").read_text())["predictor"]
    assert entry["chosen"] == "baseline" and entry["metric"] == "val/rmse" and "predictor: baseline" in out
    card = hub.model_card(str(run))
    assert card.predictor["baseline"]["file"] == "baseline.skops"
    units = [str(folder / "engine_0.csv"), str(folder / "engine_5.csv")]
    assert main(["predict", str(run), *units, "--out", str(tmp_path / "rul.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "rul.csv")))
    estimator = load_skops(run / "baseline.skops", card.predictor["baseline"]["sha256"], TRUSTED_TYPES)
    spec = card.input_spec
    windows = np.stack([kind_of(card).transform(card)(u).numpy() for u in units])
    expected = rul_forecast(estimator, windows, spec["horizon"], spec["rul_cap"])  # (2, horizon)
    names = ["rul", *(f"rul_plus_{h}" for h in range(1, spec["horizon"]))]
    np.testing.assert_allclose([[float(r[n]) for n in names] for r in rows], expected, atol=1e-4)
    assert float(rows[0]["rul"]) == pytest.approx(0.0, abs=2.0)  # the unit's last cycle: it failed there
    conformal = card.calibration["conformal"]  # the intervals are the baseline's, centred on its forecasts
    assert conformal["fitted_on"] == "validation split, residuals of the predictor (baseline)"
    assert len(conformal["half_width"]["0.9"]) == spec["horizon"]
    for row in rows:
        for name, widths, edges in zip(names, conformal["half_width"]["0.9"], conformal["bin_edges"]):
            width = widths[int(np.searchsorted(edges, float(row[name]), side="right"))]
            assert float(row[f"{name}_upper_90"]) - float(row[name]) == pytest.approx(width, abs=1e-4)

    tampered = _tamper(run / "baseline.skops")
    capsys.readouterr()
    assert main(["predict", str(run), *units]) == 2
    err = capsys.readouterr().err
    assert str(run / "baseline.skops") in err and tampered in err


def test_rul_units_choose_by_folds_of_whole_units_with_a_guard_and_refit_on_every_unit(tmp_path, capsys):
    """Issue 68 on RUL sensor units: the choice by 3 folds of whole units (each pooled unit validated in one fold
    run), the guard chosen on the folds' near shift (perturbed sensors, out of fold), the refit on every unit; its
    intervals are the chosen predictor's, fitted on the first run's held-out validation residuals, not the refit's
    in-sample ones; predict answers with the refit's predictor."""
    folder = _sensor_folder(tmp_path / "units", units=12)
    assert main(["finetune", "rul_attention", "--data", str(folder), "--output-dir", str(tmp_path / "runs"),
                 "--cv-folds", "3", *FAST, *FROZEN]) == 0
    out = capsys.readouterr().out
    run = _run_folder(out)
    entry = json.loads((run / "metrics.json").read_text())["predictor"]
    assert entry["selection"] == "cross-validation" and "chosen by 3-fold cross-validation" in out
    assert entry["chosen"] == "baseline"  # a model that barely moved: the regressor, out of fold too
    assert "guard" in entry  # chosen on the out-of-fold near shift (none: a chosen baseline is its own guard)
    card = hub.model_card(str(run))
    assert sorted(card.data["units"]["train"]) == list(range(12)) and "refit" in card.data["split"]
    validated = []
    for name in entry["refit"]["folds"]:
        fold = hub.model_card(str(run.parent / name)).data["units"]
        assert not set(fold["val"]) & set(fold["train"])
        validated += fold["val"]
    first = hub.model_card(str(run.parent / entry["refit"]["from"])).data["units"]
    assert sorted(validated) == sorted(first["train"] + first["val"])  # each pooled unit in one fold
    assert card.calibration["conformal"]["fitted_on"] == "validation split, residuals of the predictor (baseline)"
    assert main(["predict", str(run), str(folder / "engine_0.csv"), "--out", str(tmp_path / "rul.csv")]) == 0
    (row,) = list(csv.DictReader(open(tmp_path / "rul.csv")))
    assert float(row["rul"]) == pytest.approx(0.0, abs=2.0)  # the unit's last cycle: it failed there


def test_forced_image_blend_predicts_the_blend_of_probabilities(tmp_path, capsys):
    from PIL import Image

    from hub.classical import kept_linear, linear_probabilities
    from hub.deploy.predict import predicted_values
    from vision.baselines import pixels
    from vision.io import read_image

    rng = np.random.default_rng(0)
    for label, level in (("dark", 60), ("bright", 190)):
        (tmp_path / "imgs" / label).mkdir(parents=True)
        for i in range(30):
            image = np.clip(rng.normal(level, 40, (8, 8)), 0, 255).astype(np.uint8)
            Image.fromarray(image).save(tmp_path / "imgs" / label / f"{i}.png")
    assert main(["finetune", "vit_digits", "--data", str(tmp_path / "imgs"), "--output-dir", str(tmp_path / "runs"),
                 "--predictor", "blend", "--cv-folds", "0", *FAST]) == 0
    run = _run_folder(capsys.readouterr().out)
    weight = json.loads((run / "metrics.json").read_text())["predictor"]["weight"]
    files = [str(tmp_path / "imgs" / "dark" / "0.png"), str(tmp_path / "imgs" / "bright" / "0.png")]
    assert main(["predict", str(run), *files, "--top-k", "2", "--out", str(tmp_path / "p.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "p.csv")))
    model = hub.load(str(run))
    card = model.pretrained_cfg
    with torch.inference_mode():
        ours = predicted_values(model(torch.stack([read_image(f, card.input_spec) for f in files])), card).numpy()
    theirs = linear_probabilities(kept_linear(card), pixels([Path(f) for f in files], card.input_spec))
    expected = weight * ours + (1 - weight) * theirs
    got = np.array([[float(r["prob_1"]) if r["class_1"] == name else float(r["prob_2"]) for name in
                     card.label_names] for r in rows])
    np.testing.assert_allclose(got, expected, atol=2e-6)

    from hub.deploy.exporter import export, run_artefact  # the blend exports as one graph of its probabilities
    path = export(str(run), "onnx", tmp_path / "onnx")
    exported = run_artefact(path, {"x": torch.stack([read_image(f, card.input_spec) for f in files])}).numpy()
    np.testing.assert_allclose(exported, expected, atol=1e-5)
    assert json.loads((tmp_path / "onnx" / "preprocess.json").read_text())["predictor"] == "blend"
    alone = export(str(run), "onnx", tmp_path / "network", model_only=True)
    assert run_artefact(alone, {"x": torch.stack([read_image(f, card.input_spec) for f in files])}).shape == (2, 2)
    assert json.loads((tmp_path / "network" / "preprocess.json").read_text())["predictor"] == "model"
