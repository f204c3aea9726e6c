"""Medical fine-tuning runs end to end on synthetic survival tables and ICU records (no dataset): tags and bare
families through the CLI, then predict (an ICU run's predictor: its logistic regression, or the blend)."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import hub
import hub.kinds
from hub.cli import main
from hub.run.evaluate import evaluate
from tests.integration.test_predictor_runs import _tamper
from tests.unit.test_medical import _icu_folder, _user_survival_table

ICU_FAST = ["trainer.max_epochs=2", "trainer.accelerator=cpu"]


def test_cli_finetune_on_a_survival_table_with_its_own_column_names(tmp_path, capsys):
    """``attnhub finetune survival_fusion.metabric --data my.csv --time T --event E --genes a,b,c,d``."""
    card = hub.model_card("survival_fusion.metabric")
    generator = np.random.default_rng(0)
    header = ["T", "E", "a", "b", "c", "d", *card.input_spec["clinical"]]
    rows = [[f"{generator.exponential(100):.1f}", str(i % 2), *[f"{v:.3f}" for v in generator.normal(size=9)]]
            for i in range(80)]
    (tmp_path / "my.csv").write_text("\n".join(",".join(r) for r in [header, *rows]) + "\n")
    common = ["finetune", "survival_fusion.metabric", "--data", str(tmp_path / "my.csv"), "--time", "T", "--event", "E",
              "--output-dir", str(tmp_path / "runs"), "--no-progress", "--policy", "full", "--cv-folds", "0",
              "trainer.max_epochs=1"]
    assert main(common + ["--genes", "a, b,c,d"]) == 0  # spaces after the commas are dropped
    (run,) = (tmp_path / "runs").glob("*/*")  # one policy: one run folder
    tuned = hub.model_card(str(run))
    assert tuned.input_spec["genes"] == ["a", "b", "c", "d"] and tuned.data["args"]["rank_weight"] == 8.0
    assert main(common + ["--genes", "a,b"]) == 2  # the card takes 4 genes
    assert "the model takes 4 gene columns" in capsys.readouterr().err
    assert main(["finetune", "vit_digits.sklearn", "--data", str(tmp_path), "--time", "T"]) == 2
    assert "--time do not apply" in capsys.readouterr().err


def test_cli_finetune_bare_survival_family_on_a_user_table_then_predict(tmp_path, capsys):
    """``attnhub finetune survival_fusion --data t.csv --time week --event arrest``: no genes, a categorical column,
    CoxPH beside it; the run predicts on rows with a category it never saw."""
    table = _user_survival_table(tmp_path / "t.csv")
    assert main(["finetune", "survival_fusion", "--data", table, "--time", "week", "--event", "arrest",
                 "--output-dir", str(tmp_path / "runs"), "trainer.max_epochs=1", "trainer.accelerator=cpu",
                 "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "CoxPH on the same split: test/cindex" in out
    run = Path(out.split("run folder: ")[1].split()[0])
    kept = json.loads((run / "metrics.json").read_text())["baseline"]
    assert kept["name"] == "CoxPH" and kept["metric"] == "test/cindex" and set(kept["test"]) == {
        "test/cindex", "test/uno_c"}
    verdict = "the model is at least as good as CoxPH" if kept["model_is_better"] else "WARNING: CoxPH beats the model"
    assert verdict in out
    rows = list(csv.DictReader(open(run / kept["predictions"])))
    assert list(rows[0]) == ["time", "event", "risk"] and len(rows) == 48  # 20% of 240 patients
    card = hub.model_card(str(run))
    assert card.model_args["num_genes"] == 0 and card.model_args["num_clinical"] == 4
    assert card.input_spec["clinical"] == ["age", "stage=I", "stage=II", "stage=III"]
    assert card.input_spec["categories"] == {"stage": ["I", "II", "III"]}
    (tmp_path / "new.csv").write_text("id,age,stage\na,70,III\nb,50,IV\n")  # IV: no indicator is set
    assert main(["predict", str(run), str(tmp_path / "new.csv"), "--out", str(tmp_path / "risk.csv")]) == 0
    assert [r["file"] for r in csv.DictReader(open(tmp_path / "risk.csv"))] == ["a", "b"]


@pytest.mark.parametrize("family", ["tfcam", "icu_gru"])
def test_cli_trains_an_icu_family_from_scratch_on_a_folder_of_records(tmp_path, capsys, family):
    """``attnhub finetune tfcam --data FOLDER``: the stays' own three variables define the input; the logistic
    regression on stay summaries is fitted on the same split and kept beside the run's metrics."""
    folder = _icu_folder(tmp_path / "stays")
    assert main(["finetune", family, "--data", str(folder), "--output-dir", str(tmp_path / "runs"), "--cv-folds", "0",
                 "trainer.max_epochs=2", "trainer.accelerator=cpu", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "LogisticRegression on the same split: test/auroc" in out
    run = Path(out.split("run folder: ")[1].split()[0])
    summary = json.loads((run / "metrics.json").read_text())
    kept = summary["baseline"]
    assert kept["name"] == "LogisticRegression" and kept["metric"] == "test/auroc"
    assert kept["test"]["test/auroc"] > 0.9  # the label is in the lactate level
    # the metrics kept are those of the run's weights on its test split, evaluated again
    assert evaluate(str(run), progress=False)["test/auroc"] == pytest.approx(summary["test"]["test/auroc"], abs=1e-6)
    rows = list(csv.DictReader(open(run / kept["predictions"])))
    assert len(rows) == 12 and {r["id"] for r in rows} <= {str(140000 + i) for i in range(60)}  # 20% of 60
    card = hub.model_card(str(run))
    assert card.input_spec["variables"] == ["HR", "Lactate", "MAP"] and card.input_spec["hours"] == 48
    assert card.model_args["num_variables"] == 3 and card.data["sizes"] == [42, 6, 12]
    inputs = hub.transforms(str(run))(folder / "140003.txt")
    assert inputs["values"].shape == (48, 3) and inputs["mask"].sum() == 18


def test_tag_finetune_on_icu_records_drops_and_reports_unknown_variables(tmp_path, caplog):
    """``attnhub finetune tfcam.physionet2012 --data FOLDER`` on stays with a parameter the card does not know:
    the card's 37 variables stay the input, the unknown one is dropped and listed in the run's card. The folder's
    In-hospital_death is the card's outcome under the card's class names, so the tag's classifier is kept (trained
    fresh, a linear probe from it scored 0.655 test AUROC on PhysioNet's fold 0 against 0.744 for the tag as is)."""
    from hub.finetune import finetune

    folder = _icu_folder(tmp_path / "stays", n=40, variables=("HR", "MeanBP", "Lactate"))
    run, entry = finetune("tfcam.physionet2012", str(folder), ["trainer.max_epochs=1", "trainer.accelerator=cpu"],
                          str(tmp_path / "runs"), progress=False, policy="full", cv_folds=0)
    card = hub.model_card(str(run))
    assert card.data["unknown_variables_dropped"] == ["MeanBP"]
    assert "MAP" in card.data["variables_never_observed"] and "HR" not in card.data["variables_never_observed"]
    assert card.model_args["num_variables"] == 37 and len(card.input_spec["variables"]) == 37
    assert entry["name"] == "LogisticRegression"
    assert json.loads((run / "metrics.json").read_text())["policy"]["chosen"] == "full"
    assert card.label_names == ["survived", "died"] and "trained fresh" not in caplog.text


def _predicted_probabilities(path: Path, classes: list[str]) -> np.ndarray:
    """The probabilities (files, classes) in the card's class order of a ``predict --out`` CSV of a classifier."""
    rows = list(csv.DictReader(open(path)))
    return np.array([[float(next(r[f"prob_{i}"] for i in range(1, len(classes) + 1) if r[f"class_{i}"] == c))
                      for c in classes] for r in rows])


def _pipeline_probabilities(run: Path, records: list[str]) -> np.ndarray:
    """The run's kept logistic regression (loaded through its allow-list) on the records' features (N, 2)."""
    from hub.predictor import load_skops
    from medical.baselines import ICU_TRUSTED_TYPES, stay_features
    from medical.icu_data import read_record

    card = hub.model_card(str(run))
    pipeline = load_skops(run / "baseline.skops", card.predictor["baseline"]["sha256"], ICU_TRUSTED_TYPES)
    spec = card.input_spec
    means, static_raw = zip(*(read_record(r, spec["variables"], spec["hours"]) for r in records))
    return pipeline.predict_proba(stay_features(np.stack(means), np.stack(static_raw), spec))


def test_icu_run_predicting_with_its_logistic_regression_refuses_it_tampered(tmp_path, capsys):
    """``finetune tfcam --data FOLDER --predictor baseline``: predict answers with the kept pipeline on the record
    files' features, as in training (the test stays' probabilities of baseline_predictions.csv); export refuses the
    predictor naming --model-only; a tampered baseline.skops is refused."""
    folder = _icu_folder(tmp_path / "stays")
    assert main(["finetune", "tfcam", "--data", str(folder), "--output-dir", str(tmp_path / "runs"), "--predictor",
                 "baseline", "--cv-folds", "0", "--no-progress", *ICU_FAST]) == 0
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[1].split()[0])
    entry, card = json.loads((run / "metrics.json").read_text())["predictor"], hub.model_card(str(run))
    assert entry["asked"] == entry["chosen"] == card.predictor["chosen"] == "baseline" and entry["weight"] == 0.0
    assert card.predictor["baseline"]["name"] == "LogisticRegression" and entry["metric"] == "val/nll"
    assert card.predictor["baseline"]["file"] == "baseline.skops" and "predictor: baseline" in out
    kept = {r["id"]: r for r in csv.DictReader(open(run / "baseline_predictions.csv"))}  # the test stays
    ids = sorted(kept)[:2]
    records = [str(folder / f"{i}.txt") for i in ids]
    assert main(["predict", str(run), *records, "--out", str(tmp_path / "x.csv")]) == 0
    assert [r["file"] for r in csv.DictReader(open(tmp_path / "x.csv"))] == records
    got = _predicted_probabilities(tmp_path / "x.csv", card.label_names)
    np.testing.assert_allclose(got, [[float(kept[i][f"proba_{c}"]) for c in card.label_names] for i in ids], atol=1e-6)
    np.testing.assert_allclose(got, _pipeline_probabilities(run, records), atol=1e-6)
    capsys.readouterr()
    assert main(["export", str(run), "--format", "onnx", "--out", str(tmp_path / "export")]) == 2
    err = capsys.readouterr().err
    assert "LogisticRegression" in err and "--model-only" in err

    tampered = _tamper(run / "baseline.skops")
    assert main(["predict", str(run), *records]) == 2
    err = capsys.readouterr().err
    assert "sha256" in err and str(run / "baseline.skops") in err and tampered in err


def test_icu_blend_run_predicts_the_weighted_mean_of_model_and_logistic_regression(tmp_path):
    """``finetune(..., predictor="blend")``: predict gives ``w * model + (1 - w) * baseline`` of the calibrated
    probabilities."""
    from torch.utils.data import default_collate

    from hub.finetune import finetune

    folder = _icu_folder(tmp_path / "stays")
    run, _ = finetune("tfcam", str(folder), ICU_FAST, str(tmp_path / "runs"), progress=False, predictor="blend",
                      cv_folds=0)
    card = hub.model_card(str(run))
    weight = card.predictor["weight"]
    assert card.predictor["chosen"] == json.loads((run / "metrics.json").read_text())["predictor"]["chosen"] == "blend"
    assert 0 < weight < 1
    records = [str(folder / f"{140000 + i}.txt") for i in (1, 3, 6)]
    assert main(["predict", str(run), *records, "--out", str(tmp_path / "x.csv")]) == 0
    model = hub.load(str(run)).eval()
    with torch.inference_mode():
        logits = model(**default_collate([hub.transforms(str(run))(r) for r in records]))
    ours = (logits.double() / card.calibration.get("temperature", 1.0)).softmax(-1).numpy()
    expected = weight * ours + (1 - weight) * _pipeline_probabilities(run, records)
    np.testing.assert_allclose(_predicted_probabilities(tmp_path / "x.csv", card.label_names), expected, atol=1e-6)


def test_a_small_stays_folder_chooses_by_folds_and_refits_on_every_stay(tmp_path, capsys):
    """Issue 68 on ICU stays: below 5,000 stays the predictor is chosen on folds of the stays outside the test split
    (the logistic regression out of fold), then model and choice are refitted on every stay; predict reads a record."""
    folder = _icu_folder(tmp_path / "stays")  # 60 stays: 42 train, 6 val, 12 test
    assert main(["finetune", "tfcam", "--data", str(folder), "--output-dir", str(tmp_path / "runs"), "--cv-folds", "3",
                 "--no-progress", *ICU_FAST]) == 0
    out = capsys.readouterr().out
    assert "3 fold runs of the model and one refit on every labelled item" in out
    run = Path(out.split("run folder: ")[-1].split()[0])
    entry = json.loads((run / "metrics.json").read_text())["predictor"]
    assert entry["selection"] == "cross-validation" and entry["folds"] == 3 and entry["items"] == 48
    assert hub.model_card(str(run)).data["sizes"] == [60, 6, 12]  # every stay trains
    assert main(["predict", str(run), str(folder / "140003.txt"), "--no-progress"]) == 0
