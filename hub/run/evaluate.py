"""Testing a trained model: a single-device trainer that sees each test sample once, the data a model card names
(:func:`hub.recipe.card_data`, re-exported) and :func:`evaluate` of a pretrained tag or run folder on it."""
from __future__ import annotations

import pytorch_lightning as pl

from hub.recipe import OptimizerSection, SchedulerSection, card_data
from hub.run.module import HubModule
from hub.tasks import create_task


def single_device_trainer(accelerator: str, precision: str, progress: bool) -> pl.Trainer:
    """A trainer for testing on one device (each test sample seen once), which writes nothing."""
    return pl.Trainer(accelerator=accelerator, devices=1, strategy="auto", precision=precision, logger=False,
                      enable_progress_bar=progress, enable_model_summary=False, enable_checkpointing=False)


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
