"""The time-series input kinds: ``sensor_series`` (one CSV per unit for the RUL models) and ``traffic_series`` (a
folder with ``speeds.csv`` and ``adjacency.csv`` for TESTAM and the traffic GRU)."""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import numpy as np
import torch

from hub.adapters import register_finetune_adapter, register_predict_adapter
from hub.errors import DataError
from timeseries.data import minmax_apply
from timeseries.io import read_speed_csv, read_unit_csv


@register_finetune_adapter("sensor_series")
def sensor_units_section(card, path: str) -> dict[str, Any]:
    spec = card.input_spec
    return {"name": "sensor_units", "args": {"root": str(path), "sensors": spec["sensors"], "window": spec["window"],
                                             "horizon": spec["horizon"], "rul_cap": spec["rul_cap"]}}


@register_predict_adapter("sensor_series")
def sensor_series_forecast(card, model, paths: Iterable[str],
                           batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
    """Yield ``(names, forecasts (B, horizon))`` from the last ``window`` cycles of each unit CSV."""
    spec = card.input_spec
    names, windows = [], []
    for path in paths:
        series = read_unit_csv(path, spec["sensors"], spec["window"])[-spec["window"]:]  # (window, S)
        names.append(str(path))
        windows.append(torch.from_numpy(minmax_apply(series, spec["min"], spec["max"])))
        if len(names) == batch_size:
            yield names, model(torch.stack(windows))
            names, windows = [], []
    if names:
        yield names, model(torch.stack(windows))


@register_finetune_adapter("traffic_series")
def traffic_folder_section(card, path: str) -> dict[str, Any]:
    spec = card.input_spec
    return {"name": "traffic_csv", "args": {"root": str(path), "input_steps": spec["input_steps"],
                                            "output_steps": spec["output_steps"]}}


@register_predict_adapter("traffic_series")
def traffic_forecast(card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
    """Yield ``(["file:sensor", ...], forecasts (N, output_steps))`` per speeds file: its last input window."""
    spec = card.input_spec
    for path in paths:
        ids, speed, time_of_day = read_speed_csv(path)
        if len(ids) != spec["num_nodes"]:
            raise DataError(f"{path} has {len(ids)} sensors but {card.name} takes {spec['num_nodes']}")
        if "sensors" in spec and ids != spec["sensors"]:
            raise DataError(f"{path}: sensor ids differ from the ones {card.name} was trained on")
        if len(speed) < spec["input_steps"]:
            raise DataError(f"{path} has {len(speed)} rows, fewer than the model's {spec['input_steps']} input steps")
        recent = slice(len(speed) - spec["input_steps"], None)
        x = np.stack([(speed[recent] - spec["mean"]) / spec["std"],
                      np.broadcast_to(time_of_day[recent, None], speed[recent].shape)], -1)  # (T_in, N, 2)
        forecast = model(torch.from_numpy(x.astype(np.float32))[None])[0]  # (T_out, N)
        yield [f"{path}:{sensor}" for sensor in ids], forecast.T
