"""Training a recipe into a run folder: the data and model it names, the Lightning trainer with its checkpoints,
early stopping and EMA, resuming, and the test of the chosen weights once per sample by global rank zero.

``train(recipe)`` writes a new run folder that never overwrites another::

    runs/<recipe>/<YYYYmmdd-HHMMSS>-s<seed>[-N]/
        recipe.yaml      the resolved recipe
        metrics.csv      one row per epoch (train and validation metrics)
        metrics.json     final, best and test metrics; calibration or intervals (hub.uncertainty)
        checkpoints/     last.ckpt and best.ckpt, written atomically
        curves.png       training curves
        tensorboard/, mlflow.db   the loggers of ``trainer.loggers`` (:mod:`hub.run.tracking`), when named
        model.safetensors + card.json   the best weights and a model card draft (``hub.load(run)``)
"""
from __future__ import annotations

import contextlib
import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import rank_zero_only

from hub.core.cards import read_card
from hub.core.registry import get_dataset_entry, get_model_entry
from hub.errors import RecipeError, TrainingError
from hub.recipe import Recipe, load_recipe
from hub.run.callbacks import (
    AtomicCheckpointIO,
    EMAWeights,
    JointImprovement,
    Lookahead,
    ModelCheckpoint,
    RunRecorder,
    Timer,
)
from hub.run.distributed import is_global_zero, is_sharded, lightning_strategy, replica_check
from hub.run.evaluate import single_device_trainer
from hub.run.folder import new_run_dir, plot_curves, write_model, write_recipe, write_summary
from hub.run.host_memory import keep_freed_memory
from hub.run.module import HubModule, seed_all
from hub.run.tracking import build_loggers, check_logger_packages, log_test_metrics
from hub.tasks import Task, create_task
from hub.uncertainty.conformal import fit_run
from hub.uncertainty.ood import fit_and_store

log = logging.getLogger("hub")


def build_data(recipe: Recipe):
    entry = get_dataset_entry(recipe.data.name)
    args = dict(recipe.data.args)
    if "seed" in entry.arg_names():
        args.setdefault("seed", recipe.seed)
    datamodule = entry.builder(**args)
    datamodule.setup("fit")  # fails here, before any training, on bad data
    return datamodule


def build_model(recipe: Recipe, datamodule) -> torch.nn.Module:
    from hub.models import create_model

    entry = get_model_entry(recipe.model.name)
    args = dict(recipe.model.args)
    for name, value in datamodule.model_args().items():
        if name not in entry.arg_names():
            continue
        if args.get(name, value) != value:
            raise RecipeError(f"key 'model.args.{name}' is {args[name]} but the data '{recipe.data.name}' "
                              f"has {name}={value}")
        args[name] = value
    fresh: set[str] = set()
    if recipe.model.memory_tokens:
        model = _memory_from(recipe.model.init_from, args, recipe.model.memory_tokens)
        model.train()
    elif recipe.model.init_from:
        model, fresh = _init_from(recipe.model.init_from, recipe.model.name, args, datamodule.label_names)
        model.train()
    else:
        model = create_model(recipe.model.name, **args)
    if recipe.model.freeze_backbone:
        freeze_backbone(model, entry.classifier, recipe.model.name, fresh)
    return model


DATA_INIT_ITEMS = 5000  # training inputs given to a model's initialize_from_data


def training_images(datamodule, count: int = DATA_INIT_ITEMS) -> torch.Tensor:
    """The first ``count`` training inputs as the model takes them, unaugmented (the OOD statistics' loader)."""
    loader = getattr(datamodule, "statistics_dataloader", datamodule.train_dataloader)
    batches, seen = [], 0
    for x, _ in loader():
        batches.append(x)
        seen += len(x)
        if seen >= count:
            break
    return torch.cat(batches)[:count]


def build_task(recipe: Recipe, datamodule) -> Task:
    """The data's task, with the recipe's ``task`` keys that differ from their defaults (e.g. label smoothing)."""
    options = recipe.task.model_dump(exclude_defaults=True)
    try:
        return create_task(datamodule.task, **datamodule.task_args(), **options)
    except TypeError:
        if not options:
            raise
        raise RecipeError(f"key 'task.{next(iter(options))}': the data's task '{datamodule.task}' does not take it "
                          f"(set in the recipe: {options})") from None


def freeze_backbone(model: torch.nn.Module, classifier: str | None, family: str, fresh: set[str] = frozenset()) -> None:
    """Leave only the parameters under the ``classifier`` prefix trainable (a linear probe), and the ``fresh`` ones
    that no pretrained weight started (e.g. an input layer sized to other features)."""
    trainable = 0
    for name, param in model.named_parameters():
        param.requires_grad = name in fresh or (classifier is not None and (name + ".").startswith(classifier + "."))
        trainable += param.requires_grad
    if not trainable:
        raise RecipeError(f"key 'model.freeze_backbone': {family} has no classifier parameters to train "
                          f"(classifier prefix {classifier!r}); fine-tune it whole instead")


def _init_from(name: str, family: str, args: dict[str, Any],
               label_names: list[str]) -> tuple[torch.nn.Module, set[str]]:
    """Start from pretrained weights; returns the model and the names of the tensors trained fresh. When the data
    changes another dimension than ``num_classes`` (e.g. ``in_channels``: a graph with other node features), the
    tensors that no longer fit are trained fresh (a new ``num_classes`` re-initialises the classifier). So is the
    classifier when the data's ``label_names`` are as many as the card's but others (FSDD digits 5-9 after a run on
    digits 0-4): its rows would score classes they never learnt."""
    from hub.models import create_model, load, model_card
    from hub.names import resolve

    ref = resolve(name)
    card = model_card(ref)
    if card.memory_tokens:  # its weights are a MemoryTokens wrapper's, not the family's
        raise RecipeError(f"key 'model.init_from': {name} was fine-tuned by memory tokens; start from its source, "
                          f"{card.memory_tokens['source']}")
    card_args = card.model_args
    changed = sorted(k for k, v in args.items() if k != "num_classes" and k in card_args and card_args[k] != v)
    relabelled = (args.get("num_classes") == card_args.get("num_classes") and bool(card.label_names)
                  and bool(label_names) and list(label_names) != list(card.label_names))
    if not changed and not relabelled:
        return load(ref, **args), set()
    pretrained = load(ref).state_dict()  # verified against the card's sha256
    model = create_model(family, **args)
    own = model.state_dict()
    classifier = get_model_entry(family).classifier if relabelled else None
    if relabelled and classifier is None:
        raise RecipeError(f"{name} was trained on classes {card.label_names}, the data has {list(label_names)}, and "
                          f"{family} has no classifier to train fresh for them")
    kept = {k: v for k, v in pretrained.items() if k in own and own[k].shape == v.shape
            and not (classifier is not None and (k + ".").startswith(classifier + "."))}
    model.load_state_dict(kept, strict=False)
    if changed:
        log.warning("%s: %s differ from the card's %s; trained fresh: %s", name,
                    {k: args[k] for k in changed}, {k: card_args[k] for k in changed}, sorted(set(own) - set(kept)))
    if relabelled:
        log.warning("%s: trained on classes %s, the data has %s; classifier '%s' trained fresh", name,
                    card.label_names, list(label_names), classifier)
    return model, set(own) - set(kept)


def _memory_from(name: str | None, args: dict[str, Any], tokens_per_layer: int) -> torch.nn.Module:
    """The pretrained ``name`` frozen whole inside :class:`~hub.attention.memory_tokens.MemoryTokens`, with
    ``tokens_per_layer`` memory tokens per block and a new class token and head for the data's classes. The source
    model is loaded as its card built it: data that would change another of its arguments than ``num_classes`` (other
    input channels, another size) raises, since the source task must keep its outputs."""
    from hub.attention.memory_tokens import MemoryTokens
    from hub.models import load, model_card
    from hub.names import resolve

    if not name:
        raise RecipeError("key 'model.memory_tokens': memory tokens extend a pretrained model; set model.init_from")
    ref = resolve(name)
    card = model_card(ref)
    if card.memory_tokens:
        raise RecipeError(f"key 'model.memory_tokens': {name} was itself fine-tuned by memory tokens; start from its "
                          f"source, {card.memory_tokens['source']}")
    changed = {k: v for k, v in args.items() if k != "num_classes" and k in card.model_args and card.model_args[k] != v}
    if changed:
        raise RecipeError(f"key 'model.memory_tokens': the data changes {changed} of {name} (its card: "
                          f"{ {k: card.model_args[k] for k in changed} }); memory tokens keep the source model as "
                          "it is")
    if not args.get("num_classes"):
        raise RecipeError("key 'model.memory_tokens': memory tokens train a new classifier; the data has no classes")
    return MemoryTokens(load(ref), args["num_classes"], tokens_per_layer)


class EarlyStopping(pl.callbacks.EarlyStopping):
    """Lightning's EarlyStopping, whose stop waits until ``min_epochs`` epochs have run: the epochs without progress
    are counted all along, as under ``Trainer(min_epochs=...)``, which would hold back the time budget's stop
    (``trainer.max_minutes``) too. Named as Lightning's, so that its state keeps its key in checkpoints (older runs
    resume with it).

    Args:
        min_epochs: the epochs that run before early stopping may end the run (None: no minimum).
        **kwargs: Lightning's EarlyStopping arguments (monitor, mode, patience, min_delta).
    """

    def __init__(self, min_epochs: int | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.min_epochs = min_epochs or 0

    def _run_early_stopping_check(self, trainer: pl.Trainer) -> None:
        stop = trainer.should_stop  # another callback's (the time budget's) stands
        super()._run_early_stopping_check(trainer)
        if trainer.current_epoch + 1 < self.min_epochs:
            trainer.should_stop = stop


def _trainer(recipe: Recipe, run_dir: Path | None, task: Task, recorder: RunRecorder, data_callbacks: list[pl.Callback],
             enable_progress: bool = True):
    cfg = recipe.trainer
    monitored = cfg.monitor if isinstance(cfg.monitor, list) else [cfg.monitor or task.monitor]
    modes = {m: task.mode if m == task.monitor else ("min" if "loss" in m or "rmse" in m else "max")
             for m in monitored}
    joint = [JointImprovement(modes)] if len(monitored) > 1 else []
    monitor, mode = (JointImprovement.BEST, "max") if joint else (monitored[0], modes[monitored[0]])
    # None in a data-parallel process other than global rank zero: ModelCheckpoint takes rank zero's folder when the
    # processes connect, and nothing else of this process writes in the run folder
    checkpoints = run_dir / "checkpoints" if run_dir is not None else None
    callbacks: list[pl.Callback] = [
        *joint,
        # best.ckpt: the epoch with the best monitored metric (first, so it is trainer.checkpoint_callback)
        ModelCheckpoint(dirpath=checkpoints, filename="best", monitor=monitor, mode=mode, save_top_k=1,
                        enable_version_counter=False, auto_insert_metric_name=False),
        # last.ckpt: every epoch (or every n steps). A separate callback, because Lightning 2.6 refreshes a
        # monitored callback's `last` only when its best improves, which would make --resume lose epochs; saved at
        # each training epoch's end, since Lightning otherwise saves after validation only when
        # check_val_every_n_epoch > 1 (a run shorter than that would end with no checkpoint to test)
        ModelCheckpoint(dirpath=checkpoints, filename="last", monitor=None, save_top_k=1,
                        enable_version_counter=False, every_n_train_steps=cfg.checkpoint_every_n_steps,
                        save_on_train_epoch_end=True),
        recorder,
        *data_callbacks,
    ]
    if cfg.ema_decay is not None:
        callbacks.append(EMAWeights(decay=cfg.ema_decay))
    if cfg.lookahead:
        callbacks.append(Lookahead())
    if cfg.early_stopping.patience is not None:
        callbacks.append(EarlyStopping(cfg.min_epochs, monitor=JointImprovement.IMPROVED if joint else monitor,
                                       mode=mode, patience=cfg.early_stopping.patience,
                                       min_delta=cfg.early_stopping.min_delta))
    if cfg.max_minutes is not None:  # Trainer(max_time=...) would stop inside an epoch (the first: no checkpoint)
        callbacks.append(Timer(timedelta(minutes=cfg.max_minutes), interval="epoch"))
    return pl.Trainer(
        default_root_dir=run_dir, max_epochs=cfg.max_epochs, accelerator=cfg.accelerator, devices=cfg.devices,
        num_nodes=cfg.num_nodes, strategy=lightning_strategy(cfg), precision=cfg.precision,
        gradient_clip_val=cfg.gradient_clip_val, accumulate_grad_batches=cfg.accumulate_grad_batches,
        check_val_every_n_epoch=cfg.check_val_every_n_epoch, limit_train_batches=cfg.limit_train_batches,
        limit_val_batches=cfg.limit_val_batches, log_every_n_steps=cfg.log_every_n_steps,
        deterministic=cfg.deterministic, callbacks=callbacks, logger=build_loggers(recipe, run_dir) or False,
        plugins=[AtomicCheckpointIO()],
        enable_progress_bar=enable_progress, enable_model_summary=False, num_sanity_val_steps=0,
    ), monitor, mode


def _epoch_selection(recipe: Recipe, monitor: str, mode: str) -> str:
    if monitor == JointImprovement.BEST:
        return (f"weights of the last epoch where {', '.join(recipe.trainer.monitor)} all reached their best so far "
                "are tested (the GAT paper's rule)")
    return f"weights of the epoch with the best {monitor} ({mode}) are tested"


def _check_resume(run_dir: Path, recipe: Recipe) -> None:
    saved = load_recipe(run_dir / "recipe.yaml")
    differing = [f"model.{k}" for k in ("name", "args", "init_from")
                 if getattr(saved.model, k) != getattr(recipe.model, k)]
    differing += [f"data.{k}" for k in ("name", "args") if getattr(saved.data, k) != getattr(recipe.data, k)]
    if saved.seed != recipe.seed:
        differing.append("seed")
    if differing:
        raise TrainingError(f"cannot resume {run_dir}: the recipe differs from the run's in {differing}; "
                            "start a new run instead")


def is_ddp_worker() -> bool:
    """True in a data-parallel worker process (global rank > 0): it runs the same command line as the
    launching process, which alone writes the run folder and reports it."""
    return rank_zero_only.rank != 0


def train(recipe_path: str | None = None, overrides: list[str] | None = None, resume: str | None = None,
          recipe: Recipe | None = None, progress: bool = True) -> Path:
    """Train a recipe into a new run folder (or continue ``resume``); returns the run folder. Under data
    parallelism every process returns it; global rank zero alone tests the weights and writes the files."""
    resume_dir = Path(resume) if resume else None
    if resume_dir is not None:
        if not (resume_dir / "recipe.yaml").is_file():
            raise TrainingError(f"cannot resume {resume_dir}: it has no recipe.yaml (not a run folder)")
        if not (resume_dir / "checkpoints" / "last.ckpt").is_file():
            raise TrainingError(f"cannot resume {resume_dir}: it has no checkpoints/last.ckpt")
        saved = load_recipe(resume_dir / "recipe.yaml", overrides)
        if recipe_path is not None or recipe is not None:
            candidate = recipe or load_recipe(recipe_path, overrides)
            _check_resume(resume_dir, candidate)
        else:
            _check_resume(resume_dir, saved)
        recipe = saved
    elif recipe is None:
        if recipe_path is None:
            raise RecipeError("give a recipe file or --resume RUN_DIR")
        recipe = load_recipe(recipe_path, overrides)
    with intra_op_threads(recipe.trainer.num_threads):
        return _train_resolved(recipe, resume_dir, progress, recipe_path, overrides)


@contextlib.contextmanager
def intra_op_threads(count: int | None):
    """torch's intra-op threads set to ``count`` inside the block (None: left as they are), restored after it."""
    previous = torch.get_num_threads()
    if count is not None:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _hub_module(recipe: Recipe, model: torch.nn.Module, task: Task) -> HubModule:
    if recipe.trainer.channels_last:
        model = model.to(memory_format=torch.channels_last)
    module = HubModule(model, task, recipe.optimizer, recipe.scheduler, recipe.to_dict(),
                       classifier=get_model_entry(recipe.model.name).classifier)
    if recipe.trainer.compile:
        module.model = torch.compile(module.model)
    return module


def _train_resolved(recipe: Recipe, resume_dir: Path | None, progress: bool, recipe_path: str | None,
                    overrides: list[str] | None) -> Path:
    check_logger_packages(recipe.trainer.loggers)
    keep_freed_memory()  # each step's activations reuse the last step's memory (hub.run.host_memory)
    seed_all(recipe.seed)
    datamodule = build_data(recipe)
    model = build_model(recipe, datamodule)
    if resume_dir is None and not recipe.model.init_from and hasattr(model, "initialize_from_data"):
        model.initialize_from_data(training_images(datamodule))  # e.g. airbench's whitening filters
    task = build_task(recipe, datamodule)
    data_callbacks = datamodule.callbacks(model)

    # Global rank zero alone creates the run folder (hub.run.distributed); a resumed run's is given to every process
    run_dir: Path | None = resume_dir
    if is_global_zero(recipe.trainer) and run_dir is None:
        run_dir = new_run_dir(recipe.output_dir, recipe.name or recipe.model.name, recipe.seed)
        write_recipe(run_dir, recipe)

    module = _hub_module(recipe, model, task)
    recorder = RunRecorder(run_dir)
    trainer, monitor, mode = _trainer(recipe, run_dir, task, recorder, data_callbacks, progress)
    ckpt = str(run_dir / "checkpoints" / "last.ckpt") if resume_dir is not None else None
    fit_start = time.perf_counter()
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt, weights_only=True)
    fit_seconds = time.perf_counter() - fit_start
    if run_dir is None:  # another process than rank zero: the folder of rank zero's checkpoints, broadcast to all
        run_dir = Path(trainer.checkpoint_callback.dirpath).parent

    replicas = replica_check(trainer, module.model)
    rows = list(recorder.history)
    last_path = str(run_dir / "checkpoints" / "last.ckpt")
    best_path = (trainer.checkpoint_callback.best_model_path if recipe.trainer.test_checkpoint == "best" else "") \
        or last_path
    # The test split is evaluated once per sample, by global rank zero alone on one device: under data
    # parallelism Lightning's DistributedSampler pads the split with repeated samples to give every process an
    # equal share, which biases the test metrics. The process group is closed first, else torchmetrics would
    # wait in its all-gather for processes that no longer test. Only rank zero writes the files below.
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    if not trainer.is_global_zero:
        return run_dir
    if is_sharded(trainer):  # FSDP left this process's shard in the module: a whole one is tested and kept
        module = _hub_module(recipe, build_model(recipe, datamodule), task)
    # the checkpoint's weights (the average under EMA); its callbacks' states belong to the fitting trainer
    checkpoint = AtomicCheckpointIO().load_checkpoint(best_path)
    module.load_state_dict(checkpoint["state_dict"])
    kept_row = next((r for r in rows if r["epoch"] == checkpoint.get("epoch")), rows[-1] if rows else {})
    tester = single_device_trainer(recipe.trainer.accelerator, recipe.trainer.precision, progress)
    test_metrics = tester.test(module, datamodule=datamodule, verbose=False)
    test = {k: float(v) for k, v in (test_metrics[0] if test_metrics else {}).items()}
    log_test_metrics(trainer.loggers, test, trainer.global_step)
    best_score = trainer.checkpoint_callback.best_model_score
    best_epoch = None
    validated = [r for r in rows if monitor in r]  # every epoch, or every trainer.check_val_every_n_epoch
    if validated:
        values = [r[monitor] for r in validated]
        best_epoch = validated[int(np.nanargmax(values) if mode == "max" else np.nanargmin(values))]["epoch"]
    validation_metric, validation_mode = (monitor, mode) if isinstance(recipe.trainer.monitor, str) \
        else (task.monitor, task.mode)
    summary = {
        "final": rows[-1] if rows else {},
        "best": {"monitor": monitor, "mode": mode, "value": float(best_score) if best_score is not None else None,
                 "epoch": best_epoch, "checkpoint": Path(best_path).name},
        "test": test,
        # the validation metric of the tested weights (what a fine-tune policy is chosen on): the recipe's monitor
        # (an ICU or table recipe's val/auroc: accuracy says little with 14% positives), else the task's
        "validation": {"metric": validation_metric, "mode": validation_mode, "value": kept_row.get(validation_metric)},
        "epoch_selection": _epoch_selection(recipe, monitor, mode) if best_path != last_path
        else "weights of the last epoch are tested (fixed schedule)",
        "replicas": replicas,
        "fit_seconds": round(fit_seconds, 1),  # wall time of this process's trainer.fit (a resumed run: since resuming)
    }
    write_summary(run_dir, summary)
    if rows:
        plot_curves(rows, run_dir / "curves.png")
    write_model(run_dir, recipe, datamodule, module.plain_model, test, str(recipe_path) if recipe_path else None,
                overrides)
    if recipe.trainer.calibrate:  # a temperature or conformal intervals, fitted on the validation split
        fit_run(run_dir, module.plain_model, datamodule, task, tester.strategy.root_device, progress)
    # out-of-distribution statistics from the training and validation splits (hub.uncertainty.ood), into the card
    fit_and_store(module.plain_model, read_card(run_dir / "card.json"), datamodule, run_dir / "card.json")
    return run_dir
