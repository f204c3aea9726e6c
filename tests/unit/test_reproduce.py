"""``attnhub reproduce`` / ``hub.reproduce``: retrain a card's recipe and compare the test metrics with the card's."""
import dataclasses
import importlib
import math

import pytest

import hub
from hub.core.cards import portable_recipe
from hub.errors import HubError
from hub.recipe import load_recipe, validate_recipe
from hub.reproduction import compare, locate_recipe, parse_seeds, run_overrides, verdict


def test_verdict_within_two_std_of_the_card():
    assert verdict(0.99, mean=0.97, std=0.01, n=3)["within"]  # exactly 2 std away: on the bound
    assert verdict(0.955, mean=0.97, std=0.01, n=3)["within"]
    far = verdict(0.80, mean=0.97, std=0.01, n=3)
    assert not far["within"] and far["allowed"] == pytest.approx(0.02) and far["difference"] == pytest.approx(0.17)
    assert far["rule"] == "2 std of the card"
    assert not verdict(math.nan, mean=0.97, std=0.01, n=3)["within"]


def test_verdict_uses_a_stated_absolute_tolerance_without_a_spread():
    one_seed = verdict(0.975, mean=0.97, std=0.0, n=1)
    assert one_seed["within"] and "absolute tolerance 0.01" in one_seed["rule"] and "n=1" in one_seed["rule"]
    assert not verdict(0.99, mean=0.97, std=0.0, n=1)["within"]
    no_spread = verdict(0.99, mean=0.97, std=0.0, n=4, tolerance=0.05)
    assert no_spread["within"] and no_spread["allowed"] == 0.05 and "std 0" in no_spread["rule"]


def test_compare_judges_the_new_mean_and_flags_missing_metrics():
    card = {"test/acc": {"mean": 0.9, "std": 0.01, "n": 3, "values": [0.89, 0.9, 0.91]},
            "test/auroc": {"mean": 0.8, "std": 0.02, "n": 3, "values": [0.78, 0.8, 0.82]},
            "val/acc": {"mean": 0.5, "std": 0.0, "n": 1, "values": [0.5]}}
    runs = [{"seed": 0, "run_dir": "a", "test": {"test/acc": 0.88}},
            {"seed": 1, "run_dir": "b", "test": {"test/acc": 0.9}}]
    out = compare(card, runs)
    assert set(out) == {"test/acc", "test/auroc"}  # test metrics only
    assert out["test/acc"]["new"]["mean"] == pytest.approx(0.89) and out["test/acc"]["new"]["n"] == 2
    assert out["test/acc"]["within"]
    assert out["test/auroc"]["new"] is None and not out["test/auroc"]["within"]


def test_parse_seeds():
    assert parse_seeds("1,2,3") == [1, 2, 3]
    with pytest.raises(HubError, match="1,2,3"):
        parse_seeds("1,two")
    with pytest.raises(HubError, match="twice"):
        parse_seeds("1,1")


def test_run_overrides_replace_the_cards_seed_and_come_after_the_cards():
    card = hub.model_card("gat.cora")
    assert card.recipe["overrides"] == ["seed=1"]
    extra = dataclasses.replace(card, recipe={**card.recipe, "overrides": ["seed=1", "trainer.max_epochs=9"]})
    assert run_overrides(extra, 4, ["trainer.max_epochs=3"], "out") == \
        ["trainer.max_epochs=9", "seed=4", "trainer.max_epochs=3", "output_dir=out"]
    with pytest.raises(HubError, match="--seeds"):
        run_overrides(card, 4, ["seed=5"], "runs")
    with pytest.raises(HubError, match="--output-dir"):
        run_overrides(card, 4, ["output_dir=/elsewhere"], "runs")


def test_hub_reproduce_stays_the_function_once_the_module_is_imported():
    importlib.import_module("hub.reproduction")
    assert callable(hub.reproduce) and hub.reproduce.__module__ == "hub"


@pytest.mark.parametrize("tag", hub.list_models(pretrained=True))
def test_the_recipe_file_a_card_names_still_trains_what_the_card_records(tag):
    """``attnhub reproduce TAG`` trains the recipe file the card names, with the card's overrides: that file as it is
    now must resolve to the recipe the weights were trained with (the card's ``recipe.resolved``), so a recipe edited
    after publishing (as coat_lite_micro_cifar10.yaml was, for all 50,000 CIFAR-10 images) fails here until the old
    tag's card names a recipe of its own. Not compared: the run's name (from the file's name) and the keys no card
    holds (the output folder and the trackers, ``hub.core.cards.LOCAL_KEYS``)."""
    card = hub.model_card(tag)
    path, note = locate_recipe(card)
    assert path is not None, note
    resolved = card.recipe["resolved"]
    overrides = run_overrides(card, resolved["seed"], [], "runs")
    from_file = portable_recipe({"resolved": load_recipe(path, overrides).model_dump(mode="json")})["resolved"]
    recorded = portable_recipe({"resolved": validate_recipe(resolved, tag).model_dump(mode="json")})["resolved"]
    assert {**from_file, "name": None} == {**recorded, "name": None}


def test_a_predictor_chosen_by_folds_is_not_chosen_again_on_the_refits_in_sample_split(tmp_path):
    """A refit card (issue 68): its predictor's test figures were scored before the refit, so reproduce compares the
    model's metrics and neither re-chooses nor compares the predictor; a card chosen on validation still is."""
    from types import SimpleNamespace

    from hub.reproduction import compare_predictor, refit_predictor

    test = {"chosen": {"test/acc": 0.9}}
    folded = SimpleNamespace(name="x", predictor={"asked": "auto", "selection": "cross-validation", "test": test})
    assert refit_predictor(folded, tmp_path) is None
    assert compare_predictor(folded, [{"predictor": {"test": {"test/acc": 0.5}}}]) == {}
    on_val = SimpleNamespace(name="x", predictor={"asked": "auto", "test": test})
    compared = compare_predictor(on_val, [{"predictor": {"test": {"test/acc": 0.5}}}])
    assert not compared["predictor:test/acc"]["within"]
