"""A run's predictor (hub.predictor): the choice among model, baseline and blend uses the validation split alone
(a trap whose test split favours the baseline), ties go to the model. The table runs (the baseline that wins
predicts, a forced blend predicts the blend, a tampered baseline is refused, publish carries it) are in
tests/integration/test_tabular_runs.py."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hub.errors import HubError
from hub.kinds import PredictorData
from hub.predictor import choose, predictor_entry, scores


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
    assert entry["chosen"] == "model" and entry["weight"] == 1.0 and entry["metric"] == "val/nll"
    assert entry["validation"]["model"] == pytest.approx(-np.log([0.8, 0.7]).mean())
    assert entry["validation"]["baseline"] == pytest.approx(-np.log([0.3, 0.2]).mean())
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


def test_a_classifier_is_chosen_on_log_loss_so_one_item_of_a_small_split_does_not_swap_a_sure_model_out():
    """issue 48's audio row: on 23 validation clips the baseline was right on all, the model on 22; the model's
    probabilities were sure and right, the baseline's near uniform. On accuracy the baseline won; on log loss the
    model does (it then tested 0.67 against the baseline's 0.55)."""
    labels = np.arange(23) % 5
    model = np.full((23, 5), 0.01)
    model[np.arange(23), labels] = 0.96
    model[0] = [0.3, 0.6, 0.04, 0.03, 0.03]  # wrong on one clip, not by much
    baseline = np.full((23, 5), 0.18)
    baseline[np.arange(23), labels] = 0.28  # right on every clip, barely
    choice = choose("classification", labels, model, baseline)
    assert (choice.chosen, choice.metric) == ("model", "val/nll")
    assert scores("classification", labels, baseline)["acc"] == 1.0 > scores("classification", labels, model)["acc"]
