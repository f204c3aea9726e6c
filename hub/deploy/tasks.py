"""Which task a run fine-tuned by memory tokens answers (``attnhub finetune --policy memory``,
:mod:`hub.attention.memory_tokens`): its frozen source keeps answering the source task bit for bit, and the memory
tokens answer the new one, so ``predict --task`` and ``serve``'s ``?task=`` take

- ``new`` (the default, and the only task of every other model): the new task's classes, as the run's card says them
  (its temperature, OOD statistics and predictor);
- ``source``: the source task's classes, from the frozen source model with the source's temperature (the card's
  ``memory_tokens``), without OOD columns (the run's statistics are of the new task's outputs);
- ``both``: the new task's columns, then the source task's prefixed ``source_`` (``source_class_1``,
  ``source_prob_1``, ...), from one forward pass (:meth:`~hub.attention.memory_tokens.MemoryTokens.forward_both`).
"""
from __future__ import annotations

import dataclasses

import torch
from torch import nn

from hub.core.cards import PretrainedCfg
from hub.errors import HubError

TASKS = ("new", "source", "both")
SOURCE_PREFIX = "source_"  # the source task's columns under --task both


def source_card(card: PretrainedCfg) -> PretrainedCfg:
    """The card of a memory-token run's source task: its classes and temperature, no OOD statistics, no predictor."""
    memory = card.memory_tokens
    return dataclasses.replace(card, label_names=list(memory["source_label_names"]),
                               calibration=dict(memory["source_calibration"]), ood={}, predictor={}, memory_tokens={},
                               model_args={**card.model_args, "num_classes": memory["source_num_classes"]})


class BothTasks(nn.Module):
    """A memory-token run answering both tasks in one pass: ``forward`` gives the new task's logits (B, C_new), as the
    run does, and keeps the source task's (B, C_source) until :meth:`take_source` collects them.

    Args:
        model: a loaded memory-token run (:class:`~hub.attention.memory_tokens.MemoryTokens` with its card).
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.pretrained_cfg = model.pretrained_cfg
        self.source_cfg = source_card(model.pretrained_cfg)
        self._source: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        source, new = self.model.forward_both(x)
        self._source.append(source)
        return new

    def take_source(self) -> torch.Tensor:
        """The source task's logits of every input since the last call, in order (N, C_source)."""
        taken, self._source = torch.cat(self._source), []
        return taken


def task_model(model: nn.Module, task: str, name: str) -> nn.Module:
    """``model`` (loaded from ``name``, with its card) answering ``task``, one of :data:`TASKS`: itself for ``new``;
    for a memory-token run, its frozen source with the source task's card for ``source``, :class:`BothTasks` for
    ``both``. Raises for another task of a model without one."""
    if task not in TASKS:
        raise HubError(f"task {task!r}: expected one of {list(TASKS)}")
    if task == "new":
        return model
    card = getattr(model, "pretrained_cfg", None)
    if card is None or not card.memory_tokens:
        raise HubError(f"task {task!r}: {name} answers its own task alone; a run fine-tuned with --policy memory "
                       "answers its source's task too (source, both)")
    if task == "both":
        return BothTasks(model).eval()
    source = model.model
    source.pretrained_cfg = source_card(card)
    return source
