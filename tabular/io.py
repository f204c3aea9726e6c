"""Reading and checking the user's tables (:func:`read_table`) and the tabular preprocessing fitted on the training
split and saved with the model as plain JSON.

:class:`TabularPreprocessor` turns a raw ``pandas.DataFrame`` into model inputs:

- column types are inferred (numeric when at least 90% of the non-empty cells parse as numbers, else
  categorical) unless given with ``numeric=`` / ``categorical=``; ``drop=`` removes id columns;
- numeric columns: missing cells are filled with the training median and, for every column that had
  missing cells in training, an extra 0/1 "was missing" column is appended; then a quantile transform
  to a normal distribution (as TabR and TabM preprocess) or standard scaling;
- categorical columns: code 0 = missing, 1 = a category not seen in training (the unknown bucket),
  2.. = the training categories in sorted order;
- target: the class list for classification (labels are the target's values as text), mean and std for
  regression (the model learns the standardised target).

``to_dict()`` / ``from_dict()`` round-trip through JSON (never pickle); the model card keeps it in
``input_spec["preprocessor"]`` so that predicting on a raw CSV reapplies exactly the training transform.

Shapes:
    transform(frame of N rows) -> x_num (N, num_numeric) float32, x_cat (N, num_categorical) int64

>>> import pandas as pd
>>> frame = pd.DataFrame({"age": [20, 30, None, 50], "city": ["a", "b", "a", None], "y": [0, 1, 0, 1]})
>>> pre = TabularPreprocessor.fit(frame, target="y")
>>> [t.shape for t in pre.transform(frame)], pre.task, pre.cat_cardinalities
([(4, 2), (4, 1)], 'binary', [4])
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy.special import ndtri

from hub.datafiles import read_csv_frame
from hub.errors import DataError

log = logging.getLogger("hub")
TASKS = ("auto", "binary", "multiclass", "regression")
MISSING_CODE, UNKNOWN_CODE = 0, 1  # categorical codes reserved before the known categories
_NUMERIC_SHARE = 0.9  # inferred numeric when this share of the non-empty cells are numbers
_MAX_CLASSES_FROM_NUMBERS = 20  # an integer target with more distinct values is a regression target


def _rows(mask: np.ndarray) -> str:
    """1-based data row numbers (the header is not counted) of the first few True entries."""
    rows = np.flatnonzero(mask) + 1
    return ", ".join(str(r) for r in rows[:5]) + (f" ... ({len(rows)} rows)" if len(rows) > 5 else "")


def _numbers(frame: pd.DataFrame, column: str) -> np.ndarray:
    """The column as float64, NaN for empty cells; text that is not a number, or inf, raises naming the column."""
    raw = frame[column]
    values = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64)
    text = np.isnan(values) & raw.notna().to_numpy()
    if text.any():
        found = sorted({str(v) for v in raw[text].tolist()})[:5]
        raise DataError(f"numeric column {column!r} holds text that is not a number ({found}) at rows {_rows(text)}; "
                        f"expected numbers or empty cells. Clean these cells, or treat the column as categorical "
                        f"(categorical=[{column!r}])")
    infinite = np.isinf(values)
    if infinite.any():
        raise DataError(f"numeric column {column!r} has infinite values (inf, or numbers too large for float64) at "
                        f"rows {_rows(infinite)}; expected finite numbers or empty cells")
    return values


def _labels(series: pd.Series) -> np.ndarray:
    """Target values as text; whole floats print without '.0' so labels 0/1 read the same from any file."""
    def text(v):
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v).strip()

    return np.array([text(v) for v in series.tolist()], dtype=object)


def infer_task(target: pd.Series) -> str:
    """``regression`` for numbers that are not all whole or take more than 20 values, else ``binary`` or
    ``multiclass`` by the number of distinct values (empty cells are ignored)."""
    target = target.dropna()
    values = pd.to_numeric(target, errors="coerce")
    if values.notna().all() and not (np.allclose(values, np.round(values))
                                     and target.nunique() <= _MAX_CLASSES_FROM_NUMBERS):
        return "regression"
    return "binary" if target.nunique() == 2 else "multiclass"


def read_table(path, drop: list[str] | tuple = ()) -> pd.DataFrame:
    """Read a CSV with a header into a DataFrame; an empty file or one without rows raises naming it."""
    frame = read_csv_frame(path, "a CSV table with a header row and data rows", skipinitialspace=True, na_values=["?"])
    return frame.drop(columns=[c for c in drop if c in frame.columns])


@dataclass
class TabularPreprocessor:
    """The fitted transform; build it with :meth:`fit`, save it with :meth:`to_dict`."""

    target: str
    task: str  # binary | multiclass | regression
    numeric: list[str]
    categorical: list[str]
    scaling: str = "quantile"  # quantile | standard
    fill: list[float] = field(default_factory=list)  # training median per numeric column
    indicators: list[str] = field(default_factory=list)  # numeric columns that get a "was missing" column
    quantiles: list[list[float]] = field(default_factory=list)  # per numeric column (quantile scaling)
    mean: list[float] = field(default_factory=list)  # per numeric column (standard scaling)
    std: list[float] = field(default_factory=list)
    categories: list[list[str]] = field(default_factory=list)  # training categories per categorical column
    classes: list[str] = field(default_factory=list)
    target_mean: float = 0.0
    target_std: float = 1.0

    @classmethod
    def fit(cls, frame: pd.DataFrame, target: str, task: str = "auto", numeric: list[str] | None = None,
            categorical: list[str] | None = None, scaling: str = "quantile", n_quantiles: int = 256
            ) -> "TabularPreprocessor":
        """Fit on the training rows of ``frame`` (all columns but ``target`` are features)."""
        if task not in TASKS:
            raise DataError(f"task must be one of {TASKS}, got {task!r}")
        if scaling not in ("quantile", "standard"):
            raise DataError(f"scaling must be 'quantile' or 'standard', got {scaling!r}")
        if target not in frame.columns:
            raise DataError(f"target column {target!r} is not in the table; its columns are {list(frame.columns)}")
        if len(frame) == 0:
            raise DataError("the training table has no rows")
        features = [c for c in frame.columns if c != target]
        named = list(numeric or []) + list(categorical or [])
        unknown = [c for c in named if c not in features]
        if unknown:
            raise DataError(f"columns {unknown} named as numeric/categorical are not feature columns of the table; "
                            f"its feature columns are {features}")
        empty = [c for c in features if frame[c].isna().all()]
        if empty:
            raise DataError(f"columns {empty} are empty in every training row (all NaN); drop them from the table")
        if numeric is None:
            numeric = [c for c in features if c not in (categorical or []) and cls._looks_numeric(frame[c])]
        categorical = list(categorical or []) + [c for c in features
                                                 if c not in numeric and c not in (categorical or [])]
        pre = cls(target=target, task=task, numeric=list(numeric), categorical=list(categorical), scaling=scaling)
        pre._fit_target(frame[target])
        for column in pre.numeric:
            values = _numbers(frame, column)
            present = values[~np.isnan(values)]
            pre.fill.append(float(np.median(present)))
            if len(present) < len(values):
                pre.indicators.append(column)
            if scaling == "quantile":
                qs = np.quantile(present, np.linspace(0, 1, min(n_quantiles, len(present))))
                pre.quantiles.append([float(q) for q in qs])
            else:
                pre.mean.append(float(present.mean()))
                pre.std.append(float(present.std()) or 1.0)
        for column in pre.categorical:
            pre.categories.append(sorted({str(v).strip() for v in frame[column].dropna().tolist()}))
        return pre

    @staticmethod
    def _looks_numeric(series: pd.Series) -> bool:
        present = series.dropna()
        return bool(len(present)) and pd.to_numeric(present, errors="coerce").notna().mean() >= _NUMERIC_SHARE

    def _fit_target(self, target: pd.Series) -> None:
        missing = target.isna().to_numpy()
        if missing.any():
            raise DataError(f"target column {self.target!r} is empty at rows {_rows(missing)}; every training row "
                            "needs a target")
        values = pd.to_numeric(target, errors="coerce")
        if self.task == "auto":
            self.task = infer_task(target)
        if self.task == "regression":
            if values.isna().any():
                bad = values.isna().to_numpy()
                raise DataError(f"regression target {self.target!r} holds text at rows {_rows(bad)} "
                                f"({sorted({str(v) for v in target[bad]})[:5]}); expected numbers")
            self.target_mean, self.target_std = float(values.mean()), float(values.std(ddof=0)) or 1.0
            return
        self.classes = sorted(set(_labels(target)), key=lambda c: (len(c), c) if c.lstrip("-").isdigit() else (0, c))
        if len(self.classes) < 2:
            raise DataError(f"target column {self.target!r} has a single class ({self.classes}); classification needs "
                            "at least two classes")
        if self.task == "binary" and len(self.classes) != 2:
            raise DataError(f"task 'binary' but target column {self.target!r} has {len(self.classes)} classes "
                            f"({self.classes[:10]}); use task 'multiclass'")

    @property
    def num_numeric(self) -> int:
        return len(self.numeric) + len(self.indicators)

    @property
    def cat_cardinalities(self) -> list[int]:
        return [len(c) + 2 for c in self.categories]  # + missing and unknown codes

    @property
    def num_outputs(self) -> int:
        return 1 if self.task == "regression" else len(self.classes)

    def check_columns(self, frame: pd.DataFrame) -> None:
        """Every training feature column must be there; extra columns are ignored with a warning."""
        expected = self.numeric + self.categorical
        missing = [c for c in expected if c not in frame.columns]
        if missing:
            raise DataError(f"the table lacks {len(missing)} of the {len(expected)} feature columns the model was "
                            f"trained on: missing {missing}; it has {list(frame.columns)}")
        extra = [c for c in frame.columns if c not in expected and c != self.target]
        if extra:
            log.warning("columns %s were not used in training and are ignored", extra)

    def transform(self, frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """``(x_num (N, num_numeric) float32, x_cat (N, num_categorical) int64)`` for the rows of ``frame``."""
        self.check_columns(frame)
        x_num = np.zeros((len(frame), self.num_numeric), np.float32)
        for j, column in enumerate(self.numeric):
            values = _numbers(frame, column)
            missing = np.isnan(values)
            values = np.where(missing, self.fill[j], values)
            x_num[:, j] = self._scale(values, j)
            if column in self.indicators:
                x_num[:, len(self.numeric) + self.indicators.index(column)] = missing
        x_cat = np.zeros((len(frame), len(self.categorical)), np.int64)
        for j, column in enumerate(self.categorical):
            lookup = {c: i + 2 for i, c in enumerate(self.categories[j])}
            x_cat[:, j] = [MISSING_CODE if pd.isna(v) else lookup.get(str(v).strip(), UNKNOWN_CODE)
                           for v in frame[column].tolist()]
        return x_num, x_cat

    def _scale(self, values: np.ndarray, j: int) -> np.ndarray:
        if self.scaling == "standard":
            return (values - self.mean[j]) / self.std[j]
        qs = np.asarray(self.quantiles[j])
        refs = np.linspace(0, 1, len(qs))
        # Forward and backward interpolation averaged, so repeated quantiles (discrete columns) map to the
        # middle of their range, as scikit-learn's QuantileTransformer does.
        u = 0.5 * (np.interp(values, qs, refs) - np.interp(-values, -qs[::-1], -refs[::-1]))
        return ndtri(np.clip(u, 1e-7, 1 - 1e-7))

    def transform_target(self, target: pd.Series) -> np.ndarray:
        """Class indices (int64) or the standardised target (float32)."""
        if self.task == "regression":
            values = pd.to_numeric(target, errors="coerce").to_numpy(np.float64)
            return ((values - self.target_mean) / self.target_std).astype(np.float32)
        labels = _labels(target)
        lookup = {c: i for i, c in enumerate(self.classes)}
        unknown = np.array([c not in lookup for c in labels])
        if unknown.any():
            raise DataError(f"target column {self.target!r} has classes not seen in training "
                            f"({sorted(set(labels[unknown]))[:5]}) at rows {_rows(unknown)}; known: {self.classes}")
        return np.array([lookup[c] for c in labels], np.int64)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> "TabularPreprocessor":
        return cls(**state)


def table_cells(frame: pd.DataFrame, preprocessor: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """``(numbers (N, F), unseen (N,))`` of a raw table, for the OOD range check (:mod:`hub.uncertainty.ood`): its
    numeric columns as float (NaN when empty or not a number) and, per row, whether it has a category not seen in
    training or an empty cell in a numeric column that was never empty in training. ``preprocessor``: the card's
    ``input_spec["preprocessor"]`` (:meth:`TabularPreprocessor.to_dict`)."""
    numbers = np.stack([pd.to_numeric(frame[c], errors="coerce").to_numpy(np.float64)
                        for c in preprocessor["numeric"]], 1) if preprocessor["numeric"] else np.zeros((len(frame), 0))
    unseen = np.zeros(len(frame), bool)
    for j, column in enumerate(preprocessor["numeric"]):
        if column not in preprocessor["indicators"]:
            unseen |= np.isnan(numbers[:, j])
    for column, known in zip(preprocessor["categorical"], preprocessor["categories"]):
        cells = frame[column]
        unseen |= cells.notna().to_numpy() & ~cells.astype(str).str.strip().isin(set(known)).to_numpy()
    return numbers, unseen
