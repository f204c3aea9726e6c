"""Medical survival tables for recipes: the DeepSurv benchmark sets (METABRIC, SUPPORT, GBSG, WHAS) and a
user's CSV file.

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

The PhysioNet 2012 ICU stays are in :mod:`medical.icu_data`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from hub.core.registry import register_dataset
from hub.core.weights import read_verified
from hub.data import HubDataModule, data_dir, dataset_file, read_csv_frame, stratified_split
from hub.errors import DataError
from medical.io import _bad_rows, encoded_names, feature_matrix, infer_categories, survival_inputs

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
    """Rows of a standardised survival table; ``genes`` may be absent (G = 0).

    Args:
        clinical: clinical covariates (N, C), standardised.
        genes: gene values (N, G), standardised; a missing value is 0 with ``gene_mask`` False.
        gene_mask: which gene values are present (N, G), bool.
        time: follow-up times (N,).
        event: event indicators (N,): 1 = the event was observed, 0 = censored.

    Shapes: item ``({"clinical": (C,), "genes": (G,), "gene_mask": (G,)}, target (2,) = [time, event])``; without
    genes (G = 0) the inputs hold ``clinical`` alone."""

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
    ``loss`` and ``rank_weight`` configure the training loss (:class:`medical.tasks.SurvivalTask`).

    Args:
        batch_size: patients per batch (default 8192, large: the Cox loss's risk sets are taken within a batch).
        num_workers: DataLoader worker processes (default 0: the main process).
        seed: seed of the training order (default 0).
        split_seed: seed of the validation split (default 0).
        val_fraction: fraction of the training patients held out for validation (default 0.2).
        loss: ``"efron"`` (default) or ``"breslow"`` (the Cox partial likelihood with those tie corrections) or
            ``"weighted"`` (the weighted Cox loss).
        rank_weight: weight of the pairwise ordering loss added to it (default 0: none).
        cv_fold: ``[k, index, seed]``: train on the other k-1 folds of the patients outside the test split and
            validate on fold ``index`` (:func:`hub.crossval.fold_indices`, stratified by event: a fold run of
            finetune's cross-validated choice).
        refit: train on every patient, test included (that choice's refit; validation and test figures in-sample)."""

    task = "survival"

    def __init__(self, batch_size: int = 8192, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                 val_fraction: float = 0.2, loss: str = "efron", rank_weight: float = 0.0,
                 cv_fold: list[int] | None = None, refit: bool = False):
        super().__init__(batch_size, num_workers, seed)
        self.split_seed, self.val_fraction, self.loss, self.rank_weight = split_seed, val_fraction, loss, rank_weight
        self.cv_fold, self.refit = cv_fold, refit
        self.pool_labels: np.ndarray | None = None  # (N, 2) time, event of the patients outside the test split
        self.gene_names: list[str] = []
        self.clinical_names: list[str] = []
        self.train_time = self.train_event = None

    def load(self) -> dict[str, Any]:
        """``{"train": (x, time, event), "test": (x, time, event), "genes": [...], "clinical": [...]}`` with
        x (N, G + C): gene columns first, NaN where a gene was not measured; ``clinical`` names the C features
        (``column=category`` for a categorical column's indicators, whose categories an optional ``"categories"``
        entry keeps: see :mod:`medical.io`)."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        parts = self.load()
        self.gene_names, self.clinical_names = list(parts["genes"]), list(parts["clinical"])
        x, time, event = parts["train"]
        self.pool_labels = np.stack([time, event], 1)
        split = f"validation: {self.val_fraction:.0%} of train, stratified by event, split_seed={self.split_seed}"
        if self.cv_fold is not None:
            from hub.crossval import fold_indices

            k, index, fold_seed = (int(v) for v in self.cv_fold)
            train, val = fold_indices("survival", self.pool_labels, k=k, seed=fold_seed, warn=lambda line: None)[index]
            split = f"fold {index} of {k} (seed {fold_seed}) of the patients outside the test split"
        else:
            train, val = stratified_split(event.astype(np.int64), (1 - self.val_fraction, self.val_fraction),
                                          self.split_seed, source=parts.get("info", {}).get("source"))
        if self.refit:  # every patient trains, test included: validation and test figures are in-sample
            x, time, event = (np.concatenate([a, b]) for a, b in zip(parts["train"], parts["test"]))
            train = np.arange(len(time))
            split += "; refit: every patient trains (validation and test figures in-sample)"
        mean = np.nanmean(x[train], 0)
        std = np.nanstd(x[train], 0)
        std = np.where(std > 0, std, 1.0)
        self.train_time, self.train_event = time[train], event[train]
        self.train_set = self._rows(x[train], time[train], event[train], mean, std)
        self.val_set = self._rows(x[val], time[val], event[val], mean, std)
        self.test_set = self._rows(*parts["test"], mean, std)
        self.input_spec = {"kind": "survival_table", "genes": self.gene_names, "clinical": self.clinical_names,
                           "mean": [float(v) for v in mean], "std": [float(v) for v in std],
                           **({"categories": parts["categories"]} if parts.get("categories") else {})}
        self.info = {**parts["info"], "sizes": [len(train), len(val), len(parts["test"][1])], "split": split}
        self.output_names = ["risk"]  # one log hazard ratio per patient

    def _rows(self, x: np.ndarray, time: np.ndarray, event: np.ndarray, mean, std) -> SurvivalRows:
        return SurvivalRows(**survival_inputs(x, mean, std, len(self.gene_names)), time=time, event=event)

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


GSE7390_INFO = {"source": "GSE7390 (Desmedt et al., Clin. Cancer Res. 2007): 198 node-negative breast cancer patients, "
                           "76 genes and 4 clinical variables, time to distant metastasis; as scikit-survival ships "
                           "it (sksurv.datasets.load_breast_cancer)",
                 "license": "GEO public data; scikit-survival is GPL-3.0",
                 "stand_in": "for BioFusionNet's TCGA ER+ breast cancer images, genes and clinical data, which are "
                             "not available here"}
GSE7390_FOLDS, GSE7390_REPEATS = 5, 3


def gse7390_table() -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str], list[str]]:
    """scikit-survival's GSE7390 as ``(x (198, 76 + 7), time (198,), event (198,), genes, clinical)``: the 76 gene
    probes, then age, size, er (1 = positive) and grade one-hot (4 levels, ``grade=LEVEL``)."""
    try:
        from sksurv.datasets import load_breast_cancer
    except ImportError as err:
        raise DataError("gse7390 is read from scikit-survival (pip install scikit-survival)") from err
    frame, target = load_breast_cancer()
    genes = [c for c in frame.columns if c not in ("age", "er", "grade", "size")]
    grades = list(frame["grade"].cat.categories)
    clinical = ["age", "size", "er", *(f"grade={g}" for g in grades)]
    x = np.column_stack([frame[genes].to_numpy(np.float64), frame["age"].to_numpy(np.float64),
                         frame["size"].to_numpy(np.float64), (frame["er"] == "positive").to_numpy(np.float64),
                         *((frame["grade"] == g).to_numpy(np.float64) for g in grades)])
    return x, target["t.tdm"].astype(np.float64), target["e.tdm"].astype(np.float64), genes, clinical


def gse7390_folds(event: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """The 15 (train, test) index pairs: 5 folds stratified by event, repeated 3 times (scikit-learn's
    ``RepeatedStratifiedKFold``, random_state 0), the split the benchmark and the recipe share."""
    from sklearn.model_selection import RepeatedStratifiedKFold

    splitter = RepeatedStratifiedKFold(n_splits=GSE7390_FOLDS, n_repeats=GSE7390_REPEATS, random_state=0)
    return list(splitter.split(np.zeros(len(event)), event.astype(int)))


class GSE7390Data(SurvivalTableData):
    """GSE7390's fold ``fold`` (0-14: repeat ``fold // 5``, fold ``fold % 5``) as the test part; validation is
    carved from the rest as :class:`SurvivalTableData` does."""

    def __init__(self, fold: int = 0, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= fold < GSE7390_FOLDS * GSE7390_REPEATS:
            raise DataError(f"gse7390 fold must be in 0..{GSE7390_FOLDS * GSE7390_REPEATS - 1}, got {fold}")
        self.fold = fold

    def load(self) -> dict[str, Any]:
        x, time, event, genes, clinical = gse7390_table()
        train, test = gse7390_folds(event)[self.fold]
        return {"train": (x[train], time[train], event[train]), "test": (x[test], time[test], event[test]),
                "genes": genes, "clinical": clinical,
                "info": {**GSE7390_INFO, "fold": f"{self.fold % GSE7390_FOLDS} of repeat {self.fold // GSE7390_FOLDS}"}}


@register_dataset(task="survival")
def gse7390(fold: int = 0, batch_size: int = 8192, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
            val_fraction: float = 0.2, loss: str = "weighted", rank_weight: float = 0.0) -> GSE7390Data:
    """GSE7390 breast cancer (198 patients, 76 genes + clinical, distant metastasis), one of 5 x 3 CV folds."""
    return GSE7390Data(fold, batch_size=batch_size, num_workers=num_workers, seed=seed, split_seed=split_seed,
                       val_fraction=val_fraction, loss=loss, rank_weight=rank_weight)


class SurvivalCSVData(SurvivalTableData):
    """A user's survival table (CSV with a header): one row per patient, split stratified by event into
    train / validation / test. Gene columns may have empty cells (that gene is masked for that patient); clinical
    columns are numeric or categorical (one indicator per category, :mod:`medical.io`), the categories given or
    inferred from the training and validation rows.

    Args:
        path: the CSV file.
        time_col: the follow-up time column (times >= 0).
        event_col: the event column (1 = event, 0 = censored).
        gene_cols: the gene columns (may be empty).
        clinical_cols: the clinical columns; None: every column but the time, event, ``id`` and gene columns.
        categories: categorical clinical column -> its categories; None: inferred from the training and validation
            rows.
        test_fraction: fraction of the patients held out for testing, stratified by event.
        expect_num_genes: the number of gene columns the model takes (a fine-tuned card's), checked; None: any.
        expect_num_clinical: likewise for the clinical columns.
        **kwargs: those of :class:`SurvivalTableData`."""

    def __init__(self, path: str, time_col: str, event_col: str, gene_cols: list[str], clinical_cols: list[str] | None,
                 categories: dict[str, list[str]] | None, test_fraction: float, expect_num_genes: int | None,
                 expect_num_clinical: int | None, **kwargs):
        super().__init__(**kwargs)
        self.path, self.time_col, self.event_col = Path(path), time_col, event_col
        self.gene_cols, self.clinical_cols, self.test_fraction = list(gene_cols), clinical_cols, test_fraction
        self.categories = categories
        self.expect = {"gene": expect_num_genes, "clinical": expect_num_clinical}

    def load(self) -> dict[str, Any]:
        import pandas as pd

        table = read_csv_frame(self.path, f"a survival table: one row per patient with the columns "
                                          f"{self.time_col!r} (time), {self.event_col!r} (0/1 event) and features")
        clinical = self.clinical_cols if self.clinical_cols is not None else [
            c for c in table.columns if c not in (self.time_col, self.event_col, "id", *self.gene_cols)]
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
        if not self.gene_cols and not clinical:
            raise DataError(f"{self.path}: no covariates: the table has only the time and event columns; "
                            "expected clinical (and optionally gene) columns beside them")
        unknown = sorted(set(self.categories or {}) - set(clinical))
        if unknown:
            raise DataError(f"data.args.categories names {unknown}, which are not clinical columns ({clinical})")
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
        rest, test = stratified_split(event_raw.astype(np.int64), (1 - self.test_fraction, self.test_fraction),
                                      self.split_seed, source=str(self.path))
        categories = (self.categories if self.categories is not None
                      else infer_categories(table.iloc[rest], clinical))
        x = feature_matrix(table, self.path, self.gene_cols, clinical, categories)
        return {"train": (x[rest], time[rest], event_raw[rest]), "test": (x[test], time[test], event_raw[test]),
                "genes": self.gene_cols, "clinical": encoded_names(clinical, categories), "categories": categories,
                "info": {"source": str(self.path), "license": "the user's data",
                         "test_split": f"{self.test_fraction:.0%} stratified by event, split_seed={self.split_seed}"}}


@register_dataset(task="survival")
def survival_csv(path: str, time_col: str = "time", event_col: str = "event", gene_cols: list[str] = (),
                 clinical_cols: list[str] | None = None, categories: dict[str, list[str]] | None = None,
                 test_fraction: float = 0.2, expect_num_genes: int | None = None,
                 expect_num_clinical: int | None = None, batch_size: int = 8192, num_workers: int = 0, seed: int = 0,
                 split_seed: int = 0, val_fraction: float = 0.2, loss: str = "efron",
                 rank_weight: float = 0.0, cv_fold: list[int] | None = None, refit: bool = False) -> SurvivalCSVData:
    """A survival CSV: time and event (0/1) columns, optional gene columns, clinical columns (default: the rest).

    An ``id`` column is not a covariate; clinical columns are numeric or categorical (``categories``: column -> its
    categories; default: inferred from the training and validation rows). ``cv_fold`` and ``refit``: the fold runs
    and the refit of finetune's cross-validated choice (:class:`SurvivalTableData`)."""
    return SurvivalCSVData(path, time_col, event_col, list(gene_cols), clinical_cols, categories, test_fraction,
                           expect_num_genes, expect_num_clinical, batch_size=batch_size, num_workers=num_workers,
                           seed=seed, split_seed=split_seed, val_fraction=val_fraction, loss=loss,
                           rank_weight=rank_weight, cv_fold=cv_fold, refit=refit)
