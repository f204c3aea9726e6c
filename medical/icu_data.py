"""Medical ICU stays for recipes: PhysioNet/CinC Challenge 2012, training set A: 4000 ICU stays, the first 48 h
of 37 irregularly sampled variables and 6 admission descriptors, with in-hospital death as the binary target.

Each stay becomes an hourly grid: ``values`` (48, 37) holds the mean of the observations in each hour,
``mask`` (48, 37) is True where the hour had an observation; hours without one carry the last
observed value forward (the mean before the first). Values are clipped to the training part's 1st-99th
percentiles and standardised with its observed mean and std (kept in the card). ``static`` holds the
standardised age, gender, height, weight on admission and the one-hot ICU type, with missing
descriptors (``-1``) at the mean and flagged. Batches: ``({"values", "mask", "static"}, y)``.

Splits are stratified by outcome: ``fold`` k of 5 is the test part (20%), 1/8 of the rest validates.
Parsing the 4000 text files (each checked against MANIFEST.tsv's sha256) takes seconds; the grids are
cached in ``HUB_CACHE``/data, keyed by the manifest's sha256, so later runs load one ``.npz``.

>>> data = physionet2012(fold=0); data.setup()
>>> inputs, y = data.train_set[0]; inputs["values"].shape, inputs["static"].shape
(torch.Size([48, 37]), torch.Size([9]))

A user's stays (:func:`icu_stays_folder`, the data of ``attnhub finetune tfcam --data FOLDER``) take the same path: a
folder of records in set A's format (or one long ``stays.csv``) with an outcomes CSV, the grid of the stays' own
variables (or a card's), split stratified by the label unless the folder has ``train/``, ``val/``, ``test/``.

The survival tables (DeepSurv sets, a user's survival CSV) are in :mod:`medical.survival_data`.
"""
from __future__ import annotations

import csv
import io
import logging
import math
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import torch
from torch.utils.data import Dataset

from hub.core.registry import register_dataset
from hub.core.weights import cache_dir, sha256_bytes
from hub.data import HubDataModule, data_dir, read_csv_frame, stratified_split
from hub.errors import DataError, DatasetUnavailable
from hub.io import atomic_write_bytes

log = logging.getLogger("hub")


VARIABLES = ["ALP", "ALT", "AST", "Albumin", "BUN", "Bilirubin", "Cholesterol", "Creatinine", "DiasABP", "FiO2",
             "GCS", "Glucose", "HCO3", "HCT", "HR", "K", "Lactate", "MAP", "MechVent", "Mg", "NIDiasABP", "NIMAP",
             "NISysABP", "Na", "PaCO2", "PaO2", "Platelets", "RespRate", "SaO2", "SysABP", "Temp", "TroponinI",
             "TroponinT", "Urine", "WBC", "Weight", "pH"]
DESCRIPTORS = ["Age", "Gender", "Height", "Weight"]
HOURS = 48
MORTALITY_LABEL, MORTALITY_CLASSES = "In-hospital_death", ["survived", "died"]  # PhysioNet 2012's outcome, 0 and 1
MANIFEST_SHA256 = "2783d6fe8bd2896a3936bd8a0396724a4262e4255a4ffde50cf17a44c02aad3d"
DOWNLOAD = "https://physionet.org/content/challenge-2012/1.0.0/"
SOURCE = ("PhysioNet/CinC Challenge 2012 training set A (Silva et al., Computing in Cardiology 39, 2012), "
          "physionet.org/content/challenge-2012/1.0.0")


def _observations(rows: Iterable[list[str]]) -> Iterator[tuple[int, str, float]]:
    """``Time,Parameter,Value`` rows (no header) -> ``(minutes since admission, parameter, value)``; a row that is
    not such a triple raises ValueError naming it."""
    for line, row in enumerate(rows, 2):
        if not row:
            continue
        try:
            time, name, value = row
            hours, minutes = time.split(":")
            observation = int(hours) * 60 + int(minutes), name.strip(), float(value)
            if not math.isfinite(observation[2]):
                raise ValueError(value)
        except ValueError:
            raise ValueError(f"line {line} is {','.join(row)[:60]!r}, not Time (HH:MM),Parameter,Value (a finite "
                             "number)") from None
        yield observation


def _record_rows(text: str) -> list[list[str]]:
    """The data rows of one record file's text (its header dropped)."""
    return list(csv.reader(io.StringIO(text)))[1:]


def _grid_sums(observations: Iterable[tuple[int, str, float]], variables: list[str], hours: int
               ) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """A stay's ``(minutes, parameter, value)`` observations -> hourly sums (hours, F) and counts (hours, F) of the F
    ``variables``, and its descriptors; observations after ``hours`` h (beyond ``hours``:00), of other parameters and
    negative values (-1: not measured) are ignored."""
    sums, counts = np.zeros((hours, len(variables))), np.zeros((hours, len(variables)))
    descriptors: dict[str, float] = {}
    index = {v: i for i, v in enumerate(variables)}
    for minutes, name, value in _time_series(observations, descriptors):
        if name in index and value >= 0 and 0 <= minutes <= hours * 60:
            hour = min(minutes // 60, hours - 1)  # 48:00 belongs to the last hour
            sums[hour, index[name]] += value
            counts[hour, index[name]] += 1
    return sums, counts, descriptors


def _time_series(observations: Iterable[tuple[int, str, float]], descriptors: dict[str, float]
                 ) -> Iterator[tuple[int, str, float]]:
    """The time-series observations of a stay; its descriptors (the first ``00:00`` row of each of Age, Gender,
    Height, Weight and ICUType: ``Weight`` is also a time series) go into ``descriptors`` instead."""
    for minutes, name, value in observations:
        if minutes == 0 and name in (*DESCRIPTORS, "ICUType") and name not in descriptors:
            descriptors[name] = value
        else:
            yield minutes, name, value


def record_grid(text: str, variables: list[str] = VARIABLES, hours: int = HOURS) -> tuple[np.ndarray, np.ndarray]:
    """One record file's text -> its hourly means (hours, F) float32 of the ``variables``, NaN where unobserved,
    and ``static_raw`` (5,): age, gender, height, weight, ICU type, NaN where missing."""
    return _stay_grid(_observations(_record_rows(text)), variables, hours)


def _stay_grid(observations: Iterable[tuple[int, str, float]], variables: list[str], hours: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`record_grid` of a stay's ``(minutes, parameter, value)`` observations."""
    sums, counts, descriptors = _grid_sums(observations, variables, hours)
    with np.errstate(invalid="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan).astype(np.float32)
    static = np.array([descriptors.get(k, -1.0) for k in (*DESCRIPTORS, "ICUType")], dtype=np.float32)
    static[static < 0] = np.nan
    if static[4] not in (1, 2, 3, 4) and not np.isnan(static[4]):
        raise ValueError(f"ICUType {static[4]:g}; expected 1 to 4")
    return means, static


RECORD_EXPECTED = "a PhysioNet 2012 record: a 'Time,Parameter,Value' header, then rows such as '00:42,HR,88'"


def _record_text(path: Path) -> str:
    """The text of a record file, its header checked; a file that is not such a record raises naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(f"cannot read {path} ({err}); expected {RECORD_EXPECTED}") from None
    header = text.split("\n", 1)[0].strip()
    if header != "Time,Parameter,Value":
        raise DataError(f"{path}: the first line is {header[:60]!r}; expected {RECORD_EXPECTED}")
    return text


def read_record(path: str | Path, variables: list[str] = VARIABLES, hours: int = HOURS
                ) -> tuple[np.ndarray, np.ndarray]:
    """A patient's raw record file (``set-a/<id>.txt``: a ``Time,Parameter,Value`` header, then rows such as
    ``00:42,HR,88``) -> :func:`record_grid`; a file that is not such a record raises naming it."""
    path = Path(path)
    text = _record_text(path)
    try:
        return record_grid(text, variables, hours)
    except ValueError as err:
        raise DataError(f"{path}: {err}; expected {RECORD_EXPECTED}") from None


def load_grids(root: Path) -> dict[str, np.ndarray]:
    """The raw hourly grids of set A (cached): ``means`` (N, 48, 37) NaN where unobserved, ``static_raw``
    (N, 5): age, gender, height, weight, ICU type (NaN if missing), ``y`` (N,), ``ids`` (N,)."""
    manifest = root / "MANIFEST.tsv"
    if not manifest.is_file():
        raise DatasetUnavailable("physionet2012", f"{manifest} not found; download set-a.tar.gz and Outcomes-a.txt "
                                 f"from {DOWNLOAD} (a credentialed-free PhysioNet page), unpack them with the "
                                 f"MANIFEST.tsv of the hub's PROVENANCE.md into {root}, or set HUB_DATA_DIR")
    digest = sha256_bytes(manifest.read_bytes())
    if digest != MANIFEST_SHA256:
        raise DataError(f"{manifest}: sha256 {digest}, expected {MANIFEST_SHA256}; not the known set A")
    cache = cache_dir() / "data" / f"physionet2012-{digest[:16]}.npz"
    if cache.is_file():
        with np.load(cache) as saved:
            return dict(saved)
    outcomes = {row["RecordID"]: int(row["In-hospital_death"])
                for row in csv.DictReader(open(root / "Outcomes-a.txt", newline=""))}
    expected = {line.split("\t")[0]: line.split("\t")[2] for line in manifest.read_text().splitlines()[1:]}
    ids = sorted(outcomes)
    means = np.full((len(ids), HOURS, len(VARIABLES)), np.nan, dtype=np.float32)
    static = np.full((len(ids), 5), np.nan, dtype=np.float32)
    for n, record in enumerate(ids):
        path = root / "set-a" / f"{record}.txt"
        data = path.read_bytes()
        if sha256_bytes(data) != expected.get(f"set-a/{record}.txt"):
            raise DataError(f"{path}: sha256 does not match MANIFEST.tsv; the file was changed")
        means[n], static[n] = record_grid(data.decode())
    grids = {"means": means, "static_raw": static, "y": np.array([outcomes[i] for i in ids], dtype=np.int64),
             "ids": np.array(ids, dtype=np.int64)}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **grids)
    cache.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(cache, buffer.getvalue())
    return grids


def prepare(means: np.ndarray, static_raw: np.ndarray, train: np.ndarray) -> tuple[dict[str, np.ndarray], dict]:
    """The training statistics of the ``train`` stays (:func:`stay_statistics`) and every stay's arrays
    (:func:`stay_arrays`) -> arrays, statistics."""
    stats = stay_statistics(means[train], static_raw[train])
    return stay_arrays(means, static_raw, stats), stats


def stay_statistics(means: np.ndarray, static_raw: np.ndarray) -> dict[str, list[float]]:
    """Of training stays' raw grids (N, T, F) and descriptors (N, 5): each variable's 1st and 99th percentile
    (``low``, ``high``), mean and std after clipping to them, and the mean and std of age, gender, height, weight
    (``static_mean``, ``static_std``); the card's ``input_spec`` keeps them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a variable never observed: NaN, set below
        low, high = np.nanpercentile(means, 1, axis=(0, 1)), np.nanpercentile(means, 99, axis=(0, 1))
        clipped = np.clip(means, low, high)
        mean, std = np.nanmean(clipped, axis=(0, 1)), np.nanstd(clipped, axis=(0, 1))
        numeric = static_raw[:, :4]
        s_mean, s_std = np.nanmean(numeric, 0), np.nanstd(numeric, 0)
    # never observed (a variable or descriptor absent from a user's stays): clipped to 0, standardised by 1
    low, high, mean, s_mean = (np.nan_to_num(a) for a in (low, high, mean, s_mean))
    std, s_std = (np.where(a > 0, a, 1.0) for a in (std, s_std))
    return {"low": low.tolist(), "high": high.tolist(), "mean": mean.tolist(), "std": std.tolist(),
            "static_mean": s_mean.tolist(), "static_std": s_std.tolist()}


def stay_arrays(means: np.ndarray, static_raw: np.ndarray, stats: dict[str, list[float]]) -> dict[str, np.ndarray]:
    """Raw grids (N, T, F) and descriptors (N, 5) -> the model's inputs with the training ``stats``
    (:func:`stay_statistics`): ``values`` (N, T, F) clipped, standardised and carried forward, ``mask``
    (N, T, F) True where observed, ``static`` (N, 9) standardised descriptors, one-hot ICU type and a
    height-missing flag."""
    low, high, mean, std, s_mean, s_std = (np.asarray(stats[k], dtype=np.float32) for k in (
        "low", "high", "mean", "std", "static_mean", "static_std"))
    mask = ~np.isnan(means)
    z = (np.clip(means, low, high) - mean) / std
    filled = np.zeros_like(z)
    last = np.zeros(z[:, 0].shape, dtype=z.dtype)  # before the first observation: the mean (0)
    for hour in range(means.shape[1]):
        last = np.where(mask[:, hour], z[:, hour], last)
        filled[:, hour] = last
    numeric = static_raw[:, :4]
    s = np.nan_to_num((numeric - s_mean) / np.where(s_std > 0, s_std, 1.0))
    icu = np.nan_to_num(static_raw[:, 4], nan=3).astype(int)
    static = np.concatenate([s, np.eye(4)[icu - 1], np.isnan(numeric[:, 2:3])], 1).astype(np.float32)  # (N, 9)
    return {"values": filled.astype(np.float32), "mask": mask, "static": static}


def summary_features(means: np.ndarray, static_raw: np.ndarray) -> np.ndarray:
    """Per-variable last, mean, min, max and count of observations, plus the raw descriptors: the table
    of the gradient-boosting baseline (NaN where a variable was never observed). (N, T, F) -> (N, 5F + 5)."""
    observed = ~np.isnan(means)
    count = observed.sum(1).astype(np.float32)  # (N, F)
    last_hour = np.where(observed, np.arange(means.shape[1])[None, :, None], -1).max(1)  # (N, F)
    last = np.take_along_axis(means, np.maximum(last_hour, 0)[:, None], 1)[:, 0]
    last = np.where(last_hour >= 0, last, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a never-observed variable gives NaN, as wanted
        stats = [np.nanmean(means, 1), np.nanmin(means, 1), np.nanmax(means, 1)]
    return np.concatenate([last, *stats, count, static_raw], 1)


class StayRows(Dataset):
    def __init__(self, arrays: dict[str, np.ndarray], y: np.ndarray, index: np.ndarray):
        self.values = torch.from_numpy(arrays["values"][index])  # (N, T, F)
        self.mask = torch.from_numpy(arrays["mask"][index])  # (N, T, F) bool
        self.static = torch.from_numpy(arrays["static"][index])  # (N, 9)
        self.y = torch.from_numpy(y[index])

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        return {"values": self.values[i], "mask": self.mask[i], "static": self.static[i]}, self.y[i]


class IcuStaysData(HubDataModule):
    """Base of the ICU stay modules: subclasses read raw grids and a split, then :meth:`_build_sets` standardises
    them with the training part's statistics (kept in the card's ``input_spec``, kind ``icu_stays``)."""

    task = "classification"

    def _build_sets(self, grids: dict[str, np.ndarray], split: dict[str, np.ndarray], variables: list[str],
                    hours: int) -> None:
        """``grids``: ``means`` (N, hours, F) of the F ``variables``, ``static_raw`` (N, 5), ``y`` (N,) 0/1, ``ids``
        (N,); ``split``: the ``train``, ``val`` and ``test`` indices."""
        arrays, stats = prepare(grids["means"], grids["static_raw"], split["train"])
        self.train_set, self.val_set, self.test_set = (StayRows(arrays, grids["y"], split[p]) for p in PARTS)
        self.split_index = split
        self.grids = grids  # the raw grids, for the baseline's summaries
        self.input_spec = {"kind": "icu_stays", "variables": list(variables), "hours": hours, **stats}

    def model_args(self):
        return {"num_variables": len(self.input_spec["variables"]), "num_static": self.train_set.static.shape[1],
                "num_classes": 2}


class PhysioNet2012Data(IcuStaysData):
    """Set A as hourly grids; fold ``fold`` of 5 (stratified) is the test part.

    Args:
        fold: the test fold, 0-4 (folds drawn once, stratified by outcome); an eighth of the rest, stratified and
            seeded by ``fold``, is the validation part.
        batch_size: stays per batch.
        num_workers: DataLoader worker processes (0: the main process).
        seed: seed of the training order."""

    def __init__(self, fold: int, batch_size: int, num_workers: int, seed: int):
        super().__init__(batch_size, num_workers, seed)
        if not 0 <= fold < 5:
            raise DataError(f"data.args.fold must be 0-4 (5 stratified folds), got {fold}")
        self.fold = fold

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        grids = load_grids(data_dir() / "physionet2012")
        y = grids["y"]
        folds = stratified_split(y, (0.2,) * 5, seed=2012)
        test = folds[self.fold]
        rest = np.sort(np.concatenate([f for k, f in enumerate(folds) if k != self.fold]))
        train_part, val_part = stratified_split(y[rest], (7 / 8, 1 / 8), seed=self.fold)
        train, val = rest[train_part], rest[val_part]
        self._build_sets(grids, {"train": train, "val": val, "test": test}, VARIABLES, HOURS)
        self.num_classes, self.label_names = 2, list(MORTALITY_CLASSES)
        self.info = {"source": SOURCE, "license": "PhysioNet open access (see PROVENANCE.md)",
                     "split": f"fold {self.fold} of 5 stratified folds (seed 2012) is the test part; 1/8 of the "
                              f"rest validates (seed {self.fold})", "sizes": [len(train), len(val), len(test)],
                     "positive_rate": float(y.mean())}


@register_dataset(task="classification")
def physionet2012(fold: int = 0, batch_size: int = 64, num_workers: int = 0, seed: int = 0) -> PhysioNet2012Data:
    """PhysioNet 2012 set A: 48 hourly steps of 37 variables + 9 static features, in-hospital death."""
    return PhysioNet2012Data(fold, batch_size, num_workers, seed)


PARTS = ("train", "val", "test")
DESCRIPTOR_ONLY = ("RecordID", "Age", "Gender", "Height", "ICUType")  # parameters that are never a time series
STAYS_TABLE = "stays.csv"  # a long table instead of one file per stay
STAYS_TABLE_COLUMNS = ["RecordID", "Time", "Parameter", "Value"]
OUTCOMES_EXPECTED = ("a CSV with a RecordID column (the record file names without .txt) and a 0/1 label column, "
                     "such as PhysioNet 2012's Outcomes-a.txt")


def _outcomes_path(root: Path, outcomes: str | None) -> Path:
    """The outcomes file: ``outcomes`` (inside ``root``, else as given), by default the one file of ``root`` whose
    name starts with ``outcomes`` (any case)."""
    if outcomes is not None:
        path = next((p for p in (root / outcomes, Path(outcomes)) if p.is_file()), None)
        if path is None:
            raise DataError(f"the outcomes file {outcomes!r} (--outcomes, data.args.outcomes) is neither in {root} "
                            f"nor a file; expected {OUTCOMES_EXPECTED}")
        return path
    found = sorted(p.name for p in root.iterdir() if p.is_file() and p.name.lower().startswith("outcomes"))
    if len(found) != 1:
        what = f"several outcomes files {found}" if found else "no outcomes file (a file named Outcomes*)"
        raise DataError(f"{root} has {what}; expected one, {OUTCOMES_EXPECTED}, or name it with --outcomes FILE")
    return root / found[0]


def _stay_sources(root: Path, outcomes: Path) -> tuple[dict[str, tuple[str, Any]], dict[str, str]]:
    """The stays of a user's folder: ``{id: (where, rows)}``, ``rows()`` giving the stay's ``Time,Parameter,Value``
    rows, and ``{id: part}`` when the folder has ``train/``, ``val/``, ``test/`` subfolders (else empty)."""
    if (root / STAYS_TABLE).is_file():
        table = read_csv_frame(root / STAYS_TABLE, f"one row per observation with the columns {STAYS_TABLE_COLUMNS}",
                               dtype=str, keep_default_na=False)
        absent = [c for c in STAYS_TABLE_COLUMNS if c not in table.columns]
        if absent:
            raise DataError(f"{root / STAYS_TABLE} lacks the columns {absent}; expected the columns "
                            f"{STAYS_TABLE_COLUMNS} (one row per observation), has {list(table.columns)}")
        groups = table.groupby("RecordID", sort=False)[STAYS_TABLE_COLUMNS[1:]]
        return {str(i).strip(): (f"{root / STAYS_TABLE} (RecordID {i})", lambda rows=rows: rows.values.tolist())
                for i, rows in groups}, {}
    folders = {p: root / p for p in PARTS if (root / p).is_dir()}
    if folders and not {"train", "test"} <= set(folders):
        raise DataError(f"{root} has the subfolder(s) {sorted(folders)}; a given split needs train/ and test/ "
                        "(val/ optional), else put every record in one folder for a stratified split")
    if not folders:  # the records in the folder itself or in its subfolders (such as PhysioNet's set-a/)
        folders = {"": root, **{p.name: p for p in sorted(root.iterdir()) if p.is_dir()}}
    stays: dict[str, tuple[str, Any]] = {}
    parts: dict[str, str] = {}
    for part, folder in folders.items():
        for path in sorted(folder.iterdir()):
            if path.suffix.lower() not in (".txt", ".csv") or path == outcomes or not path.is_file():
                continue
            if path.stem in stays:
                raise DataError(f"two records of the stay {path.stem!r}: {stays[path.stem][0]} and {path}")
            stays[path.stem] = (str(path), lambda path=path: _record_rows(_record_text(path)))
            if part in PARTS:
                parts[path.stem] = part
    if not stays:
        raise DataError(f"{root} holds no record files; expected one {RECORD_EXPECTED} per stay, named "
                        f"<RecordID>.txt, or a long table {STAYS_TABLE} with the columns {STAYS_TABLE_COLUMNS}")
    return stays, parts


def _stay_labels(path: Path, label: str, ids: list[str]) -> np.ndarray:
    """The 0/1 ``label`` of each of the stays ``ids`` in the outcomes file at ``path``, (N,) int64."""
    import pandas as pd

    table = read_csv_frame(path, OUTCOMES_EXPECTED, dtype={"RecordID": str})
    for column, role in (("RecordID", "the stay ids"), (label, "the label (--label, data.args.label)")):
        if column not in table.columns:
            raise DataError(f"{path} has no column {column!r} ({role}); its columns are {list(table.columns)}; "
                            f"expected {OUTCOMES_EXPECTED}")
    values = dict(zip(table["RecordID"].str.strip(), table[label]))
    absent = [i for i in ids if i not in values]
    if absent:
        raise DataError(f"{path} has no outcome for {len(absent)} stay(s), e.g. {absent[:5]}; expected a row per "
                        "record file")
    raw = [values[i] for i in ids]
    y = pd.to_numeric(pd.Series(raw), errors="coerce").to_numpy(np.float64)
    bad = ~np.isin(y, (0.0, 1.0))
    if bad.any():
        found = sorted({str(v) for v, b in zip(raw, bad) if b})[:5]
        raise DataError(f"{path}: label column {label!r} must be binary, 0 or 1 for every stay (such as "
                        f"In-hospital_death); found {found} for stays {[i for i, b in zip(ids, bad) if b][:5]}")
    if len(np.unique(y)) < 2:
        raise DataError(f"{path}: label column {label!r} is {int(y[0])} for every stay; expected both 0 and 1")
    return y.astype(np.int64)


class IcuStaysFolderData(IcuStaysData):
    """A user's ICU stays (see :func:`icu_stays_folder`) as hourly grids of ``variables`` (default: every
    time-series parameter of the stays, sorted), labelled from the outcomes file.

    Args:
        path: the folder of ``<RecordID>.txt`` records (or holding ``stays.csv``).
        outcomes: the outcomes CSV (``RecordID`` and the ``label`` column); None: the file named ``Outcomes*``.
        label: the binary outcome column.
        variables: the time-series parameters to grid, in order (a card's); None: every one found, sorted.
        hours: the first hours of each stay that become the grid.
        split_seed: seed of the stratified split (without ``train/``, ``val/``, ``test/`` subfolders).
        val_fraction: fraction of the stays held out for validation (stratified split only).
        test_fraction: fraction held out for testing (stratified split only).
        cv_fold: ``[k, index, seed]``: train on the other k-1 folds of the stays outside the test split and validate
            on fold ``index`` (finetune's cross-validated choice, :mod:`hub.crossval`).
        refit: train on every stay, test included (that choice's refit; validation and test figures in-sample).
        **kwargs: ``batch_size``, ``num_workers`` and ``seed`` of :class:`~hub.data.HubDataModule`."""

    def __init__(self, path: str, outcomes: str | None, label: str, variables: list[str] | None, hours: int,
                 split_seed: int, val_fraction: float, test_fraction: float, cv_fold: list[int] | None = None,
                 refit: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.cv_fold, self.refit = cv_fold, refit
        self.root, self.outcomes, self.label, self.hours = Path(path), outcomes, label, hours
        self.variables = None if variables is None else list(variables)
        self.split_seed, self.fractions = split_seed, (1 - val_fraction - test_fraction, val_fraction, test_fraction)

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        if not self.root.is_dir():
            raise DataError(f"{self.root} is not a folder; expected a folder of PhysioNet 2012 style records "
                            f"(<RecordID>.txt) with an outcomes file ({OUTCOMES_EXPECTED})")
        outcomes = _outcomes_path(self.root, self.outcomes)
        stays, parts = _stay_sources(self.root, outcomes)
        ids = sorted(stays)
        y = _stay_labels(outcomes, self.label, ids)
        names: set[str] = set()
        for where, rows in stays.values():
            try:
                names.update(name for _, name, _ in _time_series(_observations(rows()), {}))
            except ValueError as err:
                raise DataError(f"{where}: {err}; expected {RECORD_EXPECTED}") from None
        names -= set(DESCRIPTOR_ONLY)
        variables = self.variables if self.variables is not None else sorted(names)
        if not names & set(variables):
            raise DataError(f"{self.root}: the stays hold none of the variables {variables} (found {sorted(names)})")
        self.info = {"source": str(self.root), "license": "the user's data", "outcomes": outcomes.name,
                     "label": self.label}
        if self.variables is not None:
            self.info["unknown_variables_dropped"] = sorted(names - set(variables))
            self.info["variables_never_observed"] = [v for v in variables if v not in names]
            if self.info["unknown_variables_dropped"]:
                log.warning("%s: variable(s) %s are not among the model's %d; dropped", self.root,
                            self.info["unknown_variables_dropped"], len(variables))
        means = np.full((len(ids), self.hours, len(variables)), np.nan, dtype=np.float32)
        static = np.full((len(ids), 5), np.nan, dtype=np.float32)
        for n, stay in enumerate(ids):
            where, rows = stays[stay]
            try:
                means[n], static[n] = _stay_grid(_observations(rows()), variables, self.hours)
            except ValueError as err:  # a bad ICUType
                raise DataError(f"{where}: {err}; expected {RECORD_EXPECTED}") from None
        split = self._folded(self._split(y, ids, parts), y)
        self._build_sets({"means": means, "static_raw": static, "y": y, "ids": np.array(ids)}, split, variables,
                         self.hours)
        # In-hospital_death's classes as the PhysioNet 2012 cards name them, so a tag fine-tuned on the same outcome
        # keeps its classifier (other names would train it fresh: hub.run.train._init_from); any other label: 0, 1
        self.num_classes = 2
        self.label_names = list(MORTALITY_CLASSES) if self.label == MORTALITY_LABEL else ["0", "1"]
        self.info.update(sizes=[len(split[p]) for p in PARTS], positive_rate=float(y.mean()))

    def _folded(self, split: dict[str, np.ndarray], y: np.ndarray) -> dict[str, np.ndarray]:
        """``split`` as ``cv_fold`` and ``refit`` make it; the folded stays are train then val (``pool_index``)."""
        self.pool_index = np.concatenate([split["train"], split["val"]])
        if self.cv_fold is not None:
            from hub.crossval import fold_indices

            k, index, seed = (int(v) for v in self.cv_fold)
            fit, held = fold_indices("classification", y[self.pool_index], k=k, seed=seed,
                                     warn=lambda line: None)[index]
            split = {**split, "train": self.pool_index[fit], "val": self.pool_index[held]}
            self.info["split"] += f"; fold {index} of {k} (seed {seed}) of the stays outside the test split"
        if self.refit:
            split = {**split, "train": np.concatenate([self.pool_index, split["test"]])}
            self.info["split"] += "; refit: every stay trains (validation and test figures in-sample)"
        return split

    def _split(self, y: np.ndarray, ids: list[str], parts: dict[str, str]) -> dict[str, np.ndarray]:
        """The folder's train/val/test subfolders (val: 1/8 of train, stratified, when absent), else a stratified
        split by the label."""
        if not parts:
            split = dict(zip(PARTS, stratified_split(y, self.fractions, self.split_seed, source=str(self.root))))
            self.info["split"] = (f"{'/'.join(f'{f:.0%}' for f in self.fractions)} stratified by the label, "
                                  f"split_seed={self.split_seed}")
            return split
        part = np.array([parts[i] for i in ids])
        split = {p: np.flatnonzero(part == p) for p in PARTS}
        self.info["split"] = "the folder's train/, val/ and test/ subfolders"
        if not len(split["val"]):
            train, val = stratified_split(y[split["train"]], (7 / 8, 1 / 8), self.split_seed, source=str(self.root))
            split.update(train=split["train"][train], val=split["train"][val])
            self.info["split"] = f"the folder's train/ and test/; 1/8 of train/ validates, split_seed={self.split_seed}"
        return split

    def model_args(self):
        return {**super().model_args(), "hours": self.hours}


@register_dataset(task="classification")
def icu_stays_folder(path: str, outcomes: str | None = None, label: str = MORTALITY_LABEL,
                     variables: list[str] | None = None, hours: int = HOURS, split_seed: int = 0,
                     val_fraction: float = 0.1, test_fraction: float = 0.2, batch_size: int = 64, num_workers: int = 0,
                     seed: int = 0, cv_fold: list[int] | None = None, refit: bool = False) -> IcuStaysFolderData:
    """A user's ICU stays held as PhysioNet 2012 holds them: a folder of ``<RecordID>.txt`` records
    (``Time,Parameter,Value`` rows, times ``HH:MM`` since admission; the descriptors Age, Gender, Height, ICUType,
    Weight as ``00:00`` rows), directly or in subfolders such as ``set-a/``, or one long table ``stays.csv``
    (``RecordID,Time,Parameter,Value``), with an outcomes CSV (``outcomes``; default: the file named ``Outcomes*``)
    holding ``RecordID`` and the binary ``label`` column. The first ``hours`` hours become the hourly grid of
    ``variables`` (default: every time-series parameter found; given, as a card's, other parameters are dropped and
    listed in the run's card). Split: ``train/``, ``val/``, ``test/`` subfolders when present, else stratified by the
    label, ``val_fraction`` and ``test_fraction`` of the stays, ``split_seed``. The records are parsed at every setup
    (4000 stays: seconds), not cached. ``cv_fold`` and ``refit``: the fold runs and the refit of finetune's
    cross-validated choice (:class:`IcuStaysFolderData`)."""
    return IcuStaysFolderData(path, outcomes, label, variables, hours, split_seed, val_fraction, test_fraction,
                              cv_fold, refit, batch_size=batch_size, num_workers=num_workers, seed=seed)
