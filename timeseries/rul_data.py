"""Remaining-useful-life data: NASA C-MAPSS turbofan engines as per-engine sliding windows.

Preparation, as in the RUL literature on C-MAPSS (Saxena et al., PHM 2008 for the data; Zheng et al.,
PHM 2017 for the window/cap recipe):

* inputs are the 21 sensors; the operational settings are not used (FD001 has one operating
  condition). Sensors with fewer than 3 distinct values over the training engines are dropped
  (constant ones; on FD001 that leaves the usual 14: s2 s3 s4 s7 s8 s9 s11 s12 s13 s14 s15 s17 s20 s21);
* min-max scaling to [0, 1], fitted on the training engines only (min/max go into the card's input_spec);
* windows of ``window`` consecutive cycles of one engine (never across engines), one per end cycle;
* the target of a window ending at cycle t of an engine that fails at cycle T is the piecewise-linear
  RUL ``min(T - t, rul_cap)``; ``horizon`` targets forecast the RUL of the next cycles,
  ``clip(T - t - h, 0, rul_cap)`` for h = 0..horizon-1 (the ForeNet idea: forecast, not only estimate now);
* validation holds out whole training engines (``val_fraction``), never windows of an engine in training;
* the test set is the official one: the last window of each test engine against ``RUL_FD001.txt``.
  ``test_rul_cap`` caps those true values too (125 by default, as the published FD001 figures do;
  ``null`` scores against the raw values).

Batches are ``(x, y)``: x (B, window, sensors) float, y (B, horizon) RUL in cycles.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from hub.data import HubDataModule, data_dir, dataset_file
from hub.errors import DataError
from hub.registry import register_dataset
from hub.weights import read_verified

SENSOR_NAMES = [f"s{i}" for i in range(1, 22)]
# The copy named in ../shared/data/cmapss/PROVENANCE.md (NASA PCoE data, mirrored on GitHub at a fixed commit).
CMAPSS_URL = ("https://raw.githubusercontent.com/alireza-javanmardi/conformal-RUL-intervals/"
              "37e450ac8b656229d44aed3ac39dcf85ea11b86c/data/CMAPSS/{name}")
CMAPSS_FILES = {  # name -> (sha256, bytes)
    "train_FD001.txt": ("963b5e22825b34d8b21c69e1aeb4af3e647050eb672ee8834ba4b5d91d2de0f8", 3_515_356),
    "test_FD001.txt": ("3cda7109ce17bafb5443f2ac926cfcf88154b941b8c4cf95eb55d1ddd6f52851", 2_228_855),
    "RUL_FD001.txt": ("a19c8ec94931949d0485bdc35118206e9c81c4547b422efb9cf86f4ceddbceca", 429),
}
CMAPSS_INFO = {"source": "NASA Ames PCoE C-MAPSS turbofan degradation (Saxena et al., PHM 2008), FD001",
               "license": "none stated; NASA (US government) data from the PCoE Prognostics Data Repository"}


def cmapss_file(name: str) -> Path:
    """Local path of a C-MAPSS file: ``data_dir()/cmapss/name`` if present, else downloaded into the
    cache. The full sha256 is checked either way."""
    if name not in CMAPSS_FILES:
        raise DataError(f"unknown C-MAPSS file {name!r}; available: {sorted(CMAPSS_FILES)}")
    sha256, num_bytes = CMAPSS_FILES[name]
    path = dataset_file("cmapss", data_dir() / "cmapss" / name, CMAPSS_URL.format(name=name), sha256, num_bytes)
    read_verified(path, sha256)
    return path


def read_cmapss_units(name: str) -> dict[int, np.ndarray]:
    """``train_FD001.txt`` / ``test_FD001.txt`` -> {unit: (cycles, 21) sensor array in cycle order}."""
    table = np.loadtxt(cmapss_file(name))  # (rows, 26): unit, cycle, 3 settings, 21 sensors
    units = {}
    for unit in np.unique(table[:, 0]).astype(int):
        rows = table[table[:, 0] == unit]
        units[int(unit)] = rows[np.argsort(rows[:, 1]), 5:]  # (cycles, 21)
    return units


def varying_sensors(train_units: dict, names: list[str], min_distinct: int = 3) -> list[int]:
    """Indices of the sensors with at least ``min_distinct`` values over the training engines."""
    stacked = np.concatenate(list(train_units.values()))  # (all cycles, S)
    keep = [i for i in range(stacked.shape[1]) if len(np.unique(stacked[:, i])) >= min_distinct]
    if not keep:
        raise DataError(f"every sensor of {names} is constant over the training units; nothing to learn from")
    return keep


def sliding_windows(series: np.ndarray, window: int) -> np.ndarray:
    """All windows of ``window`` consecutive rows. Shapes: (L, S) -> (L - window + 1, window, S)."""
    if len(series) < window:
        raise DataError(f"a unit has {len(series)} cycles, fewer than the window of {window}")
    view = np.lib.stride_tricks.sliding_window_view(series, window, axis=0)  # (N, S, window)
    return np.ascontiguousarray(view.transpose(0, 2, 1))  # (N, window, S)


def rul_targets(length: int, window: int, horizon: int, rul_cap: float, rul_at_end: float = 0.0) -> np.ndarray:
    """Piecewise-linear RUL of every window end and the ``horizon - 1`` cycles after it.

    Shapes: -> (length - window + 1, horizon). Row i ends at cycle ``window + i`` (1-based); its RUL is
    ``length - window - i + rul_at_end``, capped at ``rul_cap`` and floored at 0 (past failure).

    >>> rul_targets(5, 3, 2, rul_cap=125).tolist()
    [[2.0, 1.0], [1.0, 0.0], [0.0, 0.0]]
    """
    now = np.arange(length - window, -1, -1, dtype=np.float64)[:, None] + rul_at_end  # (N, 1)
    return np.clip(now - np.arange(horizon)[None, :], 0.0, rul_cap)


def rul_output_names(horizon: int) -> list[str]:
    """Names of the ``horizon`` forecast outputs: ``rul`` (now), then ``rul_plus_h``, the RUL h cycles later."""
    return ["rul", *(f"rul_plus_{h}" for h in range(1, horizon))]


def minmax_fit(train_units: dict) -> tuple[np.ndarray, np.ndarray]:
    stacked = np.concatenate(list(train_units.values()))
    low, high = stacked.min(0), stacked.max(0)
    return low, np.where(high > low, high, low + 1.0)


def minmax_apply(series: np.ndarray, low, high) -> np.ndarray:
    return ((series - np.asarray(low)) / (np.asarray(high) - np.asarray(low))).astype(np.float32)


def split_units(units: list[int], fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """Hold out ``fraction`` of the units (at least one), drawn with ``seed``: (kept, held_out)."""
    held = max(1, round(fraction * len(units)))
    if held >= len(units):
        raise DataError(f"cannot hold out {held} of {len(units)} units for validation; give more units")
    order = np.random.default_rng(seed).permutation(sorted(units))
    return sorted(int(u) for u in order[held:]), sorted(int(u) for u in order[:held])


class RULWindowData(HubDataModule):
    """Run-to-failure units -> scaled per-unit windows with (capped) RUL targets; see the module doc.

    Subclasses implement :meth:`load` returning ``(train_units, test_units, test_rul_at_end, names)``:
    unit -> (cycles, S) arrays, the true RUL after each test unit's last cycle, and the S sensor names.
    """

    task = "rul-regression"

    def __init__(self, window: int = 30, horizon: int = 10, rul_cap: float = 125.0, val_fraction: float = 0.2,
                 split_seed: int = 0, batch_size: int = 256, num_workers: int = 0, seed: int = 0):
        super().__init__(batch_size, num_workers, seed)
        if window < 2 or horizon < 1:
            raise DataError(f"expected window >= 2 and horizon >= 1, got window={window}, horizon={horizon}")
        self.window, self.horizon, self.rul_cap = window, horizon, rul_cap
        self.val_fraction, self.split_seed = val_fraction, split_seed
        self.sensors: list[str] = []
        self.test_units: dict[int, np.ndarray] = {}  # scaled, for plots and trajectories
        self.test_rul_at_end: dict[int, float] = {}

    def load(self) -> tuple[dict, dict, dict, list[str]]:
        raise NotImplementedError

    def test_rul_cap(self) -> float | None:
        return self.rul_cap

    def select_sensors(self, train_units: dict, names: list[str]) -> list[int]:
        """Indices of the sensors used as inputs: the varying ones."""
        return varying_sensors(train_units, names)

    def _windows(self, units: dict, rul_at_end: dict | None, last_only: bool, cap: float | None):
        xs, ys = [], []
        for unit, series in units.items():
            windows = sliding_windows(series, self.window)  # (N, window, S)
            targets = rul_targets(len(series), self.window, self.horizon, np.inf,
                                  rul_at_end[unit] if rul_at_end else 0.0)  # (N, horizon)
            if cap is not None:
                targets = np.minimum(targets, cap)
            xs.append(windows[-1:] if last_only else windows)
            ys.append(targets[-1:] if last_only else targets)
        return TensorDataset(torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys)).float())

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        train_units, test_units, test_rul, names = self.load()
        keep = self.select_sensors(train_units, names)
        self.sensors = [names[i] for i in keep]
        train_ids, val_ids = split_units(list(train_units), self.val_fraction, self.split_seed)
        low, high = minmax_fit({u: train_units[u][:, keep] for u in train_ids})
        scaled = {u: minmax_apply(s[:, keep], low, high) for u, s in train_units.items()}
        self.test_units = {u: minmax_apply(s[:, keep], low, high) for u, s in test_units.items()}
        self.test_rul_at_end = dict(test_rul)
        self.train_set = self._windows({u: scaled[u] for u in train_ids}, None, False, self.rul_cap)
        self.val_set = self._windows({u: scaled[u] for u in val_ids}, None, False, self.rul_cap)
        self.test_set = self._windows(self.test_units, test_rul, last_only=bool(test_rul), cap=self.test_rul_cap())
        self.input_spec = {"kind": "sensor_series", "window": self.window, "horizon": self.horizon,
                           "sensors": self.sensors, "min": [float(v) for v in low], "max": [float(v) for v in high],
                           "rul_cap": self.rul_cap}
        self.output_names = rul_output_names(self.horizon)
        self.info = {**self.info, "units": {"train": train_ids, "val": val_ids, "test": len(test_units)},
                     "windows": [len(self.train_set), len(self.val_set), len(self.test_set)]}

    def model_args(self):
        return {"num_sensors": len(self.sensors), "window": self.window, "horizon": self.horizon,
                "rul_scale": self.rul_cap}


class CMAPSSData(RULWindowData):
    """C-MAPSS FD001 (the only subset whose training file is available here)."""

    def __init__(self, test_rul_cap: float | None = 125.0, **kwargs):
        super().__init__(**kwargs)
        self._test_rul_cap = test_rul_cap
        self.info = dict(CMAPSS_INFO)

    def test_rul_cap(self) -> float | None:
        return self._test_rul_cap

    def load(self):
        train = read_cmapss_units("train_FD001.txt")
        test = read_cmapss_units("test_FD001.txt")
        rul = np.loadtxt(cmapss_file("RUL_FD001.txt"))
        if len(rul) != len(test):
            raise DataError(f"RUL_FD001.txt has {len(rul)} values but test_FD001.txt has {len(test)} engines")
        return train, test, {u: float(r) for u, r in zip(sorted(test), rul)}, SENSOR_NAMES


@register_dataset(task="rul-regression")
def cmapss_fd001(window: int = 30, horizon: int = 10, rul_cap: float = 125.0, test_rul_cap: float | None = 125.0,
                 val_fraction: float = 0.2, split_seed: int = 0, batch_size: int = 256, num_workers: int = 0,
                 seed: int = 0) -> CMAPSSData:
    """NASA C-MAPSS FD001: 100 training engines (20% held out by engine), the official 100 test engines."""
    return CMAPSSData(test_rul_cap=test_rul_cap, window=window, horizon=horizon, rul_cap=rul_cap,
                      val_fraction=val_fraction, split_seed=split_seed, batch_size=batch_size,
                      num_workers=num_workers, seed=seed)
