"""Medical survival models: shapes, gradients, overfit, Cox losses by hand, missing modalities, user tables,
the shipped survival_fusion.metabric weight, the risk-group plot and a recipe smoke run."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

import hub
import hub.kinds
from hub.errors import DataError


def test_shipped_weight_reproduces_its_card():
    card = hub.model_card("survival_fusion.metabric")
    from hub.run.evaluate import evaluate

    measured = evaluate("survival_fusion.metabric", progress=False)
    assert measured["test/cindex"] == pytest.approx(card.metrics["test/cindex"]["values"][0], abs=1e-4)
    assert card.input_spec["genes"] == ["MKI67", "EGFR", "PGR", "ERBB2"]


@pytest.mark.parametrize("name", ["resnet_cbam_micro_32.breastmnist", "vit_micro_patch4_32.breastmnist",
                                  "coat_lite_micro_32.breastmnist"])
def test_shipped_breastmnist_classifiers_reproduce_their_cards_and_are_calibrated(name):
    from hub.run.evaluate import evaluate

    card = hub.model_card(name)
    measured = evaluate(name, progress=False)
    assert measured["test/auroc"] == pytest.approx(card.metrics["test/auroc"]["values"][0], abs=1e-4)
    assert card.label_names == ["malignant", "normal_or_benign"] and card.calibration["temperature"] > 0


@pytest.mark.slow
def test_recipe_smoke_run_and_report(repo, tmp_path):
    from hub.run.train import train
    from medical.survival_report import survival_report

    run = train(str(repo / "recipes" / "medical" / "survival_fusion_metabric.yaml"),
                ["trainer.max_epochs=2", f"output_dir={tmp_path}"], progress=False)
    summary = json.loads((run / "metrics.json").read_text())
    assert summary["test"]["test/cindex"] > 0.5  # ranks better than chance
    report = survival_report(str(run))
    # a survival of 0.5 at every time scores 0.25: below it, the model's survival curves say something
    assert (run / "risk_groups.png").is_file() and report["test"]["ibs"] < 0.25
    low, high = report["test"]["harrell_c_ci95"]
    assert low < report["test"]["harrell_c"] < high


def test_predict_risks_of_a_patient_csv_match_the_model(tmp_path, capsys):
    """Raw patient rows (unstandardised, a gene left blank, extra columns) -> the model's risks on the same
    standardised inputs; rows named by the id column."""
    from hub.cli import main
    from medical.survival_data import deepsurv_metabric

    card = hub.model_card("survival_fusion.metabric")
    data = deepsurv_metabric()
    data.setup()
    spec = card.input_spec
    rows = data.test_set
    raw = torch.cat([rows.genes * torch.tensor(spec["std"][:4]) + torch.tensor(spec["mean"][:4]),
                     rows.clinical * torch.tensor(spec["std"][4:]) + torch.tensor(spec["mean"][4:])], 1)[:20]
    header = ["id", *spec["genes"], *spec["clinical"], "time"]
    lines = [",".join(header)] + [",".join([f"p{i}", *[f"{v:.6f}" for v in raw[i].tolist()], "5"]) for i in range(20)]
    lines[1] = lines[1].replace(lines[1].split(",")[1], "", 1)  # patient p0: MKI67 not measured
    (tmp_path / "patients.csv").write_text("\n".join(lines) + "\n")
    assert main(["predict", "survival_fusion.metabric", str(tmp_path / "patients.csv"), "--out",
                 str(tmp_path / "risks.csv"), "--no-progress"]) == 0
    header, *printed = capsys.readouterr().out.strip().splitlines()
    assert header.split() == ["file", "risk", "ood_score", "ood"]
    assert (tmp_path / "risks.csv").read_text().startswith("file,risk,ood_score,ood\n")
    assert [line.split()[0] for line in printed] == [f"p{i}" for i in range(20)]
    # hub.uncertainty.ood: MKI67 was never empty in training, so p0's row looks unlike the training data
    assert printed[0].split()[-2:] == ["inf", "True"] and sum(line.endswith("True") for line in printed) <= 2
    model = hub.load("survival_fusion.metabric").eval()
    mask = torch.ones(20, 4, dtype=torch.bool)
    mask[0, 0] = False
    with torch.no_grad():
        expected = model(rows.clinical[:20], genes=rows.genes[:20] * mask, gene_mask=mask)
    got = torch.tensor([float(r.split(",")[1]) for r in (tmp_path / "risks.csv").read_text().splitlines()[1:]])
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    (tmp_path / "bad.csv").write_text("id,MKI67\np1,0.5\n")
    with pytest.raises(DataError, match=r"missing columns \['EGFR'"):
        list(hub.kinds.predict_logits(card, model, [str(tmp_path / "bad.csv")], 8))


def test_physionet2012_folds_are_disjoint_stratified_and_cached(tmp_path, monkeypatch):
    from medical.icu_data import physionet2012

    monkeypatch.setenv("HUB_CACHE", str(tmp_path))
    first = physionet2012(fold=1)
    first.setup()
    parts = first.split_index
    assert sum(len(p) for p in parts.values()) == 4000
    assert not set(parts["test"]) & set(parts["train"]) and not set(parts["val"]) & set(parts["train"])
    assert abs(float(first.test_set.y.float().mean()) - 0.1385) < 0.01
    assert list(tmp_path.glob("data/physionet2012-*.npz"))
    again = physionet2012(fold=1)
    again.setup()
    assert torch.equal(again.train_set.values, first.train_set.values)
    with pytest.raises(DataError, match="fold must be 0-4"):
        physionet2012(fold=5)


@pytest.mark.slow
def test_shipped_tfcam_reproduces_its_card():
    from hub.run.evaluate import evaluate

    card = hub.model_card("tfcam.physionet2012")
    measured = evaluate("tfcam.physionet2012", progress=False)
    assert measured["test/auroc"] == pytest.approx(card.metrics["test/auroc"]["values"][0], abs=1e-4)
    assert card.input_spec["kind"] == "icu_stays"


def test_icu_logistic_regression_baseline_on_a_run_split(tmp_path):
    """The ICU baseline on a run's PhysioNet 2012 split, rebuilt from its recipe.yaml (no model: no predictor data);
    summaries predict mortality."""
    from hub.recipe import load_recipe
    from hub.run.train import build_data
    from medical.baselines import logistic_regression_baseline

    (tmp_path / "recipe.yaml").write_text("model: {name: tfcam}\ndata: {name: physionet2012, args: {fold: 0}}\n")
    recipe = load_recipe(tmp_path / "recipe.yaml")
    result = logistic_regression_baseline(build_data(recipe), recipe.seed)
    assert result.predictor is None
    assert list(result.metrics)[0] == "test/auroc" and result.metrics["test/auroc"] > 0.8
    assert len(result.predictions["id"]) == 800 and set(result.predictions["target"]) == {"survived", "died"}


def test_shipped_tfcam_predicts_physionet_records_as_the_model_on_their_transforms(tmp_path):
    """``attnhub predict tfcam.physionet2012 set-a/132539.txt set-a/132540.txt``: the calibrated probabilities of the
    model on ``hub.transforms`` of the same files, and the OOD columns of the card's ``ood`` section."""
    import csv

    from torch.utils.data import default_collate

    from hub.cli import main
    from hub.data import data_dir
    from hub.errors import DatasetUnavailable

    records = [str(data_dir() / "physionet2012" / "set-a" / f"{i}.txt") for i in (132539, 132540)]
    if not all(map(os.path.isfile, records)):
        raise DatasetUnavailable("physionet2012", f"{records} not found (HUB_DATA_DIR)")
    assert main(["predict", "tfcam.physionet2012", *records, "--out", str(tmp_path / "x.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "x.csv")))
    assert [r["file"] for r in rows] == records and {"ood_score", "ood"} <= set(rows[0])
    model, card = hub.load("tfcam.physionet2012").eval(), hub.model_card("tfcam.physionet2012")
    with torch.inference_mode():
        logits = model(**default_collate([hub.transforms("tfcam.physionet2012")(r) for r in records]))
    expected = (logits.double() / card.calibration["temperature"]).softmax(-1).numpy()  # (2, 2)
    got = [[float(next(r[f"prob_{i}"] for i in (1, 2) if r[f"class_{i}"] == c)) for c in card.label_names]
           for r in rows]
    np.testing.assert_allclose(got, expected, atol=1e-6)


def test_shipped_biofusionnet_tag_reproduces_its_card_and_says_it_is_a_stand_in():
    from hub.run.evaluate import evaluate

    card = hub.model_card("biofusionnet.gse7390")
    measured = evaluate("biofusionnet.gse7390", progress=False)
    assert measured["test/cindex"] == pytest.approx(card.metrics["test/cindex"]["values"][0], abs=1e-4)
    assert "STAND-IN DATA" in card.notes and "TCGA" in card.data["stand_in"]
