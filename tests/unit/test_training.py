"""Recipe training end to end: run folders, resume, refused resumes, NaN stop, DDP on CPU, experiment tracking."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hub
from hub.errors import HubError, RecipeError, TrainingError
from hub.registry import register_model
from hub.run.train import train
from hub.weights import load_state_dict

SHORT = ["trainer.max_epochs=2", "trainer.limit_train_batches=3", "trainer.limit_val_batches=2"]


def _train(repo, tmp_path, extra=(), **kwargs):
    return train(str(repo / "recipes" / "quickstart.yaml"), [*SHORT, f"output_dir={tmp_path}", *extra],
                 progress=False, **kwargs)


def test_run_folder_contents_and_no_overwrite(repo, tmp_path):
    run = _train(repo, tmp_path)
    for name in ("recipe.yaml", "metrics.csv", "metrics.json", "curves.png", "model.safetensors", "card.json",
                 "checkpoints/last.ckpt", "checkpoints/best.ckpt"):
        assert (run / name).is_file(), name
    summary = json.loads((run / "metrics.json").read_text())
    assert set(summary) >= {"final", "best", "test", "epoch_selection"}
    assert 0.0 <= summary["test"]["test/acc"] <= 1.0
    assert len((run / "metrics.csv").read_text().strip().splitlines()) == 3  # header + 2 epochs
    assert summary["validation"]["metric"] == "val/acc"  # the task's: what a fine-tune policy is chosen on
    assert torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)["epoch"] == 1  # refreshed every epoch
    model = hub.load(str(run))  # a run folder loads like a pretrained tag
    assert model(torch.zeros(1, 1, 8, 8)).shape == (1, 10)
    second = _train(repo, tmp_path)
    assert second != run and (run / "card.json").is_file()


def test_tensorboard_and_mlflow_hold_the_metrics_of_metrics_csv(repo, tmp_path):
    """trainer.loggers=[csv,tensorboard,mlflow]: TensorBoard's events and the MLflow run (in RUN_DIR/mlflow.db, named
    after the run folder) read back, epoch by epoch, the values of metrics.csv (the training loss per epoch under
    Lightning's name train/loss_epoch), then the test metrics; MLflow holds the recipe as parameters."""
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = _train(repo, tmp_path, ["trainer.loggers=[csv,tensorboard,mlflow]"])
    with open(run / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    columns = [c for c in rows[0] if c not in ("epoch", "step", "lr")]
    assert len(rows) == 2 and {"train/loss", "val/loss", "val/acc"} <= set(columns)
    test = json.loads((run / "metrics.json").read_text())["test"]
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    client = MlflowClient(f"sqlite:///{(run / 'mlflow.db').as_posix()}")
    (mlflow_run,) = client.search_runs([client.get_experiment_by_name("quickstart").experiment_id])
    assert mlflow_run.info.run_name == run.name and mlflow_run.info.status == "FINISHED"
    assert mlflow_run.data.params["optimizer/lr"] == "0.003" and mlflow_run.data.params["trainer/max_epochs"] == "2"

    def mlflow_values(key):
        return [m.value for m in sorted(client.get_metric_history(mlflow_run.info.run_id, key), key=lambda m: m.step)]

    for column in columns:
        key = "train/loss_epoch" if column == "train/loss" else column
        expected = [float(row[column]) for row in rows]
        assert [e.value for e in events.Scalars(key)] == pytest.approx(expected, rel=0, abs=1e-6), key
        assert mlflow_values(key) == pytest.approx(expected, rel=0, abs=1e-6), key
    for key, value in test.items():
        assert [e.value for e in events.Scalars(key)] == pytest.approx([value], rel=0, abs=1e-6), key
        assert mlflow_values(key) == pytest.approx([value], rel=0, abs=1e-6), key
    card = json.loads((run / "card.json").read_text())  # tracking is where a run went, not what it trains
    assert "loggers" not in card["recipe"]["resolved"]["trainer"]
    assert not any(o.startswith("trainer.loggers") for o in card["recipe"]["overrides"])


def test_a_logger_without_its_package_fails_before_training(repo, tmp_path, monkeypatch):
    import hub.run.tracking

    real = hub.run.tracking.importlib.util.find_spec
    monkeypatch.setattr(hub.run.tracking.importlib.util, "find_spec",
                        lambda name, *args: None if name == "mlflow" else real(name, *args))
    with pytest.raises(RecipeError, match=r"trainer.loggers names 'mlflow'.*pip install mlflow"):
        _train(repo, tmp_path, ["trainer.loggers=[csv,mlflow]"])
    assert list(tmp_path.iterdir()) == []  # no run folder


def test_publish_then_add_seeds_keeps_the_weights_and_extends_the_metrics(repo, tmp_path):
    from hub.errors import HubError
    from hub.publish import publish

    runs = [_train(repo, tmp_path / "runs", [f"seed={seed}"]) for seed in (0, 1, 2)]
    tests = [json.loads((run / "metrics.json").read_text())["test"]["test/acc"] for run in runs]
    dest = tmp_path / "pretrained"
    card_path = publish([str(runs[0])], "vit_digits.tiny", dest=str(dest))
    weights = (dest / "vit_digits.tiny.safetensors").read_bytes()
    written = json.loads(card_path.read_text())  # as if published before the schema gained trainer.ema_decay
    del written["recipe"]["resolved"]["trainer"]["ema_decay"]
    card_path.write_text(json.dumps(written))
    publish([str(runs[1]), str(runs[2])], "vit_digits.tiny", dest=str(dest), add_seeds=True, notes="three seeds")
    card = json.loads(card_path.read_text())
    assert card["recipe"]["seeds"] == [0, 1, 2] and card["metrics"]["test/acc"]["values"] == tests
    assert card["metrics"]["test/acc"]["n"] == 3 and card["notes"] == "three seeds"
    assert (dest / "vit_digits.tiny.safetensors").read_bytes() == weights
    with pytest.raises(HubError, match="seed 1 is already in"):
        publish([str(runs[1])], "vit_digits.tiny", dest=str(dest), add_seeds=True)
    other = _train(repo, tmp_path / "runs", ["seed=3", "optimizer.lr=0.01"])
    with pytest.raises(HubError, match=r"different recipe than the card vit_digits.tiny .*\['optimizer'\]"):
        publish([str(other)], "vit_digits.tiny", dest=str(dest), add_seeds=True)


def test_run_card_holds_no_machine_path_and_publish_refuses_one_that_does(repo, tmp_path):
    from hub.cards import absolute_paths
    from hub.errors import HubError
    from hub.publish import publish

    run = _train(repo, tmp_path / "runs", ["seed=3"])  # trained with an absolute recipe path and output_dir
    card = json.loads((run / "card.json").read_text())
    assert absolute_paths(card) == [] and absolute_paths(json.loads((run / "metrics.json").read_text())) == []
    assert card["recipe"]["path"] == "recipes/quickstart.yaml"
    assert card["recipe"]["overrides"] == [*SHORT, "seed=3"]  # the output_dir override is not recorded
    assert "output_dir" not in card["recipe"]["resolved"] and card["recipe"]["resolved"]["seed"] == 3
    card["data"]["source"] = "/home/someone/digits"
    (run / "card.json").write_text(json.dumps(card))
    with pytest.raises(HubError, match=r"paths of this machine: data.source='/home/someone/digits'"):
        publish([str(run)], "vit_digits.tiny", dest=str(tmp_path / "pretrained"))
    assert not (tmp_path / "pretrained" / "vit_digits.tiny.safetensors").exists()


def test_finetune_and_train_write_under_runs_or_output_dir_never_a_cards_folder(monkeypatch):
    """A card whose recipe still names its publisher's folder: finetune goes to ./runs or --output-dir."""
    import dataclasses

    import hub.finetune
    import hub.run.train
    from hub.cli import main

    card = hub.model_card("vit_digits.sklearn")
    old = dataclasses.replace(card, recipe={**card.recipe, "resolved": {**card.recipe["resolved"],
                                                                        "output_dir": "/tmp/publisher/runs"}})
    monkeypatch.setattr(hub.finetune, "model_card", lambda name: old)
    monkeypatch.setattr(hub.finetune, "finetune_data_section",
                        lambda card, path, **options: card.recipe["resolved"]["data"])
    calls = []

    class Stop(Exception):
        pass

    def fake_train(recipe_path=None, overrides=None, recipe=None, **kwargs):
        calls.append(recipe.output_dir if recipe is not None else overrides)
        raise Stop

    monkeypatch.setattr(hub.finetune, "train", fake_train)
    monkeypatch.setattr(hub.run.train, "train", fake_train)
    for argv in (["finetune", "vit_digits.sklearn", "--data", "mine"],
                 ["finetune", "vit_digits.sklearn", "--data", "mine", "--output-dir", "elsewhere"],
                 ["train", "recipes/quickstart.yaml", "seed=1", "--output-dir", "elsewhere"]):
        with pytest.raises(Stop):
            main(argv)
    assert calls == ["runs", "elsewhere", ["seed=1", "output_dir=elsewhere"]]


def test_finetune_recipe_monitors_the_validation_loss_unless_the_card_names_a_metric(monkeypatch, tmp_path):
    """Fine-tunes early-stop on val/loss (accuracy on a small validation split plateaus); a card's own monitor is
    kept. LP-FT starts from the linear probe's run folder, at the full fine-tune's rates."""
    import dataclasses

    import hub.finetune

    card = hub.model_card("vit_digits.sklearn")
    resolved = card.recipe["resolved"]
    assert resolved["trainer"].get("monitor") is None  # the task's default (val/acc) when it was trained
    monkeypatch.setattr(hub.finetune, "finetune_data_section", lambda card, path, **options: resolved["data"])
    full = hub.finetune.finetune_recipe("vit_digits.sklearn", "mine", policy="full")
    assert full.trainer.monitor == "val/loss" and full.model.init_from == "vit_digits.sklearn"
    named = dataclasses.replace(card, recipe={**card.recipe, "resolved": {
        **resolved, "trainer": {**resolved["trainer"], "monitor": "val/auroc"}}})
    monkeypatch.setattr(hub.finetune, "model_card", lambda name: named)
    assert hub.finetune.finetune_recipe("vit_digits.sklearn", "mine").trainer.monitor == "val/auroc"
    lp_ft = hub.finetune.finetune_recipe("vit_digits.sklearn", "mine", policy="lp-ft", probe=tmp_path / "probe")
    assert lp_ft.model.init_from == str(tmp_path / "probe") and not lp_ft.model.freeze_backbone
    assert (lp_ft.optimizer.backbone_lr_scale, lp_ft.optimizer.layer_decay) == (0.1, 0.75)
    with pytest.raises(HubError, match="'lp-ft' needs the linear probe's run folder"):
        hub.finetune.finetune_recipe("vit_digits.sklearn", "mine", policy="lp-ft")
    with pytest.raises(HubError, match="'full' starts from no probe"):
        hub.finetune.finetune_recipe("vit_digits.sklearn", "mine", policy="full", probe=tmp_path / "probe")


def test_auto_picks_its_candidates_by_training_examples_per_class():
    """The rule (hub.finetune.AUTO_RULE): a linear probe and LP-FT below 50 training examples per class, the full
    fine-tune at the card's learning rate too from 50; families without a classifier fine-tune whole."""
    from hub.finetune import auto_candidates, rule_text, stopping_for

    assert auto_candidates(49.9, classifier=True) == ["linear-probe", "lp-ft"]
    assert auto_candidates(50, classifier=True) == ["linear-probe", "lp-ft", "full-recipe-lr"]
    assert auto_candidates(3, classifier=False) == ["full"]
    assert auto_candidates(400, classifier=False) == ["full", "full-recipe-lr"]
    assert rule_text(True) == ("fewer than 50 training examples per class: linear-probe, lp-ft; 50 or more: "
                               "linear-probe, lp-ft, full-recipe-lr")
    assert rule_text(False, per_class=False) == ("fewer than 50 training examples: full; 50 or more: full, "
                                                 "full-recipe-lr")
    assert [stopping_for(n) for n in (2, 20, 60)] == [(5, 0), (5, 6), (10, 20)]  # (patience, min_epochs)


@pytest.mark.parametrize("info,num_classes,expected", [
    ({"sizes": [400, 50, 50]}, 10, {"train": 400, "counted": "examples", "classes": 10, "per_class": 40.0}),
    ({"sizes": [70, 15, 15]}, 1, {"train": 70, "counted": "examples", "classes": None, "per_class": 70.0}),  # rows
    ({"split": {"train": 140, "val": 500, "test": 1000}}, 7,
     {"train": 140, "counted": "nodes", "classes": 7, "per_class": 20.0}),
    ({"units": {"train": [1, 2, 3], "val": [4], "test": 2}}, None,
     {"train": 3, "counted": "units", "classes": None, "per_class": 3.0}),
    ({"samples": [900, 100, 200]}, None, {"train": 900, "counted": "windows", "classes": None, "per_class": 900.0}),
])
def test_the_training_data_auto_counts_in_each_domains_data_module(monkeypatch, info, num_classes, expected):
    from types import SimpleNamespace

    import hub.finetune

    monkeypatch.setattr(hub.finetune, "build_data", lambda recipe: SimpleNamespace(info=info, num_classes=num_classes))
    assert hub.finetune.count_training_data(None) == expected


def test_a_data_module_without_a_training_size_asks_for_a_policy(monkeypatch):
    from types import SimpleNamespace

    import hub.finetune

    monkeypatch.setattr(hub.finetune, "build_data", lambda recipe: SimpleNamespace(info={"source": "x"}, num_classes=2))
    with pytest.raises(HubError, match="reports no training size.*other than auto"):
        hub.finetune.count_training_data(None)


def test_finetune_budgets_scale_patience_and_minimum_epochs_with_the_schedule(monkeypatch):
    """The card's max_epochs (vit_digits.sklearn: 150) capped per policy (a linear probe 30, the rest 60), a time
    budget, patience max(5, epochs // 6) and min_epochs epochs // 3 of the run's (an overridden) max_epochs, unless
    the recipe sets them; full-recipe-lr trains the backbone at the card's own rate, without layer decay."""
    import hub.finetune

    resolved = hub.model_card("vit_digits.sklearn").recipe["resolved"]
    monkeypatch.setattr(hub.finetune, "finetune_data_section", lambda card, path, **options: resolved["data"])

    def trainer(policy="full-recipe-lr", overrides=(), **kwargs):
        cfg = hub.finetune.finetune_recipe("vit_digits.sklearn", "mine", list(overrides), policy=policy, **kwargs)
        return cfg, (cfg.trainer.max_epochs, cfg.trainer.early_stopping.patience, cfg.trainer.min_epochs,
                     cfg.trainer.max_minutes)

    recipe, budget = trainer()
    assert (recipe.optimizer.backbone_lr_scale, recipe.optimizer.layer_decay) == (1.0, None)
    assert recipe.optimizer.lr == resolved["optimizer"]["lr"] and recipe.model.init_from == "vit_digits.sklearn"
    assert budget == (60, 10, 20, 30.0)
    assert trainer("linear-probe")[1] == (30, 5, 10, 30.0)
    assert trainer("full")[0].optimizer.layer_decay == 0.75
    assert trainer(overrides=["trainer.max_epochs=12"])[1] == (12, 5, 4, 30.0)
    assert trainer(overrides=["trainer.min_epochs=0", "trainer.early_stopping.patience=null"],
                   budget_minutes=None)[1] == (60, None, 0, None)
    line = hub.finetune.budget_line("full-recipe-lr", recipe)
    assert line == ("  full-recipe-lr: at most 60 epochs or 30 minutes; stops after 10 epochs without progress on "
                    "val/loss, not before epoch 20")


def _fake_run(root: Path, value: float, best: int, last: int) -> Path:
    run = root / f"run-{len(list(root.glob('run-*')))}"
    run.mkdir(parents=True)
    (run / "metrics.json").write_text(json.dumps({
        "final": {"epoch": last}, "best": {"monitor": "val/loss", "epoch": best},
        "validation": {"metric": "val/loss", "mode": "min", "value": value}}))
    return run


def test_a_candidate_whose_best_epoch_is_its_last_is_recorded_as_still_improving(tmp_path):
    from hub.finetune import candidate_entry

    assert candidate_entry(_fake_run(tmp_path, 0.5, best=19, last=19)) == {
        "run": "run-0", "metric": "val/loss", "mode": "min", "value": 0.5, "epochs": 20, "still_improving": True}
    assert not candidate_entry(_fake_run(tmp_path, 0.5, best=12, last=19))["still_improving"]


def test_auto_says_its_rule_and_budgets_then_records_every_candidate(monkeypatch, tmp_path):
    """finetune(auto) on 60 training examples per class (counted, not trained here: the runs are faked): the rule,
    then one budget line per run before training; a line for the candidate still improving at its last epoch; the
    best on validation kept with its policy entry (rule, counts, each candidate's run, value, epochs)."""
    import hub.finetune

    resolved = hub.model_card("vit_digits.sklearn").recipe["resolved"]
    monkeypatch.setattr(hub.finetune, "finetune_data_section", lambda card, path, **options: resolved["data"])
    monkeypatch.setattr(hub.finetune, "count_training_data", lambda recipe: {
        "train": 600, "counted": "examples", "classes": 10, "per_class": 60.0})
    monkeypatch.setattr(hub.finetune, "baseline", lambda card, run_dir: None)
    card = hub.model_card("vit_digits.sklearn")
    monkeypatch.setattr(hub.finetune, "model_card", lambda name: card)  # the faked run folders hold no card
    # (validation loss, best epoch, last epoch) of the linear probe, LP-FT, full-recipe-lr
    outcomes = {(True, 1.0): (0.9, 29, 29), (False, 0.1): (0.4, 10, 20), (False, 1.0): (0.6, 30, 40)}

    def fake_train(recipe, progress):
        value, best, last = outcomes[(recipe.model.freeze_backbone, recipe.optimizer.backbone_lr_scale)]
        return _fake_run(tmp_path, value, best, last)

    monkeypatch.setattr(hub.finetune, "train", fake_train)
    lines = []
    run, comparison = hub.finetune.finetune("vit_digits.sklearn", "mine", report=lines.append)
    assert comparison is None and run.name == "run-1"  # LP-FT: the lowest validation loss
    assert lines[0].startswith("fine-tune policy auto: 600 training examples, 60 per class (10 classes); "
                               "candidates linear-probe, lp-ft, full-recipe-lr (rule: fewer than 50")
    assert lines[2:5] == [
        "  linear-probe: at most 30 epochs or 30 minutes; stops after 5 epochs without progress on val/loss, "
        "not before epoch 10",
        "  lp-ft: at most 60 epochs or 30 minutes; stops after 10 epochs without progress on val/loss, "
        "not before epoch 20",
        "  full-recipe-lr: at most 60 epochs or 30 minutes; stops after 10 epochs without progress on val/loss, "
        "not before epoch 20"]
    assert lines[5:] == ["  linear-probe was still improving at its last epoch (30); more epochs "
                         "(trainer.max_epochs=60) may help"]
    policy = json.loads((run / "metrics.json").read_text())["policy"]
    assert (policy["chosen"], policy["asked"]) == ("lp-ft", "auto")
    assert policy["rule"]["per_class"] == 60.0 and policy["rule"]["text"].startswith("fewer than 50 training")
    assert policy["candidates"]["full-recipe-lr"] == {"run": "run-2", "metric": "val/loss", "mode": "min",
                                                      "value": 0.6, "epochs": 41, "still_improving": False}
    assert policy["candidates"]["linear-probe"]["still_improving"]


def test_min_epochs_hold_back_early_stopping_but_not_the_time_budget(repo, tmp_path):
    """No epoch improves val/acc by 100: patience 1 stops after 2 epochs, after 3 with trainer.min_epochs=3; a time
    budget (trainer.max_minutes) spent in the first batch ends the run in its first epoch all the same."""
    stalled = ["trainer.max_epochs=4", "trainer.early_stopping.patience=1", "trainer.early_stopping.min_delta=100"]

    def epochs(*extra):
        run = _train(repo, tmp_path, [*stalled, *extra])
        return len((run / "metrics.csv").read_text().strip().splitlines()) - 1

    assert epochs() == 2
    assert epochs("trainer.min_epochs=3") == 3
    assert epochs("trainer.min_epochs=3", "trainer.max_minutes=1e-6") == 1


def test_hub_training_is_a_deprecated_alias_of_hub_run(monkeypatch):
    import importlib

    import hub.run.evaluate
    import hub.run.train

    monkeypatch.delitem(sys.modules, "hub.training", raising=False)
    with pytest.warns(DeprecationWarning, match="hub.run"):
        old = importlib.import_module("hub.training")
    assert (old.train, old.evaluate, old.card_data) == (hub.run.train.train, hub.run.evaluate.evaluate,
                                                        hub.run.evaluate.card_data)


def test_resume_matches_uninterrupted_run(repo, tmp_path):
    straight = _train(repo, tmp_path / "a", ["trainer.max_epochs=2"])
    half = _train(repo, tmp_path / "b", ["trainer.max_epochs=1"])
    resumed = train(resume=str(half), overrides=["trainer.max_epochs=2"], progress=False)
    assert resumed == half
    a = load_state_dict(straight / "model.safetensors", None)
    b = load_state_dict(resumed / "model.safetensors", None)
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6)
    rows = (resumed / "metrics.csv").read_text().strip().splitlines()
    assert len(rows) == 3


def test_ema_weights_are_the_ones_checkpointed_tested_and_kept(repo, tmp_path):
    from hub.run.evaluate import evaluate

    run = _train(repo, tmp_path / "a", ["trainer.ema_decay=0.5", "trainer.test_checkpoint=last"])
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    kept = load_state_dict(run / "model.safetensors", None)
    averaged = {k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()}
    raw = {k.removeprefix("model."): v for k, v in ckpt["current_model_state"].items()}
    assert kept.keys() == averaged.keys()
    for key in kept:
        torch.testing.assert_close(kept[key], averaged[key], rtol=0, atol=0)
    assert any(not torch.equal(kept[k], raw[k]) for k in kept)  # the average, not the last step's weights
    summary = json.loads((run / "metrics.json").read_text())
    assert evaluate(str(run), progress=False)["test/loss"] == pytest.approx(summary["test"]["test/loss"], rel=1e-5)
    half = _train(repo, tmp_path / "b", ["trainer.ema_decay=0.5", "trainer.test_checkpoint=last",
                                         "trainer.max_epochs=1"])
    resumed = load_state_dict(train(resume=str(half), overrides=["trainer.max_epochs=2"], progress=False)
                              / "model.safetensors", None)
    for key in kept:
        torch.testing.assert_close(resumed[key], kept[key], rtol=0, atol=1e-6)


def test_resume_with_changed_model_args_refused(repo, tmp_path):
    run = _train(repo, tmp_path, ["trainer.max_epochs=1"])
    with pytest.raises(TrainingError, match=r"model\.args"):
        train(str(repo / "recipes" / "quickstart.yaml"), ["model.args.drop_path_rate=0.3", *SHORT],
              resume=str(run), progress=False)


class _NaNAfter(torch.nn.Module):
    """A linear classifier whose output turns NaN after ``steps`` training forwards."""

    def __init__(self, steps: int, num_classes: int = 10):
        super().__init__()
        self.head = torch.nn.Linear(64, num_classes)
        self.steps = steps
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        out = self.head(x.flatten(1))
        if self.training:
            self.calls += 1
            if self.calls > self.steps:
                out = out * float("nan")
        return out


@register_model(task="image-classification", domain="core")
def nan_after_model(num_classes: int = 10, steps: int = 4):
    return _NaNAfter(steps, num_classes)


def test_nan_loss_stops_naming_step_and_keeps_last_good_checkpoint(repo, tmp_path):
    with pytest.raises(TrainingError, match=r"loss is nan at global step 4") as err:
        _train(repo, tmp_path, ["model.name=nan_after_model", "model.args={steps: 4}", "trainer.max_epochs=3",
                                "trainer.limit_train_batches=3"])
    assert "last.ckpt" in str(err.value)
    last = next(tmp_path.rglob("last.ckpt"))
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)
    assert checkpoint["global_step"] == 3
    assert all(torch.isfinite(v).all() for v in checkpoint["state_dict"].values() if v.is_floating_point())


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """``attnhub train`` of the quickstart with 2 DDP processes on CPU (warnings shown), on a test split of 343
    samples: an odd count, which Lightning's DistributedSampler would pad with a repeated sample."""
    out = tmp_path_factory.mktemp("ddp")
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "quickstart.yaml"
    cmd = [sys.executable, "-m", "hub", "train", str(recipe), *SHORT, "trainer.strategy=ddp", "trainer.devices=2",
           "trainer.accelerator=cpu", "data.args.test_fraction=0.19", f"output_dir={out}", "--no-progress"]
    result = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "default"},
                            timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result, next(out.rglob("metrics.json")).parent


@pytest.mark.slow
def test_ddp_on_cpu_trains_the_same_weights_in_both_processes(ddp_run):
    _, run = ddp_run
    summary = json.loads((run / "metrics.json").read_text())
    assert summary["replicas"]["world_size"] == 2
    assert summary["replicas"]["in_sync"] is True


@pytest.mark.slow
def test_ddp_tests_each_sample_once_and_reports_once(ddp_run):
    from hub.models import model_card
    from hub.run.evaluate import card_data, evaluate

    result, run = ddp_run
    assert len(card_data(model_card(str(run))).test_dataloader().dataset) % 2 == 1
    tested = json.loads((run / "metrics.json").read_text())["test"]
    single = evaluate(str(run), progress=False)  # one process, the run's weights and test split
    assert tested.keys() == single.keys()
    for key, value in single.items():
        assert tested[key] == pytest.approx(value, rel=0, abs=1e-6), key
    assert result.stdout.count(str(run)) == 1, result.stdout
    assert "sync_dist" not in result.stderr and "DistributedSampler" not in result.stderr, result.stderr[-3000:]


def test_joint_monitor_follows_the_gat_rule(repo, tmp_path):
    """trainer.monitor=[val/loss, val/acc]: patience counts epochs where neither reaches its best so far;
    the tested weights are those of the last epoch where both did (checked against metrics.csv)."""
    run = _train(repo, tmp_path, ["trainer.max_epochs=8", "trainer.monitor=[val/loss,val/acc]",
                                  "trainer.early_stopping.patience=2", "trainer.test_checkpoint=best",
                                  "optimizer.lr=0.05"])
    rows = [dict(zip(*[line.split(",") for line in pair]))
            for pair in [((run / "metrics.csv").read_text().splitlines()[0], line)
                         for line in (run / "metrics.csv").read_text().splitlines()[1:]]]
    best_loss, best_acc, improved, best, waited = float("inf"), -1.0, -1, -1, 0
    for row in rows:
        loss, acc, epoch = float(row["val/loss"]), float(row["val/acc"]), int(row["epoch"])
        if loss <= best_loss or acc >= best_acc:
            improved, waited = epoch, 0
            if loss <= best_loss and acc >= best_acc:
                best = epoch
            best_loss, best_acc = min(best_loss, loss), max(best_acc, acc)
        else:
            waited += 1
        assert float(row["monitor/best_at"]) == best and float(row["monitor/improved_at"]) == improved
    summary = json.loads((run / "metrics.json").read_text())
    assert summary["best"]["epoch"] == best and "GAT" in summary["epoch_selection"]
    assert torch.load(run / "checkpoints" / "best.ckpt", weights_only=True)["epoch"] == best
    assert len(rows) == 8 or waited == 2  # stopped by patience, or ran out of epochs
    assert summary["validation"]["metric"] == "val/acc"  # a joint monitor: the task's metric


def test_the_recipes_monitor_is_the_validation_metric_a_policy_is_chosen_on(repo, tmp_path):
    run = _train(repo, tmp_path, ["trainer.monitor=val/loss", "trainer.test_checkpoint=best"])
    summary = json.loads((run / "metrics.json").read_text())
    rows = (run / "metrics.csv").read_text().splitlines()
    losses = [float(dict(zip(rows[0].split(","), line.split(",")))["val/loss"]) for line in rows[1:]]
    assert summary["validation"] == {"metric": "val/loss", "mode": "min", "value": pytest.approx(min(losses))}


def test_parameter_groups_scale_the_backbone_and_decay_timm_layers():
    import timm

    from hub.recipe import OptimizerSection
    from hub.run.module import parameter_groups

    model = torch.nn.Sequential()
    model.add_module("body", torch.nn.Linear(4, 4))
    model.add_module("head", torch.nn.Linear(4, 2))
    groups = parameter_groups(model, OptimizerSection(lr=1e-2, weight_decay=0.1, backbone_lr_scale=0.1), "head")
    by_param = {id(p): (g["lr"], g["weight_decay"]) for g in groups for p in g["params"]}
    assert by_param[id(model.body.weight)] == pytest.approx((1e-3, 0.1))
    assert by_param[id(model.body.bias)] == pytest.approx((1e-3, 0.0))
    assert by_param[id(model.head.weight)] == pytest.approx((1e-2, 0.1))
    with pytest.raises(RecipeError, match="optimizer.layer_decay"):
        parameter_groups(model, OptimizerSection(layer_decay=0.5), "head")
    vit = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=3, num_classes=2)
    lrs = {name: g["lr"] for g in parameter_groups(vit, OptimizerSection(lr=1.0, layer_decay=0.5), "head")
           for name, p in vit.named_parameters() for q in g["params"] if p is q}
    assert [lrs[n] for n in ("head.weight", "blocks.2.mlp.fc1.weight", "blocks.0.mlp.fc1.weight",
                             "patch_embed.proj.weight")] == [1.0, 0.5, 0.125, 0.0625]


def test_freeze_backbone_leaves_the_classifier_and_fresh_tensors_trainable():
    from hub.run.train import freeze_backbone

    model = hub.create_model("vit_digits", num_classes=3)
    freeze_backbone(model, "head", "vit_digits", fresh={"patch_embed.proj.weight"})
    trainable = sorted(n for n, p in model.named_parameters() if p.requires_grad)
    assert trainable == ["head.bias", "head.weight", "patch_embed.proj.weight"]
    with pytest.raises(RecipeError, match="no classifier parameters"):
        freeze_backbone(model, None, "vit_digits")


def test_init_from_trains_the_classifier_fresh_for_as_many_classes_under_other_names():
    """Fine-tuning vit_digits.sklearn (digits 0-9) on ten other classes must not start from rows scoring digits;
    on the same ten classes the whole model, head included, starts from the card's weights."""
    from hub.run.train import _init_from

    card = hub.model_card("vit_digits.sklearn")
    pretrained = hub.load(card.name).state_dict()
    same, fresh = _init_from(card.name, card.family, dict(card.model_args), card.label_names)
    assert fresh == set() and all(torch.equal(v, pretrained[k]) for k, v in same.state_dict().items())
    other, fresh = _init_from(card.name, card.family, dict(card.model_args), [f"kind_{n}" for n in card.label_names])
    assert fresh == {"head.weight", "head.bias"}
    assert all(torch.equal(v, pretrained[k]) for k, v in other.state_dict().items() if not k.startswith("head."))
    assert not torch.equal(other.state_dict()["head.weight"], pretrained["head.weight"])


def test_norm_layers_learn_faster_and_decay_as_much_per_step_with_norm_lr_scale():
    from hub.recipe import OptimizerSection
    from hub.run.module import parameter_groups

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    groups = parameter_groups(model, OptimizerSection(lr=0.5, weight_decay=0.01, norm_lr_scale=64), None)
    by_param = {id(p): (g["lr"], g["weight_decay"]) for g in groups for p in g["params"]}
    assert by_param[id(model[0].weight)] == pytest.approx((0.5, 0.01))
    assert by_param[id(model[1].bias)] == pytest.approx((32.0, 0.01 / 64))  # lr * wd unchanged: airbench's scaler


@pytest.mark.parametrize("name,expected", [
    ("linear", [1.0, 0.75, 0.5, 0.25, 0.0]),  # airbench's triangle: 0.2 -> 1 over the warmup -> 0
    ("cosine", [1.0, 0.8535534, 0.5, 0.1464466, 0.0]),
])
def test_lr_factor_warms_up_from_its_start_ratio_over_fractional_epochs_then_decays(name, expected):
    from hub.recipe import SchedulerSection
    from hub.run.module import lr_factor

    sched = SchedulerSection(name=name, warmup_epochs=1.5, warmup_start_ratio=0.2)  # 1.5 x 2 steps: 3 steps
    factors = [lr_factor(sched, step, steps_per_epoch=2, total_steps=7) for step in range(8)]
    assert factors[:3] == pytest.approx([0.2 + 0.8 / 3, 0.2 + 1.6 / 3, 1.0])
    assert factors[3:] == pytest.approx(expected)


def test_lookahead_pulls_towards_slow_weights_on_its_schedule_and_resumes_from_its_state():
    from types import SimpleNamespace

    from hub.run.callbacks import Lookahead

    module, trainer = torch.nn.Linear(3, 2), SimpleNamespace(global_step=0, estimated_stepping_batches=10)
    lookahead = Lookahead(every=5, base=0.9)
    lookahead.on_train_start(trainer, module)
    start = module.weight.detach().clone()
    for step in range(1, 6):
        with torch.no_grad():
            module.weight.add_(1.0)  # a "training step"
        trainer.global_step = step
        lookahead.on_train_batch_end(trainer, module, None, None, step - 1)
    decay = 0.9 ** 5 * 0.5 ** 3  # at step 5 of 10
    torch.testing.assert_close(module.weight, start + 5 * (1 - decay))
    restored = Lookahead(every=5, base=0.9)
    restored.load_state_dict(lookahead.state_dict())
    twin = torch.nn.Linear(3, 2)
    twin.load_state_dict(module.state_dict())
    trainer.global_step = 10  # the last step: both end on their slow weights
    for callback, model in ((lookahead, module), (restored, twin)):
        callback.on_train_batch_end(trainer, model, None, None, 9)
        torch.testing.assert_close(model.weight, callback.slow[0])
    torch.testing.assert_close(module.weight, twin.weight, rtol=0, atol=0)


def test_lookahead_run_checkpoints_its_slow_weights(repo, tmp_path):
    run = _train(repo, tmp_path, ["trainer.lookahead=true", "task.label_smoothing=0.1"])
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    slow = next(v for k, v in ckpt["callbacks"].items() if k.startswith("Lookahead"))["slow"]
    weights = [v for v in ckpt["state_dict"].values() if v.is_floating_point()]
    assert len(slow) == len(weights) and all(torch.equal(s, w) for s, w in zip(slow, weights))


def test_a_task_option_the_datas_task_does_not_take_is_a_recipe_error():
    from types import SimpleNamespace

    from hub.recipe import Recipe
    from hub.run.train import build_task

    recipe = Recipe.model_validate({"model": {"name": "vit_digits"}, "data": {"name": "sklearn_digits"},
                                    "task": {"label_smoothing": 0.1}})
    classes = SimpleNamespace(task="classification", task_args=lambda: {"num_classes": 3})
    assert build_task(recipe, classes).label_smoothing == 0.1
    values = SimpleNamespace(task="regression", task_args=lambda: {})
    with pytest.raises(RecipeError, match="task.label_smoothing.*'regression' does not take it"):
        build_task(recipe, values)
