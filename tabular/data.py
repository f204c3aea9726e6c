"""Tabular datasets: scikit-learn's shipped sets, Adult, California Housing, Churn Modelling and any CSV.

Every sample is ``(inputs, target)`` with ``inputs = {"x_num": (F,) float32, "x_cat": (C,) int64}`` (training
rows also carry ``"index"``: their row in the training set, which TabR uses to leave a row out of its own
neighbours) and ``target`` a class index or a standardised value. Splits are fixed by ``split_seed``
(stratified by class for classification); the :class:`~tabular.io.TabularPreprocessor` is fitted
on the training part only and kept in ``input_spec["preprocessor"]`` (JSON) of the model card.

Models that need the training rows at inference (TabR's candidates) get them through ``set_candidates``,
called when training starts by the callback that :meth:`TabularData.callbacks` hands to the trainer.

>>> data = breast_cancer(); data.setup()
>>> inputs, y = data.train_set[0]; inputs["x_num"].shape, data.num_classes
(torch.Size([30]), 2)
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytorch_lightning as pl
import torch
from torch.utils.data import Dataset

from hub.core.registry import register_dataset
from hub.core.weights import read_verified
from hub.data import HubDataModule, data_dir, dataset_file, grouped_split, stratified_split
from hub.errors import DataError
from tabular.io import TASKS, TabularPreprocessor, _labels, _rows, infer_task, read_table
from tabular.models.tab_transformer import pretrain
from tabular.row_graph import EMBED_DIM, RowGraphPreprocessor, StringEmbedder, unlabelled_graphs

ADULT_COLUMNS = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
                 "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week", "native_country",
                 "income"]
# name -> (folder, file, sha256, bytes, canonical URL or None); the sha256 and sizes are those of
# ../shared/data/<folder>/PROVENANCE.md. The Churn copy there was repaired (a stray last line dropped, CRLF),
# so no public URL serves those bytes: it is read from HUB_DATA_DIR only.
FILES = {
    "adult.data": ("adult", "adult.data", "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
                   3_974_305, "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/adult.data"),
    "adult.test": ("adult", "adult.test", "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
                   2_003_153, "https://archive.ics.uci.edu/ml/machine-learning-databases/adult/adult.test"),
    "housing.csv": ("california_housing", "housing.csv",
                    "8a3727f4cf54ac1a327f69b1d5b4db54c5834ea81c6e4efc0d163300022a685e", 1_423_529,
                    "https://raw.githubusercontent.com/ageron/handson-ml2/1e2115277b50f6c584cd668fa30e3af309a5b136/"
                    "datasets/housing/housing.csv"),
    "Churn_Modelling.csv": ("churn_modelling", "Churn_Modelling.csv",
                            "3996cd1fa372e0db0cd9c0ebac35bbd4e8e3c65fb942bb010c826e7b1eeef0a0", 684_858, None),
    # the CARTE repository's four single tables (../shared/data/carte/PROVENANCE.md); no public URL serves them alone
    **{f"carte/{file}": ("carte", file, sha256, size, None) for file, sha256, size in (
        ("spotify.parquet", "baa78746662a38e7260ec3384c9df5708a0fd07c51ddbd7225e10f0c17469428", 2_508_770),
        ("wine_dot_com_prices.parquet", "6e5ed07d4c15423708b008f1e46bf4cb4044d0983b94b41d7b3518e7bcd78103", 446_747),
        ("wine_pl.parquet", "3bcd6e997d5e5ff75419dc8589c98b1d54b742dfde645263998811ea83ed2369", 106_985),
        ("wine_vivino_price.parquet", "6e6d7d6e42887658e4695b65ea1ad86346333c93289ec3a755b3bbc5ed516434", 384_826),
        ("config_spotify.json", "8221f230d2b81c4de57faac9c9cff91754fad8c39a1a889276d5f0021a4a0d9c", 98),
        ("config_wine_dot_com_prices.json", "9e7247312b13092e2c8afab3a89bef8056b5d678c987381fd9a786ea038382db", 90),
        ("config_wine_pl.json", "e50133522937d1a898ee0506970f3787f48e2166f572b1b28773abb59e5cf022", 88),
        ("config_wine_vivino_price.json", "83d60587e466fdf644d306064b513ae01aab0a0c86a2aa5f175caf00d28b8ac8", 88),
    )},
}
CARTE_TABLES = ("wine_pl", "wine_vivino_price", "wine_dot_com_prices", "spotify")


def data_file(key: str) -> Path:
    """``data_dir()/<folder>/<file>`` when present, else downloaded into the cache; sha256 checked either way."""
    folder, file, sha256, num_bytes, url = FILES[key]
    path = dataset_file(folder, data_dir() / folder / file, url, sha256, num_bytes)
    read_verified(path, sha256)
    return path


class TabularRows(Dataset):
    """Preprocessed rows; ``with_index`` adds each row's position (training rows, for TabR).

    Args:
        x_num: numeric features (N, F), float32 (already scaled by the preprocessor).
        x_cat: categorical codes (N, C), int64 (0 = missing, 1 = unseen category).
        y: targets (N,): int64 class indices, or float32 standardised values for regression.
        with_index: if True, each sample's inputs also carry ``"index"``, the row's position in this set
            (default False; the tabular data module sets it for the training split)."""

    def __init__(self, x_num: np.ndarray, x_cat: np.ndarray, y: np.ndarray, with_index: bool = False):
        self.x_num = torch.as_tensor(x_num)  # (N, F) float32
        self.x_cat = torch.as_tensor(x_cat)  # (N, C) int64
        self.y = torch.as_tensor(y)  # (N,) int64 class or float32 standardised value
        self.with_index = with_index

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i):
        inputs = {"x_num": self.x_num[i], "x_cat": self.x_cat[i]}
        if self.with_index:
            inputs["index"] = i
        return inputs, self.y[i]


class TabularData(HubDataModule):
    """A table split into train / validation / test with a preprocessor fitted on train.

    ``load()`` returns the whole table, or ``(train_and_val, test)`` when the data has a published test split.

    Args:
        target: name of the target column.
        task: ``"auto"`` (inferred from the target column), ``"binary"``, ``"multiclass"`` or ``"regression"``.
        numeric: the numeric feature columns; None infers them (a column is numeric when at least 90% of its
            non-empty cells parse as numbers).
        categorical: the categorical feature columns; None takes every feature column not numeric.
        scaling: numeric scaling fitted on the training rows: ``"quantile"`` (to a normal distribution, default) or
            ``"standard"``.
        val_fraction: fraction of the rows held out for validation (of the training file when the data has a
            published test split).
        test_fraction: fraction of the rows held out for testing; unused when the data has a published test split.
        split_seed: seed of the split (stratified by class for classification).
        info: source and licence of the data, copied into ``info`` (the model card's data section).
        batch_size: rows per batch.
        num_workers: DataLoader worker processes (0: load in the main process).
        seed: seed of the training order (per epoch, so a resumed run sees the same order).
        label_fraction: in (0, 1]; below 1, only a stratified ``label_fraction`` of the training rows keep their
            labels (the TabTransformer paper's semi-supervised setting). Default 1: all.
        pretrain_epochs: epochs of TabTransformer's replaced-token-detection pre-training on every training row
            before fitting (0, the default: none; only the ``tab_transformer`` model accepts more).
        cv_fold: ``[k, index, seed]``: train on the other k-1 folds of the rows outside the test split (train and
            validation, in that order) and validate on fold ``index`` (:func:`hub.crossval.fold_indices`: a fold run
            of finetune's cross-validated choice).
        refit: train on every row, test included (that choice's refit; validation and test figures in-sample).
        groups: the column naming each row's group (patient, unit, site): no group is split between training,
            validation and test (:func:`hub.data.grouped_split`) nor between the folds of ``cv_fold``; not a feature.
            None (default): rows are independent."""

    kind = "table"  # the input kind its cards name (input_spec["kind"])

    def __init__(self, target: str, task: str = "auto", numeric: list[str] | None = None,
                 categorical: list[str] | None = None, scaling: str = "quantile", val_fraction: float = 0.15,
                 test_fraction: float = 0.15, split_seed: int = 0, info: dict[str, Any] | None = None,
                 batch_size: int = 256, num_workers: int = 0, seed: int = 0, label_fraction: float = 1.0,
                 pretrain_epochs: int = 0, cv_fold: list[int] | None = None, refit: bool = False,
                 groups: str | None = None):
        super().__init__(batch_size, num_workers, seed)
        self.cv_fold, self.refit, self.groups = cv_fold, refit, groups
        self.pool_labels: np.ndarray | None = None  # the labels of the rows outside the test split (train, val)
        self.pool_groups: np.ndarray | None = None  # their groups, with ``groups``
        if not 0 < label_fraction <= 1 or pretrain_epochs < 0:
            raise DataError(f"expected 0 < data.args.label_fraction <= 1 and data.args.pretrain_epochs >= 0, got "
                            f"{label_fraction} and {pretrain_epochs}")
        # The semi-supervised setting of the TabTransformer paper: only a stratified label_fraction of the training
        # rows keep their labels; pretrain_epochs of replaced token detection run first on every training row.
        self.label_fraction, self.pretrain_epochs = label_fraction, pretrain_epochs
        self.pretrain_x_cat: torch.Tensor | None = None
        self.target, self.task_kind, self.scaling = target, task, scaling
        self.numeric, self.categorical = numeric, categorical
        self.val_fraction, self.test_fraction, self.split_seed = val_fraction, test_fraction, split_seed
        self.base_info = info or {}
        self.preprocessor: TabularPreprocessor | None = None
        self.frames: dict[str, pd.DataFrame] = {}

    def load(self) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]:
        raise NotImplementedError

    def _split(self, frame: pd.DataFrame, fractions: tuple[float, ...], by_group: bool = True) -> list[pd.DataFrame]:
        if self.target not in frame.columns:
            raise DataError(f"target column {self.target!r} is not in the table; its columns are {list(frame.columns)}")
        missing = frame[self.target].isna().to_numpy()
        if missing.any():
            raise DataError(f"target column {self.target!r} is empty at rows {_rows(missing)}; every row used for "
                            "training and testing needs a target (drop the rows to predict, then use attnhub predict)")
        if self.groups is not None and by_group:
            if self.groups not in frame.columns or self.groups == self.target:
                raise DataError(f"groups column {self.groups!r}: expected a column of the table other than the target "
                                f"{self.target!r}; its columns are {list(frame.columns)}")
            if frame[self.groups].isna().any():
                raise DataError(f"groups column {self.groups!r} is empty at rows {_rows(frame[self.groups].isna())}; "
                                "every row needs its group")
            parts = grouped_split(frame[self.groups].astype(str).to_numpy(), fractions, self.split_seed)
        elif (self.task_kind if self.task_kind != "auto" else infer_task(frame[self.target])) == "regression":
            order = np.random.default_rng(self.split_seed).permutation(len(frame))
            bounds = np.cumsum([int(round(f * len(frame))) for f in fractions[:-1]])
            parts = [np.sort(p) for p in np.split(order, bounds)]
        else:
            labels = _labels(frame[self.target])
            values, counts = np.unique(labels, return_counts=True)
            rare = {str(v): int(c) for v, c in zip(values, counts) if c < len(fractions)}
            kept = ~np.isin(labels, list(rare))
            if rare:  # kept whole in training (the first part), never dropped, never an error
                logging.getLogger(__name__).warning(
                    f"target column {self.target!r}: class(es) {rare} have fewer than the {len(fractions)} rows a "
                    f"stratified split needs (rows {_rows(~kept)}); they stay in training (not validated or tested)")
            try:
                parts = stratified_split(pd.factorize(labels[kept])[0], fractions, self.split_seed)
            except DataError as err:
                raise DataError(f"target column {self.target!r}: {err}") from None
            parts = [np.flatnonzero(kept)[p] for p in parts]
            parts[0] = np.sort(np.concatenate([parts[0], np.flatnonzero(~kept)]))
        return [frame.iloc[p].reset_index(drop=True) for p in parts]

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        loaded = self.load()
        if isinstance(loaded, tuple):
            rest, test = loaded
            train, val = self._split(rest, (1 - self.val_fraction, self.val_fraction))
        else:
            train, val, test = self._split(loaded, (1 - self.val_fraction - self.test_fraction, self.val_fraction,
                                                    self.test_fraction))
        split = (f"validation {self.val_fraction:.0%}, test "
                 f"{'the published test file' if isinstance(loaded, tuple) else f'{self.test_fraction:.0%}'}")
        train, val, split = self._folded(train, val, test, split)
        if self.groups is not None:  # no group in two parts; the group names no feature
            split += f", grouped by {self.groups!r}"
            train, val, test = (frame.drop(columns=[self.groups]) for frame in (train, val, test))
        pre = self.fit_preprocessor(train)
        if self.cv_fold is not None and pre.task != "regression":  # a class of fewer rows than folds is validated in
            pre.classes = self.fit_preprocessor(pd.concat([train, val])).classes  # some fold it did not train on
        unlabelled = 0
        if self.label_fraction < 1:
            if self.pretrain_epochs:  # every training row's categoricals, labels unused
                self.pretrain_x_cat = torch.as_tensor(pre.transform(train)[1])
            kept = self._split(train, (self.label_fraction, 1 - self.label_fraction), by_group=False)[0]
            train, unlabelled = kept, len(train) - len(kept)
        self.frames = {"train": train, "val": val, "test": test}
        self.preprocessor = pre
        self.task = "regression" if pre.task == "regression" else "classification"
        self.num_classes = pre.num_outputs
        self.label_names = list(pre.classes)
        self.output_names = [self.target] if pre.task == "regression" else []
        sets = {name: self.rows(frame, name) for name, frame in self.frames.items()}
        self.train_set, self.val_set, self.test_set = sets["train"], sets["val"], sets["test"]
        if self.pretrain_epochs and self.pretrain_x_cat is None:  # every row is labelled: pre-train on them
            self.pretrain_x_cat = self.train_set.x_cat
        self.input_spec = {"kind": self.kind, "preprocessor": pre.to_dict()}
        stratified = pre.task != "regression" and self.groups is None
        self.info = {**self.base_info, "sizes": [len(train), len(val), len(test)],
                     **({"unlabelled_train_rows": unlabelled} if unlabelled else {}),
                     "split": f"{split}, {'stratified by class, ' if stratified else ''}split_seed={self.split_seed}"}

    def fit_preprocessor(self, frame: pd.DataFrame) -> TabularPreprocessor:
        """The preprocessing fitted on the training rows ``frame`` (a subclass's hook)."""
        return TabularPreprocessor.fit(frame, self.target, self.task_kind, self.numeric, self.categorical,
                                       self.scaling)

    def rows(self, frame: pd.DataFrame, split: str) -> Dataset:
        """The model's dataset of a split's rows, preprocessed by ``self.preprocessor`` (a subclass's hook)."""
        x_num, x_cat = self.preprocessor.transform(frame)
        return TabularRows(x_num, x_cat, self.preprocessor.transform_target(frame[self.target]),
                           with_index=split == "train")

    def _folded(self, train: pd.DataFrame, val: pd.DataFrame, test: pd.DataFrame,
                split: str) -> tuple[pd.DataFrame, pd.DataFrame, str]:
        """``(train, val, split)`` as ``cv_fold`` and ``refit`` make them (see the class docstring)."""
        pool = pd.concat([train, val], ignore_index=True)
        regression = (self.task_kind if self.task_kind != "auto" else infer_task(pool[self.target])) == "regression"
        self.pool_labels = (pool[self.target].to_numpy(np.float64) if regression
                            else pd.factorize(_labels(pool[self.target]), sort=True)[0])
        if self.groups is not None:
            self.pool_groups = pool[self.groups].astype(str).to_numpy()
        if self.cv_fold is not None:
            from hub.crossval import fold_indices

            k, index, fold_seed = (int(v) for v in self.cv_fold)
            fit, held = fold_indices("regression" if regression else "classification", self.pool_labels,
                                     self.pool_groups, k=k, seed=fold_seed, warn=lambda line: None)[index]
            train, val = pool.iloc[fit].reset_index(drop=True), pool.iloc[held].reset_index(drop=True)
            split = f"fold {index} of {k} (seed {fold_seed}) of the rows outside the test split"
        if self.refit:  # every row trains, test included: validation and test figures are in-sample
            train = pd.concat([pool, test], ignore_index=True)
            split += "; refit: every row trains (validation and test figures in-sample)"
        return train, val, split

    def model_args(self) -> dict[str, Any]:
        pre = self.preprocessor
        return {"num_classes": pre.num_outputs, "num_numeric": pre.num_numeric,
                "cat_cardinalities": pre.cat_cardinalities, "num_candidates": len(self.train_set)}

    def callbacks(self, model):
        """TabR's candidates (the training rows) and, with ``pretrain_epochs``, TabTransformer's pre-training."""
        from tabular.models.tab_transformer import TabTransformer
        from tabular.models.tabr import TabR

        found = [TrainingRowCandidates(self.train_set)] if isinstance(model, TabR) else []
        if self.pretrain_epochs:
            if not isinstance(model, TabTransformer):
                raise DataError(f"data.args.pretrain_epochs: only tab_transformer has the paper's pre-training "
                                f"(replaced token detection), not {type(model).__name__}; set it to 0")
            found.append(ReplacedTokenPretraining(self.pretrain_x_cat, self.pretrain_epochs, self.seed))
        return found


class FrameData(TabularData):
    """A table produced by a function (scikit-learn sets and the shared files)."""

    def __init__(self, loader, **kwargs):
        super().__init__(**kwargs)
        self.loader = loader

    def load(self):
        return self.loader()


class CSVData(TabularData):
    """A user's CSV file with a header row."""

    def __init__(self, path: str, drop: list[str] = (), **kwargs):
        super().__init__(**kwargs)
        self.path, self.drop = Path(path), list(drop)

    def load(self) -> pd.DataFrame:
        return read_table(self.path, self.drop)


class RowGraphs(Dataset):
    """CARTE's row graphs (:mod:`tabular.row_graph`): each sample's inputs are ``{"values": (L, E), "columns":
    (L, E), "mask": (L,) bool}`` (the columns' embeddings are the same for every row, kept once).

    Args:
        values: leaf values (N, L, E) float32; columns: column-name embeddings (L, E); mask: cells present (N, L);
        y: targets (N,), class indices or standardised values."""

    def __init__(self, values: np.ndarray, columns: np.ndarray, mask: np.ndarray, y: np.ndarray):
        self.values, self.columns = torch.as_tensor(values), torch.as_tensor(columns)
        self.mask, self.y = torch.as_tensor(mask), torch.as_tensor(y)

    def __len__(self) -> int:
        return len(self.y)

    def inputs(self, rows) -> dict[str, torch.Tensor]:
        """The model's keyword inputs of ``rows`` (a slice or index tensor): columns (L, E) shared."""
        return {"values": self.values[rows], "columns": self.columns, "mask": self.mask[rows]}

    def __getitem__(self, i):
        return {"values": self.values[i], "columns": self.columns, "mask": self.mask[i]}, self.y[i]


class RowGraphData(TabularData):
    """A table as CARTE's row graphs: :class:`TabularData`'s split, :class:`~tabular.row_graph.RowGraphPreprocessor`
    fitted on the training rows.

    Args:
        loader: a function returning the whole table (a DataFrame).
        embedder: the string embedding (None: GloVe when installed, else hashed character n-grams).
        pretrain_steps: CARTE's contrastive pretraining on the background tables before the first epoch (0: none).
        pretrain_exclude: background tables left out of it (the table under test).
        **kwargs: :class:`TabularData`'s (target, task, split, batch size, ...)."""

    kind = "carte_table"

    def __init__(self, loader, embedder: str | None = None, pretrain_steps: int = 0,
                 pretrain_exclude: tuple[str, ...] = (), **kwargs):
        super().__init__(**kwargs)
        if pretrain_steps < 0:
            raise DataError(f"data.args.pretrain_steps must be >= 0, got {pretrain_steps}")
        self.loader, self.embedder = loader, StringEmbedder(embedder)
        self.pretrain_steps, self.pretrain_exclude = pretrain_steps, tuple(pretrain_exclude)

    def load(self):
        return self.loader()

    def fit_preprocessor(self, frame: pd.DataFrame) -> RowGraphPreprocessor:
        return RowGraphPreprocessor.fit(frame, self.target, self.task_kind, self.numeric, self.categorical,
                                        self.embedder.name)

    def rows(self, frame: pd.DataFrame, split: str) -> RowGraphs:
        values, columns, mask = self.preprocessor.transform(frame, self.embedder)
        return RowGraphs(values, columns, mask, self.preprocessor.transform_target(frame[self.target]))

    def model_args(self) -> dict[str, Any]:
        return {"num_classes": self.preprocessor.num_outputs, "embed_dim": EMBED_DIM}

    def callbacks(self, model):
        return [BackgroundPretraining(self.pretrain_exclude, self.pretrain_steps, self.embedder, self.seed)] \
            if self.pretrain_steps else []


def _sklearn(name: str) -> pd.DataFrame:
    import sklearn.datasets

    bunch = getattr(sklearn.datasets, f"load_{name}")(as_frame=True)
    frame = bunch.frame.rename(columns={bunch.target.name: "target"})
    if name != "diabetes":  # class names instead of indices
        frame["target"] = np.asarray(bunch.target_names)[bunch.target.to_numpy()]
    return frame


def _adult() -> tuple[pd.DataFrame, pd.DataFrame]:
    def read(key, skip):
        frame = pd.read_csv(data_file(key), header=None, names=ADULT_COLUMNS, skipinitialspace=True,
                            na_values=["?"], skiprows=skip)
        frame["income"] = frame["income"].str.rstrip(".")  # adult.test writes '>50K.'
        return frame

    return read("adult.data", 0), read("adult.test", 1)


def carte_table(name: str) -> tuple[pd.DataFrame, str, str]:
    """One of the CARTE repository's tables (:data:`CARTE_TABLES`): ``(frame, target, task)`` as its config file
    names them (task ``regression`` or ``binary``); its text columns stay text (CARTE embeds them, ``Year`` too)."""
    import json

    if name not in CARTE_TABLES:
        raise DataError(f"unknown CARTE table {name!r}; expected one of {CARTE_TABLES}")
    config = json.loads(data_file(f"carte/config_{name}.json").read_text())
    frame = pd.read_parquet(data_file(f"carte/{name}.parquet"))
    return frame, config["target_name"], "regression" if config["task"] == "regression" else "binary"


def text_columns(frame: pd.DataFrame, target: str | None = None) -> list[str]:
    """The feature columns that are not of a numeric dtype (a parquet table's strings, even those that read as
    numbers, such as a year: CARTE embeds them as text)."""
    return [c for c in frame.columns if c != target and not pd.api.types.is_numeric_dtype(frame[c])]


def background_tables(exclude: tuple[str, ...] = (), rows: int = 4000, seed: int = 0) -> dict[str, pd.DataFrame]:
    """The tables CARTE pretrains on, targets kept as cells (no schema is matched, no label used): scikit-learn's
    breast cancer, wine and diabetes, Adult, California Housing, Churn Modelling and the CARTE tables not in
    ``exclude``, each at most ``rows`` rows drawn with ``seed``; a table whose data is not here is left out."""
    from hub.errors import DatasetUnavailable

    loaders = {"breast_cancer": lambda: _sklearn("breast_cancer"), "wine": lambda: _sklearn("wine"),
               "diabetes": lambda: _sklearn("diabetes"), "adult": lambda: _adult()[0],
               "california_housing": lambda: read_table(data_file("housing.csv")),
               "churn_modelling": lambda: read_table(data_file("Churn_Modelling.csv"),
                                                     ["RowNumber", "CustomerId", "Surname"]),
               **{f"carte_{n}": (lambda n=n: carte_table(n)[0]) for n in CARTE_TABLES if n not in exclude}}
    found = {}
    for name, load in loaders.items():
        try:
            frame = load()
        except DatasetUnavailable:
            continue
        found[name] = frame.sample(min(rows, len(frame)), random_state=seed).reset_index(drop=True)
    return found


SKLEARN_INFO = {"source": "scikit-learn's shipped copy (sklearn.datasets)", "license": "BSD-3-Clause (scikit-learn)"}
INFO = {
    "adult": {"source": "UCI Adult (Kohavi 1996), HUB_DATA_DIR/adult", "license": "CC BY 4.0 (UCI)"},
    "california_housing": {"source": "California Housing (Pace & Barry 1997), Geron's housing.csv variant",
                           "license": "Apache-2.0 (ageron/handson-ml2)"},
    "churn_modelling": {"source": "Kaggle 'Churn Modelling' (shrutime), HUB_DATA_DIR/churn_modelling",
                        "license": "none stated"},
}


def _common(batch_size, num_workers, seed, split_seed, scaling):
    return dict(batch_size=batch_size, num_workers=num_workers, seed=seed, split_seed=split_seed, scaling=scaling)


@register_dataset(task="classification")
def breast_cancer(batch_size: int = 64, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                  scaling: str = "quantile") -> FrameData:
    """scikit-learn's breast cancer (569 rows, 30 numeric features, binary): the embedded default."""
    return FrameData(lambda: _sklearn("breast_cancer"), target="target", info=SKLEARN_INFO,
                     **_common(batch_size, num_workers, seed, split_seed, scaling))


@register_dataset(task="classification")
def wine(batch_size: int = 32, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
         scaling: str = "quantile") -> FrameData:
    """scikit-learn's wine (178 rows, 13 numeric features, 3 classes)."""
    return FrameData(lambda: _sklearn("wine"), target="target", info=SKLEARN_INFO,
                     **_common(batch_size, num_workers, seed, split_seed, scaling))


@register_dataset(task="regression")
def diabetes(batch_size: int = 64, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
             scaling: str = "quantile") -> FrameData:
    """scikit-learn's diabetes (442 rows, 10 numeric features, regression)."""
    return FrameData(lambda: _sklearn("diabetes"), target="target", info=SKLEARN_INFO,
                     **_common(batch_size, num_workers, seed, split_seed, scaling))


@register_dataset(task="classification")
def adult(batch_size: int = 256, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
          scaling: str = "quantile", label_fraction: float = 1.0, pretrain_epochs: int = 0) -> FrameData:
    """UCI Adult: income >50K (binary); the published adult.test is the test split, validation from adult.data.
    ``label_fraction`` < 1 keeps the labels of that stratified share of the training rows only;
    ``pretrain_epochs`` pre-trains a TabTransformer on every training row first (the paper's semi-supervised
    setting)."""
    return FrameData(_adult, target="income", info=INFO["adult"], label_fraction=label_fraction,
                     pretrain_epochs=pretrain_epochs, **_common(batch_size, num_workers, seed, split_seed, scaling))


@register_dataset(task="regression")
def california_housing(batch_size: int = 256, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                       scaling: str = "quantile") -> FrameData:
    """California Housing (housing.csv): median_house_value, regression; 70/15/15 split."""
    return FrameData(lambda: read_table(data_file("housing.csv")), target="median_house_value",
                     info=INFO["california_housing"], **_common(batch_size, num_workers, seed, split_seed, scaling))


@register_dataset(task="classification")
def churn_modelling(batch_size: int = 256, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                    scaling: str = "quantile") -> FrameData:
    """Bank customer churn: Exited (binary); RowNumber, CustomerId and Surname dropped; 70/15/15 split."""
    return FrameData(lambda: read_table(data_file("Churn_Modelling.csv"), ["RowNumber", "CustomerId", "Surname"]),
                     target="Exited", info=INFO["churn_modelling"],
                     **_common(batch_size, num_workers, seed, split_seed, scaling))


@register_dataset(task="classification")
def tabular_csv(path: str, target: str, task: str = "auto", numeric: list[str] | None = None,
                categorical: list[str] | None = None, drop: list[str] = (), scaling: str = "quantile",
                val_fraction: float = 0.15, test_fraction: float = 0.15, split_seed: int = 0, batch_size: int = 256,
                num_workers: int = 0, seed: int = 0, cv_fold: list[int] | None = None, refit: bool = False,
                groups: str | None = None) -> CSVData:
    """Any CSV with a header: ``target`` column, task auto|binary|multiclass|regression, the other columns features.
    ``cv_fold`` and ``refit``: the fold runs and the refit of finetune's cross-validated choice; ``groups``: the
    column naming each row's group, kept whole in one split and one fold (:class:`TabularData`)."""
    if task not in TASKS:
        raise DataError(f"data.args.task must be one of {TASKS}, got {task!r}")
    return CSVData(path, drop, target=target, task=task, numeric=numeric, categorical=categorical, scaling=scaling,
                   val_fraction=val_fraction, test_fraction=test_fraction, split_seed=split_seed,
                   info={"source": str(path), "license": "the user's data"}, batch_size=batch_size,
                   num_workers=num_workers, seed=seed, cv_fold=cv_fold, refit=refit, groups=groups)


@register_dataset(task="classification")
def carte_csv(path: str, target: str, task: str = "auto", numeric: list[str] | None = None,
              categorical: list[str] | None = None, drop: list[str] = (), val_fraction: float = 0.15,
              test_fraction: float = 0.15, split_seed: int = 0, batch_size: int = 64, num_workers: int = 0,
              seed: int = 0, embedder: str | None = None, pretrain_steps: int = 0,
              groups: str | None = None) -> RowGraphData:
    """Any CSV with a header as CARTE's row graphs (strings, numbers, empty cells): ``target`` column, task
    auto|binary|multiclass|regression, the other columns cells; ``pretrain_steps`` of pretraining on the
    background tables first; ``groups`` as :func:`tabular_csv`'s."""
    if task not in TASKS:
        raise DataError(f"data.args.task must be one of {TASKS}, got {task!r}")
    return RowGraphData(lambda: read_table(path, drop), embedder, pretrain_steps, target=target, task=task,
                        numeric=numeric, categorical=categorical, val_fraction=val_fraction,
                        test_fraction=test_fraction, split_seed=split_seed,
                        info={"source": str(path), "license": "the user's data"}, batch_size=batch_size,
                        num_workers=num_workers, seed=seed, groups=groups)


@register_dataset(task="regression")
def carte_tables(table: str = "wine_pl", val_fraction: float = 0.15, test_fraction: float = 0.15,
                 split_seed: int = 0, batch_size: int = 64, num_workers: int = 0, seed: int = 0,
                 embedder: str | None = None, pretrain_steps: int = 0) -> RowGraphData:
    """A table of the CARTE repository (wine_pl, wine_vivino_price, wine_dot_com_prices: log price regression;
    spotify: popularity, binary) as row graphs, its text columns embedded as text; ``pretrain_steps`` on the
    background tables other than it first."""
    if table not in CARTE_TABLES:
        raise DataError(f"data.args.table must be one of {CARTE_TABLES}, got {table!r}")
    frame, target, task = carte_table(table)
    info = {"source": f"CARTE repository (Kim et al., ICML 2024), table {table}, HUB_DATA_DIR/carte",
            "license": "BSD-3-Clause (soda-inria/carte)"}
    return RowGraphData(lambda: carte_table(table)[0], embedder, pretrain_steps, (table,), target=target,
                        task=task, categorical=text_columns(frame, target), val_fraction=val_fraction,
                        test_fraction=test_fraction, split_seed=split_seed, info=info, batch_size=batch_size,
                        num_workers=num_workers, seed=seed)


# Training callbacks of the tabular families, kept here (with the data that brings them to a trainer) so that the
# model modules import no Lightning.
class TrainingRowCandidates(pl.Callback):
    """Lightning callback that fills a TabR model's candidates with the training rows when fitting starts.

    ``rows``: the training set (``x_num`` (N, F), ``x_cat`` (N, C), ``y`` (N,)), its order being the ``index``
    that training batches carry."""

    def __init__(self, rows):
        self.rows = rows

    def on_fit_start(self, trainer, pl_module) -> None:
        model = pl_module.plain_model
        model.set_candidates(self.rows.x_num, self.rows.x_cat, self.rows.y)


class ReplacedTokenPretraining(pl.Callback):
    """Lightning callback that runs :func:`pretrain` on the rows ``x_cat`` (B, C) when fitting starts, and records
    the loss per epoch in the data's ``info["pretrain_loss"]`` (the card's data section). A resumed run skips it:
    its checkpoint already holds the pre-trained weights. The tabular data module brings it to a recipe's
    trainer when ``data.args.pretrain_epochs`` > 0."""

    def __init__(self, x_cat: torch.Tensor, epochs: int, seed: int = 0):
        self.x_cat, self.epochs, self.seed = x_cat, epochs, seed

    def on_fit_start(self, trainer, pl_module) -> None:
        if trainer.global_step > 0:
            return
        model = pl_module.plain_model
        device = next(model.parameters()).device
        trainer.datamodule.info["pretrain_loss"] = pretrain(model, self.x_cat.to(device), self.epochs, seed=self.seed)


class BackgroundPretraining(pl.Callback):
    """Lightning callback that pretrains a CARTE model on the background tables (:func:`tabular.models.carte.pretrain`)
    when fitting starts, and records the tables and the loss in the data's ``info`` (the card's data section). A
    resumed run skips it.

    Args:
        exclude: background tables left out (:func:`background_tables`).
        steps: optimiser steps.
        embedder: the :class:`~tabular.row_graph.StringEmbedder` of the data (the same vectors as fine-tuning).
        seed: seed of the tables' rows and of the steps' draws."""

    def __init__(self, exclude: tuple[str, ...], steps: int, embedder: StringEmbedder, seed: int = 0):
        self.exclude, self.steps, self.embedder, self.seed = exclude, steps, embedder, seed

    def on_fit_start(self, trainer, pl_module) -> None:
        from tabular.models.carte import CARTE
        from tabular.models.carte import pretrain as pretrain_carte

        model = pl_module.plain_model
        if trainer.global_step > 0:
            return
        if not isinstance(model, CARTE):
            raise DataError(f"data.args.pretrain_steps: only carte pretrains on background tables, not "
                            f"{type(model).__name__}; set it to 0")
        tables = background_tables(self.exclude, seed=self.seed)
        graphs = [tuple(torch.as_tensor(a) for a in unlabelled_graphs(frame, self.embedder, text_columns(frame)))
                  for frame in tables.values()]
        losses = pretrain_carte(model, graphs, self.steps, seed=self.seed)
        trainer.datamodule.info["pretrain"] = {"tables": sorted(tables), "steps": self.steps,
                                               "loss": [round(v, 4) for v in losses]}
