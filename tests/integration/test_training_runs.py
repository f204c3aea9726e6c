"""Training runs end to end on scikit-learn's digits (shipped by a dependency, nothing to fetch): run folders, tracking,
publish, resume, refused resumes, NaN stop, DDP on CPU, early stopping rules, EMA and Lookahead checkpoints, and the
quickstart recipe in full. Short runs train the tag vit_digits.sklearn's recipe (batches of 64, validated every
epoch), cut to a few batches."""
import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.datasets import load_digits

import hub
from hub.cli import main
from hub.core.registry import register_model
from hub.core.weights import load_state_dict
from hub.errors import HubError, TrainingError
from hub.run.evaluate import evaluate
from hub.run.train import train
from tests.unit.test_quickstart import _write_digit_pngs

RECIPE = Path("recipes") / "vision" / "vit_digits_sklearn.yaml"
SHORT = ["trainer.max_epochs=2", "trainer.limit_train_batches=3", "trainer.limit_val_batches=2"]


def _train(repo, tmp_path, extra=(), **kwargs):
    return train(str(repo / RECIPE), [*SHORT, f"output_dir={tmp_path}", *extra],
                 progress=False, **kwargs)


def test_run_folder_contents_and_no_overwrite(repo, tmp_path):
    run = _train(repo, tmp_path)
    for name in ("recipe.yaml", "metrics.csv", "metrics.json", "curves.png", "model.safetensors", "card.json",
                 "checkpoints/last.ckpt", "checkpoints/best.ckpt"):
        assert (run / name).is_file(), name
    summary = json.loads((run / "metrics.json").read_text())
    assert set(summary) >= {"final", "best", "test", "epoch_selection"}
    # the test metrics are those of the kept weights, on the card's test split
    assert evaluate(str(run), progress=False)["test/acc"] == pytest.approx(summary["test"]["test/acc"], abs=1e-6)
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
    (mlflow_run,) = client.search_runs([client.get_experiment_by_name("vit_digits_sklearn").experiment_id])
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


def test_publish_then_add_seeds_keeps_the_weights_and_extends_the_metrics(repo, tmp_path):
    from hub.deploy.publish import publish

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
    from hub.core.cards import absolute_paths
    from hub.deploy.publish import publish

    run = _train(repo, tmp_path / "runs", ["seed=3"])  # trained with an absolute recipe path and output_dir
    card = json.loads((run / "card.json").read_text())
    assert absolute_paths(card) == [] and absolute_paths(json.loads((run / "metrics.json").read_text())) == []
    assert card["recipe"]["path"] == RECIPE.as_posix()
    assert card["recipe"]["overrides"] == [*SHORT, "seed=3"]  # the output_dir override is not recorded
    assert "output_dir" not in card["recipe"]["resolved"] and card["recipe"]["resolved"]["seed"] == 3
    card["data"]["source"] = "/home/someone/digits"
    (run / "card.json").write_text(json.dumps(card))
    with pytest.raises(HubError, match=r"paths of this machine: data.source='/home/someone/digits'"):
        publish([str(run)], "vit_digits.tiny", dest=str(tmp_path / "pretrained"))
    assert not (tmp_path / "pretrained" / "vit_digits.tiny.safetensors").exists()


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
        train(str(repo / RECIPE), ["model.args.drop_path_rate=0.3", *SHORT],
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
    """``attnhub train`` of the digits recipe with 2 DDP processes on CPU (warnings shown), on a test split of 343
    samples: an odd count, which Lightning's DistributedSampler would pad with a repeated sample."""
    out = tmp_path_factory.mktemp("ddp")
    recipe = Path(__file__).resolve().parents[2] / RECIPE
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
    from hub.run.evaluate import card_data

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


def test_lookahead_run_checkpoints_its_slow_weights(repo, tmp_path):
    run = _train(repo, tmp_path, ["trainer.lookahead=true", "task.label_smoothing=0.1"])
    ckpt = torch.load(run / "checkpoints" / "last.ckpt", weights_only=True)
    slow = next(v for k, v in ckpt["callbacks"].items() if k.startswith("Lookahead"))["slow"]
    weights = [v for v in ckpt["state_dict"].values() if v.is_floating_point()]
    assert len(slow) == len(weights) and all(torch.equal(s, w) for s, w in zip(slow, weights))


@pytest.mark.slow
def test_quickstart_in_full_learns_the_digits_and_says_how_long_it_took(tmp_path, capsys):
    """The README's first command in full (cct_digits, 60 epochs on one thread, trainer.num_threads: 52-56 s fitting
    on a busy CPU): seed 0 tested 0.967 (seeds 1 and 2: 0.978, 0.972; the tag's 150-epoch recipe 0.976 ± 0.011),
    then the wall time is printed."""
    assert main(["train", "recipes/quickstart.yaml", "--output-dir", str(tmp_path), "--no-progress"]) == 0
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[1].split()[0])
    summary = json.loads((run / "metrics.json").read_text())
    assert summary["test"]["test/acc"] >= 0.96 and f"test/acc: {summary['test']['test/acc']:.4f}" in out
    assert summary["final"]["epoch"] == 59 and 0 < summary["fit_seconds"]
    assert f"s ({summary['fit_seconds']:.1f} s fitting, to epoch 60;" in out


def test_finetune_on_an_image_folder(tmp_path, capsys):
    root = tmp_path / "folder"
    target = load_digits().target
    for label in (0, 1, 7):
        _write_digit_pngs(root / f"class_{label}", np.flatnonzero(target == label)[:20])
    code = main(["finetune", "vit_digits.sklearn", "--data", str(root), "--output-dir", str(tmp_path / "runs"),
                 "--cv-folds", "0", "trainer.max_epochs=2", "--no-progress"])
    assert code == 0
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[1].split()[0])
    card = hub.model_card(str(run))
    assert card.label_names == ["class_0", "class_1", "class_7"]
    assert card.model_args["num_classes"] == 3
    trainer = card.recipe["resolved"]["trainer"]  # small-data defaults: early stopping on val/loss, no weight EMA
    assert trainer["ema_decay"] is None and trainer["early_stopping"]["patience"] == 5 and trainer["max_epochs"] == 2
    assert trainer["monitor"] == "val/loss" and trainer["max_minutes"] == 30.0 and trainer["min_epochs"] == 0
    # --policy auto: a linear probe, LP-FT (a full fine-tune started from that probe) and a full fine-tune at the
    # card's rate, each in its own folder, their budgets said before training; the best on validation is kept
    choice = json.loads((run / "metrics.json").read_text())["policy"]
    assert choice["asked"] == "auto" and list(choice["candidates"]) == ["linear-probe", "lp-ft", "full-recipe-lr"]
    assert choice["rule"]["classes"] == 3 and choice["rule"]["per_class"] < 50
    plan = out.split("fine-tune policy auto: ")[1]
    assert "\n  lp-ft: at most 2 epochs or 30 minutes; stops after 5 epochs without progress on val/loss" in plan
    assert f"fine-tune policy: {choice['chosen']}" in out
    assert all(c["epochs"] == 2 and c["run"] in out for c in choice["candidates"].values())
    values = {p: c["value"] for p, c in choice["candidates"].items()}
    assert {c["metric"] for c in choice["candidates"].values()} == {"val/loss"}  # the recipe's monitor
    assert values[choice["chosen"]] == min(values.values())
    assert run.name == choice["candidates"][choice["chosen"]]["run"]
    probe, full = (run.parent / choice["candidates"][p]["run"] for p in ("linear-probe", "lp-ft"))
    assert probe != full
    assert hub.model_card(str(probe)).recipe["resolved"]["model"]["init_from"] == "vit_digits.sklearn"
    resolved = hub.model_card(str(full)).recipe["resolved"]
    assert resolved["optimizer"]["layer_decay"] == 0.75 and resolved["optimizer"]["backbone_lr_scale"] == 0.1
    assert resolved["model"]["init_from"] == probe.name and not resolved["model"]["freeze_backbone"]  # no path
    pretrained, probed = hub.load("vit_digits.sklearn").state_dict(), hub.load(str(probe)).state_dict()
    assert all(torch.equal(v, pretrained[k]) for k, v in probed.items() if not k.startswith("head."))
    assert not torch.equal(hub.load(str(full)).state_dict()["blocks.0.attn.qkv.weight"],
                           pretrained["blocks.0.attn.qkv.weight"])


@pytest.mark.parametrize("recipe", ["set_max_sab", "set_max_isab", "clustering_sab", "clustering_isab"])
def test_set_task_recipe_smoke(repo, tmp_path, recipe):
    run = train(str(repo / "recipes" / "core" / f"{recipe}.yaml"),
                ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "data.args.num_train=16",
                 "data.args.num_val=8", "data.args.num_test=8", "data.args.batch_size=8", f"output_dir={tmp_path}"],
                progress=False)
    test = json.loads((run / "metrics.json").read_text())["test"]
    keys = ("test/ll", "test/oracle_ll") if recipe.startswith("clustering") else ("test/mae", "test/rmse")
    assert all(math.isfinite(test[k]) for k in keys), test


EPOCHS = ["trainer.max_epochs=3", "trainer.limit_val_batches=2"]


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(repo, tmp_path):
    recipe = str(repo / "recipes" / "quickstart.yaml")
    straight = train(recipe, [*EPOCHS, f"output_dir={tmp_path / 'a'}"], progress=False)

    cmd = [sys.executable, "-m", "hub", "train", recipe, *EPOCHS, f"output_dir={tmp_path / 'b'}", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    metrics = None
    while time.time() < deadline and proc.poll() is None:
        found = list((tmp_path / "b").rglob("metrics.csv"))
        if found and len(found[0].read_text().strip().splitlines()) >= 2:  # epoch 0 done, now inside epoch 1
            metrics = found[0]
            time.sleep(0.3)
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait(60)
    assert metrics is not None and proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    run = metrics.parent
    assert not (run / "metrics.json").exists()
    resumed = train(resume=str(run), progress=False)
    a = load_state_dict(straight / "model.safetensors", None)
    b = load_state_dict(resumed / "model.safetensors", None)
    for key in a:  # tolerance: exact up to float32 rounding of the same operations
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6)
    test_a = json.loads((straight / "metrics.json").read_text())["test"]
    test_b = json.loads((resumed / "metrics.json").read_text())["test"]
    assert test_a == pytest.approx(test_b, abs=1e-6)


def test_a_classifier_run_keeps_its_temperature_and_the_nll_and_ece_before_and_after(repo, tmp_path):
    run = train(str(repo / RECIPE), [*SHORT, f"output_dir={tmp_path}"], progress=False)
    card = json.loads((run / "card.json").read_text())
    summary = json.loads((run / "metrics.json").read_text())["calibration"]
    assert card["calibration"]["temperature"] == summary["temperature"] > 0
    assert summary["temperature"] != 1.0
    for split in ("val", "test"):
        assert set(summary[split]) == {"nll", "nll_calibrated", "ece", "ece_calibrated"}
    assert summary["val"]["nll_calibrated"] <= summary["val"]["nll"]  # fitted there: T = 1 is one of the candidates
    assert "conformal" not in card["calibration"] and "intervals" not in json.loads((run / "metrics.json").read_text())
    off = train(str(repo / RECIPE), [*SHORT, f"output_dir={tmp_path}",
                                                             "trainer.calibrate=false"], progress=False)
    assert json.loads((off / "card.json").read_text())["calibration"] == {}
    assert "calibration" not in json.loads((off / "metrics.json").read_text())
