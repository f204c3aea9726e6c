"""``attnhub reproduce`` / ``hub.reproduce``: retrain a card's recipe and compare the test metrics with the card's."""
import dataclasses
import json
import sys
from pathlib import Path

import pytest
import yaml

import hub
from hub.cli import main
from hub.core.cards import absolute_paths
from hub.errors import HubError
from hub.recipe import Recipe
from hub.reproduction import REPORT_FILE, format_report, locate_recipe


def test_reproduce_graph_card_from_the_command_line(tmp_path, capsys):
    from graph.data import read_planetoid

    read_planetoid("Cora")  # first, so a missing Cora skips (tests/conftest.py) before the CLI reports it
    out = tmp_path / "out"
    assert main(["reproduce", "gat.cora", "trainer.max_epochs=5", "--seeds", "2", "--output-dir", str(out),
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "0.8280 ± 0.0066 (n=10)" in printed  # the card's test accuracy beside the new one
    report_file = Path(printed.strip().splitlines()[-1].removeprefix("report: "))
    assert report_file.parent.parent == out / "gat_cora"  # under --output-dir, never a folder named by the card
    report = json.loads(report_file.read_text())
    assert report["seeds"] == [2] and report["overrides"] == ["trainer.max_epochs=5"]
    assert set(report["metrics"]) == {"test/acc", "test/f1", "test/loss"}
    assert all(isinstance(m["within"], bool) and m["rule"] == "2 std of the card" for m in report["metrics"].values())
    run_card = hub.model_card(str(report_file.parent))
    assert run_card.recipe["overrides"] == ["seed=2", "trainer.max_epochs=5"]  # the card's seed=1 replaced
    assert run_card.recipe["resolved"]["seed"] == 2 and run_card.recipe["resolved"]["trainer"]["max_epochs"] == 5


def test_reproduce_quickstart_short_schedule_is_flagged(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the recipe file is then found in the installed repository; runs go to ./runs
    report = hub.reproduce("vit_digits.sklearn", overrides=["trainer.max_epochs=2"], progress=False)
    assert report["recipe"] == {"path": "recipes/vision/vit_digits_sklearn.yaml", "source": "file",
                                "note": "recipe file recipes/vision/vit_digits_sklearn.yaml (from the installed "
                                        "repository)"}
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
