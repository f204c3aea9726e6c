"""User sensor data for the RUL models: one CSV per unit (engine, machine), one row per cycle.

Format: a header with a time column (``cycle`` by default) and one column per sensor, named as the
model card's ``input_spec["sensors"]`` (for ``rul_attention.fd001``: s2, s3, ..., s21). Extra columns
are ignored. Rows must be in time order with consecutive cycles (no gaps), every value finite, and at
least ``window`` rows per unit. Anything else raises :class:`hub.errors.DataError` naming the file.

* ``attnhub finetune rul_attention.fd001 --data FOLDER``: every CSV in FOLDER is a run-to-failure unit
  (its last row is the failure), split by unit into train/val/test (70/15/15);
  the min-max scaling is refitted on the training units and written to the new card.
* ``attnhub predict rul_attention.fd001 unit7.csv ...``: the last ``window`` rows of each file, scaled
  with the card's min/max, give the RUL now and its forecast over the next cycles.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import torch

from hub.adapters import register_finetune_adapter, register_predict_adapter
from hub.data import read_csv_rows
from hub.errors import DataError
from hub.registry import register_dataset
from timeseries.rul_data import RULWindowData, minmax_apply, split_units


def read_unit_csv(path: str | Path, sensors: list[str], window: int, time_column: str = "cycle") -> np.ndarray:
    """One unit's CSV -> (cycles, len(sensors)) float array in the order of ``sensors``, checked."""
    path = Path(path)
    rows = read_csv_rows(path, f"a header '{time_column},{','.join(sensors)}' and one row per cycle")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in [time_column, *sensors] if c not in header]
    if missing:
        raise DataError(f"{path}: expected columns {[time_column, *sensors]}, got {header}: missing {missing}")
    columns = [header.index(c) for c in [time_column, *sensors]]
    try:
        table = np.array([[float(row[i]) for i in columns] for row in rows[1:]],
                         dtype=np.float64).reshape(-1, len(columns))
    except (ValueError, IndexError) as err:
        raise DataError(f"{path}: every row needs a number in each of {[time_column, *sensors]} ({err})") from None
    if len(table) < window:
        raise DataError(f"{path} has {len(table)} cycles, fewer than the model's window of {window}")
    bad = np.argwhere(~np.isfinite(table))
    if len(bad):
        row, col = bad[0]
        raise DataError(f"{path}: {len(bad)} NaN/inf values, first in row {row + 2} column "
                        f"'{[time_column, *sensors][col]}'; fill or drop them first")
    steps = np.diff(table[:, 0])
    if len(steps) and not np.all(steps == 1):
        at = int(np.flatnonzero(steps != 1)[0])
        raise DataError(f"{path}: '{time_column}' must go up by 1 each row (no gaps, in time order); "
                        f"row {at + 2} has {table[at, 0]:g}, row {at + 3} has {table[at + 1, 0]:g}")
    return table[:, 1:]


def _unit_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise DataError(f"sensor folder {root} does not exist or is not a folder")
    files = sorted(root.glob("*.csv"))
    if len(files) < 3:
        raise DataError(f"{root} has {len(files)} CSV files; expected one per unit and at least 3 units "
                        "(train, validation and test units are split by unit)")
    return files


class SensorUnitsData(RULWindowData):
    """A folder of run-to-failure unit CSVs; train/val/test by unit; every given sensor is kept."""

    def __init__(self, root: str, sensors: list[str], time_column: str = "cycle", test_fraction: float = 0.15,
                 **kwargs):
        super().__init__(**kwargs)
        self.root, self.sensor_names, self.time_column = Path(root), list(sensors), time_column
        self.test_fraction = test_fraction
        self.info = {"source": str(self.root), "license": "the user's data"}

    def select_sensors(self, train_units, names):
        return list(range(len(names)))  # the model's sensors, even if one is constant here

    def load(self):
        files = _unit_files(self.root)
        units = {i: read_unit_csv(f, self.sensor_names, self.window, self.time_column) for i, f in enumerate(files)}
        train_ids, test_ids = split_units(list(units), self.test_fraction, self.split_seed + 1)
        return ({u: units[u] for u in train_ids}, {u: units[u] for u in test_ids}, {}, self.sensor_names)


@register_dataset(task="rul-regression")
def sensor_units(root: str, sensors: list[str], window: int = 30, horizon: int = 10, rul_cap: float = 125.0,
                 time_column: str = "cycle", val_fraction: float = 0.15, test_fraction: float = 0.15,
                 split_seed: int = 0, batch_size: int = 256, num_workers: int = 0, seed: int = 0) -> SensorUnitsData:
    """A folder of run-to-failure unit CSVs (cycle column + sensor columns), split by unit."""
    return SensorUnitsData(root, sensors, time_column, test_fraction, window=window, horizon=horizon, rul_cap=rul_cap,
                           val_fraction=val_fraction, split_seed=split_seed, batch_size=batch_size,
                           num_workers=num_workers, seed=seed)


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
