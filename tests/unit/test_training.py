"""Training without training a model: refusals before the first step, the fine-tune policy and its budgets (runs
faked), parameter groups, learning-rate factors, Lookahead and task options. The runs themselves are in
tests/integration/test_training_runs.py. Also the allocator setting training makes (hub.run.host_memory)."""
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hub
from hub.errors import HubError, RecipeError
from hub.recipe import DataSection
from hub.run.train import train


def test_a_logger_without_its_package_fails_before_training(repo, tmp_path, monkeypatch):
    import hub.run.tracking

    real = hub.run.tracking.importlib.util.find_spec
    monkeypatch.setattr(hub.run.tracking.importlib.util, "find_spec",
                        lambda name, *args: None if name == "mlflow" else real(name, *args))
    with pytest.raises(RecipeError, match=r"trainer.loggers names 'mlflow'.*pip install mlflow"):
        train(str(repo / "recipes" / "quickstart.yaml"), ["trainer.loggers=[csv,mlflow]", f"output_dir={tmp_path}"],
              progress=False)
    assert list(tmp_path.iterdir()) == []  # no run folder


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
                        lambda card, path, **options: DataSection(**card.recipe["resolved"]["data"]))
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
    monkeypatch.setattr(hub.finetune, "finetune_data_section",
                        lambda card, path, **options: DataSection(**resolved["data"]))
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
    """The rule (hub.finetune.AUTO_RULE): a classifier's linear probe, LP-FT and full fine-tune at the card's
    learning rate at every size; families without a classifier fine-tune whole, at the card's rate too from 50."""
    from hub.finetune import auto_candidates, rule_text, stopping_for

    assert auto_candidates(49.9, classifier=True) == ["linear-probe", "lp-ft", "full-recipe-lr"]
    assert auto_candidates(50, classifier=True) == ["linear-probe", "lp-ft", "full-recipe-lr"]
    assert auto_candidates(3, classifier=False) == ["full"]
    assert auto_candidates(400, classifier=False) == ["full", "full-recipe-lr"]
    assert rule_text(True) == "at any number of training examples per class: linear-probe, lp-ft, full-recipe-lr"
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
    monkeypatch.setattr(hub.finetune, "finetune_data_section",
                        lambda card, path, **options: DataSection(**resolved["data"]))

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
    monkeypatch.setattr(hub.finetune, "finetune_data_section",
                        lambda card, path, **options: DataSection(**resolved["data"]))
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
                               "candidates linear-probe, lp-ft, full-recipe-lr (rule: at any number")
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
    assert policy["rule"]["per_class"] == 60.0 and policy["rule"]["text"].startswith("at any number of training")
    assert policy["candidates"]["full-recipe-lr"] == {"run": "run-2", "metric": "val/loss", "mode": "min",
                                                      "value": 0.6, "epochs": 41, "still_improving": False}
    assert policy["candidates"]["linear-probe"]["still_improving"]


def test_hub_training_is_a_deprecated_alias_of_hub_run(monkeypatch):
    import importlib

    import hub.run.evaluate
    import hub.run.train

    monkeypatch.delitem(sys.modules, "hub.training", raising=False)
    with pytest.warns(DeprecationWarning, match="hub.run"):
        old = importlib.import_module("hub.training")
    assert (old.train, old.evaluate, old.card_data) == (hub.run.train.train, hub.run.evaluate.evaluate,
                                                        hub.run.evaluate.card_data)


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


def test_an_epoch_without_validation_leaves_the_validation_metrics_out_of_its_row(tmp_path):
    """trainer.check_val_every_n_epoch=2: Lightning keeps the last validation's metrics in callback_metrics, so an
    epoch that did not validate would repeat them; its row in metrics.csv leaves them empty instead."""
    from types import SimpleNamespace

    from hub.run.callbacks import RunRecorder

    recorder = RunRecorder(tmp_path)
    trainer = SimpleNamespace(sanity_checking=False, is_global_zero=True, global_step=0, callback_metrics={},
                              optimizers=[SimpleNamespace(param_groups=[{"lr": 0.1}])])
    for epoch in range(3):
        trainer.current_epoch = epoch
        trainer.callback_metrics["train/loss_epoch"] = torch.tensor(1.0 - epoch / 10)
        if epoch == 1:
            trainer.callback_metrics.update({"val/acc": torch.tensor(0.5), "monitor/best_at": torch.tensor(1.0)})
            recorder.on_validation_epoch_end(trainer, None)
        recorder.on_train_epoch_end(trainer, None)
    assert [sorted(row) for row in recorder.history] == [
        ["epoch", "lr", "step", "train/loss"], ["epoch", "lr", "monitor/best_at", "step", "train/loss", "val/acc"],
        ["epoch", "lr", "step", "train/loss"]]
    rows = (tmp_path / "metrics.csv").read_text().splitlines()
    assert rows[0] == "epoch,step,train/loss,lr,val/acc,monitor/best_at" and rows[3] == "2,0,0.800000011920929,0.1,,"


def test_time_budget_is_per_call_a_resumed_run_does_not_inherit_the_time_spent():
    """trainer.max_minutes is one call's budget: Lightning's Timer would restore the hour spent by earlier calls from
    the checkpoint and stop the resumed run at its first epoch's end; the hub's ignores it, and keeps its key."""
    from datetime import timedelta

    import pytorch_lightning as pl
    from pytorch_lightning.trainer.states import RunningStage

    from hub.run.callbacks import Timer

    spent = {"time_elapsed": {"train": 3600.0, "sanity_check": 0.0, "validate": 0.0, "test": 0.0, "predict": 0.0}}
    lightnings, hubs = pl.callbacks.Timer(timedelta(minutes=1)), Timer(timedelta(minutes=1))
    lightnings.load_state_dict(spent)
    hubs.load_state_dict(spent)
    assert lightnings.time_elapsed(RunningStage.TRAINING) >= 3600  # what the hub's Timer avoids
    assert hubs.time_elapsed(RunningStage.TRAINING) == 0.0
    assert hubs.state_key == lightnings.state_key


def test_a_run_folder_that_moved_keeps_its_best_checkpoint_score_on_resume():
    """A run folder copied elsewhere (to a lent GPU and back) and resumed: Lightning's ModelCheckpoint would drop the
    best score (its dirpath changed), so the first resumed epoch would overwrite best.ckpt whatever its score."""
    import pytorch_lightning as pl

    from hub.run.callbacks import ModelCheckpoint

    old, new = "/elsewhere/run/checkpoints", "/here/run/checkpoints"
    state = pl.callbacks.ModelCheckpoint(dirpath=old, filename="best", monitor="val/acc", mode="max").state_dict()
    state.update(best_model_score=torch.tensor(0.9), best_model_path=f"{old}/best.ckpt",
                 best_k_models={f"{old}/best.ckpt": torch.tensor(0.9)}, kth_best_model_path=f"{old}/best.ckpt",
                 kth_value=torch.tensor(0.9))
    lightnings = pl.callbacks.ModelCheckpoint(dirpath=new, filename="best", monitor="val/acc", mode="max")
    with pytest.warns(UserWarning, match="dirpath has changed"):
        lightnings.load_state_dict(state)
    assert lightnings.best_model_score is None  # what the hub's checkpoint avoids
    hubs = ModelCheckpoint(dirpath=new, filename="best", monitor="val/acc", mode="max")
    hubs.load_state_dict(state)
    assert float(hubs.best_model_score) == pytest.approx(0.9)
    assert hubs.best_model_path == f"{new}/best.ckpt" and list(hubs.best_k_models) == [f"{new}/best.ckpt"]
    assert hubs.state_key == lightnings.state_key


MMAPPED_BLOCKS = """
import ctypes, sys
from hub.run.host_memory import keep_freed_memory
class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype, libc.malloc.restype = MallInfo2, ctypes.c_void_p
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
before = libc.mallinfo2().hblks
block = libc.malloc(ctypes.c_size_t(64 << 20))
print(kept, libc.mallinfo2().hblks - before)
libc.free(ctypes.c_void_p(block))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator only")
def test_keep_freed_memory_serves_large_blocks_from_the_reusable_heap():
    """A 64 MiB request is a mapped block of its own under glibc's defaults, and comes from the heap (which keeps
    freed memory for the next step) after keep_freed_memory."""
    def mapped_blocks(mode: str) -> list[str]:
        return subprocess.run([sys.executable, "-c", MMAPPED_BLOCKS, mode], capture_output=True, text=True,
                              check=True).stdout.split()

    assert mapped_blocks("default") == ["None", "1"]
    assert mapped_blocks("keep") == ["True", "0"]
