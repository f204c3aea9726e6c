"""Calibrated probabilities and conformal intervals (hub.uncertainty): the quantile's coverage and finite-sample
correction, temperature scaling of overconfident logits, and both fitted at the end of a run and used by predict."""
import csv
import json

import pytest

from hub.cli import main
from hub.data import data_dir
from hub.run.train import train


def test_a_regression_run_has_intervals_that_cover_the_test_split_and_predict_writes_them(repo, tmp_path):
    """California Housing (3096 test rows): the 90% intervals fitted on the validation split cover 85-95% of the
    test rows; predict --data writes median_house_value with its _lower_90 and _upper_90 columns."""
    run = train(str(repo / "recipes" / "tabular" / "mlp_california_housing.yaml"),
                ["trainer.max_epochs=3", f"output_dir={tmp_path}"], progress=False)
    intervals = json.loads((run / "metrics.json").read_text())["intervals"]
    assert intervals["outputs"] == ["median_house_value"] and intervals["test_points_per_output"] == [3096]
    assert 0.85 <= intervals["test_coverage"]["0.9"] <= 0.95
    assert intervals["test_coverage"]["0.8"] < intervals["test_coverage"]["0.9"] < intervals["test_coverage"]["0.95"]
    half_width = json.loads((run / "card.json").read_text())["calibration"]["conformal"]["half_width"]["0.9"][0]
    assert 10_000 < half_width < 400_000  # in dollars, not in standardised units

    rows = list(csv.DictReader(open(data_dir() / "california_housing" / "housing.csv")))[:20]
    with open(tmp_path / "rows.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert main(["predict", str(run), "--data", str(tmp_path / "rows.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    predictions = list(csv.DictReader(open(tmp_path / "p.csv")))
    assert list(predictions[0]) == ["row", "median_house_value", "median_house_value_lower_90",
                                    "median_house_value_upper_90", "ood_score", "ood"] and len(predictions) == 20
    for row in predictions:
        value, lower, upper = (float(row[f"median_house_value{s}"]) for s in ("", "_lower_90", "_upper_90"))
        assert value - lower == pytest.approx(half_width, rel=1e-4) == upper - value
    assert main(["predict", str(run), "--data", str(tmp_path / "rows.csv"), "--interval-level", "0.95",
                 "--out", str(tmp_path / "p95.csv")]) == 0
    assert "median_house_value_upper_95" in next(csv.reader(open(tmp_path / "p95.csv")))
    assert main(["predict", str(run), "--data", str(tmp_path / "rows.csv"), "--interval-level", "0.5"]) == 2
