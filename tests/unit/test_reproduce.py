"""``attnhub reproduce`` / ``hub.reproduce``: retrain a card's recipe and compare the test metrics with the card's."""
import dataclasses
import importlib
import json
import math
import sys
from pathlib import Path

import pytest
import yaml

import hub
from hub.cards import absolute_paths
from hub.errors import HubError
from hub.recipe import Recipe
from hub.reproduction import REPORT_FILE, compare, format_report, locate_recipe, parse_seeds, run_overrides, verdict


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


def test_reproduce_quickstart_short_schedule_is_flagged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the recipe file is then found in the installed repository; runs go to ./runs
    report = hub.reproduce("vit_digits.sklearn", overrides=["trainer.max_epochs=2"], progress=False)
    assert report["recipe"] == {"path": "recipes/quickstart.yaml", "source": "file",
                                "note": "recipe file recipes/quickstart.yaml (from the installed repository)"}
    assert report["seeds"] == [0] and report["card_seeds"] == [0, 1, 2]  # the card's first seed by default
    [run] = report["runs"]
    run_dir = Path(run["run_dir"])
    assert run_dir.parts[0] == "runs" and (tmp_path / run_dir / "metrics.json").is_file()
    resolved = yaml.safe_load((run_dir / "recipe.yaml").read_text())
    assert resolved["trainer"]["max_epochs"] == 2 and resolved["seed"] == 0
    assert set(report["metrics"]) == {"test/acc", "test/f1", "test/loss"}
    acc = report["metrics"]["test/acc"]
    assert acc["card"]["n"] == 3 and acc["new"]["values"] == [run["test"]["test/acc"]]
    assert not acc["within"] and acc["new"]["mean"] < 0.9  # two epochs are far from the card's 0.976 ± 0.011
    assert not report["all_within"]
    assert Path(report["report_file"]) == run_dir / REPORT_FILE
    saved = json.loads(Path(report["report_file"]).read_text())
    assert absolute_paths(saved) == [] and saved["runs"][0]["run_dir"] == run_dir.relative_to("runs").as_posix()
    assert saved["metrics"] == json.loads(json.dumps(report["metrics"]))
    text = format_report(report)
    assert "NOT within" in text and "--seeds 0,1,2" in text and "0.9759 ± 0.0105 (n=3)" in text


def test_missing_recipe_file_falls_back_to_the_resolved_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys.modules["hub.reproduction"], "REPO_ROOT", tmp_path / "elsewhere")
    card = hub.model_card("vit_digits.sklearn")
    path, note = locate_recipe(card)
    assert path is None and "is neither in the working folder" in note and "resolved recipe" in note
    report = hub.reproduce("vit_digits.sklearn", overrides=["trainer.max_epochs=1"], progress=False)
    assert report["recipe"]["source"] == "resolved" and "resolved recipe" in format_report(report)
    trained = yaml.safe_load((Path(report["runs"][0]["run_dir"]) / "recipe.yaml").read_text())
    expected = {**card.recipe["resolved"], "trainer": {**card.recipe["resolved"]["trainer"], "max_epochs": 1}}
    # the card's resolved recipe, with the keys the schema gained since (at their defaults)
    expected = Recipe.model_validate(expected).to_dict()
    assert {k: v for k, v in trained.items() if k != "output_dir"} == {k: v for k, v in expected.items()
                                                                       if k != "output_dir"}
    assert trained["output_dir"] == "runs" and Path(report["runs"][0]["run_dir"]).parts[0] == "runs"
    with pytest.raises(HubError, match="no recipe to reproduce"):
        locate_recipe(dataclasses.replace(card, recipe={"path": "recipes/gone.yaml"}))
