"""Calibrated probabilities and conformal intervals (hub.uncertainty): the quantile's coverage and finite-sample
correction, temperature scaling of overconfident logits, and both fitted at the end of a run and used by predict."""
import dataclasses
import json

import numpy as np
import pytest
import torch

import hub
from hub.errors import HubError
from hub.run.train import train
from hub.uncertainty import (
    conformal_half_width,
    fit_intervals,
    fit_temperature_figures,
    interval_columns,
    output_residuals,
)


def test_half_width_is_the_corrected_order_statistic():
    residuals = np.arange(1.0, 11.0)[::-1]  # 10 points, unsorted
    assert conformal_half_width(residuals, 0.9) == 10.0  # ceil(11 * 0.9) = 10th smallest, not the 9th (n * 0.9)
    assert conformal_half_width(residuals, 0.8) == 9.0  # ceil(11 * 0.8) = 9
    assert conformal_half_width(np.arange(19.0), 0.95) == 18.0  # 19 points: the largest
    with pytest.raises(HubError, match="needs at least 19 calibration points, got 18"):
        conformal_half_width(np.arange(18.0), 0.95)


@pytest.mark.parametrize("n_calibration", [10, 500])
def test_ninety_percent_intervals_cover_ninety_percent_of_fresh_points(n_calibration):
    """Split conformal on Gaussian noise: over many draws of the calibration set, 90% intervals cover between 90%
    and 90% + 1/(n+1) of fresh points on average (the guarantee). With n = 10 the uncorrected quantile (the 9th of
    10) would cover 9/11 = 82% only."""
    rng = np.random.default_rng(0)
    coverage = []
    for _ in range(400):
        width = conformal_half_width(np.abs(rng.normal(0, 2.0, n_calibration)), 0.9)
        coverage.append(np.mean(np.abs(rng.normal(0, 2.0, 2000)) <= width))
    assert 0.87 <= np.mean(coverage) <= 0.93
    assert 0.895 <= np.mean(coverage) <= 0.9 + 1 / (n_calibration + 1) + 0.005


def test_intervals_are_per_output_and_leave_missing_targets_out():
    """Forecasts (N, horizons, sensors): one half width per horizon, from all sensors, without the 0 targets of
    missing readings; each horizon's noise scale shows in its width, and the test coverage is measured."""
    rng = np.random.default_rng(1)

    def draw(n):
        target = torch.from_numpy(rng.uniform(20, 70, (n, 3, 5)))
        noise = torch.from_numpy(rng.normal(0, 1, (n, 3, 5))) * torch.tensor([1.0, 2.0, 4.0])[:, None]
        forecast = target + noise
        target[:, :, 0] = 0.0  # sensor 0 never reads: its forecasts are far off and must not count
        return forecast, target

    val = output_residuals(*draw(2000), count=3, missing=0.0)
    test = output_residuals(*draw(2000), count=3, missing=0.0)
    assert [len(r) for r in val] == [2000 * 4] * 3
    entry = fit_intervals(val, test, ["speed_5min", "speed_10min", "speed_15min"], scale=10.0)
    widths = np.array(entry["half_width"]["0.9"])
    np.testing.assert_allclose(widths / widths[0], [1, 2, 4], rtol=0.08)
    np.testing.assert_allclose(widths[0], 10 * 1.645, rtol=0.05)  # the 95th percentile of N(0, 1), in units
    assert all(0.88 <= c <= 0.92 for c in entry["test_coverage_per_output"]["0.9"])
    assert entry["test_mean_width"]["0.9"] == pytest.approx(2 * widths.mean())
    with_zeros = output_residuals(*draw(2000), count=3)  # without the mask the 0 targets inflate the width
    assert conformal_half_width(with_zeros[0], 0.9) > 5 * conformal_half_width(val[0], 0.9)


def test_temperature_scaling_does_not_worsen_an_overconfident_classifier():
    rng = torch.Generator().manual_seed(0)
    true_logits = torch.randn(4000, 5, generator=rng) * 1.5
    labels = torch.multinomial(true_logits.softmax(1), 1, generator=rng).squeeze(1)
    overconfident = 3.0 * true_logits  # the right ranking, three times too sharp
    figures = fit_temperature_figures(overconfident[:2000], labels[:2000], overconfident[2000:], labels[2000:])
    assert figures["temperature"] == pytest.approx(3.0, rel=0.15)
    for split in ("val", "test"):
        assert figures[split]["ece_calibrated"] <= figures[split]["ece"]
        assert figures[split]["nll_calibrated"] < figures[split]["nll"]
    assert figures["val"]["ece"] > 0.2 and figures["val"]["ece_calibrated"] < figures["val"]["ece"] / 4


def test_interval_columns_sit_beside_each_output_at_a_stored_level():
    card = dataclasses.replace(hub.model_card("rul_attention.fd001"), output_names=["a", "b"], calibration={
        "conformal": {"half_width": {"0.8": [1.0, 2.0], "0.9": [3.0, 4.0]}}})
    header, values = interval_columns(card, ["a", "b"], torch.tensor([[10.0, 20.0]]))
    assert header == ["a", "a_lower_90", "a_upper_90", "b", "b_lower_90", "b_upper_90"]
    assert values.tolist() == [[10.0, 7.0, 13.0, 20.0, 16.0, 24.0]]
    assert interval_columns(card, ["a", "b"], torch.tensor([[10.0, 20.0]]), 0.8)[1].tolist() == [
        [10.0, 9.0, 11.0, 20.0, 18.0, 22.0]]
    with pytest.raises(HubError, match=r"levels \['0.8', '0.9'\], not 0.95"):
        interval_columns(card, ["a", "b"], torch.zeros(1, 2), 0.95)
    plain = dataclasses.replace(card, calibration={})
    assert interval_columns(plain, ["a", "b"], torch.zeros(1, 2))[0] == ["a", "b"]
    with pytest.raises(HubError, match="no prediction intervals"):
        interval_columns(plain, ["a", "b"], torch.zeros(1, 2), 0.9)


SHORT = ["trainer.max_epochs=2", "trainer.limit_train_batches=3", "trainer.limit_val_batches=2"]


def test_a_classifier_run_keeps_its_temperature_and_the_nll_and_ece_before_and_after(repo, tmp_path):
    run = train(str(repo / "recipes" / "quickstart.yaml"), [*SHORT, f"output_dir={tmp_path}"], progress=False)
    card = json.loads((run / "card.json").read_text())
    summary = json.loads((run / "metrics.json").read_text())["calibration"]
    assert card["calibration"]["temperature"] == summary["temperature"] > 0
    assert summary["temperature"] != 1.0
    for split in ("val", "test"):
        assert set(summary[split]) == {"nll", "nll_calibrated", "ece", "ece_calibrated"}
    assert summary["val"]["nll_calibrated"] <= summary["val"]["nll"]  # fitted there: T = 1 is one of the candidates
    assert "conformal" not in card["calibration"] and "intervals" not in json.loads((run / "metrics.json").read_text())
    off = train(str(repo / "recipes" / "quickstart.yaml"), [*SHORT, f"output_dir={tmp_path}",
                                                             "trainer.calibrate=false"], progress=False)
    assert json.loads((off / "card.json").read_text())["calibration"] == {}
    assert "calibration" not in json.loads((off / "metrics.json").read_text())
