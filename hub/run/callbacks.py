"""What plugs into the fitting trainer: the atomic checkpoint IO, the checkpoints and time budget of a run that may
resume elsewhere, the EMA of the weights, airbench's lookahead, the per-epoch metrics table (``metrics.csv``) and the
joint improvement rule of several monitored metrics."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO
from pytorch_lightning.callbacks import EMAWeightAveraging

from hub.errors import RecipeError
from hub.io import atomic_file
from hub.run.folder import write_metrics_csv


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoints written to a temporary file and renamed; read back with ``weights_only=True``."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with atomic_file(path) as f:
            torch.save(checkpoint, f)

    def load_checkpoint(self, path, map_location=None, weights_only=None):
        return torch.load(path, map_location=map_location or "cpu", weights_only=True)


class ModelCheckpoint(pl.callbacks.ModelCheckpoint):
    """Lightning's ModelCheckpoint, whose state a resumed run keeps when its folder has moved (copied to another
    machine and back, as ``benchmarks/gpu_slot.py`` does between device calls): Lightning's own drops the best score
    when the checkpoint's ``dirpath`` differs from the current one, so a resumed run's first epoch became the best
    whatever its score, and ``best.ckpt`` was overwritten by a worse epoch. The run folder moves as a whole, so the
    saved paths are moved with it. Named as Lightning's, so that its state keeps its key in checkpoints."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        saved = state_dict.get("dirpath")
        if saved and self.dirpath and saved != self.dirpath:
            def moved(path: Any) -> Any:
                return self.dirpath + path[len(saved):] if isinstance(path, str) and path.startswith(saved) else path

            state_dict = {**{k: moved(v) for k, v in state_dict.items()}, "dirpath": self.dirpath,
                          "best_k_models": {moved(k): v for k, v in state_dict.get("best_k_models", {}).items()}}
        super().load_state_dict(state_dict)


class Timer(pl.callbacks.Timer):
    """Lightning's Timer, counting the time of this call of :func:`hub.run.train.train` only: Lightning's own
    restores the time already spent from a resumed run's checkpoint, so a run resumed past its budget would stop at
    its first epoch's end. Here ``trainer.max_minutes`` is what one call (one session on a lent machine) may spend,
    and a run longer than one call goes on with ``attnhub train --resume RUN_DIR`` (``benchmarks/gpu_slot.py`` does
    that across device calls). Named as Lightning's, so that its state keeps its key in checkpoints."""

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Ignore the elapsed time of the earlier calls (see the class docstring)."""


class EMAWeights(EMAWeightAveraging):
    """Lightning's EMA of the weights (``trainer.ema_decay``), restored from a checkpoint only while fitting.

    Lightning's callback keeps its averaged model after ``fit``; when the same trainer then tests a checkpoint, its
    ``on_load_checkpoint`` would load the raw (non-averaged) weights over the averaged ones the checkpoint holds.
    Outside fitting the checkpoint's ``state_dict`` (the average) is what is evaluated, so nothing is done.
    """

    def on_load_checkpoint(self, trainer, pl_module, checkpoint):
        if trainer.state.fn == "fit":
            super().on_load_checkpoint(trainer, pl_module, checkpoint)


class Lookahead(pl.Callback):
    """Lookahead (Zhang et al. 2019) as airbench trains with it (Jordan 2024): every ``every`` steps a slow copy of
    the weights and floating buffers moves towards the fast ones by ``1 - decay`` and the fast ones are reset to it,
    where ``decay = base ** every * (step / total steps) ** 3`` grows from 0 (plain training) to ``base ** every``;
    the last step ends on the slow copy, so the last checkpoint holds it. Kept in checkpoints for resuming."""

    def __init__(self, every: int = 5, base: float = 0.95):
        self.every, self.base = every, base
        self.slow: list[torch.Tensor] | None = None

    def _tensors(self, pl_module) -> list[torch.Tensor]:
        return [t for t in pl_module.state_dict().values() if t.is_floating_point()]

    def on_train_start(self, trainer, pl_module):
        if self.slow is None:  # a fresh run starts the slow copy at the initial weights; a resumed one restored it
            self.slow = [t.detach().clone() for t in self._tensors(pl_module)]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step, total = trainer.global_step, max(1, int(trainer.estimated_stepping_batches))
        last = step >= total
        if step % self.every and not last:
            return
        fast = self._tensors(pl_module)
        decay = 1.0 if last else self.base ** self.every * (step / total) ** 3
        with torch.no_grad():
            for slow, weights in zip(self.slow, fast):
                slow.lerp_(weights.to(slow.device), 1 - decay)
                weights.copy_(slow)

    def state_dict(self):
        return {"slow": self.slow}

    def load_state_dict(self, state_dict):
        self.slow = state_dict["slow"]


class RunRecorder(pl.Callback):
    """Keeps one row of metrics per epoch in ``metrics.csv``; its history is saved in checkpoints, so
    a resumed run continues the table from the checkpoint's epoch. An epoch without validation
    (``trainer.check_val_every_n_epoch`` > 1) has no validation metrics in its row: Lightning keeps the last
    validation's, which are not that epoch's. Global rank zero alone writes the table (``run_dir`` is None in the
    other processes of a data-parallel run)."""

    VALIDATION_KEYS = ("val/", "monitor/")  # logged by validation steps and by JointImprovement after them

    def __init__(self, run_dir: Path | None):
        self.run_dir = run_dir
        self.history: list[dict[str, float]] = []
        self.validated_epoch: int | None = None

    def on_validation_epoch_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.validated_epoch = trainer.current_epoch

    def on_train_epoch_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            return
        row = {"epoch": trainer.current_epoch, "step": trainer.global_step}
        validated = self.validated_epoch == trainer.current_epoch
        for key, value in trainer.callback_metrics.items():
            if key.endswith("_step") or (key.startswith(self.VALIDATION_KEYS) and not validated):
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


