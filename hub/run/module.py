"""The LightningModule that trains a hub model (:class:`HubModule`: its task's steps and metrics, the optimiser and
learning-rate schedule of a recipe) and :func:`seed_all`."""
from __future__ import annotations

import math
import random
from functools import partial
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch

from hub.errors import RecipeError, TrainingError
from hub.recipe import OptimizerSection, SchedulerSection
from hub.tasks import Task


def parameter_groups(model: torch.nn.Module, cfg: OptimizerSection, classifier: str | None = None,
                     decay_all: bool = False) -> list[dict[str, Any]]:
    """The optimiser's parameter groups of the trainable parameters of ``model``.

    Weight decay goes on matrices only: norm weights, biases, embeddings and tokens take none, as timm does
    (``decay_all``: on every parameter). The learning rate of a parameter outside ``classifier`` (the family's
    classifier prefix, e.g. ``head``) is ``cfg.lr * cfg.backbone_lr_scale``; with ``cfg.layer_decay`` it is further
    scaled by ``layer_decay ** (layers above it)``, the layers of timm's ``group_matcher`` (layer-wise decay as in
    BEiT, through timm's ``group_parameters``). With ``cfg.norm_lr_scale``, the parameters of normalisation layers
    learn that much faster and are decayed at ``weight_decay / norm_lr_scale`` (airbench's bias scaler)."""
    layers: dict[str, int] = {}
    if cfg.layer_decay is not None:
        if not hasattr(model, "group_matcher"):
            raise RecipeError(f"key 'optimizer.layer_decay' needs a model whose layers timm's group_matcher orders; "
                              f"{type(model).__name__} has none: use optimizer.backbone_lr_scale alone")
        from timm.models import group_parameters

        layers = group_parameters(model, model.group_matcher(coarse=False), reverse=True)
    top = max(layers.values(), default=0)
    norms = {id(p) for m in model.modules() if isinstance(m, NORM_LAYERS) for p in m.parameters(recurse=False)}
    groups: dict[tuple[bool, float], dict[str, Any]] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        decay = decay_all or not (param.ndim <= 1 or name.endswith(("pos_embed", "cls_token")))
        in_classifier = classifier is not None and (name + ".").startswith(classifier + ".")
        layers_above = top - layers.get(name, top)
        scale = 1.0 if in_classifier else cfg.backbone_lr_scale * (cfg.layer_decay or 1.0) ** layers_above
        weight_decay = cfg.weight_decay if decay else 0.0
        if id(param) in norms and cfg.norm_lr_scale != 1.0:  # airbench: norm biases faster, decayed as much per step
            scale, weight_decay = scale * cfg.norm_lr_scale, cfg.weight_decay / cfg.norm_lr_scale
        group = groups.setdefault((weight_decay, scale), {"params": [], "weight_decay": weight_decay,
                                                          "lr": cfg.lr * scale})
        group["params"].append(param)
    return list(groups.values())


def lr_factor(sched: SchedulerSection, step: int, steps_per_epoch: int, total_steps: int) -> float:
    """The learning rate's factor at optimizer ``step`` (from 0): a linear warmup from ``warmup_start_ratio`` over
    ``warmup_epochs`` epochs' worth of steps (rounded), then a cosine or linear decay to ``min_lr_ratio`` at
    ``total_steps``, or a step decay by ``gamma`` every ``step_size`` epochs."""
    warmup = round(sched.warmup_epochs * steps_per_epoch)
    if step < warmup:
        return sched.warmup_start_ratio + (1 - sched.warmup_start_ratio) * (step + 1) / warmup
    if sched.name == "step":
        return sched.gamma ** ((step // steps_per_epoch) // sched.step_size)
    progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
    decay = 1 - progress if sched.name == "linear" else 0.5 * (1 + math.cos(math.pi * progress))
    return sched.min_lr_ratio + (1 - sched.min_lr_ratio) * decay


NORM_LAYERS = (torch.nn.modules.batchnorm._NormBase, torch.nn.LayerNorm, torch.nn.GroupNorm)


def seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class HubModule(pl.LightningModule):
    """Wraps a hub model with its task, optimiser and schedule.

    Args:
        model: the hub model to train (possibly wrapped by ``torch.compile``; ``plain_model`` unwraps it).
        task: the :class:`~hub.tasks.Task` giving the loss, the metrics and how a batch is read.
        optimizer: the recipe's optimizer section (name, learning rate, weight decay, layer decay...).
        scheduler: the recipe's scheduler section (warmup, then cosine, linear or step decay; or none).
        recipe: the whole recipe as a dict, logged as hyper-parameters, stored in checkpoints (``hub_recipe``) and
            read for its ``seed`` (per-step reseeding); None: empty.
        classifier: the model family's classifier prefix (e.g. ``"head"``); the other parameters learn at
            ``optimizer.lr * optimizer.backbone_lr_scale``. None: every parameter is backbone."""

    def __init__(self, model: torch.nn.Module, task: Task, optimizer: OptimizerSection,
                 scheduler: SchedulerSection, recipe: dict[str, Any] | None = None, classifier: str | None = None):
        super().__init__()
        self.model = model
        self.classifier = classifier  # the family's classifier prefix, for optimizer.backbone_lr_scale
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

    def on_fit_start(self):
        for logger in self.loggers:  # the trainer's loggers (trainer.loggers); each logs from rank zero alone
            logger.log_hyperparams(self.recipe)

    def on_save_checkpoint(self, checkpoint):
        checkpoint["hub_recipe"] = self.recipe

    def configure_optimizers(self):
        cfg = self.optimizer_cfg
        # Adam: coupled L2 on every parameter, as the GAT paper's Adam
        groups = parameter_groups(self.plain_model, cfg, self.classifier, decay_all=cfg.name == "adam")
        if cfg.name == "adamw":
            optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas)
        elif cfg.name == "adam":
            optimizer = torch.optim.Adam(groups, lr=cfg.lr, betas=cfg.betas)
        else:
            optimizer = torch.optim.SGD(groups, lr=cfg.lr, momentum=cfg.momentum, nesterov=True)
        sched = self.scheduler_cfg
        if sched.name == "none":
            return optimizer
        steps_per_epoch = max(1, math.ceil(self.trainer.estimated_stepping_batches / self.trainer.max_epochs))
        total = max(1, int(self.trainer.estimated_stepping_batches))
        factor = partial(lr_factor, sched, steps_per_epoch=steps_per_epoch, total_steps=total)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


