"""Reading and checking the user's survival tables: the gene and clinical columns as one float matrix, with
errors naming the column and rows of an infinite, missing or non-numeric value."""
from __future__ import annotations

from pathlib import Path

import numpy as np

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
