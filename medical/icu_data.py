"""PhysioNet/CinC Challenge 2012, training set A: 4000 ICU stays, the first 48 h of 37 irregularly sampled
variables and 6 admission descriptors, with in-hospital death as the binary target.

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
"""
from __future__ import annotations

import csv
import io
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from hub.data import HubDataModule, data_dir, stratified_split
from hub.errors import DataError, DatasetUnavailable
from hub.io import atomic_write_bytes
from hub.registry import register_dataset
from hub.weights import cache_dir, sha256_bytes

VARIABLES = ["ALP", "ALT", "AST", "Albumin", "BUN", "Bilirubin", "Cholesterol", "Creatinine", "DiasABP", "FiO2",
             "GCS", "Glucose", "HCO3", "HCT", "HR", "K", "Lactate", "MAP", "MechVent", "Mg", "NIDiasABP", "NIMAP",
             "NISysABP", "Na", "PaCO2", "PaO2", "Platelets", "RespRate", "SaO2", "SysABP", "Temp", "TroponinI",
             "TroponinT", "Urine", "WBC", "Weight", "pH"]
DESCRIPTORS = ["Age", "Gender", "Height", "Weight"]
HOURS = 48
MANIFEST_SHA256 = "2783d6fe8bd2896a3936bd8a0396724a4262e4255a4ffde50cf17a44c02aad3d"
DOWNLOAD = "https://physionet.org/content/challenge-2012/1.0.0/"
SOURCE = ("PhysioNet/CinC Challenge 2012 training set A (Silva et al., Computing in Cardiology 39, 2012), "
          "physionet.org/content/challenge-2012/1.0.0")


def _parse_record(text: str) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """One record file -> hourly sums (48, 37), counts (48, 37), first-row descriptors."""
    sums, counts = np.zeros((HOURS, len(VARIABLES))), np.zeros((HOURS, len(VARIABLES)))
    descriptors: dict[str, float] = {}
    index = {v: i for i, v in enumerate(VARIABLES)}
    for time, name, value in list(csv.reader(io.StringIO(text)))[1:]:
        minutes = int(time[:2]) * 60 + int(time[3:])
        if minutes == 0 and name in (*DESCRIPTORS, "ICUType") and name not in descriptors:
            descriptors[name] = float(value)
            continue
        if name in index and float(value) >= 0:  # -1: not measured
            hour = min(minutes // 60, HOURS - 1)  # 48:00 belongs to the last hour
            sums[hour, index[name]] += float(value)
            counts[hour, index[name]] += 1
    return sums, counts, descriptors


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
        sums, counts, descriptors = _parse_record(data.decode())
        with np.errstate(invalid="ignore"):
            means[n] = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
        static[n] = [descriptors.get(k, -1.0) for k in (*DESCRIPTORS, "ICUType")]
    static[static < 0] = np.nan
    grids = {"means": means, "static_raw": static, "y": np.array([outcomes[i] for i in ids], dtype=np.int64),
             "ids": np.array(ids, dtype=np.int64)}
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **grids)
    cache.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(cache, buffer.getvalue())
    return grids


def prepare(means: np.ndarray, static_raw: np.ndarray, train: np.ndarray) -> tuple[dict[str, np.ndarray], dict]:
    """Clip, standardise (training statistics), forward-fill; one-hot ICU type; -> arrays and the statistics."""
    observed = means[train]
    low, high = np.nanpercentile(observed, 1, axis=(0, 1)), np.nanpercentile(observed, 99, axis=(0, 1))
    clipped = np.clip(means, low, high)
    mean, std = np.nanmean(clipped[train], axis=(0, 1)), np.nanstd(clipped[train], axis=(0, 1))
    std = np.where(std > 0, std, 1.0)
    mask = ~np.isnan(means)
    z = (clipped - mean) / std
    filled = np.zeros_like(z)
    last = np.zeros(z[:, 0].shape, dtype=z.dtype)  # before the first observation: the mean (0)
    for hour in range(HOURS):
        last = np.where(mask[:, hour], z[:, hour], last)
        filled[:, hour] = last
    numeric = static_raw[:, :4]
    s_mean, s_std = np.nanmean(numeric[train], 0), np.nanstd(numeric[train], 0)
    s = np.nan_to_num((numeric - s_mean) / np.where(s_std > 0, s_std, 1.0))
    icu = np.nan_to_num(static_raw[:, 4], nan=3).astype(int)
    static = np.concatenate([s, np.eye(4)[icu - 1], np.isnan(numeric[:, 2:3])], 1).astype(np.float32)  # (N, 9)
    stats = {"low": low.tolist(), "high": high.tolist(), "mean": mean.tolist(), "std": std.tolist(),
             "static_mean": s_mean.tolist(), "static_std": s_std.tolist()}
    return {"values": filled.astype(np.float32), "mask": mask, "static": static}, stats


def summary_features(means: np.ndarray, static_raw: np.ndarray) -> np.ndarray:
    """Per-variable last, mean, min, max and count of observations, plus the raw descriptors: the table
    of the gradient-boosting baseline (NaN where a variable was never observed). (N, 48, 37) -> (N, 190)."""
    observed = ~np.isnan(means)
    count = observed.sum(1).astype(np.float32)  # (N, F)
    last_hour = np.where(observed, np.arange(HOURS)[None, :, None], -1).max(1)  # (N, F)
    last = np.take_along_axis(means, np.maximum(last_hour, 0)[:, None], 1)[:, 0]
    last = np.where(last_hour >= 0, last, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a never-observed variable gives NaN, as wanted
        stats = [np.nanmean(means, 1), np.nanmin(means, 1), np.nanmax(means, 1)]
    return np.concatenate([last, *stats, count, static_raw], 1)


class StayRows(Dataset):
    def __init__(self, arrays: dict[str, np.ndarray], y: np.ndarray, index: np.ndarray):
        self.values = torch.from_numpy(arrays["values"][index])  # (N, 48, 37)
        self.mask = torch.from_numpy(arrays["mask"][index])  # (N, 48, 37) bool
        self.static = torch.from_numpy(arrays["static"][index])  # (N, 9)
        self.y = torch.from_numpy(y[index])

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        return {"values": self.values[i], "mask": self.mask[i], "static": self.static[i]}, self.y[i]


class PhysioNet2012Data(HubDataModule):
    """Set A as hourly grids; fold ``fold`` of 5 (stratified) is the test part."""

    task = "classification"

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
        arrays, stats = prepare(grids["means"], grids["static_raw"], train)
        self.train_set, self.val_set, self.test_set = (StayRows(arrays, y, i) for i in (train, val, test))
        self.split_index = {"train": train, "val": val, "test": test}
        self.num_classes, self.label_names = 2, ["survived", "died"]
        self.input_spec = {"kind": "icu_stays", "variables": VARIABLES, "hours": HOURS, **stats}
        self.info = {"source": SOURCE, "license": "PhysioNet open access (see PROVENANCE.md)",
                     "split": f"fold {self.fold} of 5 stratified folds (seed 2012) is the test part; 1/8 of the "
                              f"rest validates (seed {self.fold})", "sizes": [len(train), len(val), len(test)],
                     "positive_rate": float(y.mean())}

    def model_args(self):
        return {"num_variables": len(VARIABLES), "num_static": self.train_set.static.shape[1], "num_classes": 2}


@register_dataset(task="classification")
def physionet2012(fold: int = 0, batch_size: int = 64, num_workers: int = 0, seed: int = 0) -> PhysioNet2012Data:
    """PhysioNet 2012 set A: 48 hourly steps of 37 variables + 9 static features, in-hospital death."""
    return PhysioNet2012Data(fold, batch_size, num_workers, seed)
