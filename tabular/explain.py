"""``attnhub explain`` for tabular models.

- TabTransformer: the attention between the categorical columns (mean over layers and heads), one heatmap per
  explained row and their mean, as ``column_attention.png``.
- TabR: which training rows each prediction retrieved and with what weight, as ``tabr_retrieval.csv``
  (``row, rank, training_row, weight, training_label``; ``training_row`` is the 1-based position in the
  training split the model was trained on, whose rows it stores as its candidates).

Rows are 1-based row numbers of ``--data rows.csv`` (raw rows, the card's preprocessing applies) or, without
``--data``, of the card's test split; the default is the first four.

>>> # attnhub explain tab_transformer.adult 1 2 3 --out explanations
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

import torch

from hub.errors import DataError
from hub.io import atomic_write_bytes
from hub.plotting import save_figure
from tabular.io import TabularPreprocessor, read_table


def _rows(inputs: list[str], count: int, where: str) -> list[int]:
    try:
        rows = [int(r) for r in inputs] or list(range(1, min(4, count) + 1))
    except ValueError:
        raise DataError(f"expected row numbers (1-based) to explain, got {inputs}") from None
    bad = [r for r in rows if not 1 <= r <= count]
    if bad:
        raise DataError(f"row numbers {bad} are outside {where}, which has rows 1-{count}")
    return rows


def plot_column_attention(weights: torch.Tensor, columns: list[str], rows: list[int], path: Path) -> Path:
    """``weights`` (B, depth, H, C, C) -> one heatmap per row (mean over layers and heads) and their mean."""
    import matplotlib.pyplot as plt

    maps = weights.mean((1, 2))  # (B, C, C)
    panels = [(f"row {r}", m) for r, m in zip(rows, maps)] + [("mean", maps.mean(0))]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.8), squeeze=False)
    for ax, (title, m) in zip(axes[0], panels):
        ax.imshow(m.numpy(), cmap="viridis", vmin=0)
        ax.set_title(title, fontsize=9)
        ax.set_xticks(range(len(columns)), columns, rotation=90, fontsize=6)
        ax.set_yticks(range(len(columns)), columns if ax is axes[0][0] else [], fontsize=6)
    axes[0][0].set_ylabel("column attending")
    fig.supxlabel("column attended to", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
    return path


def write_retrieval_table(model, x_num, x_cat, rows: list[int], pre: TabularPreprocessor, path: Path) -> Path:
    """TabR's retrieved training rows and weights for each explained row, as a CSV file."""
    neighbours, weights = model.retrieve(x_num, x_cat)  # (B, m), (B, m)
    labels = model.cand_y[neighbours]  # (B, m)
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["row", "rank", "training_row", "weight", "training_label"])
    for row, idx, w, y in zip(rows, neighbours.tolist(), weights.tolist(), labels.tolist()):
        order = sorted(range(len(idx)), key=lambda k: -w[k])
        for rank, k in enumerate(order, start=1):
            label = (f"{y[k] * pre.target_std + pre.target_mean:.6g}" if pre.task == "regression"
                     else pre.classes[int(y[k])])
            writer.writerow([row, rank, idx[k] + 1, f"{w[k]:.6f}", label])
    atomic_write_bytes(path, buffer.getvalue().encode())
    return path


def explain_rows(card, model, inputs: list[str], out_dir: Path, data: str | None = None):
    """Column attention (TabTransformer) or retrieved training rows (TabR) for some rows."""
    if not (hasattr(model, "column_attention") or hasattr(model, "retrieve")):
        raise DataError(f"{type(model).__name__} has no attention to explain; TabTransformer (attention between "
                        "columns) and TabR (retrieved training rows) do")
    pre = TabularPreprocessor.from_dict(card.input_spec["preprocessor"])
    if data:
        x_num, x_cat = (torch.as_tensor(a) for a in pre.transform(read_table(data)))
        where = data
    else:
        from hub.run.evaluate import card_data

        test = card_data(card).test_set
        x_num, x_cat, where = test.x_num, test.x_cat, "the card's test split"
    rows = _rows(inputs, len(x_num), where)
    index = torch.tensor(rows) - 1
    out_dir = Path(out_dir)
    with torch.inference_mode():
        if hasattr(model, "column_attention"):
            if not pre.categorical:
                raise DataError("this table has no categorical columns, so TabTransformer has no column attention")
            yield plot_column_attention(model.column_attention(x_cat[index]), pre.categorical, rows,
                                        out_dir / "column_attention.png")
        else:
            yield write_retrieval_table(model, x_num[index], x_cat[index], rows, pre, out_dir / "tabr_retrieval.csv")
