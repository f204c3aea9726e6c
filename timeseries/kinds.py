"""The time-series input kinds: ``sensor_series`` (one CSV per unit for the RUL models) and ``traffic_series`` (a
folder with ``speeds.csv`` and ``adjacency.csv`` for TESTAM and the traffic GRU). Each gives the default recipe of
its families (``attnhub finetune rul_attention --data FOLDER``, from scratch) and the classic baseline of
:mod:`timeseries.baselines` beside every fine-tuned run.

>>> SensorSeriesKind().default_recipe("rul_attention", "units")["data"]
{'name': 'sensor_units', 'args': {'root': 'units', 'window': 30, 'horizon': 10, 'rul_cap': 125.0}}
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import torch

from hub.errors import DataError
from hub.kinds import BaselineResult, InputKind, KindSpec, predict_per_file, register_kind
from timeseries.baselines import rul_baseline_on_run_split, traffic_baseline_on_run_split
from timeseries.data import minmax_apply
from timeseries.explain import explain_routing, explain_units
from timeseries.io import _unit_files, read_speed_csv, read_unit_columns, read_unit_csv


def _recipe(family: str, data: dict[str, Any], lr: float, weight_decay: float, gradient_clip: float,
            max_epochs: int, patience: int) -> dict[str, Any]:
    """A from-scratch recipe: the family's default dimensions (sized by the data), AdamW with a cosine schedule over
    ``max_epochs``, early stopping on the task's validation metric after ``patience`` epochs without a better one."""
    return {"name": f"finetune-{family}", "model": {"name": family, "args": {}}, "data": data,
            "optimizer": {"name": "adamw", "lr": lr, "weight_decay": weight_decay},
            "scheduler": {"name": "cosine", "warmup_epochs": 1},
            "trainer": {"max_epochs": max_epochs, "accelerator": "auto", "devices": 1,
                        "gradient_clip_val": gradient_clip, "early_stopping": {"patience": patience},
                        "log_every_n_steps": 10}}


@dataclass(frozen=True)
class SensorSeriesSpec(KindSpec):
    """A RUL model's input: the last ``window`` cycles of the ``sensors``, min-max scaled with the training ``min``
    and ``max``; it forecasts ``horizon`` RULs capped at ``rul_cap``."""

    sensors: list[str]
    window: int
    horizon: int
    min: list[float]
    max: list[float]
    rul_cap: float


@register_kind
class SensorSeriesKind(InputKind):
    """One CSV per unit (engine, machine), one row per cycle, for the RUL models."""

    name, domain, Spec = "sensor_series", "timeseries", SensorSeriesSpec
    tasks = ("rul-regression",)
    FD001 = {"window": 30, "horizon": 10, "rul_cap": 125.0}  # the FD001 recipe's windows and RUL cap

    def finetune_data(self, card, path: str) -> dict[str, Any]:
        """The card's sensors, read from the units at ``path``; units without them are refused, naming the family
        to train from scratch on their own sensors (a model's weights are tied to the sensors it was trained on)."""
        spec = self.spec(card)
        first = _unit_files(Path(path))[0]
        missing = [s for s in spec.sensors if s not in read_unit_columns(first)]
        if missing:
            raise DataError(f"{first} lacks the sensor column(s) {missing} that {card.name} was trained on; its "
                            "weights do not transfer to other sensors. To train on your own sensors from scratch: "
                            f"attnhub finetune {card.family} --data {path}")
        return {"name": "sensor_units", "args": {"root": str(path), "sensors": spec.sensors, "window": spec.window,
                                                 "horizon": spec.horizon, "rul_cap": spec.rul_cap}}

    def predict(self, card, model, paths: Iterable[str],
                batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        """Yield ``(names, forecasts (B, horizon))`` from the last ``window`` cycles of each unit CSV."""
        spec = self.spec(card)

        def window(path: str) -> torch.Tensor:  # the last ``window`` cycles, min-max scaled: (window, S)
            series = read_unit_csv(path, spec.sensors, spec.window)[-spec.window:]
            return torch.from_numpy(minmax_apply(series, spec.min, spec.max))

        return predict_per_file(model, paths, window, batch_size)

    def explain(self, card, model, inputs: list[str], out_dir: Path) -> Iterator[Path]:
        return explain_units(card, model, inputs, out_dir)

    def baseline(self, run_dir) -> BaselineResult:
        return rul_baseline_on_run_split(run_dir)

    def default_recipe(self, family: str, path: str) -> dict[str, Any]:
        """Every column of the unit CSVs at ``path`` but ``cycle`` is a sensor (the constant ones dropped); the FD001
        recipe's windows, RUL cap, optimiser and about its 18 epochs. Patience 10: with few validation units the
        validation RMSE is noisy (FD001 as user CSVs, 13 validation engines: patience 5 stopped at epoch 9 of 30,
        the learning rate barely decayed, test RMSE 16.1 against 13.4 for the baseline)."""
        return _recipe(family, {"name": "sensor_units", "args": {"root": str(path), **self.FD001}}, 1e-3, 0.01, 1.0,
                       max_epochs=20, patience=10)


@dataclass(frozen=True)
class TrafficSeriesSpec(KindSpec):
    """A traffic model's input: ``input_steps`` steps of ``num_nodes`` sensors' speeds, z-scored with the training
    ``mean`` and ``std``; it forecasts ``output_steps`` steps."""

    input_steps: int
    output_steps: int
    num_nodes: int
    mean: float
    std: float
    sensors: list[str] | None = None


@register_kind
class TrafficSeriesKind(InputKind):
    """A folder with ``speeds.csv`` and ``adjacency.csv`` for TESTAM and the traffic GRU."""

    name, domain, Spec = "traffic_series", "timeseries", TrafficSeriesSpec
    tasks = ("traffic-forecast",)

    def finetune_data(self, card, path: str) -> dict[str, Any]:
        spec = self.spec(card)
        return {"name": "traffic_csv", "args": {"root": str(path), "input_steps": spec.input_steps,
                                                "output_steps": spec.output_steps}}

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        """Yield ``(["file:sensor", ...], forecasts (N, output_steps))`` per speeds file: its last input window."""
        spec = self.spec(card)
        for path in paths:
            ids, speed, time_of_day = read_speed_csv(path)
            if len(ids) != spec.num_nodes:
                raise DataError(f"{path} has {len(ids)} sensors but {card.name} takes {spec.num_nodes}")
            if spec.sensors is not None and ids != spec.sensors:
                raise DataError(f"{path}: sensor ids differ from the ones {card.name} was trained on")
            if len(speed) < spec.input_steps:
                raise DataError(f"{path} has {len(speed)} rows, fewer than the model's {spec.input_steps} input steps")
            recent = slice(len(speed) - spec.input_steps, None)
            x = np.stack([(speed[recent] - spec.mean) / spec.std,
                          np.broadcast_to(time_of_day[recent, None], speed[recent].shape)], -1)  # (T_in, N, 2)
            forecast = model(torch.from_numpy(x.astype(np.float32))[None])[0]  # (T_out, N)
            yield [f"{path}:{sensor}" for sensor in ids], forecast.T

    def explain(self, card, model, inputs: list[str], out_dir: Path) -> Iterator[Path]:
        return explain_routing(card, model, inputs, out_dir)

    def baseline(self, run_dir) -> BaselineResult:
        return traffic_baseline_on_run_split(run_dir)

    def default_recipe(self, family: str, path: str) -> dict[str, Any]:
        """The Los-loop recipes' 12 steps in and out, optimiser and clipping, on the folder at ``path``."""
        data = {"name": "traffic_csv", "args": {"root": str(path), "input_steps": 12, "output_steps": 12,
                                                "batch_size": 64}}
        return _recipe(family, data, 3e-3, 1e-4, 5.0, max_epochs=30, patience=5)
