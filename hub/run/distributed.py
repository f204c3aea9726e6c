"""Training on several processes or machines (``trainer.devices``, ``trainer.num_nodes``, ``trainer.strategy``):
which process writes the run folder, the Lightning strategy of ``trainer.strategy``, and the check that every process
ended with the same weights.

Every process of a data-parallel run executes the same command line, however it was started: by Lightning itself
(``trainer.devices`` processes per machine, each machine started by hand with its ``NODE_RANK``), by ``torchrun`` or
by SLURM's ``srun``. Lightning reads which process it is from that launcher's environment (its cluster environment);
global rank zero alone creates the run folder and writes in it, and the others learn its path when the processes
connect (the checkpoint folder that Lightning's ``ModelCheckpoint`` broadcasts from rank zero).
"""
from __future__ import annotations

import contextlib
import logging
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.strategies import FSDPStrategy, Strategy

from hub.core.weights import sha256_bytes
from hub.errors import TrainingError
from hub.recipe import TrainerSection


class FSDP(FSDPStrategy):
    """Lightning's FSDP strategy, on any accelerator. Lightning refuses the name ``fsdp`` unless the accelerator is
    named ``cuda`` or ``gpu`` (its check compares the strategy's exact type), and on CPU it gives torch's FSDP no
    device, which torch then refuses; torch's FSDP trains on CPU over gloo when told the CPU is its device, and the
    hub's FSDP runs are tested there (``tests/integration/test_multinode_runs.py``). Checkpoints hold the full state
    dict (gathered on rank zero), so ``last.ckpt`` and ``best.ckpt`` load as any other run's."""

    def _setup_model(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.root_device.type == "cpu":  # wrapped here with the CPU as its device; Lightning keeps a wrapped model
            from torch.distributed.fsdp import FullyShardedDataParallel

            model = FullyShardedDataParallel(module=model, cpu_offload=self.cpu_offload,
                                             mixed_precision=self.mixed_precision_config,
                                             sharding_strategy=self.sharding_strategy, device_id=self.root_device,
                                             **self.kwargs)
        return super()._setup_model(model)

    def _full_state_dict(self):
        """FSDP's full state dict on rank zero; on CPU not "offloaded to the CPU" as Lightning asks (torch then
        clones tensors it has freed: a segmentation fault, torch 2.11)."""
        from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
        from torch.distributed.fsdp import FullyShardedDataParallel as TorchFSDP

        offload = self.root_device.type != "cpu"
        return TorchFSDP.state_dict_type(self.model, StateDictType.FULL_STATE_DICT,
                                         FullStateDictConfig(offload_to_cpu=offload, rank0_only=True),
                                         FullOptimStateDictConfig(offload_to_cpu=offload, rank0_only=True))

    def lightning_module_state_dict(self) -> dict[str, Any]:
        with self._full_state_dict():
            return self.model.state_dict()

    def optimizer_state(self, optimizer) -> dict[str, torch.Tensor]:
        from pytorch_lightning.core.optimizer import LightningOptimizer
        from torch.distributed.fsdp import FullyShardedDataParallel as TorchFSDP
        from torch.distributed.fsdp import OptimStateKeyType

        optimizer = optimizer._optimizer if isinstance(optimizer, LightningOptimizer) else optimizer
        with self._full_state_dict():
            state = TorchFSDP.optim_state_dict(self.model, optimizer)
            if self.global_rank == 0:  # keyed by parameter index, as a checkpoint of one process holds it
                state = TorchFSDP.rekey_optim_state_dict(state, OptimStateKeyType.PARAM_ID, self.model)
            return state


def lightning_strategy(cfg: TrainerSection) -> str | Strategy:
    """The ``strategy`` argument of Lightning's Trainer for the recipe's ``trainer.strategy``."""
    return FSDP() if cfg.strategy == "fsdp" else cfg.strategy


@contextlib.contextmanager
def _quiet_lightning():
    """Lightning's device summary ("GPU available: ...") silenced: it is printed by the run's own trainer."""
    logger = logging.getLogger("pytorch_lightning.utilities.rank_zero")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


def is_global_zero(cfg: TrainerSection) -> bool:
    """Whether this process is global rank zero of the run that the recipe's trainer settings make, read as Lightning
    reads it (``RANK`` of torchrun, ``SLURM_PROCID`` of srun, ``NODE_RANK`` and ``LOCAL_RANK`` of a launch by hand
    or by Lightning's own launcher), before any process group exists: a Trainer with the run's accelerator, devices,
    nodes and strategy is built for that alone (building one starts no process and connects to none). It also sets
    ``rank_zero_only.rank`` for this process, as the run's trainer will."""
    with _quiet_lightning():
        probe = pl.Trainer(accelerator=cfg.accelerator, devices=cfg.devices, num_nodes=cfg.num_nodes,
                           strategy=lightning_strategy(cfg), logger=False, enable_checkpointing=False,
                           enable_progress_bar=False, enable_model_summary=False)
    return probe.is_global_zero


def is_sharded(trainer: pl.Trainer) -> bool:
    """Whether the trainer's strategy shards the parameters (FSDP): after fitting, each process's module then holds
    its shard alone."""
    return isinstance(trainer.strategy, FSDPStrategy)


def replica_check(trainer: pl.Trainer, model: torch.nn.Module) -> dict[str, Any]:
    """After fitting, check that every process holds the same weights: under DDP its replica's parameters, under
    FSDP the parameters gathered from the shards (each process also reports how many parameters its shard held).
    Raises TrainingError naming the digests when they differ.

    Returns:
        ``{"world_size", "in_sync", "strategy"}`` and, under FSDP, ``"parameters"`` (the model's count) and
        ``"shard_parameters"`` (each process's count, by global rank).
    """
    sharded = is_sharded(trainer)
    summary: dict[str, Any] = {"world_size": trainer.world_size, "in_sync": True,
                               "strategy": type(trainer.strategy).__name__}
    if trainer.world_size == 1:
        return summary
    if sharded:
        from torch.distributed.fsdp import FullyShardedDataParallel

        local = sum(p.numel() for p in trainer.strategy.model.parameters())
        with FullyShardedDataParallel.summon_full_params(trainer.strategy.model, writeback=False):
            digest = _digest(model)
            summary["parameters"] = sum(p.numel() for p in model.parameters())
        shards: list[Any] = [None] * trainer.world_size
        torch.distributed.all_gather_object(shards, local)
        summary["shard_parameters"] = shards
    else:
        digest = _digest(model)
    digests: list[Any] = [None] * trainer.world_size
    torch.distributed.all_gather_object(digests, digest)
    if len(set(digests)) != 1:
        raise TrainingError(f"data-parallel replicas diverged: parameter digests {digests}")
    return summary


def _digest(model: torch.nn.Module) -> str:
    return sha256_bytes(b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters()))
