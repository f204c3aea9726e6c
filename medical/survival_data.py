"""Survival tables: the DeepSurv benchmark sets (METABRIC, SUPPORT, GBSG, WHAS) and a user's CSV file.

Every sample is ``(inputs, target)``: ``inputs`` a dict with ``"clinical"`` (C,) and, when the table
has gene columns, ``"genes"`` (G,) with ``"gene_mask"`` (G,) bool (False = not measured for this
patient: the missing-modality path); ``target`` is ``(time, event)``. Columns are standardised with
the training part's mean and std, which the model card keeps in ``input_spec`` for prediction.

The Cox loss compares each event with its whole risk set, so the default ``batch_size`` (8192) puts
every split in a single batch (full-batch training, as DeepSurv's Theano code does): the
partial likelihood of a batch is then the exact one of the training set.

>>> data = deepsurv_metabric(); data.setup()
>>> inputs, target = data.train_set[0]; inputs["genes"].shape, inputs["clinical"].shape, target.shape
(torch.Size([4]), torch.Size([5]), torch.Size([2]))
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import torch
from torch.utils.data import Dataset

from hub.adapters import register_finetune_adapter, register_predict_adapter
from hub.data import HubDataModule, data_dir, dataset_file, read_csv_frame, stratified_split
from hub.errors import DataError
from hub.registry import register_dataset
from hub.weights import read_verified

# The files of ../shared/data/deepsurv/PROVENANCE.md: GitHub jaredleekatzman/DeepSurv at a fixed commit.
DEEPSURV_URL = ("https://raw.githubusercontent.com/jaredleekatzman/DeepSurv/"
                "41eed003e5b892c81e7855e400861fa7a2d9da4f/experiments/data/{folder}/{file}")
DEEPSURV_INFO = {"source": "DeepSurv experiments (Katzman et al., BMC Med. Res. Methodol. 18:24, 2018), "
                           "github.com/jaredleekatzman/DeepSurv experiments/data",
                 "license": "MIT (repository); the original studies' terms apply to the data"}
# name -> (folder, file, sha256, bytes, gene columns, clinical columns), in the file's column order.
# Column meanings follow PROVENANCE.md (the files store no names); only METABRIC has gene expression,
# the other sets are clinical only and train with the genetic branch absent.
DEEPSURV_SETS = {
    "metabric": ("metabric", "metabric_IHC4_clinical_train_test.h5",
                 "e959131973c906c7e8b1e662c81160914768156a6da145a9bfed9b9ee8bf3e72", 90_016,
                 ["MKI67", "EGFR", "PGR", "ERBB2"],
                 ["hormone_treatment", "radiotherapy", "chemotherapy", "er_positive", "age"]),
    "support": ("support", "support_train_test.h5",
                "e398f49930e4efc4ecd675a72ac547f0d1ae25ccf13f6a1024cded12ea88a83e", 574_112, [],
                ["age", "sex", "num_comorbidities", "race", "diabetes", "dementia", "cancer", "mean_blood_pressure",
                 "heart_rate", "respiration_rate", "temperature", "sodium", "white_blood_cells", "creatinine"]),
    "gbsg": ("gbsg", "gbsg_cancer_train_test.h5",
             "bd455f4395322a8b23040c15cedbef00ad51a447d02c95f1f1d686a6b196484b", 86_592, [],
             ["hormonal_treatment", "tumour_size_category", "menopausal", "age", "positive_nodes",
              "progesterone_receptor", "oestrogen_receptor"]),
    "whas": ("whas", "whas_train_test.h5",
             "2ed86f073fdbe34be10f7e485eeaf67b61004521390c46b9a18aa9b82d5e8f9c", 58_656, [],
             ["binary_x0", "age", "binary_x2", "bmi", "binary_x4", "binary_x5"]),
}


class SurvivalRows(Dataset):
    """Rows of a standardised survival table; ``genes`` may be absent (G = 0)."""

    def __init__(self, clinical: np.ndarray, genes: np.ndarray, gene_mask: np.ndarray, time: np.ndarray,
                 event: np.ndarray):
        self.clinical = torch.as_tensor(clinical, dtype=torch.float32)  # (N, C)
        self.genes = torch.as_tensor(genes, dtype=torch.float32)  # (N, G)
        self.gene_mask = torch.as_tensor(gene_mask, dtype=torch.bool)  # (N, G)
        self.target = torch.as_tensor(np.stack([time, event], 1), dtype=torch.float32)  # (N, 2): time, event

    def __len__(self) -> int:
        return len(self.target)

    def __getitem__(self, i):
        inputs = {"clinical": self.clinical[i]}
        if self.genes.shape[1]:
            inputs.update(genes=self.genes[i], gene_mask=self.gene_mask[i])
        return inputs, self.target[i]


class SurvivalTableData(HubDataModule):
    """Base of the survival tables: subclasses return the raw parts in :meth:`load`; this class carves a
    validation part from train (stratified by event, fixed ``split_seed``), standardises and builds the sets.
    ``loss`` and ``rank_weight`` configure the training loss (:class:`medical.survival_task.SurvivalTask`)."""

    task = "survival"

    def __init__(self, batch_size: int = 8192, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                 val_fraction: float = 0.2, loss: str = "efron", rank_weight: float = 0.0):
        super().__init__(batch_size, num_workers, seed)
        self.split_seed, self.val_fraction, self.loss, self.rank_weight = split_seed, val_fraction, loss, rank_weight
        self.gene_names: list[str] = []
        self.clinical_names: list[str] = []
        self.train_time = self.train_event = None

    def load(self) -> dict[str, Any]:
        """``{"train": (x, time, event), "test": (x, time, event), "genes": [...], "clinical": [...]}`` with
        x (N, G + C): gene columns first, NaN where a gene was not measured."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        parts = self.load()
        self.gene_names, self.clinical_names = list(parts["genes"]), list(parts["clinical"])
        x, time, event = parts["train"]
        train, val = stratified_split(event.astype(np.int64), (1 - self.val_fraction, self.val_fraction),
                                      self.split_seed, source=parts.get("info", {}).get("source"))
        mean = np.nanmean(x[train], 0)
        std = np.nanstd(x[train], 0)
        std = np.where(std > 0, std, 1.0)
        self.train_time, self.train_event = time[train], event[train]
        self.train_set = self._rows(x[train], time[train], event[train], mean, std)
        self.val_set = self._rows(x[val], time[val], event[val], mean, std)
        self.test_set = self._rows(*parts["test"], mean, std)
        self.input_spec = {"kind": "survival_table", "genes": self.gene_names, "clinical": self.clinical_names,
                           "mean": [float(v) for v in mean], "std": [float(v) for v in std]}
        self.info = {**parts["info"], "sizes": [len(train), len(val), len(parts["test"][1])],
                     "split": f"validation: {self.val_fraction:.0%} of train, stratified by event, "
                              f"split_seed={self.split_seed}"}
        self.output_names = ["risk"]  # one log hazard ratio per patient

    def _rows(self, x: np.ndarray, time: np.ndarray, event: np.ndarray, mean, std) -> SurvivalRows:
        z = (x - mean) / std  # (N, G + C)
        g = len(self.gene_names)
        present = ~np.isnan(z[:, :g])
        return SurvivalRows(z[:, g:], np.nan_to_num(z[:, :g]), present, time, event)

    def task_args(self) -> dict[str, Any]:
        # Uno's C weights pairs by the censoring distribution of the training part.
        return {"loss": self.loss, "rank_weight": self.rank_weight, "train_time": self.train_time.tolist(),
                "train_event": self.train_event.tolist()}

    def model_args(self) -> dict[str, Any]:
        return {"num_genes": len(self.gene_names), "num_clinical": len(self.clinical_names)}


def deepsurv_file(name: str) -> Path:
    """Local path of a DeepSurv set: ``data_dir()/deepsurv/<file>`` if present, else downloaded into the
    cache. The full sha256 is checked either way."""
    folder, file, sha256, num_bytes = DEEPSURV_SETS[name][:4]
    path = dataset_file(f"deepsurv {name}", data_dir() / "deepsurv" / file,
                        DEEPSURV_URL.format(folder=folder, file=file), sha256, num_bytes)
    read_verified(path, sha256)
    return path


class DeepSurvData(SurvivalTableData):
    """One DeepSurv benchmark set with its published train/test split."""

    def __init__(self, name: str, **kwargs):
        super().__init__(**kwargs)
        self.name = name

    def load(self) -> dict[str, Any]:
        import h5py

        genes, clinical = DEEPSURV_SETS[self.name][4:]
        with h5py.File(deepsurv_file(self.name), "r") as f:
            parts = {split: (f[split]["x"][:].astype(np.float64), f[split]["t"][:].astype(np.float64),
                             f[split]["e"][:].astype(np.float64)) for split in ("train", "test")}
        width = parts["train"][0].shape[1]
        if width != len(genes) + len(clinical):
            raise DataError(f"{self.name}: expected {len(genes) + len(clinical)} columns, got {width}")
        return {**parts, "genes": genes, "clinical": clinical, "info": dict(DEEPSURV_INFO)}


@register_dataset(task="survival")
def deepsurv_metabric(batch_size: int = 8192, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                      val_fraction: float = 0.2, loss: str = "efron", rank_weight: float = 0.0) -> DeepSurvData:
    """METABRIC (DeepSurv split): 4 gene expressions (MKI67, EGFR, PGR, ERBB2) + 5 clinical features."""
    return DeepSurvData("metabric", batch_size=batch_size, num_workers=num_workers, seed=seed,
                        split_seed=split_seed, val_fraction=val_fraction, loss=loss, rank_weight=rank_weight)


@register_dataset(task="survival")
def deepsurv_support(batch_size: int = 8192, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                     val_fraction: float = 0.2, loss: str = "efron", rank_weight: float = 0.0) -> DeepSurvData:
    """SUPPORT (DeepSurv split): 14 clinical features, no genes."""
    return DeepSurvData("support", batch_size=batch_size, num_workers=num_workers, seed=seed,
                        split_seed=split_seed, val_fraction=val_fraction, loss=loss, rank_weight=rank_weight)


@register_dataset(task="survival")
def deepsurv_gbsg(batch_size: int = 8192, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                  val_fraction: float = 0.2, loss: str = "efron", rank_weight: float = 0.0) -> DeepSurvData:
    """Rotterdam (train) / GBSG (test), DeepSurv split: 7 clinical features, no genes."""
    return DeepSurvData("gbsg", batch_size=batch_size, num_workers=num_workers, seed=seed,
                        split_seed=split_seed, val_fraction=val_fraction, loss=loss, rank_weight=rank_weight)


@register_dataset(task="survival")
def deepsurv_whas(batch_size: int = 8192, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                  val_fraction: float = 0.2, loss: str = "efron", rank_weight: float = 0.0) -> DeepSurvData:
    """WHAS (DeepSurv split): 6 clinical features, no genes."""
    return DeepSurvData("whas", batch_size=batch_size, num_workers=num_workers, seed=seed,
                        split_seed=split_seed, val_fraction=val_fraction, loss=loss, rank_weight=rank_weight)


def _bad_rows(mask: np.ndarray) -> str:
    rows = np.flatnonzero(mask)
    return ", ".join(str(r + 2) for r in rows[:5]) + (" ..." if len(rows) > 5 else "")  # +2: header, 1-based


def feature_matrix(table, path: Path, gene_cols: list[str], clinical: list[str]) -> np.ndarray:
    """The (N, G + C) float matrix of a survival table, genes first; NaN only where a gene is not measured."""
    import pandas as pd

    x = table[gene_cols + clinical].apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)
    if np.isinf(x).any():
        col = (gene_cols + clinical)[int(np.flatnonzero(np.isinf(x).any(0))[0])]
        raise DataError(f"{path}: column {col!r} has infinite values at rows {_bad_rows(np.isinf(x).any(1))}; "
                        "expected finite numbers")
    clinical_nan = np.isnan(x[:, len(gene_cols):])
    if clinical_nan.any():
        col = clinical[int(np.flatnonzero(clinical_nan.any(0))[0])]
        raise DataError(f"{path}: clinical column {col!r} has missing or non-numeric values at rows "
                        f"{_bad_rows(clinical_nan.any(1))}; expected numbers (only gene columns may be empty)")
    return x


class SurvivalCSVData(SurvivalTableData):
    """A user's survival table (CSV with a header): one row per patient, split stratified by event into
    train / validation / test. Gene columns may have empty cells (that gene is masked for that patient)."""

    def __init__(self, path: str, time_col: str, event_col: str, gene_cols: list[str], clinical_cols: list[str] | None,
                 test_fraction: float, expect_num_genes: int | None, expect_num_clinical: int | None, **kwargs):
        super().__init__(**kwargs)
        self.path, self.time_col, self.event_col = Path(path), time_col, event_col
        self.gene_cols, self.clinical_cols, self.test_fraction = list(gene_cols), clinical_cols, test_fraction
        self.expect = {"gene": expect_num_genes, "clinical": expect_num_clinical}

    def load(self) -> dict[str, Any]:
        import pandas as pd

        table = read_csv_frame(self.path, f"a survival table: one row per patient with the columns "
                                          f"{self.time_col!r} (time), {self.event_col!r} (0/1 event) and features")
        clinical = self.clinical_cols if self.clinical_cols is not None else [
            c for c in table.columns if c not in (self.time_col, self.event_col, *self.gene_cols)]
        wanted = {"time column (data.args.time_col)": [self.time_col], "event column (data.args.event_col)":
                  [self.event_col], "gene columns (data.args.gene_cols)": self.gene_cols,
                  "clinical columns (data.args.clinical_cols)": clinical}
        missing = {role: [c for c in cols if c not in table.columns] for role, cols in wanted.items()}
        missing = {role: cols for role, cols in missing.items() if cols}
        if missing:
            raise DataError(f"{self.path}: missing columns "
                            + "; ".join(f"{role}: {cols}" for role, cols in missing.items())
                            + f"; the file has columns {list(table.columns)}")
        for kind, cols in (("gene", self.gene_cols), ("clinical", clinical)):
            if self.expect[kind] is not None and len(cols) != self.expect[kind]:
                raise DataError(f"the model takes {self.expect[kind]} {kind} columns, but {len(cols)} are named "
                                f"({cols}); set data.args.{kind}_cols to {self.expect[kind]} columns of "
                                f"{self.path.name}")
        time = pd.to_numeric(table[self.time_col], errors="coerce").to_numpy(np.float64)
        if not np.isfinite(time).all():
            raise DataError(f"{self.path}: time column {self.time_col!r} has missing, infinite or non-numeric values "
                            f"at rows {_bad_rows(~np.isfinite(time))}; expected a time >= 0 for every patient")
        if (time < 0).any():
            raise DataError(f"{self.path}: time column {self.time_col!r} has negative times at rows "
                            f"{_bad_rows(time < 0)}; expected times >= 0")
        event_raw = pd.to_numeric(table[self.event_col], errors="coerce").to_numpy(np.float64)
        bad = ~np.isin(event_raw, (0.0, 1.0))
        if bad.any():
            found = sorted({str(v) for v in table[self.event_col][bad].tolist()})[:5]
            raise DataError(f"{self.path}: event column {self.event_col!r} must hold 0 (censored) or 1 (event); "
                            f"found {found} at rows {_bad_rows(bad)}")
        if event_raw.sum() == 0:
            raise DataError(f"{self.path}: event column {self.event_col!r} has no events (all 0); the Cox loss "
                            "needs at least one observed event")
        x = feature_matrix(table, self.path, self.gene_cols, clinical)
        rest, test = stratified_split(event_raw.astype(np.int64), (1 - self.test_fraction, self.test_fraction),
                                      self.split_seed, source=str(self.path))
        return {"train": (x[rest], time[rest], event_raw[rest]), "test": (x[test], time[test], event_raw[test]),
                "genes": self.gene_cols, "clinical": clinical,
                "info": {"source": str(self.path), "license": "the user's data",
                         "test_split": f"{self.test_fraction:.0%} stratified by event, split_seed={self.split_seed}"}}


@register_dataset(task="survival")
def survival_csv(path: str, time_col: str = "time", event_col: str = "event", gene_cols: list[str] = (),
                 clinical_cols: list[str] | None = None, test_fraction: float = 0.2,
                 expect_num_genes: int | None = None, expect_num_clinical: int | None = None,
                 batch_size: int = 8192, num_workers: int = 0, seed: int = 0,
                 split_seed: int = 0, val_fraction: float = 0.2, loss: str = "efron",
                 rank_weight: float = 0.0) -> SurvivalCSVData:
    """A survival CSV: time and event (0/1) columns, optional gene columns, clinical columns (default: the rest)."""
    return SurvivalCSVData(path, time_col, event_col, list(gene_cols), clinical_cols, test_fraction, expect_num_genes,
                           expect_num_clinical, batch_size=batch_size, num_workers=num_workers, seed=seed,
                           split_seed=split_seed, val_fraction=val_fraction, loss=loss, rank_weight=rank_weight)


@register_finetune_adapter("survival_table")
def survival_csv_section(card, path: str, time: str | None = None, event: str | None = None,
                         genes: list[str] | None = None) -> dict[str, Any]:
    """``attnhub finetune survival_fusion.metabric --data my.csv --time T --event E --genes g1,g2,g3,g4
    data.args.clinical_cols=[...]``: the card's column names are the defaults; the loss, its ``rank_weight`` and the
    batch size are the card's (the pairwise ordering loss needs mini-batches)."""
    spec, trained = card.input_spec, card.data.get("args", {})
    return {"name": "survival_csv", "args": {
        "path": str(path), "time_col": time or trained.get("time_col", "time"),
        "event_col": event or trained.get("event_col", "event"),
        "gene_cols": list(genes if genes is not None else spec["genes"]), "clinical_cols": list(spec["clinical"]),
        "expect_num_genes": len(spec["genes"]), "expect_num_clinical": len(spec["clinical"]),
        "loss": trained.get("loss", "efron"), "rank_weight": trained.get("rank_weight", 0.0),
        "batch_size": trained.get("batch_size", 8192)}}


@register_predict_adapter("survival_table")
def survival_risks(card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
    """``attnhub predict survival_fusion.metabric patients.csv``: the risk score (log relative hazard; higher
    means earlier events) of every patient row, named by its ``id`` column or ``file:line``. The columns
    are the card's gene and clinical columns (others, such as time and event, are ignored); empty gene
    cells are masked, as in training; the card's training mean and std standardise them."""
    spec = card.input_spec
    genes, clinical = list(spec["genes"]), list(spec["clinical"])
    mean, std = np.asarray(spec["mean"]), np.asarray(spec["std"])
    for path in paths:
        table = read_csv_frame(path, f"one row per patient with the columns {genes + clinical}")
        missing = [c for c in genes + clinical if c not in table.columns]
        if missing:
            raise DataError(f"{path}: missing columns {missing}; {card.name} takes {genes + clinical}")
        z = (feature_matrix(table, Path(path), genes, clinical) - mean) / std  # (N, G + C)
        names = (table["id"].astype(str).tolist() if "id" in table.columns
                 else [f"{path}:{line}" for line in range(2, len(table) + 2)])
        for start in range(0, len(z), batch_size):
            chunk = torch.as_tensor(z[start:start + batch_size], dtype=torch.float32)
            inputs = {"clinical": chunk[:, len(genes):]}
            if genes:
                inputs.update(genes=chunk[:, :len(genes)].nan_to_num(), gene_mask=~chunk[:, :len(genes)].isnan())
            yield names[start:start + batch_size], model(**inputs)
