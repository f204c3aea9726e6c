"""Reading and checking the user's survival tables: the gene and clinical columns as one float matrix, with
errors naming the column and rows of an infinite, missing or non-numeric value, and the standardised model inputs
that the data modules, ``predict`` and ``hub.transforms`` all make of it (:func:`survival_inputs`)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hub.data import read_csv_frame
from hub.errors import DataError


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


def survival_features(rows, genes: list[str], clinical: list[str], source: str | Path) -> np.ndarray:
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
    return feature_matrix(rows, Path(source), genes, clinical)


def survival_inputs(x: np.ndarray, mean, std, num_genes: int) -> dict[str, torch.Tensor]:
    """Raw features (N, G + C), genes first, NaN where a gene was not measured -> the survival models' inputs,
    standardised with the training ``mean`` and ``std``: ``clinical`` (N, C) float, ``genes`` (N, G) float with 0
    where not measured and ``gene_mask`` (N, G) bool, True where measured."""
    z = (x - np.asarray(mean)) / np.asarray(std)
    genes = z[:, :num_genes]
    return {"clinical": torch.as_tensor(z[:, num_genes:], dtype=torch.float32),
            "genes": torch.as_tensor(np.nan_to_num(genes), dtype=torch.float32),
            "gene_mask": torch.from_numpy(~np.isnan(genes))}
