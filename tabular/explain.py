"""``attnhub explain`` for tabular models.

- TabTransformer: the attention between the categorical columns (mean over layers and heads), a heat map per row;
- the MLP, TabM and TabR, and ``--target CLASS``: feature ablation (Captum), each column's effect on the class's
  logit when it is set to its mean (numeric) or missing (categorical). For TabR the JSON also lists which training
  rows the prediction retrieved and with what weight (``training_row`` is the 1-based position in the training split
  the model was trained on, whose rows it stores as its candidates): a ranking of rows is no map the randomisation
  test can compare, so the map is the ablation.

Rows are 1-based row numbers of ``--data rows.csv`` (raw rows, the card's preprocessing applies) or, without
``--data``, of the card's test split; the default is the first four.

>>> # attnhub explain tab_transformer.adult 1 2 3 --out explanations
"""
from __future__ import annotations

from typing import Iterator

import torch

from hub.errors import DataError
from hub.explain import Explanation, class_target
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


def _columns(pre: TabularPreprocessor, num_numeric: int) -> list[str]:
    """The names of the model's input columns: numeric (then their missing indicators), categorical."""
    numeric = list(pre.numeric) + [f"{c} missing" for c in pre.indicators]
    numeric += [f"numeric {i}" for i in range(len(numeric), num_numeric)]
    return numeric[:num_numeric] + list(pre.categorical)


def _decision(card, model, x_num, x_cat, target: int | None) -> tuple[int | None, float | None, float | None]:
    """``(class, probability, None)`` of a classifier (``target``, else the top class), or ``(None, None, output)``."""
    with torch.no_grad():
        out = model(x_num, x_cat)
    if card.label_names:
        return (*class_target(out, target), None)
    return None, None, float(out.reshape(-1)[0])


def row_explanation(card, model, x_num: torch.Tensor, x_cat: torch.Tensor, target: int | None = None) -> Explanation:
    """What decided one row's output: TabTransformer's attention between the categorical columns (values (C, C), mean
    over layers and heads); else, and for ``--target``, feature ablation from Captum (values (columns,): the logit's
    change when each column is set to zero, its standardised mean, or category code 0, missing), with TabR's
    retrieved rows in ``details``. Shapes: x_num (1, numeric), x_cat (1, categorical)."""
    pre = TabularPreprocessor.from_dict(card.input_spec["preprocessor"])
    model.eval()
    chosen, probability, output = _decision(card, model, x_num, x_cat, target)
    with torch.no_grad():
        if target is None and hasattr(model, "column_attention") and pre.categorical:
            weights = model.column_attention(x_cat).mean((1, 2))[0]  # (B, depth, H, C, C) -> (C, C)
            return Explanation(weights.numpy(), "TabTransformer attention between the categorical columns (row "
                               "attends to column; mean over layers and heads)", chosen, probability, output,
                               labels=list(pre.categorical), axes=("column attending", "column attended to"))
    details = {}
    if hasattr(model, "retrieve"):
        with torch.no_grad():
            neighbours, weights = model.retrieve(x_num, x_cat)  # (1, m), (1, m)
        found = model.cand_y[neighbours][0].tolist()
        details["retrieved"] = [{"training_row": i + 1, "weight": round(float(w), 6), "training_label": (
            pre.classes[int(y)] if pre.task != "regression" else float(y * pre.target_std + pre.target_mean))}
            for i, w, y in zip(neighbours[0].tolist(), weights[0].tolist(), found)]
    from captum.attr import FeatureAblation

    columns = x_num.shape[1] + x_cat.shape[1]
    masks = (torch.arange(x_num.shape[1])[None], torch.arange(x_num.shape[1], columns)[None])
    attribution = FeatureAblation(model).attribute((x_num, x_cat), target=chosen, feature_mask=masks)
    values = torch.cat([a[0] for a in attribution]).detach()  # (columns,)
    reason = ("the attention is the same for every class" if target is not None and hasattr(model, "column_attention")
              else f"{type(model).__name__} has no attention to read")
    if details:
        reason = "TabR's retrieved training rows and their weights are in the JSON's details"
    return Explanation(values.numpy(), f"feature ablation (Captum): {reason}", chosen, probability, output,
                       labels=_columns(pre, x_num.shape[1]), axes=("column",), details=details)


def table_samples(card, inputs: list[str], data: str | None = None) -> Iterator[tuple[str, dict]]:
    """``(rowN, {"x_num", "x_cat"})`` per 1-based row number of ``data`` (raw rows, the card's preprocessing applies)
    or, without it, of the card's test split; default: the first four rows."""
    pre = TabularPreprocessor.from_dict(card.input_spec["preprocessor"])
    if data:
        x_num, x_cat = (torch.as_tensor(a) for a in pre.transform(read_table(data)))
        where = data
    else:
        from hub.run.evaluate import card_data

        test = card_data(card).test_set
        x_num, x_cat, where = test.x_num, test.x_cat, "the card's test split"
    for row in _rows(inputs, len(x_num), where):
        yield f"row{row}", {"x_num": x_num[row - 1:row], "x_cat": x_cat[row - 1:row]}


def cell_explanation(card, model, inputs: dict[str, torch.Tensor], target: int | None = None) -> Explanation:
    """What CARTE's row representation read: the centre node's attention to each cell in the last block (mean over
    heads; values (L,), a missing cell 0), the weights that form the row's state that the head reads. With
    ``--target`` the attention is the same for every class (it is not class-specific). Shapes: values (1, L, E),
    columns (L, E) or (1, L, E), mask (1, L)."""
    pre = card.input_spec["preprocessor"]
    model.eval()
    with torch.no_grad():
        out = model(**inputs)
        weights = model.cell_attention(**inputs)[0, -1].mean(0)  # (B, depth, H, L) -> (L,)
    chosen, probability = class_target(out, target) if card.label_names else (None, None)
    output = None if card.label_names else float(out.reshape(-1)[0])
    return Explanation(weights.numpy(), "CARTE: the row's centre node's graph attention to each cell (last block, "
                       "mean over heads; the rest goes to the centre itself)", chosen, probability, output,
                       labels=list(pre["numeric"]) + list(pre["categorical"]), axes=("cell",))


def graph_samples(card, inputs: list[str], data: str | None = None) -> Iterator[tuple[str, dict]]:
    """``(rowN, {"values", "columns", "mask"})`` per 1-based row number of ``data`` (raw rows, the card's
    preprocessing applies) or, without it, of the card's test split; default: the first four rows."""
    from tabular.row_graph import RowGraphPreprocessor

    if data:
        pre = RowGraphPreprocessor.from_dict(card.input_spec["preprocessor"])
        values, columns, mask = (torch.as_tensor(a) for a in pre.transform(read_table(data)))
        where = data
    else:
        from hub.run.evaluate import card_data

        test = card_data(card).test_set
        values, columns, mask, where = test.values, test.columns, test.mask, "the card's test split"
    for row in _rows(inputs, len(values), where):
        yield f"row{row}", {"values": values[row - 1:row], "columns": columns, "mask": mask[row - 1:row]}
