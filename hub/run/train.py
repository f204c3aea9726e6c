"""Recipe training on PyTorch Lightning: run folders, atomic checkpoints, resume, eval.

``train(recipe)`` writes a new run folder that never overwrites another::

    runs/<recipe>/<YYYYmmdd-HHMMSS>-s<seed>[-N]/
        recipe.yaml      the resolved recipe
        metrics.csv      one row per epoch (train and validation metrics)
        metrics.json     final, best and test metrics
        checkpoints/     last.ckpt and best.ckpt, written atomically
        curves.png       training curves
        model.safetensors + card.json   the best weights and a model card draft (``hub.load(run)``)
"""
from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
import yaml
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import EMAWeightAveraging

from hub.cards import PretrainedCfg, portable_recipe, write_card
from hub.errors import RecipeError, TrainingError
from hub.io import atomic_write_bytes
from hub.plotting import save_figure
from hub.recipe import OptimizerSection, Recipe, SchedulerSection, check_builder_args, load_recipe
from hub.registry import get_dataset_entry, get_model_entry
from hub.tasks import Task, create_task
from hub.weights import save_state_dict, sha256_bytes

log = logging.getLogger("hub")
RUN_DIR_ENV = "HUB_RUN_DIR"  # set by the launching process so DDP workers join its run folder


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints written to a temporary file and renamed; read back with ``weights_only=True``."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, buffer.getvalue())

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        return torch.load(path, map_location=map_location or "cpu", weights_only=True)


class EMAWeights(EMAWeightAveraging):
    """Lightning's EMA of the weights (``trainer.ema_decay``), restored from a checkpoint only while fitting.

    Lightning's callback keeps its averaged model after ``fit``; when the same trainer then tests a checkpoint, its
    ``on_load_checkpoint`` would load the raw (non-averaged) weights over the averaged ones the checkpoint holds.
    Outside fitting the checkpoint's ``state_dict`` (the average) is what is evaluated, so nothing is done.
    """

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        if trainer.state.fn == "fit":
            super().on_load_checkpoint(trainer, pl_module, checkpoint)


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class HubModule(pl.LightningModule):
    """Wraps a hub model with its task, optimiser and schedule."""

    def __init__(self, model: torch.nn.Module, task: Task, optimizer: OptimizerSection,
                 scheduler: SchedulerSection, recipe: dict[str, Any] | None = None):
        super().__init__()
        self.model = model
        self.task = task
        self.optimizer_cfg = optimizer
        self.scheduler_cfg = scheduler
        self.recipe = recipe or {}
        self.train_metrics = task.metrics().clone(prefix="train/")
        self.val_metrics = task.metrics().clone(prefix="val/")
        self.test_metrics = task.metrics().clone(prefix="test/")

    def forward(self, *args, **kwargs):
        return self.model(*args, **kwargs)

    @property
    def plain_model(self) -> torch.nn.Module:
        """The model itself, unwrapped from ``torch.compile`` (its state dict and methods)."""
        return getattr(self.model, "_orig_mod", self.model)

    def _step(self, batch, stage: str):
        loss, preds, target = self.task.step(self.model, batch, stage)
        batch_size = self.task.batch_size(batch)
        # sync_dist: under data parallelism the epoch's loss is the mean over every process's batches (the
        # torchmetrics below sync their own states)
        self.log(f"{stage}/loss", loss, on_step=stage == "train", on_epoch=True, prog_bar=True,
                 batch_size=batch_size, sync_dist=True)
        if stage != "train" or self.task.metrics_in_training:
            metrics = getattr(self, f"{stage}_metrics")
            metrics.update(preds, target)
            self.log_dict(metrics, on_step=False, on_epoch=True, prog_bar=stage != "train", batch_size=batch_size)
        return loss

    def training_step(self, batch, batch_idx):
        loss = self._step(batch, "train")
        if not torch.isfinite(loss):
            raise TrainingError(f"loss is {loss.item()} at global step {self.global_step} (epoch {self.current_epoch}, "
                                f"batch {batch_idx}); stopping. The last good checkpoint is kept in the run's "
                                "checkpoints/last.ckpt; lower the learning rate or enable gradient clipping")
        return loss

    def validation_step(self, batch, batch_idx):
        self._step(batch, "val")

    def test_step(self, batch, batch_idx):
        self._step(batch, "test")

    def on_train_batch_start(self, batch, batch_idx):
        # Reseed from (seed, epoch, batch, rank) so dropout and augmentation match when a run resumes; an epoch-
        # level seed is not enough: Lightning draws from the global RNG at different points on a resumed epoch.
        seed_all(hash((int(self.recipe.get("seed", 0)), self.current_epoch, batch_idx, self.global_rank)) % 2**31)

    def on_save_checkpoint(self, checkpoint):
        checkpoint["hub_recipe"] = self.recipe

    def configure_optimizers(self):
        cfg = self.optimizer_cfg
        decay, no_decay = [], []
        for name, param in self.model.named_parameters():
            if param.requires_grad:
                # Norm weights, biases, embeddings and tokens take no weight decay (as timm does).
                (no_decay if param.ndim <= 1 or name.endswith(("pos_embed", "cls_token")) else decay).append(param)
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        if cfg.name == "adamw":
            optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)
        elif cfg.name == "adam":  # coupled L2 on every parameter, as the GAT paper's Adam
            optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr, betas=cfg.betas,
                                         weight_decay=cfg.weight_decay)
        else:
            optimizer = torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=True)
        sched = self.scheduler_cfg
        if sched.name == "none":
            return optimizer
        steps_per_epoch = max(1, math.ceil(self.trainer.estimated_stepping_batches / self.trainer.max_epochs))
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = sched.warmup_epochs * steps_per_epoch

        def factor(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            if sched.name == "step":
                return sched.gamma ** ((step // steps_per_epoch) // sched.step_size)
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return sched.min_lr_ratio + (1 - sched.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


class RunRecorder(pl.Callback):
    """Keeps one row of metrics per epoch in ``metrics.csv``; its history is saved in checkpoints, so
    a resumed run continues the table from the checkpoint's epoch."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir
        self.history: list[dict[str, float]] = []

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        row = {"epoch": trainer.current_epoch, "step": trainer.global_step}
        for key, value in trainer.callback_metrics.items():
            if key.endswith("_step"):
                continue
            row[key.removesuffix("_epoch")] = float(value)
        row["lr"] = float(trainer.optimizers[0].param_groups[0]["lr"])
        self.history.append(row)
        if trainer.is_global_zero:
            write_metrics_csv(self.run_dir / "metrics.csv", self.history)

    def state_dict(self):
        return {"history": self.history}

    def load_state_dict(self, state_dict):
        self.history = list(state_dict["history"])


class JointImprovement(pl.Callback):
    """The stopping rule of the GAT paper's reference code, for several validation metrics at once.

    An epoch *improves* when any metric reaches its best so far (ties count); it is *best* when all of
    them do together. The callback logs the latest such epochs as :attr:`IMPROVED` and :attr:`BEST`, so
    Lightning's EarlyStopping (patience on the first) and ModelCheckpoint (``best.ckpt`` on the second)
    apply the rule unchanged; its running bests travel in checkpoints, so ``--resume`` continues it.
    """

    IMPROVED, BEST = "monitor/improved_at", "monitor/best_at"

    def __init__(self, modes: dict[str, str]):
        self.modes = modes  # metric -> "min" | "max"
        self.bests: dict[str, float] = {}
        self.improved_epoch = self.best_epoch = -1

    def on_validation_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        missing = [m for m in self.modes if m not in trainer.callback_metrics]
        if missing:
            raise RecipeError(f"trainer.monitor names {missing}, which the model does not log; "
                              f"logged: {sorted(trainer.callback_metrics)}")
        values = {m: float(trainer.callback_metrics[m]) for m in self.modes}
        reached = [m not in self.bests or (v <= self.bests[m] if self.modes[m] == "min" else v >= self.bests[m])
                   for m, v in values.items()]
        if any(reached):
            self.improved_epoch = trainer.current_epoch
            if all(reached):
                self.best_epoch = trainer.current_epoch
            for m, v in values.items():
                best = self.bests.get(m, v)
                self.bests[m] = min(best, v) if self.modes[m] == "min" else max(best, v)
        # the same on every process (computed from synced metrics); sync_dist only says so to Lightning
        pl_module.log(self.IMPROVED, float(self.improved_epoch), sync_dist=True)
        pl_module.log(self.BEST, float(self.best_epoch), sync_dist=True)

    def state_dict(self):
        return {"bests": self.bests, "improved_epoch": self.improved_epoch, "best_epoch": self.best_epoch}

    def load_state_dict(self, state_dict):
        self.bests = dict(state_dict["bests"])
        self.improved_epoch, self.best_epoch = state_dict["improved_epoch"], state_dict["best_epoch"]


def write_metrics_csv(path: Path, rows: list[dict[str, float]]) -> None:
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(path, buffer.getvalue().encode())


def plot_curves(rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = sorted({k.split("/", 1)[1] for row in rows for k in row if k.split("/", 1)[0] in ("train", "val")})
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(4 * max(1, len(metrics)), 3.2), squeeze=False)
    epochs = [r["epoch"] for r in rows]
    for ax, metric in zip(axes[0], metrics):
        for stage in ("train", "val"):
            values = [r.get(f"{stage}/{metric}", float("nan")) for r in rows]
            if not all(math.isnan(v) for v in values):
                ax.plot(epochs, values, label=stage, marker="." if len(rows) < 30 else None)
        ax.set_title(metric)
        ax.set_xlabel("epoch")
        ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def new_run_dir(output_dir: str, recipe_name: str, seed: int) -> Path:
    """Create a fresh run folder; ``mkdir`` without ``exist_ok`` makes two runs never share one."""
    base = Path(output_dir) / recipe_name
    base.mkdir(parents=True, exist_ok=True)
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-s{seed}"
    for n in range(1000):
        candidate = base / (stem if n == 0 else f"{stem}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise TrainingError(f"could not create a new run folder under {base}")


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
    if recipe.model.init_from:
        model = _init_from(recipe.model.init_from, recipe.model.name, args)
        model.train()
        return model
    return create_model(recipe.model.name, **args)


def _init_from(name: str, family: str, args: dict[str, Any]) -> torch.nn.Module:
    """Start from pretrained weights. When the data changes another dimension than ``num_classes`` (e.g.
    ``in_channels``: a graph with other node features), the tensors that no longer fit are trained fresh."""
    from hub.models import create_model, load, model_card

    card_args = model_card(name).model_args
    changed = sorted(k for k, v in args.items() if k != "num_classes" and k in card_args and card_args[k] != v)
    if not changed:
        return load(name, **args)
    pretrained = load(name).state_dict()  # verified against the card's sha256
    model = create_model(family, **args)
    own = model.state_dict()
    kept = {k: v for k, v in pretrained.items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(kept, strict=False)
    log.warning("%s: %s differ from the card's %s; trained fresh: %s", name,
                {k: args[k] for k in changed}, {k: card_args[k] for k in changed}, sorted(set(own) - set(kept)))
    return model


def make_card(recipe: Recipe, datamodule, model: torch.nn.Module, weights: bytes, name: str,
              metrics: dict[str, float], recipe_path: str | None, overrides: list[str] | None = None) -> PretrainedCfg:
    """The draft card of a run: its recipe as the recipe file, the overrides and the resolved recipe, without
    the run's output folder (:func:`hub.cards.portable_recipe`); the data module's names of its outputs."""
    return PretrainedCfg(
        name=name, sha256=sha256_bytes(weights), num_bytes=len(weights), file="model.safetensors",
        task=get_model_entry(recipe.model.name).task,
        model_args={**recipe.model.args, **{k: v for k, v in datamodule.model_args().items()
                                            if k in get_model_entry(recipe.model.name).arg_names()}},
        input_spec=datamodule.input_spec, label_names=list(datamodule.label_names),
        output_names=list(datamodule.output_names),
        num_params=sum(p.numel() for p in model.parameters()),
        data={"name": recipe.data.name, "args": recipe.data.args, **datamodule.info},
        recipe=portable_recipe({"path": recipe_path, "overrides": list(overrides or []), "resolved": recipe.to_dict()}),
        metrics={k: {"mean": v, "std": 0.0, "n": 1, "values": [v]} for k, v in metrics.items()},
    )


def _trainer(recipe: Recipe, run_dir: Path, task: Task, recorder: RunRecorder, data_callbacks: list[pl.Callback],
             enable_progress: bool = True):
    from pytorch_lightning.callbacks import EarlyStopping, ModelCheckpoint

    cfg = recipe.trainer
    monitored = cfg.monitor if isinstance(cfg.monitor, list) else [cfg.monitor or task.monitor]
    modes = {m: task.mode if m == task.monitor else ("min" if "loss" in m or "rmse" in m else "max")
             for m in monitored}
    joint = [JointImprovement(modes)] if len(monitored) > 1 else []
    monitor, mode = (JointImprovement.BEST, "max") if joint else (monitored[0], modes[monitored[0]])
    checkpoints = run_dir / "checkpoints"
    callbacks: list[pl.Callback] = [
        *joint,
        # best.ckpt: the epoch with the best monitored metric (first, so it is trainer.checkpoint_callback)
        ModelCheckpoint(dirpath=checkpoints, filename="best", monitor=monitor, mode=mode, save_top_k=1,
                        enable_version_counter=False, auto_insert_metric_name=False),
        # last.ckpt: every epoch (or every n steps). A separate callback, because Lightning 2.6 refreshes a
        # monitored callback's `last` only when its best improves, which would make --resume lose epochs.
        ModelCheckpoint(dirpath=checkpoints, filename="last", monitor=None, save_top_k=1,
                        enable_version_counter=False, every_n_train_steps=cfg.checkpoint_every_n_steps),
        recorder,
        *data_callbacks,
    ]
    if cfg.ema_decay is not None:
        callbacks.append(EMAWeights(decay=cfg.ema_decay))
    if cfg.early_stopping.patience is not None:
        callbacks.append(EarlyStopping(monitor=JointImprovement.IMPROVED if joint else monitor, mode=mode,
                                       patience=cfg.early_stopping.patience,
                                       min_delta=cfg.early_stopping.min_delta))
    return pl.Trainer(
        default_root_dir=run_dir, max_epochs=cfg.max_epochs, accelerator=cfg.accelerator, devices=cfg.devices,
        num_nodes=cfg.num_nodes, strategy=cfg.strategy, precision=cfg.precision,
        gradient_clip_val=cfg.gradient_clip_val, accumulate_grad_batches=cfg.accumulate_grad_batches,
        check_val_every_n_epoch=cfg.check_val_every_n_epoch, limit_train_batches=cfg.limit_train_batches,
        limit_val_batches=cfg.limit_val_batches, log_every_n_steps=cfg.log_every_n_steps,
        deterministic=cfg.deterministic, callbacks=callbacks, logger=False, plugins=[AtomicCheckpointIO()],
        enable_progress_bar=enable_progress, enable_model_summary=False, num_sanity_val_steps=0,
    ), monitor, mode


def single_device_trainer(accelerator: str, precision: str, progress: bool) -> pl.Trainer:
    """A trainer for testing on one device (each test sample seen once), which writes nothing."""
    return pl.Trainer(accelerator=accelerator, devices=1, strategy="auto", precision=precision, logger=False,
                      enable_progress_bar=progress, enable_model_summary=False, enable_checkpointing=False)


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


def _replica_check(trainer: pl.Trainer, model: torch.nn.Module) -> dict[str, Any]:
    """Under data parallelism, check that every process ended with the same parameters."""
    digest = sha256_bytes(b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters()))
    if trainer.world_size == 1:
        return {"world_size": 1, "in_sync": True}
    digests = [None] * trainer.world_size
    torch.distributed.all_gather_object(digests, digest)
    if len(set(digests)) != 1:
        raise TrainingError(f"data-parallel replicas diverged: parameter digests {digests}")
    return {"world_size": trainer.world_size, "in_sync": True}


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

    seed_all(recipe.seed)
    datamodule = build_data(recipe)
    model = build_model(recipe, datamodule)
    task = create_task(datamodule.task, **datamodule.task_args())
    data_callbacks = datamodule.callbacks(model)

    if resume_dir is not None:
        run_dir = resume_dir
    elif os.environ.get(RUN_DIR_ENV) and os.environ.get("LOCAL_RANK", "0") != "0":
        run_dir = Path(os.environ[RUN_DIR_ENV])  # a DDP worker joins the launcher's run folder
    else:
        run_dir = new_run_dir(recipe.output_dir, recipe.name or recipe.model.name, recipe.seed)
        os.environ[RUN_DIR_ENV] = str(run_dir)
        atomic_write_bytes(run_dir / "recipe.yaml", yaml.safe_dump(recipe.to_dict(), sort_keys=False).encode())

    if recipe.trainer.channels_last:
        model = model.to(memory_format=torch.channels_last)
    module = HubModule(model, task, recipe.optimizer, recipe.scheduler, recipe.to_dict())
    if recipe.trainer.compile:
        module.model = torch.compile(module.model)
    recorder = RunRecorder(run_dir)
    trainer, monitor, mode = _trainer(recipe, run_dir, task, recorder, data_callbacks, progress)
    ckpt = str(run_dir / "checkpoints" / "last.ckpt") if resume_dir is not None else None
    trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt, weights_only=True)

    replicas = _replica_check(trainer, module.model)
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
    # the checkpoint's weights (the average under EMA); its callbacks' states belong to the fitting trainer
    module.load_state_dict(AtomicCheckpointIO().load_checkpoint(best_path)["state_dict"])
    tester = single_device_trainer(recipe.trainer.accelerator, recipe.trainer.precision, progress)
    test_metrics = tester.test(module, datamodule=datamodule, verbose=False)
    test = {k: float(v) for k, v in (test_metrics[0] if test_metrics else {}).items()}
    best_score = trainer.checkpoint_callback.best_model_score
    best_epoch = None
    if rows and monitor in rows[0]:
        values = [r.get(monitor, float("nan")) for r in rows]
        best_epoch = rows[int(np.nanargmax(values) if mode == "max" else np.nanargmin(values))]["epoch"]
    summary = {
        "final": rows[-1] if rows else {},
        "best": {"monitor": monitor, "mode": mode, "value": float(best_score) if best_score is not None else None,
                 "epoch": best_epoch, "checkpoint": Path(best_path).name},
        "test": test,
        "epoch_selection": _epoch_selection(recipe, monitor, mode) if best_path != last_path
        else "weights of the last epoch are tested (fixed schedule)",
        "replicas": replicas,
    }
    atomic_write_bytes(run_dir / "metrics.json", (json.dumps(summary, indent=2) + "\n").encode())
    if rows:
        plot_curves(rows, run_dir / "curves.png")
    inner = module.plain_model
    save_state_dict(inner.state_dict(), run_dir / "model.safetensors")
    weights = (run_dir / "model.safetensors").read_bytes()
    card = make_card(recipe, datamodule, inner, weights, f"{recipe.model.name}.run", test,
                     str(recipe_path) if recipe_path else None, overrides)
    write_card(card, run_dir / "card.json")
    return run_dir


def card_data(card: PretrainedCfg, data_overrides: list[str] | None = None):
    """The set-up data module named by a model card (its dataset, arguments and split)."""
    from hub.recipe import apply_overrides

    data = apply_overrides({"data": {"name": card.data["name"], "args": card.data.get("args", {})}},
                           data_overrides or [])["data"]
    entry = get_dataset_entry(data["name"])
    datamodule = entry.builder(**check_builder_args(entry.builder, data["args"], "data.args"))
    datamodule.setup("test")
    return datamodule


def evaluate(name: str, data_overrides: list[str] | None = None, progress: bool = True) -> dict[str, float]:
    """Test a pretrained tag or a run folder on the data named by its card (split included)."""
    from hub.models import load_from_card, model_card

    card = model_card(name)
    datamodule = card_data(card, data_overrides)
    model = load_from_card(card)
    task = create_task(datamodule.task, **datamodule.task_args())
    module = HubModule(model, task, OptimizerSection(), SchedulerSection())
    result = single_device_trainer("auto", "32-true", progress).test(module, datamodule=datamodule, verbose=False)
    return {k: float(v) for k, v in result[0].items()}
