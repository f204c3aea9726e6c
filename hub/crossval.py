"""Choosing a run's predictor by k-fold cross-validation on small data, then refitting the choice on every labelled
item: AutoGluon's bagging and ``refit_full``, scikit-learn's ``cross_val_predict``.

Below :data:`CV_BELOW` labelled items (outside a test split the user keeps), one validation split is too small to
choose on: on 60 rows of a survival table it picked a model that then lost to CoxPH on its own test split and on
new rows (issue 68). There, ``finetune`` splits the labelled items that are not test into :data:`CV_FOLDS` folds
(:func:`fold_indices`: stratified by class, or by the event of a survival table; grouped where the data has groups:
a unit, a recording, a speaker, a patient), fits every member (the model and each baseline) on k-1 folds and
predicts the fold left out (:func:`out_of_fold`), and chooses among the model, the best baseline and their blend
on those out-of-fold predictions of every labelled item (:func:`cv_entry`, with :func:`hub.predictor.choose`'s
rule). It reports the cross-validated estimate as the mean ± std of the chosen predictor's metric over the folds,
beside the figure on the test split, which took no part; then the chosen members are fitted again on every
labelled item, test included, and those are the weights ``predict``, ``serve`` and ``export`` use.

A class with fewer labelled items than there are folds stays in training: it is validated in as many folds as it
has items and trained on in the others, with a WARNING naming it (:func:`fold_indices`); it is never dropped.

>>> labels = np.array([0] * 6 + [1] * 6 + [2])
>>> said = []
>>> found = fold_indices("classification", labels, k=3, label_names=["a", "b", "c"], warn=said.append)
>>> said[0][:62]
"class(es) 'c' (1 labelled item) have fewer labelled items than"
>>> [len(val) for _, val in found]
[5, 4, 4]
"""
from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from hub.errors import HubError
from hub.predictor import blend, choose, scores, selection_metric

CV_BELOW = 5000  # labelled items (test split aside) below which finetune chooses by cross-validation
CV_FOLDS = 5  # the folds of that choice (k); --cv-folds changes it, 0 turns the choice by folds off


def fold_indices(task: str, labels, groups: Sequence | None = None, k: int = CV_FOLDS, seed: int = 0,
                 label_names: Sequence[str] | None = None,
                 warn: Callable[[str], None] | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """The ``(train, val)`` index arrays of ``k`` folds of the items with ``labels``: scikit-learn's
    ``StratifiedKFold`` (classification: by class; survival: by event), ``StratifiedGroupKFold`` where ``groups``
    are given (no group is split between training and validation), ``KFold`` / ``GroupKFold`` for a regression.
    Fewer groups than ``k`` lower ``k`` to their number, saying so.

    Args:
        task: ``classification`` (labels: class indices), ``regression`` (values) or ``survival`` ((N, 2): time,
            event).
        labels: the items' labels, (N,) or (N, 2) for survival.
        groups: the items' group (unit, recording, speaker, patient), or None.
        k: the number of folds, at least 2.
        seed: the shuffle's seed (the same seed gives the same folds).
        label_names: class names, to name a rare class in the warning.
        warn: called with each warning (default: this module's logger, at WARNING, which the CLI shows).
    """
    from sklearn.model_selection import GroupKFold, KFold, StratifiedGroupKFold, StratifiedKFold

    selection_metric(task)  # checks the task
    warn = warn or logging.getLogger(__name__).warning
    labels = np.asarray(labels)
    n = len(labels)
    if k < 2:
        raise HubError(f"cross-validation needs at least 2 folds, got {k}")
    if n < 2:
        raise HubError(f"cross-validation needs at least 2 labelled items, got {n}")
    if groups is not None:
        distinct = len(set(np.asarray(groups).tolist()))
        if distinct < 2:
            raise HubError(f"cross-validation by groups needs at least 2 groups, got {distinct}")
        if distinct < k:
            warn(f"{distinct} groups, fewer than the {k} folds asked: {distinct} folds, one group each")
            k = distinct
    k = min(k, n)
    strata = None if task == "regression" else (labels if task == "classification" else labels[:, 1]).astype(int)
    if strata is not None:
        values, counts = np.unique(strata, return_counts=True)
        rare = [(v, c) for v, c in zip(values, counts) if c < k]
        if rare and task == "classification":
            names = [repr(str(label_names[v]) if label_names is not None else str(v)) for v, _ in rare]
            said = ", ".join(f"{name} ({c} labelled item{'s' if c > 1 else ''})" for name, (_, c) in zip(names, rare))
            warn(f"class(es) {said} have fewer labelled items than the {k} folds: each stays in training "
                 "and is validated in as many folds as it has items")
        if counts.max() < k:  # no stratum fills every fold: stratifying cannot work
            strata = None
    if strata is None:
        splitter = KFold(k, shuffle=True, random_state=seed) if groups is None else GroupKFold(k)
        found = splitter.split(np.zeros(n), groups=groups)
    else:
        splitter = (StratifiedKFold(k, shuffle=True, random_state=seed) if groups is None
                    else StratifiedGroupKFold(k, shuffle=True, random_state=seed))
        with warnings.catch_warnings():  # scikit-learn's own warning on a rare class: said above, by name
            warnings.simplefilter("ignore", UserWarning)
            found = list(splitter.split(np.zeros(n), strata, groups))
    return [(np.asarray(train), np.asarray(val)) for train, val in found]


def out_of_fold(fit_predict: Callable[[np.ndarray, np.ndarray], Any],
                folds: Sequence[tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Every item's prediction from the fit that did not see it, as scikit-learn's ``cross_val_predict`` for any
    member: ``fit_predict(train, val)`` fits on the items ``train`` and returns its outputs for ``val`` ((len(val),
    ...) in that order). Shapes: -> (N, ...) in the items' order."""
    n = sum(len(val) for _, val in folds)
    out = None
    for train, val in folds:
        predicted = np.asarray(fit_predict(train, val), dtype=np.float64)
        if out is None:
            out = np.full((n, *predicted.shape[1:]), np.nan)
        out[val] = predicted
    return out


def cv_entry(task: str, labels, folds: Sequence[tuple[np.ndarray, np.ndarray]], model, baselines: dict[str, Any],
             asked: str = "auto") -> dict[str, Any]:
    """The predictor chosen on out-of-fold outputs: the baseline with the best out-of-fold metric among
    ``baselines``, then :func:`hub.predictor.choose` among the model, that baseline and their blend (on every
    labelled item, pooled). ``cv`` holds each member's mean and std of the metric over the folds (the
    cross-validated estimate) and every baseline's pooled metric.

    Args:
        task: as :func:`fold_indices`.
        labels: the labels of the items folded, (N,) or (N, 2).
        folds: :func:`fold_indices`'s folds of them.
        model: the model's out-of-fold outputs (probabilities, values, risks), (N, ...).
        baselines: each baseline's out-of-fold outputs, by name.
        asked: one of :data:`hub.predictor.PREDICTORS`.

    Returns:
        ``asked``, ``chosen``, ``weight``, ``metric``, ``validation`` (pooled out-of-fold metric of model, baseline,
        blend), ``blend_weight``, ``baseline_name`` (the best baseline), ``baselines`` (each one's pooled metric),
        ``cv`` ({member: {"mean", "std"}} over the folds, with ``chosen``), ``folds`` and ``items``.
    """
    if not baselines:
        raise HubError("cross-validated choice needs at least one baseline")
    name, larger = selection_metric(task)
    labels = np.asarray(labels)
    pooled = {b: scores(task, labels, out)[name] for b, out in baselines.items()}
    ranked = sorted(pooled, key=lambda b: (np.isnan(pooled[b]), -pooled[b] if larger else pooled[b]))
    best = ranked[0]
    choice = choose(task, labels, model, baselines[best], asked)
    weights = {"model": 1.0, "baseline": 0.0, "blend": choice.blend_weight, "chosen": choice.weight}
    per_fold = {m: [scores(task, labels[val], blend(np.asarray(model)[val], np.asarray(baselines[best])[val], w))[name]
                    for _, val in folds] for m, w in weights.items()}
    for b, out in baselines.items():
        per_fold[b] = [scores(task, labels[val], np.asarray(out)[val])[name] for _, val in folds]
    cv = {m: {"mean": float(np.nanmean(v)), "std": float(np.nanstd(v))} for m, v in per_fold.items()}
    return {"asked": asked, "chosen": choice.chosen, "weight": choice.weight, "metric": f"cv/{name}",
            "validation": choice.validation, "blend_weight": choice.blend_weight, "baseline_name": best,
            "baselines": pooled, "cv": cv, "folds": len(folds), "items": int(len(labels))}


def format_cv(entry: dict[str, Any], test: dict[str, float] | None = None) -> str:
    """One line: the member chosen by cross-validation and its estimate ± std, each member's, and beside them the
    chosen predictor's held-out test metrics where a test split is kept."""
    metric = entry["metric"].split("/", 1)[1]
    cv = entry["cv"]
    chosen = entry["chosen"] + (f" (w={entry['weight']:g} on the model)" if entry["chosen"] == "blend" else "")
    members = ", ".join(f"{m} {cv[m]['mean']:.4f} ± {cv[m]['std']:.4f}" for m in ("model", "blend")
                        ) + "; baselines: " + ", ".join(f"{b} {cv[b]['mean']:.4f} ± {cv[b]['std']:.4f}"
                                                        for b in entry["baselines"])
    line = (f"predictor: {chosen} (baseline: {entry['baseline_name']}), chosen by {entry['folds']}-fold "
            f"cross-validation on {entry['items']} labelled items: {metric} {cv['chosen']['mean']:.4f} ± "
            f"{cv['chosen']['std']:.4f} (cross-validated; {members})")
    if test:
        line += "; held-out test split: " + ", ".join(f"{k} {v:.4f}" for k, v in test.items())
    return line + "; refitted on every labelled item, which predict uses"


def cv_budget_line(k: int, items: int, minutes: float | None) -> str:
    """The budget of the choice by folds, said before it starts: k fold runs of the model and a refit, each within
    ``minutes`` (None: no limit)."""
    each = f"at most {minutes:g} minutes each" if minutes is not None else "no time limit"
    return (f"cross-validated choice ({items} labelled items, below {CV_BELOW}): {k} fold runs of the model and one "
            f"refit on every labelled item, {each}; --cv-folds 0 turns it off")

