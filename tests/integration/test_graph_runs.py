"""Graph fine-tuning runs end to end on synthetic user graphs (no dataset): bare families with their baseline, feature
normalisation recorded and applied, portable cards, a tag fine-tuned then predicted through the CLI."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

import hub
from tests.unit.test_graph import generated_graph, split_of, with_split_column


@pytest.mark.parametrize("family", ["gat", "gatv2", "cat"])
def test_cli_finetune_bare_family_on_a_user_graph_with_its_baseline(tmp_path, capsys, family):
    from graph.baselines import BASELINES
    from hub.cli import main

    root = with_split_column(generated_graph(tmp_path / "graph"), [split_of(i) for i in range(60)])
    assert main(["finetune", family, "--data", str(root), "--output-dir", str(tmp_path / "runs"), "--no-progress",
                 "trainer.max_epochs=1", "trainer.accelerator=cpu"]) == 0
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[1].split()[0])
    summary = json.loads((run / "metrics.json").read_text())
    name = summary["baseline"]["name"]
    assert name in {b.name for b in BASELINES} and summary["baseline"]["metric"] == "test/acc"
    assert f"{name} on the same split: test/acc" in out
    assert ("the model is at least as good as" if summary["baseline"]["model_is_better"] else "WARNING:") in out
    rows = list(csv.DictReader(open(run / summary["baseline"]["predictions"])))
    assert [r["id"] for r in rows] == [f"n{i}" for i in range(60) if split_of(i) == "test"]
    assert hub.model_card(str(run)).model_args["in_channels"] == 3


def test_finetune_from_scratch_records_the_normalisation_and_predict_applies_it(tmp_path, capsys):
    from graph.io import node_features, read_graph_folder
    from hub.cli import main
    from hub.kinds import predict_logits

    root = generated_graph(tmp_path / "counts", non_negative=True)
    runs = {}
    for override in ([], ["data.args.normalize=false"]):
        assert main(["finetune", "gat", "--data", str(root), "--output-dir", str(tmp_path / "runs"), "--no-progress",
                     "trainer.max_epochs=3", "trainer.accelerator=cpu", *override]) == 0
        runs[bool(override)] = capsys.readouterr().out.split("run folder: ")[1].split()[0]
    assert hub.model_card(runs[True]).input_spec["normalize"] is False  # data.args.normalize=false kept
    card, model = hub.model_card(runs[False]), hub.load(runs[False]).eval()
    assert card.input_spec["normalize"] is True
    graph = read_graph_folder(root)[0]
    names, logits = next(predict_logits(card, model, [str(root)], batch_size=100))
    assert names == [f"n{i}" for i in range(6)]
    with torch.no_grad():
        normalised = model(node_features(graph.x, True), graph.edge_index)[:6]
        as_given = model(node_features(graph.x, False), graph.edge_index)[:6]
    torch.testing.assert_close(logits, normalised)
    assert not torch.allclose(logits, as_given, atol=1e-3)


def test_finetune_with_an_absolute_data_path_writes_no_machine_path_in_the_card(tmp_path, capsys, monkeypatch):
    from hub.cli import main
    from hub.core.cards import absolute_paths
    from hub.recipe import card_data

    root = generated_graph(tmp_path / "data" / "counts", non_negative=True)
    (tmp_path / "work").mkdir()
    for cwd, recorded in ((tmp_path / "work", "<data>/counts"), (tmp_path / "data", "counts")):
        monkeypatch.chdir(cwd)  # the data outside the working folder, then under it
        assert main(["finetune", "gat", "--data", str(root), "--output-dir", str(tmp_path / "runs"), "--no-progress",
                     "trainer.max_epochs=1", "trainer.accelerator=cpu"]) == 0
        run = Path(capsys.readouterr().out.split("run folder: ")[1].split()[0])
        text = (run / "card.json").read_text()
        assert str(tmp_path) not in text and absolute_paths(json.loads(text)) == []
        card = hub.model_card(str(run))
        assert card.data["args"]["root"] == card.recipe["resolved"]["data"]["args"]["root"] == recorded
        assert card.data["source"] == recorded
        assert str(root) in (run / "recipe.yaml").read_text()  # the run's own recipe keeps the path given
        assert card_data(card).ids[:2] == ["n0", "n1"]  # read through it


def test_finetune_and_predict_a_user_graph_through_the_cli(tmp_path, capsys):
    from hub.cli import main

    root = generated_graph(tmp_path / "graph")
    assert main(["finetune", "gat.cora", "trainer.max_epochs=10", "trainer.early_stopping.patience=null",
                 "--data", str(root), "--output-dir", str(tmp_path / "runs"), "--no-progress"]) == 0
    run_dir = capsys.readouterr().out.split("run folder: ")[1].split()[0]
    card = hub.model_card(run_dir)
    assert card.input_spec["normalize"] is True  # as gat.cora's features were
    assert json.loads((Path(run_dir) / "metrics.json").read_text())["baseline"]["metric"] == "test/acc"
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    (renamed / "nodes.csv").write_text((root / "nodes.csv").read_text().replace("id,f0,f1,f2", "id,f2,f1,f0", 1))
    assert main(["finetune", run_dir, "--data", str(renamed), "--output-dir", str(tmp_path / "runs")]) == 2
    assert f"train the family from scratch: attnhub finetune gat --data {renamed}" in capsys.readouterr().err
    assert main(["predict", run_dir, str(root), "--top-k", "2", "--out", str(tmp_path / "p.csv"),
                 "--no-progress"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == [f"n{i}" for i in range(6)]
    assert all(line.split()[1] in {"c0", "c1", "c2"} for line in lines)
    rows = list(csv.reader(open(tmp_path / "p.csv")))
    # the fine-tune fitted the OOD score of its nodes (hub.uncertainty.ood: energy; threshold on the validation nodes)
    assert rows[0] == ["file", "class_1", "prob_1", "class_2", "prob_2", "ood_score", "ood"] and len(rows) == 7
    assert json.loads((Path(run_dir) / "card.json").read_text())["ood"]["score"] == "energy"
    assert main(["explain", run_dir, "n0", "n7", "--data", str(root), "--out", str(tmp_path / "fig")]) == 0
    assert sorted(p.name for p in (tmp_path / "fig").glob("*.png")) == ["node_n0_explain.png", "node_n7_explain.png"]
    record = json.loads((tmp_path / "fig" / "node_n7_explain.json").read_text())
    assert record["input"] == "node_n7" and "n7" in record["labels"]  # a run folder is explained as a tag
    assert main(["explain", run_dir, "nope", "--data", str(root), "--out", str(tmp_path / "fig")]) == 2


def test_a_graph_run_predicting_with_its_baseline_gives_the_kept_regression_on_unlabelled_nodes(tmp_path, capsys):
    from graph.baselines import baseline_probabilities, kept_baseline, neighbour_features
    from graph.io import node_features, read_graph_folder
    from hub.cli import main

    root = generated_graph(tmp_path / "graph")
    assert main(["finetune", "gat", "--data", str(root), "--output-dir", str(tmp_path / "runs"), "--no-progress",
                 "trainer.max_epochs=1", "trainer.accelerator=cpu", "--predictor", "baseline"]) == 0
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[1].split()[0])
    entry = json.loads((run / "metrics.json").read_text())["predictor"]
    assert entry["chosen"] == "baseline" and set(entry["validation"]) == {"model", "baseline", "blend"}
    card = hub.model_card(str(run))
    assert main(["predict", str(run), str(root), "--top-k", "3", "--out", str(tmp_path / "p.csv"),
                 "--no-progress"]) == 0
    rows = list(csv.DictReader(open(tmp_path / "p.csv")))
    graph = read_graph_folder(root)[0]
    unlabelled = torch.nonzero(graph.y < 0).view(-1)
    features = neighbour_features(node_features(graph.x, card.input_spec["normalize"]), graph.edge_index)
    expected = baseline_probabilities(kept_baseline(card), features[unlabelled.numpy()])  # (6, 3)
    assert [r["file"] for r in rows] == [f"n{i}" for i in unlabelled.tolist()]
    for row, proba in zip(rows, expected):
        assert float(row["prob_1"]) == pytest.approx(proba.max(), abs=1e-5)
        assert row["class_1"] == card.label_names[int(proba.argmax())]


def test_a_small_graph_chooses_by_folds_refits_on_every_label_and_a_one_item_class_trains(tmp_path, capsys):
    """Issue 68: below CV_BELOW labelled nodes finetune chooses by 3-fold cross-validation (the budget said first),
    refits on every labelled node (the refit run's recipe and split), and a class of one labelled node trains."""
    from hub.cli import main
    from tests.unit.test_graph import with_one_item_class

    root = with_one_item_class(generated_graph(tmp_path / "graph"))
    assert main(["finetune", "gat", "--data", str(root), "--output-dir", str(tmp_path / "runs"), "--no-progress",
                 "--cv-folds", "3", "trainer.max_epochs=3", "trainer.accelerator=cpu",
                 "--predictor", "model"]) == 0
    out = capsys.readouterr().out
    assert "3 fold runs of the model and one refit on every labelled item" in out
    assert out.index("3 fold runs") < out.index("run folder: ")
    run = Path(out.split("run folder: ")[1].split()[0])
    summary = json.loads((run / "metrics.json").read_text())
    entry = summary["predictor"]
    assert entry["selection"] == "cross-validation" and entry["chosen"] == "model" and entry["folds"] == 3
    assert entry["items"] == 44  # 55 labelled nodes less the 11 of the test split
    assert set(entry["cv"]) >= {"model", "baseline", "blend", "chosen"} and entry["test"]["chosen"]["test/acc"] >= 0
    assert "chosen by 3-fold cross-validation on 44 labelled items" in out and "held-out test split" in out
    assert entry["figures"]["test"].startswith("held out") and len(entry["refit"]["folds"]) == 3
    recipe = (run / "recipe.yaml").read_text()
    assert "refit: true" in recipe and f"max_epochs: {entry['refit']['model_epochs']}" in recipe
    card = hub.model_card(str(run))
    assert card.data["split"]["train"] == 55  # every labelled node trained, 'solo' included
    assert card.predictor["selection"] == "cross-validation" and "solo" in card.label_names
    assert main(["predict", str(run), str(root), "--out", str(tmp_path / "p.csv"), "--no-progress"]) == 0
