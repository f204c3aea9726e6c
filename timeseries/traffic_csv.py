"""User traffic data for TESTAM and the traffic GRU: a folder with ``speeds.csv`` and ``adjacency.csv``.

``speeds.csv``: a header of sensor ids, optionally after a first column named ``time`` (timestamps);
one row per time step, equally spaced. Documented conversions: a blank cell or ``nan`` is a missing
reading and becomes 0, as in METR-LA and Los-loop (zeros are masked out of the targets and metrics);
the time of day comes from the timestamps, or without them from the row number and ``steps_per_day``
(288: five-minute steps). Refused, naming the file, row and column: a non-numeric or infinite value,
a negative speed, timestamps that are not equally spaced (a gap in time) or go back.

``adjacency.csv``: the (N, N) road graph, non-negative weights (0: no road between two sensors), with
or without a header row; a header must list the sensor ids of ``speeds.csv`` in the same order.

* ``attnhub finetune testam.RUN --data FOLDER``: trains on the folder's speeds, chronological
  70/10/20 split, with its road graph (the model args ``graph`` is the adjacency CSV's path).
* ``attnhub predict NAME speeds.csv``: the forecast from the last ``input_steps`` rows of each file,
  one line per sensor (``file:sensor``) with the next ``output_steps`` speeds.

>>> ids, speed, time_of_day = read_speed_csv("speeds.csv", steps_per_day=288)
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import torch

from hub.adapters import register_finetune_adapter, register_predict_adapter
from hub.data import read_csv_rows
from hub.errors import DataError
from hub.registry import register_dataset
from timeseries.road_graph import read_adjacency_csv
from timeseries.traffic_data import TrafficSeriesData

MISSING = {"", "nan", "NaN", "NA"}


def _time_of_day(path: Path, stamps: list[str]) -> tuple[np.ndarray, int]:
    """Timestamps -> time of day (T,) in [0, 1) and steps per day; refuses gaps and disorder."""
    import pandas as pd

    if len(stamps) < 2:
        raise DataError(f"{path}: {len(stamps)} data row(s); expected at least 2 timestamped rows of readings")
    try:
        with warnings.catch_warnings():  # mixed formats fall back to parsing each stamp, which is what we want
            warnings.filterwarnings("ignore", "Could not infer format", UserWarning)
            times = pd.to_datetime(pd.Series(stamps), errors="raise")
    except (ValueError, TypeError) as err:
        raise DataError(f"{path} column 'time': cannot read the timestamps ({err})") from None
    steps = np.diff(times.to_numpy().astype("datetime64[s]").astype(np.int64))
    if len(steps) == 0 or steps[0] <= 0 or (steps != steps[0]).any():
        bad = int(np.flatnonzero(steps != steps[0])[0]) if len(steps) and steps[0] > 0 else 0
        raise DataError(f"{path} column 'time': steps must be equally spaced and increasing; row {bad + 2} is "
                        f"{stamps[bad]}, row {bad + 3} is {stamps[bad + 1] if bad + 1 < len(stamps) else 'missing'} "
                        "(fill gaps with blank rows: blank readings count as missing)")
    seconds = (times.dt.hour * 3600 + times.dt.minute * 60 + times.dt.second).to_numpy()
    return (seconds / 86400).astype(np.float32), int(round(86400 / steps[0]))


def read_speed_csv(path: str | Path, steps_per_day: int = 288) -> tuple[list[str], np.ndarray, np.ndarray]:
    """-> sensor ids, speeds (T, N) float32 with 0 for missing readings, time of day (T,) in [0, 1)."""
    path = Path(path)
    rows = read_csv_rows(path, "a header of sensor ids (optionally after a 'time' column) and one row per step")
    header = [h.strip() for h in rows[0]]
    has_time = header[0].lower() == "time"
    ids = header[1:] if has_time else header
    if len(set(ids)) != len(ids):
        raise DataError(f"{path}: duplicate sensor ids in the header")
    speed = np.zeros((len(rows) - 1, len(ids)), dtype=np.float32)
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise DataError(f"{path} line {number}: {len(row)} values but the header has {len(header)} columns")
        for col, cell in enumerate(row[1:] if has_time else row):
            cell = cell.strip()
            if cell in MISSING:
                continue
            try:
                value = float(cell)
            except ValueError:
                raise DataError(f"{path} line {number} column {ids[col]!r}: {cell!r} is not a number; expected a "
                                "speed, or blank for a missing reading") from None
            if not np.isfinite(value) or value < 0:
                raise DataError(f"{path} line {number} column {ids[col]!r}: {cell!r}; expected a finite speed >= 0")
            speed[number - 2, col] = value
    if has_time:
        time_of_day, steps_per_day = _time_of_day(path, [row[0] for row in rows[1:]])
    else:
        time_of_day = (np.arange(len(speed)) % steps_per_day / steps_per_day).astype(np.float32)
    return ids, speed, time_of_day


class TrafficCSVData(TrafficSeriesData):
    """A user's traffic folder (see the module doc), chronological split."""

    def __init__(self, root: str, steps_per_day: int, expect_num_nodes: int | None, **kwargs):
        super().__init__(**kwargs)
        self.root, self.steps_per_day, self.expect_num_nodes = Path(root), steps_per_day, expect_num_nodes

    def load(self):
        if not self.root.is_dir():
            raise DataError(f"traffic folder {self.root} does not exist; expected a folder with speeds.csv and "
                            "adjacency.csv")
        ids, speed, time_of_day = read_speed_csv(self.root / "speeds.csv", self.steps_per_day)
        if self.expect_num_nodes is not None and len(ids) != self.expect_num_nodes:
            raise DataError(f"{self.root / 'speeds.csv'} has {len(ids)} sensors but the model takes "
                            f"{self.expect_num_nodes}")
        adjacency_path = self.root / "adjacency.csv"
        read_adjacency_csv(adjacency_path, ids)  # checked now, before any training
        return speed, time_of_day, str(adjacency_path.resolve()), {
            "source": str(self.root), "license": "the user's data", "spec": {"sensors": ids}}


@register_dataset(task="traffic-forecast")
def traffic_csv(root: str, steps_per_day: int = 288, expect_num_nodes: int | None = None, input_steps: int = 12,
                output_steps: int = 12, val_fraction: float = 0.1, test_fraction: float = 0.2, batch_size: int = 32,
                num_workers: int = 0, seed: int = 0) -> TrafficCSVData:
    """A folder with speeds.csv (time x sensors) and adjacency.csv (sensors x sensors), chronological 70/10/20."""
    return TrafficCSVData(root, steps_per_day, expect_num_nodes, input_steps=input_steps, output_steps=output_steps,
                          val_fraction=val_fraction, test_fraction=test_fraction, batch_size=batch_size,
                          num_workers=num_workers, seed=seed)


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
