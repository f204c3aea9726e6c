"""Reading and checking the user's survival tables: the gene and clinical columns as one float matrix, with
errors naming the column and rows of an infinite, missing or non-numeric value, and the standardised model inputs
that the data modules, ``predict`` and ``hub.transforms`` all make of it (:func:`survival_inputs`).

Clinical columns are numeric or categorical, told apart as the tabular package does (numeric when at least 90% of
the non-empty cells are numbers; :func:`infer_categories`). A categorical column enters the models as one 0/1
indicator per category seen in the training rows, named ``column=category`` (:func:`encoded_names`); a missing cell
or a category not seen in training sets none of them.

>>> import pandas as pd
>>> table = pd.DataFrame({"age": [61, 70, 55], "stage": ["II", "I", None]})
>>> categories = infer_categories(table, ["age", "stage"]); categories
{'stage': ['I', 'II']}
>>> encoded_names(["age", "stage"], categories)
['age', 'stage=I', 'stage=II']
>>> feature_matrix(table, Path("t.csv"), [], ["age", "stage"], categories).tolist()
[[61.0, 0.0, 1.0], [70.0, 1.0, 0.0], [55.0, 0.0, 0.0]]
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hub.datafiles import read_csv_frame
from hub.errors import DataError

_NUMERIC_SHARE = 0.9  # a column is numeric when this share of its non-empty cells are numbers (as in tabular)


def _bad_rows(mask: np.ndarray) -> str:
    rows = np.flatnonzero(mask)
    return ", ".join(str(r + 2) for r in rows[:5]) + (" ..." if len(rows) > 5 else "")  # +2: header, 1-based


def infer_categories(table, clinical: list[str]) -> dict[str, list[str]]:
    """The categorical columns among ``clinical`` (fewer than 90% of their non-empty cells are numbers), each with
    its categories in sorted order; fit it on the training rows."""
    import pandas as pd

    categories = {}
    for column in clinical:
        present = table[column].dropna()
        if len(present) and pd.to_numeric(present, errors="coerce").notna().mean() < _NUMERIC_SHARE:
            categories[column] = sorted({str(v).strip() for v in present.tolist()})
    return categories


def encoded_names(clinical: list[str], categories: dict[str, list[str]]) -> list[str]:
    """The model's clinical feature names: a numeric column's own name, ``column=category`` per category."""
    return [name for column in clinical
            for name in ([f"{column}={c}" for c in categories[column]] if column in categories else [column])]


def clinical_columns(encoded: list[str], categories: dict[str, list[str]]) -> list[str]:
    """The table columns behind :func:`encoded_names` (the inverse), in their order."""
    column_of = {f"{column}={c}": column for column, cats in categories.items() for c in cats}
    return list(dict.fromkeys(column_of.get(name, name) for name in encoded))


def feature_matrix(table, path: Path, gene_cols: list[str], clinical: list[str],
                   categories: dict[str, list[str]] | None = None) -> np.ndarray:
    """The (N, G + C) float matrix of a survival table, genes first, then the clinical columns with each categorical
    one (a key of ``categories``) as its 0/1 indicators; NaN only where a gene is not measured."""
    import pandas as pd

    categories = categories or {}
    numeric = [c for c in gene_cols + clinical if c not in categories]
    values = table[numeric].apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)  # (N, G + numeric clinical)
    if np.isinf(values).any():
        col = numeric[int(np.flatnonzero(np.isinf(values).any(0))[0])]
        raise DataError(f"{path}: column {col!r} has infinite values at rows {_bad_rows(np.isinf(values).any(1))}; "
                        "expected finite numbers")
    clinical_nan = np.isnan(values[:, len(gene_cols):])
    if clinical_nan.any():
        col = numeric[len(gene_cols) + int(np.flatnonzero(clinical_nan.any(0))[0])]
        raise DataError(f"{path}: clinical column {col!r} has missing or non-numeric values at rows "
                        f"{_bad_rows(clinical_nan.any(1))}; expected numbers (only gene columns and categorical "
                        f"columns may be empty)")
    columns = dict(zip(numeric, values.T))
    for column, cats in categories.items():
        text = np.array([None if pd.isna(v) else str(v).strip() for v in table[column].tolist()], dtype=object)
        for c in cats:
            columns[f"{column}={c}"] = (text == c).astype(np.float64)
    order = gene_cols + encoded_names(clinical, categories)
    return np.stack([columns[name] for name in order], 1) if order else np.zeros((len(table), 0))


def survival_features(rows, genes: list[str], clinical: list[str], source: str | Path,
                      categories: dict[str, list[str]] | None = None) -> np.ndarray:
    """Patients' raw rows -> their (N, G + C) feature matrix (:func:`feature_matrix`), genes first. ``rows``: a
    pandas DataFrame or CSV path with the ``genes`` and ``clinical`` columns (others are ignored), or an (N, G + C)
    array in that order (as the DeepSurv files' ``x`` holds METABRIC); ``source`` names them in errors."""
    import pandas as pd

    columns = genes + clinical
    if isinstance(rows, (str, Path)):
        source = rows
        rows = read_csv_frame(rows, f"one row per patient with the columns {columns}")
    elif isinstance(rows, np.ndarray):
        if rows.ndim != 2 or rows.shape[1] != len(columns):
            raise DataError(f"{source}: expected an (N, {len(columns)}) array of the columns {columns}, got shape "
                            f"{rows.shape}")
        rows = pd.DataFrame(rows, columns=columns)
    elif not isinstance(rows, pd.DataFrame):
        raise DataError(f"{source}: expected patients' rows as a DataFrame, CSV path or (N, {len(columns)}) array, "
                        f"got {type(rows).__name__}")
    missing = [c for c in columns if c not in rows.columns]
    if missing:
        raise DataError(f"{source}: missing columns {missing}; the model takes {columns}")
    return feature_matrix(rows, Path(source), genes, clinical, categories)


def survival_inputs(x: np.ndarray, mean, std, num_genes: int) -> dict[str, torch.Tensor]:
    """Raw features (N, G + C), genes first, NaN where a gene was not measured -> the survival models' inputs,
    standardised with the training ``mean`` and ``std``: ``clinical`` (N, C) float, ``genes`` (N, G) float with 0
    where not measured and ``gene_mask`` (N, G) bool, True where measured."""
    z = (x - np.asarray(mean)) / np.asarray(std)
    genes = z[:, :num_genes]
    return {"clinical": torch.as_tensor(z[:, num_genes:], dtype=torch.float32),
            "genes": torch.as_tensor(np.nan_to_num(genes), dtype=torch.float32),
            "gene_mask": torch.from_numpy(~np.isnan(genes))}
