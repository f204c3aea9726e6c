"""Experiment tracking: the Lightning loggers a recipe names in ``trainer.loggers``, all under the run folder.

- ``csv``: the run folder's ``metrics.csv`` (:class:`hub.run.callbacks.RunRecorder`), which is always written;
- ``tensorboard``: Lightning's ``TensorBoardLogger``, event files in ``RUN_DIR/tensorboard``
  (``tensorboard --logdir RUN_DIR/tensorboard``);
- ``mlflow``: Lightning's ``MLFlowLogger``, a run named after the run folder in the experiment named after the
  recipe, in the tracking store ``trainer.mlflow_uri``; by default the SQLite file ``RUN_DIR/mlflow.db``
  (``mlflow ui --backend-store-uri sqlite:///RUN_DIR/mlflow.db``). MLflow 3 refuses its file store (``./mlruns``)
  unless told otherwise, and SQLite needs no server.

Lightning logs from global rank zero alone. The metrics are those the model logs, under Lightning's names: an
epoch's ``val/...`` values as ``val/...``, the training loss per step as ``train/loss_step`` and per epoch as
``train/loss_epoch`` (``train/loss`` in ``metrics.csv``).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from pytorch_lightning.loggers import Logger
from pytorch_lightning.utilities import rank_zero_only

from hub.errors import RecipeError
from hub.recipe import Recipe

PACKAGES = {"tensorboard": "tensorboard", "mlflow": "mlflow"}  # logger name -> the package it needs


def check_logger_packages(names: list[str]) -> None:
    """Fail before training when a logger named in ``trainer.loggers`` lacks its package."""
    for name in names:
        package = PACKAGES.get(name)
        if package and importlib.util.find_spec(package) is None:
            raise RecipeError(f"trainer.loggers names '{name}', whose package '{package}' is not installed; "
                              f"install it with `pip install {package}` (or `pip install 'attention-hub[tracking]'`)")


def mlflow_uri(recipe: Recipe, run_dir: Path) -> str:
    """The MLflow tracking store of a run: ``trainer.mlflow_uri``, else ``RUN_DIR/mlflow.db`` (SQLite)."""
    return recipe.trainer.mlflow_uri or f"sqlite:///{(run_dir.resolve() / 'mlflow.db').as_posix()}"


def build_loggers(recipe: Recipe, run_dir: Path) -> list[Logger]:
    """The Lightning loggers of ``trainer.loggers`` (``csv`` needs none), writing under ``run_dir``; their packages
    were checked before training (:func:`check_logger_packages`). None in a data-parallel worker: Lightning logs from
    global rank zero alone, and MLflow's logger opens (and creates) its store as soon as it is built."""
    if rank_zero_only.rank != 0:
        return []
    loggers: list[Logger] = []
    if "tensorboard" in recipe.trainer.loggers:
        from pytorch_lightning.loggers import TensorBoardLogger

        # version "": the events go straight into RUN_DIR/tensorboard; no placeholder hp_metric
        loggers.append(TensorBoardLogger(save_dir=run_dir, name="tensorboard", version="", default_hp_metric=False))
    if "mlflow" in recipe.trainer.loggers:
        from pytorch_lightning.loggers import MLFlowLogger

        loggers.append(MLFlowLogger(experiment_name=recipe.name or recipe.model.name, run_name=run_dir.name,
                                    tracking_uri=mlflow_uri(recipe, run_dir),
                                    artifact_location=(run_dir.resolve() / "mlflow-artifacts").as_uri()))
    return loggers


def log_test_metrics(loggers: list[Logger], metrics: dict[str, float], step: int) -> None:
    """After fitting, the test metrics of the kept weights at the last ``step``; the loggers are then closed."""
    for logger in loggers:
        logger.log_metrics(metrics, step=step)
        logger.finalize("success")
