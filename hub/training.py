"""Deprecated: training and evaluation moved to :mod:`hub.run` (``hub.run.train``, ``hub.run.evaluate``,
``hub.run.module``, ``hub.run.callbacks``, ``hub.run.folder``). This module re-exports the old names for one
release."""
from __future__ import annotations

import warnings

from hub.run.callbacks import AtomicCheckpointIO, EMAWeights, JointImprovement, RunRecorder
from hub.run.evaluate import card_data, evaluate, single_device_trainer
from hub.run.folder import make_card, new_run_dir, plot_curves, write_metrics_csv
from hub.run.module import HubModule, seed_all
from hub.run.train import build_data, build_model, train

__all__ = ["AtomicCheckpointIO", "EMAWeights", "HubModule", "JointImprovement", "RunRecorder",
           "build_data", "build_model", "card_data", "evaluate", "make_card", "new_run_dir", "plot_curves",
           "seed_all", "single_device_trainer", "train", "write_metrics_csv"]

warnings.warn("hub.training is deprecated: import from hub.run.train, hub.run.evaluate, hub.run.module, "
              "hub.run.callbacks or hub.run.folder", DeprecationWarning, stacklevel=2)
