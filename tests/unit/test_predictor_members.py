"""The members of a run's predictor beyond tables (hub.predictor, hub.classical): survival risks blended on ranks,
chosen on the validation split alone (a trap whose test split favours the baseline); rank scores keep each member's
order; a kept logistic regression predicts as scikit-learn does; kept arrays are refused when tampered with or
incomplete; NaN labels (missing readings) are left out of the regression scores and a predictor's intervals. The
runs themselves are in tests/integration/test_predictor_runs.py."""
from __future__ import annotations

import numpy as np
import pytest

from hub.core.weights import sha256_bytes
from hub.errors import HubError
from hub.kinds import PredictorData
from hub.predictor import choose, load_arrays, predictor_entry, rank_scores, save_arrays, scores


def test_survival_choice_reads_validation_only():
    rng = np.random.default_rng(0)
    time = {s: rng.exponential(10, 200) for s in ("val", "test")}
    labels = {s: np.stack([t, np.ones(200)], 1) for s, t in time.items()}
    good = {s: rank_scores(-t, -t) for s, t in time.items()}  # risk falls with time: C = 1
    noise = {s: rank_scores(rng.normal(size=200), rng.normal(size=200)) for s in time}
    # validation: the model ranks the patients and the baseline guesses; the test split the other way round
    data = PredictorData("survival", labels, model={"val": good["val"], "test": noise["test"]},
                         baseline={"val": noise["val"], "test": good["test"]}, save=lambda run_dir: run_dir)
    entry = predictor_entry(data)
    assert entry["chosen"] == "model" and entry["metric"] == "val/cindex" and entry["validation"]["model"] == 1.0
    assert entry["test"]["baseline"]["test/cindex"] == 1.0 > entry["test"]["chosen"]["test/cindex"]
    assert choose("survival", labels["val"], noise["val"], good["val"]).chosen == "baseline"


def test_rank_scores_keep_each_members_order_and_c_index():
    rng = np.random.default_rng(1)
    reference, values = rng.normal(size=50), rng.normal(scale=3, size=400)  # many beyond the reference's range
    ranked = rank_scores(values, reference)
    order = np.argsort(values)
    assert np.all(np.diff(ranked[order]) > 0) and np.all((ranked > 0) & (ranked < 1))
    labels = np.stack([rng.exponential(size=400), rng.integers(0, 2, 400)], 1)
    assert scores("survival", labels, ranked) == scores("survival", labels, values)
    with pytest.raises(HubError, match="at least one reference"):
        rank_scores(values, [])


@pytest.mark.parametrize("num_classes", [2, 3])
def test_kept_logistic_regression_predicts_as_scikit_learn(num_classes):
    from hub.classical import logistic_regression_baseline

    rng = np.random.default_rng(num_classes)
    y = {s: np.arange(60) % 2 for s in ("train", "val", "test")}  # three classes: the last one never seen
    x = {s: y[s][:, None] * 2.0 + rng.standard_normal((60, 4)) for s in y}
    uniform = {s: np.full((60, num_classes), 1 / num_classes) for s in ("val", "test")}
    names = [f"c{i}" for i in range(num_classes)]
    result = logistic_regression_baseline("demo", x, y, names, [str(i) for i in range(60)],
                                          model_probabilities=uniform)
    shown = np.array([result.predictions[f"proba_{c}"] for c in names]).T  # scikit-learn's predict_proba
    np.testing.assert_allclose(result.predictor.baseline["test"], shown, atol=1e-12)
    assert result.predictor.task == "classification" and result.predictor.model["val"] is uniform["val"]


def test_kept_arrays_are_refused_when_tampered_with_or_incomplete(tmp_path):
    path = save_arrays({"coef": np.arange(3.0), "reference": np.ones(4)}, tmp_path / "baseline.safetensors")
    digest = sha256_bytes(path.read_bytes())
    np.testing.assert_array_equal(load_arrays(path, digest, ["coef"])["coef"], [0.0, 1.0, 2.0])
    with pytest.raises(HubError, match=r"lacks the arrays \['intercept'\]"):
        load_arrays(path, digest, ["coef", "intercept"])
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(HubError, match="sha256 mismatch"):
        load_arrays(path, digest, ["coef"])
    with pytest.raises(HubError, match="not a valid safetensors file"):
        (tmp_path / "junk").write_bytes(b"not safetensors")
        load_arrays(tmp_path / "junk", sha256_bytes(b"not safetensors"), ["coef"])


def test_a_regression_predictor_other_than_the_model_gets_intervals_from_its_own_residuals():
    from types import SimpleNamespace

    from hub.uncertainty.conformal import conformal_half_width, predictor_intervals

    rng = np.random.default_rng(0)
    labels = {s: rng.normal(size=n) for s, n in (("val", 99), ("test", 50))}  # standardised targets
    model = {s: y + rng.normal(scale=2.0, size=len(y)) for s, y in labels.items()}
    baseline = {s: y + rng.normal(scale=0.1, size=len(y)) for s, y in labels.items()}
    data = PredictorData("regression", labels, model, baseline, save=lambda run_dir: run_dir)
    model_intervals = {"conformal": {"outputs": ["price"], "half_width": {"0.9": [[9.9]]}}}
    card = SimpleNamespace(name="price.run", calibration=model_intervals,
                           input_spec={"kind": "table", "preprocessor": {"task": "regression", "target_std": 3.0,
                                                                     "target_mean": 1.0}})
    conformal = predictor_intervals(card, data, "baseline", 0.0)
    expected = 3.0 * conformal_half_width(np.abs(baseline["val"] - labels["val"]), 0.9)  # in the target's units
    assert conformal["half_width"]["0.9"] == [[pytest.approx(expected)]] and expected < 1.0
    assert conformal["fitted_on"] == "validation split, residuals of the predictor (baseline)"
    blended = predictor_intervals(card, data, "blend", 0.5)["half_width"]["0.9"][0][0]
    assert blended == pytest.approx(3.0 * conformal_half_width(np.abs((model["val"] + baseline["val"]) / 2
                                                                      - labels["val"]), 0.9))
    assert predictor_intervals(card, data, "model", 1.0) is None  # the model's own intervals stay


def test_regression_scores_and_choice_leave_nan_labels_out_and_intervals_take_further_axes_as_rows():
    """A NaN label is a missing reading (a traffic target's): the scores, hence the choice, and a baseline
    predictor's intervals leave it out; outputs (N, K, M) are K outputs over N * M rows, as the model's own fit."""
    from types import SimpleNamespace

    from hub.uncertainty.conformal import conformal_half_width, predictor_intervals

    labels = np.array([[1.0, np.nan], [3.0, 4.0]])
    assert scores("regression", labels, [[2.0, 100.0], [3.0, 6.0]]) == {"rmse": pytest.approx(np.sqrt(5 / 3)),
                                                                       "mae": pytest.approx(1.0)}
    assert np.isnan(scores("regression", labels, [[np.nan, 0.0], [3.0, 4.0]])["rmse"])  # a NaN output is not left out
    assert np.isnan(scores("regression", np.full(2, np.nan), [1.0, 2.0])["mae"])
    # a member far off only where the label is missing is the better one
    assert choose("regression", labels, [[1.5, 0.0], [3.5, 4.5]], [[1.0, 1e6], [3.0, 4.0]]).chosen == "baseline"

    rng = np.random.default_rng(0)
    labels = {s: rng.normal(50, 5, size=(n, 2, 3)) for s, n in (("val", 40), ("test", 20))}  # (S, K=2, sensors)
    for y in labels.values():
        y[::4, 1, 0] = np.nan
    baseline = {s: np.nan_to_num(y, nan=0.0) + rng.normal(scale=0.1, size=y.shape) for s, y in labels.items()}
    data = PredictorData("regression", labels, {s: y + 3.0 for s, y in baseline.items()}, baseline,
                         save=lambda run_dir: run_dir)
    card = SimpleNamespace(name="speeds.run", calibration={"conformal": {"outputs": ["speed_5min", "speed_10min"],
                                                                         "half_width": {"0.9": [[9.9], [9.9]]}}},
                           input_spec={"kind": "none"})
    conformal = predictor_intervals(card, data, "baseline", 0.0)
    assert conformal["test_points_per_output"] == [60, 55]  # 20 samples x 3 sensors, less the 5 missing
    second = np.abs(baseline["val"] - labels["val"])[:, 1].ravel()
    assert conformal["half_width"]["0.9"][1] == [pytest.approx(conformal_half_width(second[~np.isnan(second)], 0.9))]
    assert conformal["half_width"]["0.9"][0][0] < 1.0  # the baseline's residuals, not the model's (3 mph off)
    card.calibration["conformal"]["outputs"] = ["speed_5min"]
    with pytest.raises(HubError, match=r"outputs of shape \(2, 3\) per item for the 1 outputs"):
        predictor_intervals(card, data, "baseline", 0.0)
