"""Time-series datasets for recipes: NASA C-MAPSS (remaining useful life), Los-loop traffic speeds, and a user's
sensor units and traffic folders.

Remaining-useful-life data, NASA C-MAPSS turbofan engines as per-engine sliding windows.

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

Traffic speed forecasting data: Los-loop (T-GCN) and the METR-LA / PEMS-BAY road graphs (DCRNN).

Los-loop: 207 loop detectors of Los Angeles highways, 2016 five-minute steps (7 days), with a weighted
road adjacency (Zhao et al., T-GCN, IEEE T-ITS 2019). Samples are 12 steps in, 12 steps out, split
chronologically 70/10/20 over the samples (as DCRNN and the TESTAM paper do). Inputs are z-scored with
the training mean/std and carry the time of day; targets stay in mph.

Batches: x (B, 12, N, 2) = [z-scored speed, time of day in [0, 1)], y (B, 12, N) mph.
Metrics (task ``traffic-forecast``): MAE, RMSE and MAPE at 15, 30 and 60 minutes (steps 3, 6, 12) and MAE
over all steps, with zero targets masked, as the traffic literature does.

Road graphs (Los-loop, METR-LA, PEMS-BAY, a user's CSV) are read by :func:`timeseries.io.road_graph`.

Degradation paths: Meeker & Escobar's GaAs lasers (``laser_degradation``: 15 lasers, % operating-current increase
every 250 h to 4000 h, failure at 10%; only a local copy, there being no fixed public file) and a user's folder of
degradation CSVs (``degradation_units``: one per unit, a time column and one measure, equally spaced inspections).
Windows of ``window`` consecutive levels with the next ``horizon`` as targets, split by unit; no scaling (the model
reads levels in the data's units, divided by its ``scale``). Batches: x (B, window, 1), y (B, horizon).

User sensor data for the RUL models: one CSV per unit (engine, machine), one row per cycle.

Format: a header with a time column (``cycle`` by default) and one column per sensor, named as the
model card's ``input_spec["sensors"]`` (for ``rul_attention.fd001``: s2, s3, ..., s21). Extra columns
are ignored. Rows must be in time order with consecutive cycles (no gaps), every value finite, and at
least ``window`` rows per unit. Anything else raises :class:`hub.errors.DataError` naming the file.

* ``attnhub finetune rul_attention.fd001 --data FOLDER``: every CSV in FOLDER is a run-to-failure unit
  (its last row is the failure), split by unit into train/val/test (70/15/15);
  the min-max scaling is refitted on the training units and written to the new card. Units that lack the
  card's sensors are refused, naming the family to train from scratch instead.
* ``attnhub finetune rul_attention --data FOLDER`` (a family, no tag): trained from scratch on every column but
  the time column, whatever the sensors' names; the sensors with fewer than 3 distinct values over the training
  units are dropped (as on FD001) and reported; the FD001 recipe's 30-cycle windows, RUL cap and min-max scaling.
* ``attnhub predict rul_attention.fd001 unit7.csv ...``: the last ``window`` rows of each file, scaled
  with the card's min/max, give the RUL now and its forecast over the next cycles.

User traffic data for TESTAM and the traffic GRU: a folder with ``speeds.csv`` and ``adjacency.csv``.

``speeds.csv``: a header of sensor ids, optionally after a first column named ``time`` (timestamps);
one row per time step, equally spaced. Documented conversions: a blank cell or ``nan`` is a missing
reading and becomes 0, as in METR-LA and Los-loop (zeros are masked out of the targets and metrics);
the time of day comes from the timestamps, or without them from the row number and ``steps_per_day``
(288: five-minute steps). Refused, naming the file, row and column: a non-numeric or infinite value,
a negative speed, timestamps that are not equally spaced (a gap in time) or go back.

``adjacency.csv``: the (N, N) road graph, non-negative weights (0: no road between two sensors), with
or without a header row; a header must list the sensor ids of ``speeds.csv`` in the same order.

* ``attnhub finetune testam.RUN --data FOLDER`` (or the family ``testam`` / ``traffic_gru``, from scratch):
  trains on the folder's speeds, chronological 70/10/20 split, with its road graph (the model args ``graph``
  is the adjacency CSV's path as FOLDER names it: relative when FOLDER is, so the card holds no machine path).
* ``attnhub predict NAME speeds.csv``: the forecast from the last ``input_steps`` rows of each file,
  one line per sensor (``file:sensor``) with the next ``output_steps`` speeds.
"""
from __future__ import annotations

import io
import logging
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import TensorDataset

from hub.core.registry import register_dataset
from hub.core.weights import read_verified
from hub.data import EpochSeededDataset, HubDataModule, data_dir, dataset_file
from hub.errors import DataError, DatasetUnavailable
from timeseries.io import (
    STEPS_PER_DAY,
    _unit_files,
    read_adjacency_csv,
    read_degradation_csv,
    read_ppg_folder,
    read_speed_csv,
    read_unit_columns,
    read_unit_csv,
    road_neighbours,
)
from timeseries.signals import (
    BAND_HZ,
    CHANNELS,
    MODEL_RATE,
    STEP_S,
    WINDOW_S,
    prepare_segments,
    prepare_windows,
    stretch_windows,
    window_count,
)

log = logging.getLogger("hub")

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


def pool_groups(units: dict[int, np.ndarray], window: int) -> np.ndarray:
    """The unit of each window of ``units`` in their order (:meth:`RULWindowData._windows`'s): the groups by which
    the choice by folds splits them. Shapes: -> (windows,) int."""
    return np.concatenate([np.full(len(series) - window + 1, unit) for unit, series in units.items()])


class RULWindowData(HubDataModule):
    """Run-to-failure units -> scaled per-unit windows with (capped) RUL targets; see the module doc.

    Subclasses implement :meth:`load` returning ``(train_units, test_units, test_rul_at_end, names)``:
    unit -> (cycles, S) arrays, the true RUL after each test unit's last cycle, and the S sensor names.

    Args:
        window: cycles per input window (at least 2; default 30).
        horizon: RUL targets per window: now and the next ``horizon - 1`` cycles (at least 1; default 10).
        rul_cap: the piecewise-linear RUL's ceiling, in cycles (default 125).
        val_fraction: fraction of the training units held out whole for validation (default 0.2).
        split_seed: seed of that split (default 0).
        batch_size: windows per batch (default 256).
        num_workers: DataLoader worker processes (default 0: the main process).
        seed: seed of the training order (default 0).
        cv_fold: ``[k, index, seed]``: train on the units of the other k-1 folds of the training and validation
            units' windows, grouped by unit (:func:`hub.crossval.fold_indices`, as ``finetune``'s choice folds
            them: :func:`pool_groups`), and validate on the units of fold ``index``.
        refit: train on every unit, test units included (that choice's refit; validation and test figures
            in-sample)."""

    task = "rul-regression"

    def __init__(self, window: int = 30, horizon: int = 10, rul_cap: float = 125.0, val_fraction: float = 0.2,
                 split_seed: int = 0, batch_size: int = 256, num_workers: int = 0, seed: int = 0,
                 cv_fold: list[int] | None = None, refit: bool = False):
        super().__init__(batch_size, num_workers, seed)
        if window < 2 or horizon < 1:
            raise DataError(f"expected window >= 2 and horizon >= 1, got window={window}, horizon={horizon}")
        if cv_fold is not None and refit:
            raise DataError("cv_fold and refit exclude each other (a fold run trains on k-1 folds, the refit on all)")
        self.cv_fold, self.refit = cv_fold, refit
        self.pool_units: np.ndarray | None = None  # the unit of each training then validation window
        self.window, self.horizon, self.rul_cap = window, horizon, rul_cap
        self.val_fraction, self.split_seed = val_fraction, split_seed
        self.sensors: list[str] = []
        self.test_units: dict[int, np.ndarray] = {}  # scaled, for plots and trajectories
        self.test_rul_at_end: dict[int, float] = {}
        self.unit_names: dict[int, str] = {}  # unit -> its name for the user (a file's stem); default: its number
        self.test_windows: dict[str, list] = {}  # "unit" and "cycle" (the last one) of each test window

    def load(self) -> tuple[dict, dict, dict, list[str]]:
        raise NotImplementedError

    def test_rul_cap(self) -> float | None:
        return self.rul_cap

    def select_sensors(self, train_units: dict, names: list[str]) -> list[int]:
        """Indices of the sensors used as inputs: the varying ones."""
        return varying_sensors(train_units, names)

    def _windows(self, units: dict, rul_at_end: dict | None, last_only: bool, cap: float | None,
                 ids: dict[str, list] | None = None):
        """The windows of ``units`` and their targets; ``ids`` (if given) gets the unit name and last cycle of each."""
        xs, ys = [], []
        for unit, series in units.items():
            windows = sliding_windows(series, self.window)  # (N, window, S)
            targets = rul_targets(len(series), self.window, self.horizon, np.inf,
                                  rul_at_end[unit] if rul_at_end else 0.0)  # (N, horizon)
            if cap is not None:
                targets = np.minimum(targets, cap)
            xs.append(windows[-1:] if last_only else windows)
            ys.append(targets[-1:] if last_only else targets)
            if ids is not None:
                ends = [len(series)] if last_only else range(self.window, len(series) + 1)
                ids.setdefault("unit", []).extend([self.unit_names.get(unit, str(unit))] * len(ends))
                ids.setdefault("cycle", []).extend(ends)
        return TensorDataset(torch.from_numpy(np.concatenate(xs)), torch.from_numpy(np.concatenate(ys)).float())

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        train_units, test_units, test_rul, names = self.load()
        keep = self.select_sensors(train_units, names)
        self.sensors = [names[i] for i in keep]
        train_ids, val_ids = split_units(list(train_units), self.val_fraction, self.split_seed)
        self.pool_units = pool_groups({u: train_units[u] for u in train_ids + val_ids}, self.window)
        split = "validation: units held out whole"
        if self.cv_fold is not None:
            from hub.crossval import fold_indices

            k, index, fold_seed = (int(v) for v in self.cv_fold)
            _, held = fold_indices("regression", np.zeros(len(self.pool_units)), self.pool_units, k=k, seed=fold_seed,
                                   warn=lambda line: None)[index]
            held_units = set(self.pool_units[held].tolist())
            train_ids, val_ids = ([u for u in train_ids + val_ids if (u in held_units) == is_held]
                                  for is_held in (False, True))  # pool order: the folds' windows in their order
            split = f"fold {index} of {k} (seed {fold_seed}) of the training and validation units, by unit"
        fitted = {u: train_units[u][:, keep] for u in train_ids + (val_ids if self.refit else [])}
        if self.refit:  # test units may share ids with training units (C-MAPSS numbers both from 1)
            fitted.update({("test", u): s[:, keep] for u, s in test_units.items()})
        low, high = minmax_fit(fitted)
        scaled = {u: minmax_apply(s[:, keep], low, high) for u, s in train_units.items()}
        self.test_units = {u: minmax_apply(s[:, keep], low, high) for u, s in test_units.items()}
        self.test_rul_at_end = dict(test_rul)
        self.train_set = self._windows({u: scaled[u] for u in train_ids}, None, False, self.rul_cap)
        if self.refit:  # every unit trains: the test units' windows with their own targets
            split += "; refit: every unit trains (validation and test figures in-sample)"
            parts = [self._windows({u: scaled[u] for u in train_ids + val_ids}, None, False, self.rul_cap),
                     self._windows(self.test_units, test_rul, False, self.rul_cap)]
            self.train_set = TensorDataset(*(torch.cat(t) for t in zip(*(p.tensors for p in parts))))
        self.val_set = self._windows({u: scaled[u] for u in val_ids}, None, False, self.rul_cap)
        self.test_windows = {}
        self.test_set = self._windows(self.test_units, test_rul, bool(test_rul), self.test_rul_cap(), self.test_windows)
        self.input_spec = {"kind": "sensor_series", "window": self.window, "horizon": self.horizon,
                           "sensors": self.sensors, "min": [float(v) for v in low], "max": [float(v) for v in high],
                           "rul_cap": self.rul_cap}
        self.output_names = rul_output_names(self.horizon)
        trained = train_ids + (val_ids + sorted(test_units) if self.refit else [])
        self.info = {**self.info, "units": {"train": trained, "val": val_ids, "test": len(test_units)},
                     "windows": [len(self.train_set), len(self.val_set), len(self.test_set)], "split": split}

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


LOS_SPEED_SHA256 = "7b732d86ae32b2930595becba28aff39dacbfb2197e250fc0332e1744ce2cbf4"


def forecast_output_names(output_steps: int, step_seconds: int) -> list[str]:
    """Names of the forecast outputs, by lead time: ``speed_5min``, ``speed_10min``, ... for five-minute steps
    (``speed_30s``, ... when a step is not a whole number of minutes)."""
    if step_seconds % 60 == 0:
        return [f"speed_{h * step_seconds // 60}min" for h in range(1, output_steps + 1)]
    return [f"speed_{h * step_seconds}s" for h in range(1, output_steps + 1)]


def traffic_features(speed: np.ndarray, time_of_day: np.ndarray, mean: float, std: float) -> np.ndarray:
    """The traffic models' input features of raw speeds: [speed z-scored with the training ``mean`` and ``std``,
    time of day in [0, 1)]. Shapes: (T, N) mph and (T,) -> (T, N, 2) float32."""
    return np.stack([(speed - mean) / std, np.broadcast_to(time_of_day[:, None], speed.shape)], -1).astype(np.float32)


TIME_BLOCKS = 10  # the blocks of consecutive samples a traffic series is folded by (at least the folds asked)


def time_blocks(count: int, blocks: int = TIME_BLOCKS) -> np.ndarray:
    """Each of ``count`` consecutive samples' block of time: ``blocks`` runs of about equal length, the groups by
    which the choice by folds splits a single series (whole blocks validate, so a fold's validation is a stretch of
    time, not scattered samples whose neighbours trained). Shapes: -> (count,) int.

    >>> time_blocks(5, 2).tolist()
    [0, 0, 0, 1, 1]
    """
    return np.minimum(np.arange(count) * blocks // max(count, 1), blocks - 1)


class TrafficSeriesData(HubDataModule):
    """Speeds (T, N) as ``input_steps``-in / ``output_steps``-out samples, split chronologically; subclasses
    :meth:`load` the speeds, the time of day of each step and the road graph (see the module doc).

    Args:
        input_steps: time steps per input (default 12).
        output_steps: time steps forecast (default 12).
        val_fraction: fraction of the samples, after the training ones, held out for validation (default 0.1).
        test_fraction: fraction of the samples, the last ones, held out for testing (default 0.2).
        batch_size: samples per batch (default 32).
        num_workers: DataLoader worker processes (default 0: the main process).
        seed: seed of the training order (default 0).
        cv_fold: ``[k, index, seed]``: the samples before the test split cut into ``k`` blocks of consecutive time
            (:func:`time_blocks`, the groups ``finetune``'s choice folds them by), validate on the block of fold
            ``index`` and train on the samples of the others that share no time step with it (a purge of
            ``input_steps + output_steps - 1`` samples each side).
        refit: train on every sample, test included (that choice's refit; validation and test figures in-sample)."""

    task = "traffic-forecast"

    def __init__(self, input_steps: int = 12, output_steps: int = 12, val_fraction: float = 0.1,
                 test_fraction: float = 0.2, batch_size: int = 32, num_workers: int = 0, seed: int = 0,
                 cv_fold: list[int] | None = None, refit: bool = False):
        super().__init__(batch_size, num_workers, seed)
        if cv_fold is not None and refit:
            raise DataError("cv_fold and refit exclude each other (a fold run trains on k-1 folds, the refit on all)")
        self.cv_fold, self.refit = cv_fold, refit
        self.pool_blocks: np.ndarray | None = None  # the time block of each training then validation sample
        self.train_steps = np.zeros(0, dtype=bool)  # (T,) the steps seen as inputs of training samples
        self.input_steps, self.output_steps = input_steps, output_steps
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.mean = self.std = 0.0
        self.graph = ""
        self.time_slot = np.zeros(0, dtype=np.int64)  # (T,) each step's slot of the day, for the historical average
        self.steps_per_day = 0
        self.splits: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # raw windows for the baselines

    def load(self) -> tuple[np.ndarray, np.ndarray, str, dict]:
        """-> speed (T, N) float32 (0 = missing reading), time of day (T,) in [0, 1), road graph (a name of
        :data:`timeseries.io.GRAPH_FILES` or an adjacency CSV path), info for the card."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        speed, time_of_day, self.graph, info = self.load()
        total = self.input_steps + self.output_steps
        starts = np.arange(len(speed) - total + 1)
        n_test, n_val = round(len(starts) * self.test_fraction), round(len(starts) * self.val_fraction)
        if len(starts) - n_val - n_test < 1 or n_val < 1 or n_test < 1:
            raise DataError(f"{info['source']}: {len(speed)} time steps make {max(len(starts), 0)} samples of "
                            f"{self.input_steps} + {self.output_steps} steps, too few for a train/val/test split; "
                            "expected several days of readings")
        parts = {"train": starts[:len(starts) - n_val - n_test],
                 "val": starts[len(starts) - n_val - n_test:len(starts) - n_test],
                 "test": starts[len(starts) - n_test:]}
        pool = starts[:len(starts) - n_test]
        self.pool_blocks = time_blocks(len(pool))
        split = "chronological: train, then validation, then test"
        if self.cv_fold is not None:
            from hub.crossval import fold_indices

            k, index, fold_seed = (int(v) for v in self.cv_fold)
            _, held = fold_indices("regression", np.zeros(len(pool)), self.pool_blocks, k=k, seed=fold_seed,
                                   warn=lambda line: None)[index]
            is_held = np.zeros(len(pool))
            is_held[held] = 1.0
            near = np.convolve(is_held, np.ones(2 * total - 1), "same") > 0  # shares a time step with a held sample
            parts = {"train": pool[~near], "val": pool[held], "test": parts["test"]}
            split = f"fold {index} of {k} (seed {fold_seed}): a block of time before the test split, purged"
        if self.refit:
            parts = {**parts, "train": starts}
            split += "; refit: every sample trains (validation and test figures in-sample)"
        self.train_steps = np.zeros(len(speed), dtype=bool)
        self.train_steps[(parts["train"][:, None] + np.arange(self.input_steps)[None, :]).ravel()] = True
        self.mean, self.std = float(speed[self.train_steps].mean()), float(speed[self.train_steps].std())
        features = traffic_features(speed, time_of_day, self.mean, self.std)
        for name, idx in parts.items():
            window = idx[:, None] + np.arange(total)[None, :]  # (S, T_in + T_out) step indices
            x = features[window[:, :self.input_steps]]  # (S, T_in, N, 2)
            y = speed[window[:, self.input_steps:]]  # (S, T_out, N)
            self.splits[name] = (window, y)
            setattr(self, f"{name}_set", TensorDataset(torch.from_numpy(x), torch.from_numpy(y)))
        self.speed = speed
        step_seconds = round((float(time_of_day[1] - time_of_day[0]) % 1.0) * 86400) or 86400  # one step
        self.steps_per_day = max(1, round(86400 / step_seconds))
        self.time_slot = np.round(time_of_day * 86400 / step_seconds).astype(np.int64) % self.steps_per_day
        self.input_spec = {"kind": "traffic_series", "input_steps": self.input_steps, "output_steps": self.output_steps,
                           "num_nodes": speed.shape[1], "mean": self.mean, "std": self.std,
                           "graph": self.graph if isinstance(self.graph, str) else "adjacency.csv",
                           **info.pop("spec", {})}
        self.info = {**info, "samples": [len(v) for v in parts.values()], "split": split}
        self.output_names = forecast_output_names(self.output_steps, step_seconds)

    def model_args(self):
        return {"num_nodes": self.speed.shape[1], "input_steps": self.input_steps, "output_steps": self.output_steps,
                "speed_mean": self.mean, "speed_std": self.std, "graph": self.graph}


class LosLoopData(TrafficSeriesData):
    """Los-loop speeds (see the module doc)."""

    def load(self):
        path = data_dir() / "los_loop" / "los_speed.csv"
        if not path.is_file():
            raise DatasetUnavailable("los_loop", f"{path} not found; put Los-loop there (see its PROVENANCE.md) or "
                                                 "set HUB_DATA_DIR")
        lines = read_verified(path, LOS_SPEED_SHA256).decode().splitlines()
        speed = np.loadtxt(lines[1:], delimiter=",", dtype=np.float32)  # (T, N), header = sensor ids
        time_of_day = np.arange(len(speed)) % STEPS_PER_DAY / STEPS_PER_DAY
        return speed, time_of_day, "los_loop", {
            "source": "Los-loop (T-GCN, Zhao et al. 2019; METR-LA sensors, Jagadish et al. 2014)",
            "license": "none stated for the data (T-GCN-PyTorch code is MIT)"}


@register_dataset(task="traffic-forecast")
def los_loop(input_steps: int = 12, output_steps: int = 12, val_fraction: float = 0.1, test_fraction: float = 0.2,
             batch_size: int = 32, num_workers: int = 0, seed: int = 0) -> LosLoopData:
    """Los-loop speeds (207 sensors, 7 days, 5 min), 12 steps in / 12 out, chronological 70/10/20."""
    return LosLoopData(input_steps, output_steps, val_fraction, test_fraction, batch_size, num_workers, seed)


class SensorUnitsData(RULWindowData):
    """A folder of run-to-failure unit CSVs; train/val/test by unit. Given ``sensors`` (a model's) are all kept;
    without them every column but ``time_column`` is a sensor, and the constant ones are dropped and reported.

    Args:
        root: the folder of unit CSVs (one per unit, one row per cycle, the last row the failure).
        sensors: the sensor columns to read, all required (a model card's ``input_spec["sensors"]``); None: every
            column but ``time_column``, the constant ones dropped.
        time_column: the cycle column (default ``"cycle"``).
        test_fraction: fraction of the units held out whole for testing (default 0.15).
        **kwargs: those of :class:`RULWindowData` (``window``, ``horizon``, ``rul_cap``, ``val_fraction``...)."""

    def __init__(self, root: str, sensors: list[str] | None = None, time_column: str = "cycle",
                 test_fraction: float = 0.15, **kwargs):
        super().__init__(**kwargs)
        self.root, self.time_column, self.test_fraction = Path(root), time_column, test_fraction
        self.sensor_names = None if sensors is None else list(sensors)
        self.info = {"source": str(self.root), "license": "the user's data"}

    def select_sensors(self, train_units, names):
        if self.sensor_names is not None:
            return list(range(len(names)))  # the model's sensors, even if one is constant here
        keep = varying_sensors(train_units, names)
        dropped = [n for i, n in enumerate(names) if i not in keep]
        if dropped:
            self.info["constant_sensors_dropped"] = dropped
            log.warning("%s: sensor(s) %s have fewer than 3 distinct values over the training units; dropped",
                        self.root, dropped)
        return keep

    def load(self):
        files = _unit_files(self.root)
        names = self.sensor_names
        if names is None:
            names = [c for c in read_unit_columns(files[0], self.time_column) if c != self.time_column]
        units = {i: read_unit_csv(f, names, self.window, self.time_column) for i, f in enumerate(files)}
        self.unit_names = {i: f.stem for i, f in enumerate(files)}
        train_ids, test_ids = split_units(list(units), self.test_fraction, self.split_seed + 1)
        return {u: units[u] for u in train_ids}, {u: units[u] for u in test_ids}, {}, names


@register_dataset(task="rul-regression")
def sensor_units(root: str, sensors: list[str] | None = None, window: int = 30, horizon: int = 10,
                 rul_cap: float = 125.0, time_column: str = "cycle", val_fraction: float = 0.15,
                 test_fraction: float = 0.15, split_seed: int = 0, batch_size: int = 256, num_workers: int = 0,
                 seed: int = 0, cv_fold: list[int] | None = None, refit: bool = False) -> SensorUnitsData:
    """A folder of run-to-failure unit CSVs (cycle column + sensor columns), split by unit.

    ``sensors``: a model's (all kept), or None for every column but the time column (the constant ones dropped).
    ``cv_fold`` and ``refit``: the fold runs and the refit of finetune's cross-validated choice (by unit)."""
    return SensorUnitsData(root, sensors, time_column, test_fraction, window=window, horizon=horizon, rul_cap=rul_cap,
                           val_fraction=val_fraction, split_seed=split_seed, batch_size=batch_size,
                           num_workers=num_workers, seed=seed, cv_fold=cv_fold, refit=refit)


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
        adjacency = read_adjacency_csv(self.root / "adjacency.csv", ids)  # checked now, before any training
        return speed, time_of_day, road_neighbours(adjacency), {
            "source": str(self.root), "license": "the user's data", "spec": {"sensors": ids}}


@register_dataset(task="traffic-forecast")
def traffic_csv(root: str, steps_per_day: int = 288, expect_num_nodes: int | None = None, input_steps: int = 12,
                output_steps: int = 12, val_fraction: float = 0.1, test_fraction: float = 0.2, batch_size: int = 32,
                num_workers: int = 0, seed: int = 0, cv_fold: list[int] | None = None,
                refit: bool = False) -> TrafficCSVData:
    """A folder with speeds.csv (time x sensors) and adjacency.csv (sensors x sensors), chronological 70/10/20.
    ``cv_fold`` and ``refit``: the fold runs (blocks of time) and the refit of finetune's cross-validated choice."""
    return TrafficCSVData(root, steps_per_day, expect_num_nodes, input_steps=input_steps, output_steps=output_steps,
                          val_fraction=val_fraction, test_fraction=test_fraction, batch_size=batch_size,
                          num_workers=num_workers, seed=seed, cv_fold=cv_fold, refit=refit)


# Meeker & Escobar's GaAs laser degradation data (../shared/data/laser_degradation/PROVENANCE.md): no public file
# to download at a fixed address, so only a local copy is read.
LASER_FILE = ("laser_degradation", "laser.csv", "7690b595182481b6e1468841e4e14c9aa3e6f35710fb8f73e2aad16b3079687d")
LASER_INFO = {"source": "GaAs laser degradation, Meeker & Escobar, Statistical Methods for Reliability Data (1998), "
                        "Example 13.5 / Table C.17: 15 lasers, % operating-current increase every 250 h to 4000 h",
              "license": "none stated; data published in the textbook",
              "failure_threshold": 10.0, "inspection_hours": 250}


def read_laser_units() -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """The laser data as ``(hours (17,), {unit: (17,) % current increase})``, the origin (0 h, 0 %) prepended."""
    dataset, name, sha256 = LASER_FILE
    path = dataset_file(dataset, data_dir() / dataset / name, None, sha256)
    read_verified(path, sha256)
    table = np.genfromtxt(path, delimiter=",", names=True)
    hours = np.unique(table["hours"])
    units = {}
    for unit in np.unique(table["unit"]).astype(int):
        rows = table[table["unit"] == unit]
        if not np.array_equal(np.sort(rows["hours"]), hours):
            raise DataError(f"{path}: laser {unit} lacks some of the inspections {hours.tolist()}")
        units[int(unit)] = np.concatenate([[0.0], rows["current_increase_pct"][np.argsort(rows["hours"])]])
    return np.concatenate([[0.0], hours]), units


def degradation_windows(path: np.ndarray, window: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ``window`` consecutive levels of a path and the ``horizon`` levels after them.

    Shapes: (L,) -> x (N, window, 1), y (N, horizon), N = L - window - horizon + 1.

    >>> x, y = degradation_windows(np.arange(6.0), 2, 3)
    >>> x[:, :, 0].tolist(), y.tolist()
    ([[0.0, 1.0], [1.0, 2.0]], [[2.0, 3.0, 4.0], [3.0, 4.0, 5.0]])
    """
    if len(path) < window + horizon:
        raise DataError(f"a path of {len(path)} inspections is shorter than window + horizon = {window + horizon}")
    view = np.lib.stride_tricks.sliding_window_view(path, window + horizon)  # (N, window + horizon)
    return view[:, :window, None].astype(np.float32), view[:, window:].astype(np.float32)


def degradation_output_names(horizon: int, step: float) -> list[str]:
    """``level_plus_250h``, ... for the ``horizon`` forecast inspections ``step`` hours apart."""
    return [f"level_plus_{int(step * h)}h" for h in range(1, horizon + 1)]


class DegradationPathData(HubDataModule):
    """Degradation paths (one per unit, equally spaced inspections) as windows, split by unit.

    Batches are ``(x, y)``: x (B, window, 1) levels at ``window`` consecutive inspections, y (B, horizon) the next
    ``horizon`` inspections. Subclasses implement :meth:`load` and :meth:`split`.

    Args:
        window: inspections per input.
        horizon: inspections forecast.
        batch_size, num_workers, seed: as :class:`hub.data.HubDataModule`."""

    task = "degradation-forecast"
    measure, time_column, threshold = "level", "time", None

    def __init__(self, window: int = 4, horizon: int = 4, batch_size: int = 32, num_workers: int = 0, seed: int = 0):
        super().__init__(batch_size, num_workers, seed)
        if window < 2 or horizon < 1:
            raise DataError(f"expected window >= 2 and horizon >= 1, got window={window}, horizon={horizon}")
        self.window, self.horizon = window, horizon

    def load(self) -> tuple[float, dict]:
        """``(step between inspections, {unit: (L,) levels})``."""
        raise NotImplementedError

    def split(self, units: list) -> tuple[list, list, list]:
        """The units' ``(train, val, test)`` lists."""
        raise NotImplementedError

    def _windows(self, paths: list[np.ndarray]) -> TensorDataset | None:
        if not paths:
            return None
        pairs = [degradation_windows(p, self.window, self.horizon) for p in paths]
        return TensorDataset(torch.from_numpy(np.concatenate([x for x, _ in pairs])),
                             torch.from_numpy(np.concatenate([y for _, y in pairs])))

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        step, units = self.load()
        train, val, test = self.split(list(units))
        self.train_set = self._windows([units[u] for u in train])
        self.val_set, self.test_set = self._windows([units[u] for u in val]), self._windows([units[u] for u in test])
        self.input_spec = {"kind": "degradation_series", "window": self.window, "horizon": self.horizon,
                           "measure": self.measure, "time_column": self.time_column, "step": step,
                           "threshold": self.threshold}
        self.output_names = degradation_output_names(self.horizon, step)
        self.info = {**self.info, "units": {"train": train, "val": val, "test": test}}

    def model_args(self):
        return {"window": self.window, "horizon": self.horizon}


class LaserDegradationData(DegradationPathData):
    """The 15 GaAs lasers (the origin, 0 h and 0 %, prepended to each path), split by laser.

    Args:
        test_units: lasers held out for testing (``benchmarks.laser_degradation`` leaves each of the 15 out).
        val_units: lasers held out to watch training (may be empty: no validation split).
        val_fraction: given, this fraction of the lasers that are not tested is drawn for validation with
            ``split_seed`` instead of ``val_units`` (the held-out units of cross-fitted intervals,
            :mod:`hub.uncertainty.cross_conformal`).
        split_seed: seed of that draw.
        **kwargs: those of :class:`DegradationPathData`."""

    measure, time_column, threshold = "current_increase_pct", "hours", LASER_INFO["failure_threshold"]

    def __init__(self, test_units: list[int] | None = None, val_units: list[int] | None = None,
                 val_fraction: float | None = None, split_seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.test_units = [5, 10, 15] if test_units is None else list(test_units)
        self.val_units = [4, 9] if val_units is None else list(val_units)
        self.val_fraction, self.split_seed = val_fraction, split_seed
        self.info = dict(LASER_INFO)

    def load(self):
        hours, units = read_laser_units()
        return float(hours[1] - hours[0]), units

    def split(self, units):
        unknown = sorted(set(self.test_units + self.val_units) - set(units))
        if unknown:
            raise DataError(f"laser_degradation has lasers {sorted(units)}; test_units/val_units name {unknown}")
        if self.val_fraction is not None:
            train, val = split_units([u for u in units if u not in self.test_units], self.val_fraction,
                                     self.split_seed)
            return train, val, self.test_units
        train = [u for u in units if u not in self.test_units + self.val_units]
        return train, self.val_units, self.test_units


@register_dataset(task="degradation-forecast")
def laser_degradation(window: int = 4, horizon: int = 4, test_units: list[int] | None = None,
                      val_units: list[int] | None = None, val_fraction: float | None = None, split_seed: int = 0,
                      batch_size: int = 32, num_workers: int = 0, seed: int = 0) -> LaserDegradationData:
    """Meeker & Escobar's 15 GaAs lasers (% current increase every 250 h), windows split by laser
    (:class:`LaserDegradationData`: ``val_fraction`` draws the validation lasers instead of ``val_units``)."""
    return LaserDegradationData(test_units, val_units, val_fraction, split_seed, window=window, horizon=horizon,
                                batch_size=batch_size, num_workers=num_workers, seed=seed)


class DegradationUnitsData(DegradationPathData):
    """A folder of a user's degradation CSVs (one per unit: ``time_column`` and ``measure`` columns, equally spaced
    inspections, no origin row added), split by unit like :class:`SensorUnitsData`.

    Args:
        root: the folder of unit CSVs.
        measure, time_column: the columns to read.
        threshold: the failure level, kept on the card (None: not known).
        val_fraction, test_fraction, split_seed: the split by unit.
        **kwargs: those of :class:`DegradationPathData`."""

    def __init__(self, root: str, measure: str = "level", time_column: str = "time", threshold: float | None = None,
                 val_fraction: float = 0.15, test_fraction: float = 0.15, split_seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.root, self.measure, self.time_column, self.threshold = Path(root), measure, time_column, threshold
        self.val_fraction, self.test_fraction, self.split_seed = val_fraction, test_fraction, split_seed
        self.info = {"source": str(self.root), "license": "the user's data"}

    def load(self):
        files = _unit_files(self.root)
        step, units = None, {}
        for f in files:
            units[f.stem], step = read_degradation_csv(f, self.measure, self.time_column, self.window + self.horizon,
                                                       step)
        return step, units

    def split(self, units):
        kept, test = split_units(list(range(len(units))), self.test_fraction, self.split_seed + 1)
        train, val = split_units(kept, self.val_fraction, self.split_seed)
        return [units[i] for i in train], [units[i] for i in val], [units[i] for i in test]


@register_dataset(task="degradation-forecast")
def degradation_units(root: str, measure: str = "level", time_column: str = "time", threshold: float | None = None,
                      window: int = 4, horizon: int = 4, val_fraction: float = 0.15, test_fraction: float = 0.15,
                      split_seed: int = 0, batch_size: int = 32, num_workers: int = 0,
                      seed: int = 0) -> DegradationUnitsData:
    """A folder of degradation CSVs (time column + one measure column, equally spaced), split by unit."""
    return DegradationUnitsData(root, measure, time_column, threshold, val_fraction, test_fraction, split_seed,
                                window=window, horizon=horizon, batch_size=batch_size, num_workers=num_workers,
                                seed=seed)


# The IEEE Signal Processing Cup 2015 training set (TROIKA; ../shared/data/troika/PROVENANCE.md), at the fixed commit
# of the public copy it was taken from.
TROIKA_URL = ("https://raw.githubusercontent.com/udacity/nd320-c4-wearable-data-project-starter/"
              "145ee96e3d7c4006fd56395da77806c38ebb144c/part_1/datasets/troika/training_data/{name}")
TROIKA_FILES = {  # recording -> (DATA sha256, REF sha256)
    "01_TYPE01": ("1efd5eff52d6302d7a70c92e4260a7e03b9d4b3baf327e6f09f5f411f841502b",
                  "af8c5acfdc3304b62231da8bafae7e3c076a18f730525e03b8f4bea2eb2510ec"),
    "02_TYPE02": ("3ea010b00a127c9162a1aa7029eba4fc000aff4f74b0b3ab15f17f5e3f38c06e",
                  "66f486fb4b1424cc0261b2d40cfd95833e5a08350a7c34785e4e01839a751da2"),
    "03_TYPE02": ("367090eccfeb0d263fde44567487faebe04044f7900aa6d38c76f94682e62bbd",
                  "14c6ecc4b7fd1b795320527c171eace70858e9954e79f1e6eecd16492324da60"),
    "04_TYPE01": ("514f487a20fd2ffdb870d2943f164b7f47d2d8f1e6e7e44a2bafb74c777bece0",
                  "d64a6b920ba21c601aaed87c376fd0731eb6948ade0e9e5048dbb8bbb22b487a"),
    "04_TYPE02": ("c5abbeb804c8c56f78ab0d99d56640ffec3c1693a94003f55bb4e8ec1da4eef4",
                  "8763cb1d38e1cdbc10b2618110738c29ab1ddd43cf9a25bc342af3c1c8cec78e"),
    "05_TYPE02": ("fd5f20105ea8b59c6a0e46990df5a82b5d780b6298be032401b67fdbf9e1e86d",
                  "78df991fdf57bd1ed01f95a089121c5a4b8da1fc586f813d53883e5a8c2aabda"),
    "06_TYPE02": ("ad290fc67ebd1212723401b008143ad1bda81200ce468f30ed3f517e19a6cc18",
                  "942bd7dde6a9d2979dccdc4813075ebae5428ec070be0fa7ed040f798739c591"),
    "07_TYPE02": ("27443d6ab16103ddeacc589ea292af648e0e0fe3639a96f723010be2243a31c1",
                  "a4addca8b65a95f0b69247a5417d358a78ad4494b794b073f14ca927207da1df"),
    "08_TYPE02": ("4b4ee64d58a4a279b4b0ba1dd722be06bc39b2fef31712538d9dec3e2854b8e0",
                  "7e940964ef57ffa5cde7edbb6f1fef525d8352845ad1d4e0cf61f116710d8074"),
    "10_TYPE02": ("22892db766b5491c5df724697deecdccb1b53a42813793fc82c7d014330238a9",
                  "bb04fc9f26fc518e5e9ae6fe348b83b14aa1a4ab1b31623a996fe8b577037080"),
    "11_TYPE02": ("d36dce46628593f7aef76dc6b8c7cead46c0585815ca72d8a9801ba2674f02f0",
                  "12e3a2262029af27f5f9c23c5f6922df1a52b38309924a299f1f3c9212c3be31"),
    "12_TYPE02": ("3971d5b17b62a2da9d9c4631ff0dc7502dd44df16c0680e2091920bbb839b214",
                  "670a1271b50c6bc09a820a0ec04d59c7193c317e03bd0afe3e2599824fa9caa4"),
}
TROIKA_RATE = 125.0
TROIKA_INFO = {"source": "IEEE Signal Processing Cup 2015 training set (TROIKA; Zhang, Pi & Liu, IEEE TBME 2015): 12 "
                         "treadmill runs, 2-channel wrist PPG and a 3-axis accelerometer at 125 Hz, ECG heart rate "
                         "per 8-s window every 2 s",
               "license": "academic research use with citation of the TROIKA paper (the organisers' Readme); not an "
                          "open license"}


def _troika_file(name: str, sha256: str) -> dict:
    from scipy.io import loadmat

    path = dataset_file("troika", data_dir() / "troika" / name, TROIKA_URL.format(name=name), sha256)
    return loadmat(io.BytesIO(read_verified(path, sha256)))


def read_troika_recording(recording: str) -> tuple[np.ndarray, np.ndarray]:
    """One TROIKA recording (``"01_TYPE01"``, ...) as ``(signals (5, N) at 125 Hz: PPG 1-2 and accelerometer x, y,
    z, BPM0 (W,))``; ``sig``'s row 0, the chest ECG, is dropped (it gave the reference). Local copy under
    ``HUB_DATA_DIR/troika`` or the public file, sha256 checked either way."""
    if recording not in TROIKA_FILES:
        raise DataError(f"unknown TROIKA recording {recording!r}; the recordings are {sorted(TROIKA_FILES)}")
    data_sha, ref_sha = TROIKA_FILES[recording]
    signals = _troika_file(f"DATA_{recording}.mat", data_sha)["sig"][1:6]
    bpm = _troika_file(f"REF_{recording}.mat", ref_sha)["BPM0"][:, 0]
    if len(bpm) != window_count(signals.shape[1], TROIKA_RATE):
        raise DataError(f"TROIKA {recording}: {len(bpm)} reference windows for {signals.shape[1]} samples; expected "
                        f"{window_count(signals.shape[1], TROIKA_RATE)}")
    return signals, bpm


class StretchedWindows(EpochSeededDataset):
    """Training windows with time-stretch augmentation (:func:`timeseries.signals.stretch_windows`): each item read
    at a random speed factor in ``1 ± stretch``, its heart rate multiplied by the same factor, so the model sees heart
    rates and step rates beyond its training recordings'. Items: (x (5, 200), bpm ()).

    Args:
        segments: the windows' centred 10-s segments (W, 5, 250) (:func:`timeseries.signals.prepare_segments`).
        bpm: their reference heart rates (W,).
        stretch: the factor's largest distance from 1.
        seed: with the epoch and the index, seeds each item's factor."""

    def __init__(self, segments: torch.Tensor, bpm: torch.Tensor, stretch: float, seed: int):
        self.segments, self.bpm, self.stretch, self.seed = segments, bpm, stretch, seed

    def __len__(self) -> int:
        return len(self.bpm)

    def augmented_item(self, index: int, generator: torch.Generator):
        factor = 1 + (torch.rand(1, generator=generator) * 2 - 1) * self.stretch  # (1,)
        return stretch_windows(self.segments[index:index + 1], factor)[0], self.bpm[index] * factor[0]


class HeartRateData(HubDataModule):
    """Recordings of wrist PPG (2 channels) and a 3-axis accelerometer with a reference heart rate per 8-s window
    every 2 s, as prepared windows (:mod:`timeseries.signals`: band-passed, decimated to 25 Hz, each channel
    normalised per window), split by recording (the group: no window of a test recording is seen in training).

    Batches are ``(x, y)``: x (B, 5, 200), y (B,) BPM. ``groups`` gives each split's recording per window, in
    order (what tracking over a recording reads). Empty ``val``/``test`` lists (a tag trained on every recording)
    make that split read the training windows, and ``info["held_out"]`` says so. Subclasses implement :meth:`load`
    and :meth:`split`.

    Args:
        stretch: time-stretch augmentation of the training windows, a factor drawn in ``1 ± stretch`` (0: none).
        batch_size, num_workers, seed: as :class:`hub.data.HubDataModule`."""

    task = "heart-rate"

    def __init__(self, stretch: float = 0.2, batch_size: int = 64, num_workers: int = 0, seed: int = 0):
        super().__init__(batch_size, num_workers, seed)
        if not 0 <= stretch <= 0.25:
            raise DataError(f"expected 0 <= stretch <= 0.25 (the segments hold 10 s for 8-s windows), got {stretch}")
        self.stretch = stretch
        self.groups: dict[str, list[str]] = {}
        self.train_windows: TensorDataset | None = None

    def load(self) -> tuple[float, dict[str, tuple[np.ndarray, np.ndarray]]]:
        """``(sampling rate, {recording: (signals (5, N), bpm (W,))})``."""
        raise NotImplementedError

    def split(self, recordings: list[str]) -> tuple[list[str], list[str], list[str]]:
        """The recordings' ``(train, val, test)`` lists."""
        raise NotImplementedError

    def _windows(self, recordings: dict, names: list[str], rate: float) -> TensorDataset | None:
        if not names:
            return None
        x = np.concatenate([prepare_windows(recordings[n][0], rate) for n in names])
        y = np.concatenate([recordings[n][1] for n in names]).astype(np.float32)
        return TensorDataset(torch.from_numpy(x), torch.from_numpy(y))

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        rate, recordings = self.load()
        train, val, test = self.split(list(recordings))
        self.train_windows = self._windows(recordings, train, rate)
        if self.stretch:
            segments = np.concatenate([prepare_segments(recordings[n][0], rate) for n in train])
            self.train_set = StretchedWindows(torch.from_numpy(segments).float(), self.train_windows.tensors[1],
                                              self.stretch, self.seed)
        else:
            self.train_set = self.train_windows
        # no recording held out (a tag trained on all of them): val and test read the training windows, fit figures
        self.val_set = self._windows(recordings, val, rate) or self.train_windows
        self.test_set = self._windows(recordings, test, rate) or self.train_windows
        self.groups = {split: [n for n in names or train for _ in range(len(recordings[n][1]))]
                       for split, names in (("train", train), ("val", val), ("test", test))}
        self.input_spec = {"kind": "ppg_series", "channels": list(CHANNELS), "rate": rate,
                           "model_rate": MODEL_RATE, "window_s": WINDOW_S, "step_s": STEP_S,
                           "band_hz": list(BAND_HZ)}
        self.output_names = ["bpm"]
        self.info = {**self.info, "recordings": {"train": train, "val": val, "test": test},
                     "samples": [sum(len(recordings[n][1]) for n in names) for names in (train, val, test)]}
        if not val or not test:
            self.info["held_out"] = ("none" if not val and not test else "test only" if test else "val only") + (
                ": the splits without a recording of their own read the training windows (fit figures)")

    def statistics_dataloader(self):
        """The training windows as evaluated (not stretched), for the OOD statistics."""
        return self._loader(self.train_windows, train=False)


class TroikaData(HeartRateData):
    """The 12 TROIKA recordings (IEEE SPC 2015 training set), split by recording.

    Args:
        test_recordings: recordings held out for testing (``benchmarks.troika_pulse`` leaves each out in turn).
        val_recordings: recordings held out to watch training (may be empty).
        **kwargs: those of :class:`HeartRateData`."""

    def __init__(self, test_recordings: list[str] | None = None, val_recordings: list[str] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.test_recordings = ["12_TYPE02"] if test_recordings is None else list(test_recordings)
        self.val_recordings = ["11_TYPE02"] if val_recordings is None else list(val_recordings)
        self.info = dict(TROIKA_INFO)

    def load(self):
        return TROIKA_RATE, {name: read_troika_recording(name) for name in TROIKA_FILES}

    def split(self, recordings):
        unknown = sorted(set(self.test_recordings + self.val_recordings) - set(recordings))
        if unknown:
            raise DataError(f"troika has the recordings {sorted(recordings)}; test_recordings/val_recordings name "
                            f"{unknown}")
        held = self.test_recordings + self.val_recordings
        return [r for r in recordings if r not in held], self.val_recordings, self.test_recordings


@register_dataset(task="heart-rate")
def troika(test_recordings: list[str] | None = None, val_recordings: list[str] | None = None, stretch: float = 0.2,
           batch_size: int = 64, num_workers: int = 0, seed: int = 0) -> TroikaData:
    """TROIKA / IEEE SPC 2015: 12 runs, wrist PPG + accelerometer, heart rate per 8-s window every 2 s."""
    return TroikaData(test_recordings, val_recordings, stretch=stretch, batch_size=batch_size,
                      num_workers=num_workers, seed=seed)


class PPGRecordingsData(HeartRateData):
    """A folder of a user's recordings: ``NAME.csv`` (a column per channel of :data:`timeseries.signals.CHANNELS`,
    one row per sample at ``rate`` Hz; other columns ignored) and ``NAME.bpm.csv`` (a ``bpm`` column, one row per
    8-s window every 2 s: row k is seconds [2k, 2k + 8)), split by recording like :class:`SensorUnitsData`.

    Args:
        root: the folder.
        rate: the recordings' sampling rate in Hz (a multiple of 25).
        val_fraction, test_fraction, split_seed: the split by recording.
        **kwargs: those of :class:`HeartRateData`."""

    def __init__(self, root: str, rate: float = 125.0, val_fraction: float = 0.15, test_fraction: float = 0.15,
                 split_seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.root, self.rate = Path(root), rate
        self.val_fraction, self.test_fraction, self.split_seed = val_fraction, test_fraction, split_seed
        self.info = {"source": str(self.root), "license": "the user's data"}

    def load(self):
        return self.rate, read_ppg_folder(self.root, self.rate)

    def split(self, recordings):
        kept, test = split_units(list(range(len(recordings))), self.test_fraction, self.split_seed + 1)
        train, val = split_units(kept, self.val_fraction, self.split_seed)
        return [recordings[i] for i in train], [recordings[i] for i in val], [recordings[i] for i in test]


@register_dataset(task="heart-rate")
def ppg_recordings(root: str, rate: float = 125.0, val_fraction: float = 0.15, test_fraction: float = 0.15,
                   split_seed: int = 0, stretch: float = 0.2, batch_size: int = 64, num_workers: int = 0,
                   seed: int = 0) -> PPGRecordingsData:
    """A folder of PPG + accelerometer recordings (NAME.csv) with reference heart rates (NAME.bpm.csv)."""
    return PPGRecordingsData(root, rate, val_fraction, test_fraction, split_seed, stretch=stretch,
                             batch_size=batch_size, num_workers=num_workers, seed=seed)
