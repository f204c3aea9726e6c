"""Predictions as CSV rows, batch by batch: for input files, a file's name then the top-k classes with their
probabilities (or a regression or forecast model's named outputs); for a table, a row's number then the prediction
and one probability per class (or the value in the target's units). Probabilities are calibrated and a named output
has its conformal interval beside it when the card holds them (:mod:`hub.uncertainty.conformal`). When the card has OOD
statistics (:mod:`hub.uncertainty.ood`), every row ends with ``ood_score`` and ``ood`` (True when the input looks unlike
the training data), and "k of n inputs look unlike the training data" goes to stderr at the end. The outputs are those
of the card's predictor (:mod:`hub.predictor`): the model's, or where the run chose so its input kind's classical
baseline's or their blend, with the intervals fitted on that predictor's own validation residuals
(:func:`hub.predictor.predictor_intervals`). The OOD columns score the input through the model's features and
outputs whatever the predictor: an input unlike the training data is unlike it for the baseline too, which was fitted
on the same rows. ``attnhub predict`` prints and writes them."""
from __future__ import annotations

import csv
import dataclasses
from typing import IO, Iterable, Iterator

import torch

from hub.datafiles import read_csv_frame
from hub.deploy.tasks import SOURCE_PREFIX, BothTasks
from hub.errors import HubError
from hub.kinds import InputForm, kind_of, predict_logits
from hub.predictor import blend_of, member_name
from hub.uncertainty.conformal import interval_columns
from hub.uncertainty.ood import HEADER as OOD_HEADER
from hub.uncertainty.ood import PredictionScorer

Batch = tuple[list[str], list[list]]  # the CSV header and a batch's rows


def for_inference(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` in eval mode, its 2-d convolutions' weights in channels-last layout (oneDNN's fast path on CPU:
    airbench_cbam_32 takes 1.4x less CPU per image at batch 1 and 64, the same logits to rounding). Only where
    predictions are made: safetensors saves contiguous tensors only, so a model that may be trained and saved keeps
    the default layout."""
    model.eval()
    if any(isinstance(module, torch.nn.Conv2d) for module in model.modules()):
        model.to(memory_format=torch.channels_last)
    return model


def output_header(card, count: int) -> list[str]:
    """Names of a regression or forecast model's ``count`` outputs: the card's ``output_names`` (``rul``,
    ``speed_5min``, ``risk``, a table's target, ...), or ``output_<i>`` for a card that has none."""
    if not card.output_names:
        return [f"output_{i}" for i in range(count)]
    if len(card.output_names) != count:
        raise HubError(f"the card of {card.name} names {len(card.output_names)} outputs {card.output_names} but the "
                       f"model gave {count} per input; the card does not match its weights")
    return list(card.output_names)


def predicted_values(logits: torch.Tensor, card) -> torch.Tensor:
    """What the model predicts from its ``logits`` (B, ...): a classifier's class probabilities (B, C) of
    ``logits / temperature`` (calibrated when the card has a temperature), else its outputs as (B, outputs)."""
    if not card.label_names:
        return logits.float().reshape(logits.shape[0], -1)
    return (logits.float() / card.calibration.get("temperature", 1.0)).softmax(-1)


def value_cells(values: torch.Tensor, card, k: int,
                interval_level: float | None = None) -> tuple[list[str], list[list[str]]]:
    """CSV header and, per input, the cells after its name, of :func:`predicted_values` (or a predictor's, of the
    same shape): the outputs of a regression or forecast model (a card without ``label_names``), named by
    :func:`output_header`, each with its interval at ``interval_level`` when the card has them
    (:func:`hub.uncertainty.conformal.interval_columns`), else the top-k classes with their probabilities."""
    if not card.label_names:
        header, values = interval_columns(card, output_header(card, values.shape[1]), values, interval_level)
        return header, [[f"{v:.6f}" for v in row] for row in values.tolist()]
    top = values.topk(min(k, values.shape[-1]), dim=-1)
    header = [c for i in range(1, top.indices.shape[1] + 1) for c in (f"class_{i}", f"prob_{i}")]
    rows = [[cell for i, p in zip(indices, probs) for cell in (card.label_names[i], f"{p:.6f}")]
            for probs, indices in zip(top.values.tolist(), top.indices.tolist())]
    return header, rows


def prediction_cells(logits: torch.Tensor, card, k: int,
                     interval_level: float | None = None) -> tuple[list[str], list[list[str]]]:
    """:func:`value_cells` of the model's own :func:`predicted_values`. ``logits``: (B, ...)."""
    return value_cells(predicted_values(logits, card), card, k, interval_level)


def source_cells(model, k: int) -> tuple[list[str], list[list[str]]] | None:
    """The source task's columns (header prefixed ``source_``, and per input its top-k classes and probabilities) of
    the inputs ``model`` ran on since the last call, where ``model`` answers both tasks of a memory-token run
    (:class:`hub.deploy.tasks.BothTasks`); else None."""
    if not isinstance(model, BothTasks):
        return None
    header, cells = prediction_cells(model.take_source(), model.source_cfg, k)
    return [f"{SOURCE_PREFIX}{column}" for column in header], cells


def predictor_mix(card, paths: list[str]):
    """``mix(values, flagged=None) -> values`` of the card's predictor (:mod:`hub.predictor`), called on the model's
    :func:`predicted_values` of each batch that its input kind's reader yields for ``paths``, in order: the
    model's as they are, or the kind's ``blend_outputs`` of them and the saved baseline's outputs for the same
    inputs (the kind's ``baseline_outputs``, read one path at a time as the batches reach it). Where the card keeps
    a guard (``predictor["guard"]``, :func:`hub.predictor.guard_entry`), the rows ``flagged`` out of distribution
    (a bool per input, dim 0 of ``values``) take the guard's member instead (:func:`row_predictors` names them)."""
    entry = getattr(card, "predictor", None) or {}
    guard = entry.get("guard")
    found = blend_of(card)
    if found is None and guard is None:
        return lambda values, flagged=None: values
    weight = 1.0 if found is None else found[0]
    # the baseline's file is read through a card whose predictor is the guard's member when the chosen one is the model
    reading = card if found is not None else dataclasses.replace(
        card, predictor={**entry, "chosen": guard["member"], "weight": guard["weight"]})
    kind = kind_of(card)
    pending = (torch.as_tensor(kind.baseline_outputs(reading, path), dtype=torch.float32) for path in paths)
    held = torch.zeros(0)  # baseline outputs read but not yet mixed

    def at(w: float, values: torch.Tensor, theirs: torch.Tensor) -> torch.Tensor:
        return values if w == 1.0 else kind.blend_outputs(reading, w, values, theirs)

    def mix(values: torch.Tensor, flagged: list[bool] | None = None) -> torch.Tensor:
        nonlocal held
        theirs = held
        while len(theirs) < len(values):
            more = next(pending, None)
            if more is None:
                raise HubError(f"the baseline of {card.name} gave fewer outputs than its model for {paths}; the "
                               f"input kind {kind.name!r} reads them differently")
            theirs = more if len(theirs) == 0 else torch.cat([theirs, more])
        held = theirs[len(values):]
        theirs = theirs[:len(values)].reshape(values.shape)
        chosen = at(weight, values, theirs)
        if guard is None or not flagged or not any(flagged):
            return chosen
        rows = torch.tensor(flagged, dtype=torch.bool).view(-1, *[1] * (values.dim() - 1))
        return torch.where(rows, at(guard["weight"], values, theirs).to(chosen.dtype), chosen)

    return mix


def row_predictors(card, flagged: list[bool] | None, count: int) -> list[str] | None:
    """The ``predictor`` column of ``count`` rows where the card keeps a guard (else None: every row is the card's
    chosen predictor's): the chosen member's name (:func:`hub.predictor.member_name`), or the guard's with
    ``(guard: ood)`` on the rows ``flagged`` out of distribution."""
    entry = getattr(card, "predictor", None) or {}
    if not entry.get("guard"):
        return None
    chosen = member_name(float(entry.get("weight", 1.0)))
    guarded = f"{member_name(float(entry['guard']['weight']))} (guard: ood)"
    return [guarded if flagged and flagged[i] else chosen for i in range(count)]


def file_predictions(model, files: Iterable[str], batch_size: int = 256, top_k: int = 3,
                     interval_level: float | None = None) -> Iterator[Batch]:
    """Per batch of ``files``: the header (``file``, then :func:`prediction_cells`'s) and one row per file, its
    name then its cells, of the card's predictor (:func:`predictor_mix`), then, for a memory-token run answering both
    tasks, the source task's (:func:`source_cells`), then the OOD columns, then, where the card keeps a guard, the
    ``predictor`` that answered the row (:func:`row_predictors`). ``model``: a loaded hub model (its
    ``pretrained_cfg`` says how to read the files), or a task of a memory-token run
    (:func:`hub.deploy.tasks.task_model`)."""
    card = model.pretrained_cfg
    kind_of(card)  # the kind registered (its domain's kinds module) before the OOD scorer looks it up
    files = list(files)
    mix = predictor_mix(card, files)
    scorer = PredictionScorer.for_model(model)
    try:
        with torch.inference_mode():
            for names, logits in predict_logits(card, model, files, batch_size):
                ood = scorer.cells(logits) if scorer is not None else None  # one per model input
                flagged = None if ood is None else [cell[-1] == "True" for cell in ood]
                values = mix(predicted_values(logits, card), flagged)
                header, cells = value_cells(values, card, top_k, interval_level)
                if (source := source_cells(model, top_k)) is not None:  # --task both: the source task's too
                    header, cells = [*header, *source[0]], [[*c, *s] for c, s in zip(cells, source[1])]
                if ood is not None:  # one per model input; a traffic window gives a row per sensor
                    per_input = len(cells) // max(len(ood), 1)
                    header, cells = [*header, *OOD_HEADER], [[*c, *ood[i // per_input]] for i, c in enumerate(cells)]
                answered = row_predictors(card, flagged, len(values))
                if answered is not None:
                    per_value = len(cells) // max(len(values), 1)
                    header, cells = [*header, "predictor"], [[*c, answered[i // per_value]] for i, c in
                                                             enumerate(cells)]
                yield ["file", *header], [[name, *row] for name, row in zip(names, cells)]
    finally:
        if scorer is not None:
            scorer.close()


def shown_row(row: list[str], regression: bool, ood: bool = False) -> list[str]:
    """A row of :func:`file_predictions` as printed: the file's name, then its values to 3 decimals (a classifier's
    class names as they are); with ``ood``, the last two cells (``ood_score``, ``ood``) as they are."""
    name, *cells = row
    cells, tail = (cells[:-len(OOD_HEADER)], cells[-len(OOD_HEADER):]) if ood else (cells, [])
    return [name, *(f"{float(c):.3f}" if i % 2 or regression else c for i, c in enumerate(cells)), *tail]


def check_table_input(card, name: str) -> None:
    """Raise unless the model of ``card`` (loaded as ``name``) takes table rows (its input kind's form), as
    :func:`table_predictions` reads them."""
    if kind_of(card).input_form is not InputForm.ROWS:
        raise HubError(f"--data takes a table for tabular models; {name} takes input files "
                       f"(kind {card.input_spec.get('kind')!r}): give them as FILES")


def table_predictions(model, path: str, batch_size: int = 256, interval_level: float | None = None) -> Iterator[Batch]:
    """Per batch of the rows of the CSV table at ``path``: the header and one row per table row: its number, then
    for classification the predicted class and one probability per class (``proba_<class>``), for regression the
    value in the target's units, in a column named after the target (the card's ``output_names``), with its
    interval at ``interval_level`` when the card has them. The outputs are those of the card's predictor
    (:mod:`hub.predictor`): the model's, its input kind's classical baseline's, or their blend; the OOD columns score
    the model's."""
    card = model.pretrained_cfg
    kind_of(card)  # the kind registered (its domain's kinds module) before the OOD scorer looks it up
    regression = bool(card.output_names)  # a regression names its target; a classifier its classes
    classes = list(card.label_names)
    header = ["row", "prediction", *(f"proba_{c}" for c in classes)]
    scorer = PredictionScorer.for_model(model)
    frame = read_csv_frame(path, "a CSV table", skipinitialspace=True, na_values=["?"]) if scorer else None
    mix = predictor_mix(card, [path])
    try:
        with torch.inference_mode():
            for rows, outputs in predict_logits(card, model, [path], batch_size):
                ood = scorer.cells(outputs, frame.iloc[int(rows[0]) - 1:int(rows[-1])]) if scorer else None
                flagged = None if ood is None else [cell[-1] == "True" for cell in ood]
                if regression:
                    values = mix(outputs.float().reshape(-1, 1), flagged)
                    names, values = interval_columns(card, output_header(card, 1), values, interval_level)
                    header = ["row", *names]
                    cells = [[f"{v:.6g}" for v in row] for row in values.tolist()]
                else:
                    probs = mix((outputs.float() / card.calibration.get("temperature", 1.0)).softmax(-1), flagged)
                    cells = [[classes[int(p.argmax())], *(f"{v:.6f}" for v in p.tolist())] for p in probs]
                if ood is not None:
                    cells = [[*c, *o] for c, o in zip(cells, ood)]
                answered = row_predictors(card, flagged, len(cells))
                if answered is not None:
                    cells = [[*c, a] for c, a in zip(cells, answered)]
                yield (header + (OOD_HEADER if scorer else []) + (["predictor"] if answered is not None else []),
                       [[row, *c] for row, c in zip(rows, cells)])
    finally:
        if scorer is not None:
            scorer.close()


def write_csv(batches: Iterable[Batch], stream: IO[str]) -> int:
    """Write ``batches`` to ``stream`` as CSV, the header once after the first batch (so input that fails leaves no
    header behind); returns the number of rows written."""
    writer = csv.writer(stream)
    count = 0
    for header, rows in batches:
        if count == 0:
            writer.writerow(header)
        writer.writerows(rows)
        count += len(rows)
    return count
