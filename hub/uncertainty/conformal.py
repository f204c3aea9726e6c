"""Predictions that say how sure they are: calibrated class probabilities and prediction intervals, fitted on the
validation split at the end of training (:func:`fit_run`) or later on a run folder or a shipped tag
(:func:`fit_card`), kept in the model card's ``calibration`` and applied by ``attnhub predict``.

- Classifiers (every task that is a :class:`hub.tasks.ClassificationTask`: images, audio, tables, graphs, ICU
  stays): temperature scaling (:func:`hub.uncertainty.calibration.fit_temperature`); the card keeps ``temperature``,
  which ``predict`` divides the logits by; NLL and expected calibration error before and after, on the validation and
  test splits.
- Regression and forecasts (named outputs with a target in the same units: RUL, traffic speeds, a table's target):
  Mondrian split conformal prediction in bins of the predicted value (Vovk et al., "Algorithmic Learning in a Random
  World", 2005, ch. 4.5; Bostrom et al., "Mondrian conformal regressors", COPA 2020; split conformal: Lei et al.,
  "Distribution-Free Predictive Inference for Regression", JASA 2018). Per output column (a forecast horizon), the
  validation predictions are cut into up to :data:`MAX_BINS` bins of equal counts, each of at least
  :data:`MIN_BIN_POINTS` points (:func:`prediction_bin_edges`); a bin's half width at level ``1 - alpha`` is the
  ``ceil((n + 1)(1 - alpha))``-th smallest of its ``n`` absolute residuals (:func:`conformal_half_width`): for a fresh
  point exchangeable with the bin's points, ``P(|y - prediction| <= half width) >= 1 - alpha`` holds within its bin,
  so whatever the share of each bin among the points predicted later. Why bins: the errors grow with the predicted
  value's difficulty (RUL far from failure, traffic speeds in congestion), and the test splits mix the bins
  differently from the validation split (C-MAPSS validation takes every window of held-out engines, a third of them at
  the RUL cap where errors are small, while its test split takes one last window per truncated engine; Los-loop's test
  follows its validation in time, with more congestion), so one pooled half width, right on average over the
  validation mix, under-covered the test splits (86.6% and 86.3% at 90%; with the bins 86.5% and 88.7%: FD001's
  validation split is 5 engines, whose errors vary by engine more than by bin, so its half widths rested on five
  engines; its card's are now fitted on the held-out engines of four more runs of its recipe,
  :mod:`hub.uncertainty.cross_conformal`: 89.9%). Binning the predicted value, which ``predict`` has for every item,
  needs nothing of the inputs; a normalised score (a bin's mean training residual as the difficulty, Papadopoulos et al.
  2008) covered FD001's test split less (84.2%). With fewer than ``2 * MIN_BIN_POINTS`` validation points an output has
  one bin: plain split conformal. The card keeps, per output, the interior ``bin_edges`` (in the target's units) and per
  level of :data:`LEVELS` one half width per bin (``half_width[level][output][bin]``); ``predict`` writes
  ``<output>_lower_90`` and ``<output>_upper_90`` beside each output from its bin's half width (``--interval-level``
  picks another stored level; an older card's single half width per output is one bin). Written here, a sort and an
  index, because MAPIE and crepes wrap scikit-learn style estimators that they fit themselves, while here the model is
  trained already and only its predictions and residuals on the validation split are needed.
- Survival risks are skipped: a Cox model's risk is a log hazard ratio, a relative score whose target (a time and
  an event indicator, censored) is not in its units, so an absolute residual means nothing.

>>> conformal_half_width(np.arange(1.0, 10.0), 0.8)  # n = 9: the ceil(10 * 0.8) = 8th smallest
8.0
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from hub.errors import HubError
from hub.kinds import registered_kind
from hub.uncertainty.calibration import calibration_error, choose_temperature, model_outputs

LEVELS = (0.8, 0.9, 0.95)  # the interval levels kept in a card; predict takes one of them
DEFAULT_LEVEL = 0.9
MAX_BINS = 10  # bins of the predicted value per output (Mondrian conformal)
MIN_BIN_POINTS = 200  # validation points per bin at least: the bin's coverage then varies by about 2% (sd)


def conformal_half_width(residuals: np.ndarray, level: float) -> float:
    """The split conformal half width at coverage ``level`` of the absolute residuals (n,): their
    ``ceil((n + 1) level)``-th smallest (the finite-sample correction of the ``level`` quantile)."""
    residuals = np.sort(np.asarray(residuals, dtype=np.float64).reshape(-1))
    if not 0 < level < 1:
        raise HubError(f"an interval level is a coverage between 0 and 1 (e.g. 0.9), got {level!r}")
    rank = math.ceil((len(residuals) + 1) * level)
    if rank > len(residuals):
        raise HubError(f"a {level:g} interval needs at least {math.ceil(level / (1 - level))} calibration points, "
                       f"got {len(residuals)}")
    return float(residuals[rank - 1])


def _level_key(level: float) -> str:
    return f"{level:g}"


def prediction_bin_edges(predictions: np.ndarray, max_bins: int = MAX_BINS,
                         min_points: int = MIN_BIN_POINTS) -> np.ndarray:
    """Interior edges (K - 1,) of up to ``max_bins`` bins of equal counts of ``predictions`` (n,), each bin holding
    at least ``min_points`` of them (an edge that would leave fewer on either side, e.g. among many equal
    predictions, is dropped); no edge (one bin) below ``2 * min_points`` predictions."""
    predictions = np.asarray(predictions, dtype=np.float64).reshape(-1)
    count = max(1, min(max_bins, len(predictions) // min_points))
    edges: list[float] = []
    for edge in np.quantile(predictions, np.arange(1, count) / count):
        lower = edges[-1] if edges else -np.inf
        if (min(((predictions >= lower) & (predictions < edge)).sum(), (predictions >= edge).sum()) >= min_points):
            edges.append(float(edge))
    return np.asarray(edges)


def prediction_bins(predictions: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """The bin (n,) of each prediction (n,) among the interior ``edges`` (K - 1,): ``b`` with
    ``edges[b - 1] <= prediction < edges[b]``, 0 to K - 1."""
    return np.searchsorted(edges, predictions, side="right")


def mondrian_half_widths(predictions: np.ndarray, residuals: np.ndarray, edges: np.ndarray,
                         level: float) -> list[float]:
    """Per bin of the ``predictions`` (n,) among ``edges`` (K - 1,), the :func:`conformal_half_width` of its
    absolute ``residuals`` (n,): K half widths."""
    bins = prediction_bins(predictions, edges)
    return [conformal_half_width(residuals[bins == b], level) for b in range(len(edges) + 1)]


def _by_output(values: torch.Tensor, count: int) -> torch.Tensor:
    """``values`` (N, count, ...) or (N,) as (rows, count): further axes (a traffic forecast's sensors) become rows."""
    values = values.reshape(len(values), count, -1)  # (N, count, rest)
    return values.permute(0, 2, 1).reshape(-1, count)


def output_residuals(outputs: torch.Tensor, targets: torch.Tensor, count: int,
                     missing: float | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per output column, the predictions (rows,) of ``outputs`` and their absolute residuals (rows,) against
    ``targets`` (N, count, ...), less the rows whose target is ``missing`` (a traffic dataset's 0: no reading)."""
    outputs, targets = _by_output(outputs.double(), count), _by_output(targets.double(), count)
    kept = torch.ones_like(targets, dtype=torch.bool) if missing is None else targets != missing
    return [(outputs[:, j][kept[:, j]].numpy(), (outputs[:, j] - targets[:, j]).abs()[kept[:, j]].numpy())
            for j in range(count)]


def fit_intervals(val: list[tuple[np.ndarray, np.ndarray]], test: list[tuple[np.ndarray, np.ndarray]],
                  names: list[str], scale: float = 1.0, shift: float = 0.0,
                  levels: tuple[float, ...] = LEVELS, fitted_on: str = "validation split") -> dict[str, Any]:
    """The ``conformal`` entry of a card: per output, the edges of its bins of predicted values and per level one
    half width per bin (:func:`mondrian_half_widths`), from the validation (predictions, absolute residuals)
    ``val`` (one pair per output), with the coverage and mean width on the test pairs ``test``. Residuals and
    widths are multiplied by ``scale`` and the edges mapped by ``scale * edge + shift`` (a standardised target to
    its units: ``predict`` bins the predictions in the target's units); ``fitted_on`` says where ``val`` came from."""
    fewest = min(len(r) for _, r in val)
    fitted = [lv for lv in levels if math.ceil((fewest + 1) * lv) <= fewest]
    if not fitted:
        raise HubError(f"the validation split has {fewest} points for an output, too few for an interval")
    edges = [prediction_bin_edges(p) for p, _ in val]
    half_width = {_level_key(lv): [[scale * w for w in mondrian_half_widths(p, r, e, lv)]
                                   for (p, r), e in zip(val, edges)] for lv in fitted}
    conformal = {"method": "Mondrian split conformal, absolute residuals in bins of the predicted value",
                 "outputs": names, "fitted_on": fitted_on,
                 "bin_edges": [[scale * x + shift for x in e] for e in edges], "half_width": half_width,
                 "val_points_per_bin": [np.bincount(prediction_bins(p, e), minlength=len(e) + 1).tolist()
                                        for (p, _), e in zip(val, edges)],
                 "test_points_per_output": [len(r) for _, r in test]}
    covered = {key: interval_coverage(conformal, test, key, scale, shift) for key in half_width}
    return {**conformal, "test_coverage": {key: float(np.concatenate(c).mean()) for key, (c, _) in covered.items()},
            "test_coverage_per_output": {key: [float(x.mean()) for x in c] for key, (c, _) in covered.items()},
            "test_mean_width": {key: float(2 * np.concatenate(w).mean()) for key, (_, w) in covered.items()}}


def interval_coverage(conformal: dict[str, Any], test: list[tuple[np.ndarray, np.ndarray]], level: str,
                      scale: float = 1.0, shift: float = 0.0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per output, whether each test point is covered (n,) and its half width (n,) at ``level`` (a key of
    ``conformal["half_width"]``, e.g. ``"0.9"``), for the (predictions, absolute residuals) pairs ``test`` in model
    units, mapped to the target's units by ``scale`` and ``shift`` as :func:`fit_intervals` says."""
    widths = [np.asarray(w)[prediction_bins(scale * p + shift, np.asarray(e))]
              for (p, _), w, e in zip(test, conformal["half_width"][level], conformal["bin_edges"])]
    return [scale * r <= w for (_, r), w in zip(test, widths)], widths


def fit_temperature_figures(val_logits: torch.Tensor, val_labels: torch.Tensor, test_logits: torch.Tensor,
                            test_labels: torch.Tensor) -> dict[str, Any]:
    """The temperature fitted on the validation logits (N, C) and labels (N,) (by NLL), with the NLL and expected
    calibration error before and after on both splits: a card's ``calibration``. A temperature that would raise the
    validation ECE is not applied (1.0 is kept, and the fitted one is recorded as ``rejected_temperature``): the
    calibration step never makes the validation split's calibration worse. The rule is
    :func:`hub.uncertainty.calibration.choose_temperature`, which ``attnhub calibrate`` keeps too."""
    temperature, rejected = choose_temperature(val_logits, val_labels)

    def figures(logits, labels):
        return {"nll": float(F.cross_entropy(logits, labels)),
                "nll_calibrated": float(F.cross_entropy(logits / temperature, labels)),
                "ece": calibration_error(logits.softmax(1), labels),
                "ece_calibrated": calibration_error((logits / temperature).softmax(1), labels)}

    return {"temperature": temperature, **rejected, "fitted_on": f"validation split ({len(val_labels)} items)",
            "val": figures(val_logits, val_labels), "test": figures(test_logits, test_labels)}


def target_units(input_spec: dict[str, Any]) -> tuple[float, float]:
    """(scale, shift) that map the data's targets to the target's units (``scale * value + shift``), as the input
    kind of ``input_spec`` says (:meth:`~hub.kinds.InputKind.target_units`: a table's regression target is
    standardised); an input of no registered kind has its targets in their own units."""
    kind = registered_kind(input_spec.get("kind"))
    return kind.target_units(input_spec) if kind is not None else (1.0, 0.0)


def fit(model: torch.nn.Module, datamodule, task, device: str | torch.device = "cpu",
        progress: bool = True, held_out: tuple[torch.Tensor, torch.Tensor, str] | None = None) -> dict[str, Any]:
    """A card's ``calibration`` for ``model`` on the set-up ``datamodule`` (validation and test splits): a
    classifier's temperature (:func:`fit_temperature_figures`), a regression's ``conformal`` intervals
    (:func:`fit_intervals`), ``{"conformal": {"skipped": why}}`` for named outputs without a target in their
    units (a survival risk), else nothing. ``held_out``: ``(outputs (N, K), targets (N, K), described)`` to fit a
    regression's intervals on instead of the model's validation split (:mod:`hub.uncertainty.cross_conformal`)."""
    from hub.tasks import ClassificationTask

    classifier = isinstance(task, ClassificationTask)
    if not classifier and not datamodule.output_names:
        return {}
    model = model.to(device).eval()
    if held_out is not None and classifier:
        raise HubError("cross-fitted residuals calibrate a regression's intervals, not a classifier's temperature")
    if held_out is not None:
        val_out, val_y = held_out[:2]
    else:
        val_out, _, val_y = model_outputs(model, datamodule.val_dataloader(), "val", progress,
                                          task if classifier else None, device)
    test_out, _, test_y = model_outputs(model, datamodule.test_dataloader(), "test", progress,
                                        task if classifier else None, device)
    if classifier:
        return fit_temperature_figures(val_out, val_y, test_out, test_y)
    if val_out.ndim == val_y.ndim + 1 and val_out.shape[-1] == 1:  # (N, 1) outputs of (N,) targets
        val_out, test_out = val_out.squeeze(-1), test_out.squeeze(-1)
    if val_out.shape != val_y.shape:
        return {"conformal": {"skipped": f"outputs of shape {tuple(val_out.shape[1:])} per item against targets of "
                                         f"shape {tuple(val_y.shape[1:])}: not in the targets' units (e.g. a Cox "
                                         "risk against a time and an event), no residual to fit an interval on"}}
    count, missing = len(datamodule.output_names), task.missing_target
    val = output_residuals(val_out, val_y, count, missing)
    test = output_residuals(test_out, test_y, count, missing)
    return {"conformal": fit_intervals(val, test, list(datamodule.output_names), *target_units(datamodule.input_spec),
                                       fitted_on=held_out[2] if held_out else "validation split")}


def with_calibration(card, calibration: dict[str, Any]):
    """``card`` with ``calibration``'s entries set in its ``calibration`` (the others kept)."""
    return dataclasses.replace(card, calibration={**card.calibration, **calibration}, card_dir="")


def fit_run(run_dir: Path, model: torch.nn.Module, datamodule, task, device: str | torch.device = "cpu",
            progress: bool = True) -> dict[str, Any]:
    """The end-of-training step (``trainer.calibrate``): :func:`fit` on the run's data, kept in the run's
    ``card.json`` and, under ``calibration`` or ``intervals``, in its ``metrics.json``; returns what it fitted."""
    from hub.core.cards import read_card, write_card
    from hub.io import atomic_write_bytes

    calibration = fit(model, datamodule, task, device, progress)
    if not calibration:
        return calibration
    write_card(with_calibration(read_card(run_dir / "card.json"), calibration), run_dir / "card.json")
    summary = json.loads((run_dir / "metrics.json").read_text())
    summary["intervals" if "conformal" in calibration else "calibration"] = calibration.get("conformal", calibration)
    atomic_write_bytes(run_dir / "metrics.json", (json.dumps(summary, indent=2) + "\n").encode())
    return calibration


def fit_card(name: str, data_overrides: list[str] | None = None, progress: bool = True) -> dict[str, Any]:
    """:func:`fit` for a run folder or a shipped tag ``name`` on the data its card names, written into its card
    (``card.json``, or the tag's ``<name>.json``; the weights and their sha256 are untouched); returns it."""
    from hub.core.cards import write_card
    from hub.models import load_from_card, model_card
    from hub.names import resolve
    from hub.recipe import card_data
    from hub.tasks import create_task

    ref = resolve(name)
    card = model_card(ref)
    datamodule = card_data(card, data_overrides)
    datamodule.setup("fit")
    task = create_task(datamodule.task, **datamodule.task_args())
    calibration = fit(load_from_card(card), datamodule, task, progress=progress)
    if not calibration:
        raise HubError(f"{name} is neither a classifier nor a model of named outputs; nothing to calibrate")
    path = ref.card_path(card)
    write_card(with_calibration(card, calibration), path)
    return calibration


def interval_columns(card, header: list[str], values: torch.Tensor,
                     level: float | None = None) -> tuple[list[str], torch.Tensor]:
    """``header`` (the K output names) and ``values`` (B, K) with, beside each output, its ``_lower_<level %>``
    and ``_upper_<level %>`` bounds (B, 3K), at ``level`` (default :data:`DEFAULT_LEVEL`) among the card's stored
    levels: each value's half width is its output's at the bin of the value (the card's ``bin_edges``; a card of
    plain split conformal holds one half width per output and no edges); as they are when the card has no
    intervals and no level is asked for."""
    conformal = card.calibration.get("conformal", {})
    if "half_width" not in conformal:
        if level is not None:
            raise HubError(f"{card.name} has no prediction intervals in its card (a classifier, a survival risk, or "
                           "a run trained with trainer.calibrate=false); drop --interval-level")
        return header, values
    level = DEFAULT_LEVEL if level is None else level
    widths = conformal["half_width"].get(_level_key(level))
    if widths is None:
        raise HubError(f"the card of {card.name} holds intervals at levels {sorted(conformal['half_width'])}, "
                       f"not {level:g}")
    widths = [w if isinstance(w, list) else [w] for w in widths]  # per output, per bin
    edges = conformal.get("bin_edges", [[]] * len(widths))
    if len(widths) != values.shape[1]:
        raise HubError(f"the card of {card.name} has interval half widths for {len(widths)} outputs but the model "
                       f"gave {values.shape[1]}; the card does not match its weights")
    if len(edges) != len(widths) or any(len(w) != len(e) + 1 for w, e in zip(widths, edges)):
        raise HubError(f"the card of {card.name} has {[len(w) for w in widths]} interval half widths per output "
                       f"for {[len(e) for e in edges]} bin edges; expected one half width more than edges, per output")
    width = torch.stack([torch.tensor(w, dtype=values.dtype)[
        torch.searchsorted(torch.tensor(e, dtype=values.dtype), values[:, j].contiguous(), right=True)]
        for j, (w, e) in enumerate(zip(widths, edges))], 1)  # (B, K)
    percent = round(100 * level)
    header = [c for name in header for c in (name, f"{name}_lower_{percent}", f"{name}_upper_{percent}")]
    return header, torch.stack([values, values - width, values + width], -1).flatten(1)


def predictor_intervals(card, data, chosen: str, weight: float) -> dict[str, Any] | None:
    """The card's conformal intervals fitted again on the validation residuals of the chosen predictor, when it is
    a regression's baseline or blend and the card has intervals (those were fitted on the model's residuals, while
    ``predict`` centres them on the predictor's values); None otherwise.

    Args:
        card: the run's card (its ``calibration["conformal"]``, its ``input_spec`` for the target's units).
        data: the run's :class:`hub.kinds.PredictorData` (its ``outputs`` where the choice saw one output of several):
            values (N, K) or (N, K, ...) for the card's K outputs, further axes (a forecast's sensors) as more rows,
            and NaN labels (missing readings) left out, as :func:`output_residuals` does for the model's.
        chosen: the chosen predictor.
        weight: its weight on the model's outputs.
    """
    from hub.predictor import blend

    conformal = card.calibration.get("conformal", {})
    if data.task != "regression" or chosen == "model" or "half_width" not in conformal:
        return None
    arrays = data.outputs or {"labels": data.labels, "model": data.model, "baseline": data.baseline}
    count = len(conformal["outputs"])
    pairs = {}
    for split in ("val", "test"):
        labels = np.asarray(arrays["labels"][split], np.float64)
        if (labels.shape[1] if labels.ndim > 1 else 1) != count:
            raise HubError(f"the predictor data of {card.name} has outputs of shape {labels.shape[1:]} per item for "
                           f"the {count} outputs of its intervals {conformal['outputs']}")
        values = blend(np.asarray(arrays["model"][split], np.float64).reshape(labels.shape),
                       np.asarray(arrays["baseline"][split], np.float64).reshape(labels.shape), weight)
        labels, values = (_by_output(torch.from_numpy(v), count).numpy() for v in (labels, values))
        kept = ~np.isnan(labels)  # a NaN label is a missing reading (PredictorData), as the model's fit drops them
        pairs[split] = [(values[kept[:, j], j], np.abs(values[:, j] - labels[:, j])[kept[:, j]]) for j in range(count)]
    return fit_intervals(pairs["val"], pairs["test"], list(conformal["outputs"]), *target_units(card.input_spec),
                         fitted_on=f"validation split, residuals of the predictor ({chosen})")


def fit_predictor_run(run_dir: Path, data, entry: dict[str, Any]) -> dict[str, Any] | None:
    """After a run's predictor is chosen (:func:`hub.predictor.record_predictor`, its ``entry``): the run's intervals
    fitted again on that predictor's residuals (:func:`predictor_intervals`), written to its ``card.json`` and
    ``metrics.json`` (``intervals``); returns them, or None when the model's own intervals stay."""
    from hub.core.cards import read_card, write_card
    from hub.io import atomic_write_bytes

    card = read_card(Path(run_dir) / "card.json")
    conformal = predictor_intervals(card, data, entry["chosen"], entry["weight"])
    if conformal is None:
        return None
    write_card(with_calibration(card, {"conformal": conformal}), Path(run_dir) / "card.json")
    summary = json.loads((Path(run_dir) / "metrics.json").read_text())
    summary["intervals"] = conformal
    atomic_write_bytes(Path(run_dir) / "metrics.json", (json.dumps(summary, indent=2) + "\n").encode())
    return conformal
