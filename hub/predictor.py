"""A run's predictor: the better of its model, the input kind's classical baseline and their blend, chosen on the
validation split alone (never worse there than its best member: the idea of AutoGluon's weighted ensemble, after
Caruana et al., ICML 2004, "Ensemble Selection from Libraries of Models").

The blend is ``w * model + (1 - w) * baseline`` on probabilities (classification), predicted values (regression) or
rank-normalised risks (survival: :func:`rank_scores`, since a network's risk and a Cox model's linear predictor
are on different scales), with one weight ``w`` on the model's output from :data:`WEIGHTS`. ``auto`` keeps the
member with the best validation metric (:func:`selection_metric`: log loss, RMSE, Harrell's C); ties go to the
model, then to the baseline, so a blend is kept only when it is strictly better. A classifier's choice is made on the
log loss of its probabilities, a proper scoring rule, not on accuracy: on the small validation splits of a user's
folder accuracy moves in steps of one item, and one clip of 23 made the baseline win where it then lost by 12
points on new speakers (``benchmarks/results/user_data.md``). The model's probabilities carry its card's
temperature, fitted on the same validation split, which leans the choice slightly towards the model. The test split
is scored afterwards, for the record, and never takes part in the choice.

The input kind supplies what is chosen from (:class:`hub.kinds.PredictorData`, with its
:class:`~hub.kinds.BaselineResult`) and reads its saved baseline back (``InputKind.baseline_outputs``); a fitted
baseline is kept as a skops file (no pickle), loaded only when its sha256 matches the one recorded and every type
it holds is in the kind's explicit allow-list (:func:`load_skops`); a linear or Cox baseline is kept as its fitted
arrays in a safetensors file (:func:`save_arrays`, :func:`load_arrays`), checked the same way.

>>> import numpy as np
>>> labels = np.array([0, 1, 1, 0])
>>> model = np.array([[.9, .1], [.2, .8], [.9, .1], [.8, .2]])  # sure, and wrong once
>>> baseline = np.array([[.6, .4], [.4, .6], [.4, .6], [.6, .4]])  # unsure, and right every time
>>> choice = choose("classification", labels, model, baseline)
>>> choice.chosen, choice.weight, round(choice.validation["baseline"], 3)
('blend', 0.3, 0.511)
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch

from hub.core.weights import read_verified, sha256_bytes
from hub.errors import HubError
from hub.io import atomic_write_bytes

PREDICTORS = ("auto", "model", "baseline", "blend")
WEIGHTS = tuple(i / 10 for i in range(11))  # the blend's weight on the model's output
TASKS = ("classification", "regression", "survival")
# the types of a fitted HistGradientBoosting (classifier or regressor) that skops does not trust by default
# (scikit-learn's estimators, numpy arrays and builtins it does): the allow-list of the kinds that keep one
HIST_GRADIENT_BOOSTING_TYPES = ("sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
                                "functools.partial", "sklearn.utils.validation.check_array")


def selection_metric(task: str) -> tuple[str, bool]:
    """The metric the choice is made on, and whether it is better larger: the log loss for classification (see the
    module's docstring), RMSE for regression, Harrell's C for survival."""
    if task not in TASKS:
        raise HubError(f"unknown predictor task {task!r}; expected one of {list(TASKS)}")
    return {"classification": ("nll", False), "regression": ("rmse", False), "survival": ("cindex", True)}[task]


def scores(task: str, labels, outputs) -> dict[str, float]:
    """Metrics of ``outputs`` against ``labels``: classification (``outputs`` (N, C) probabilities, ``labels`` (N,)
    class indices): ``acc``, ``nll`` (scikit-learn's ``log_loss`` over all C classes, so a class given probability 0
    by a baseline that never saw it scores finitely), and ``auroc`` for two classes or macro ``f1`` for more;
    regression (values (N,) or (N, K, ...)): ``rmse`` and ``mae`` over the labels that are not NaN (NaN: a missing
    reading, as a traffic target's, which the run's masked metrics leave out too; NaN when every label is); survival
    (risks (N,), higher for an earlier event; ``labels`` (N, 2): time and event): ``cindex``, Harrell's C."""
    from sklearn.metrics import f1_score, log_loss, roc_auc_score

    labels, outputs = np.asarray(labels), np.asarray(outputs, dtype=np.float64)
    if selection_metric(task)[0] == "cindex":
        from sksurv.metrics import concordance_index_censored

        return {"cindex": float(concordance_index_censored(labels[:, 1].astype(bool), labels[:, 0].astype(np.float64),
                                                           outputs.reshape(len(labels)))[0])}
    if selection_metric(task)[0] == "rmse":
        labels = labels.reshape(len(labels), -1).astype(np.float64)
        kept = ~np.isnan(labels)  # a NaN label is a missing reading, left out (a NaN output is not: it scores NaN)
        error = outputs.reshape(labels.shape)[kept] - labels[kept]
        if error.size == 0:
            return {"rmse": float("nan"), "mae": float("nan")}
        return {"rmse": float(np.sqrt(np.mean(error ** 2))), "mae": float(np.mean(np.abs(error)))}
    predicted = outputs.argmax(1)
    out = {"acc": float(np.mean(predicted == labels)),
           # rows renormalised first: float32 softmaxes sum to 1 only within rounding, which log_loss warns about
           "nll": float(log_loss(labels, outputs / outputs.sum(1, keepdims=True), labels=np.arange(outputs.shape[1])))}
    if outputs.shape[1] == 2:
        out["auroc"] = float(roc_auc_score(labels, outputs[:, 1])) if len(np.unique(labels)) == 2 else float("nan")
    else:
        out["f1"] = float(f1_score(labels, predicted, average="macro"))
    return out


def rank_scores(values, reference) -> np.ndarray:
    """Each of ``values`` placed among ``reference`` (a member's outputs on the validation split): the empirical
    distribution function at mid-ranks, linear between the reference's distinct values and with exponential tails
    beyond them (scale: the reference's standard deviation), so strictly increasing, in (0, 1). A member's ranking,
    hence its C-index, is unchanged, and risks on different scales can be averaged.

    >>> rank_scores([-1.0, 0.0, 1.0, 1.5, 2.0, 3.0], [0.0, 1.0, 2.0, 2.0]).round(3).tolist()
    [0.037, 0.125, 0.375, 0.562, 0.75, 0.925]
    """
    reference = np.sort(np.asarray(reference, dtype=np.float64).ravel())
    if len(reference) == 0:
        raise HubError("rank scores need at least one reference value")
    points, first = np.unique(reference, return_index=True)
    counts = np.diff(np.append(first, len(reference)))
    mid = (first + counts / 2) / len(reference)  # each distinct value's mid-rank, in (0, 1)
    x = np.asarray(values, dtype=np.float64)
    out = np.interp(x, points, mid)
    scale = float(reference.std()) or 1.0
    low, high = x < points[0], x > points[-1]
    out[low] = mid[0] * np.exp((x[low] - points[0]) / scale)
    out[high] = 1 - (1 - mid[-1]) * np.exp(-(x[high] - points[-1]) / scale)
    return out


def model_outputs(model, dataset, batch_size: int = 256) -> np.ndarray:
    """The run's model's raw outputs (logits, values or risks) on a split's dataset of ``(inputs, target)`` items,
    in its order (inputs: a tensor, or a dict of the model's keyword inputs), as float64."""
    import torch
    from torch.utils.data import DataLoader

    from hub.tasks import call_model

    model.eval()
    with torch.inference_mode():
        outputs = [call_model(model, x).float() for x, _ in DataLoader(dataset, batch_size=batch_size)]
    return torch.cat(outputs).numpy().astype(np.float64)


def probabilities(model, logits) -> np.ndarray:
    """Class probabilities of ``logits`` (N, C) divided by the temperature of the model's card (its calibration, as
    ``predict`` uses it)."""
    card = getattr(model, "pretrained_cfg", None)
    temperature = float(card.calibration.get("temperature", 1.0)) if card is not None else 1.0
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = np.exp(z - z.max(1, keepdims=True))
    return z / z.sum(1, keepdims=True)


def blend(model, baseline, weight: float) -> np.ndarray:
    """``weight * model + (1 - weight) * baseline``."""
    return weight * np.asarray(model, dtype=np.float64) + (1 - weight) * np.asarray(baseline, dtype=np.float64)


@dataclass(frozen=True)
class Choice:
    """The predictor chosen on the validation split: ``chosen`` (model, baseline or blend), ``weight`` (on the
    model's output: 1.0 for the model, 0.0 for the baseline), ``metric`` (the validation metric it was chosen on)
    and ``validation``: that metric for each member (the blend at ``blend_weight``, its best inner weight)."""

    chosen: str
    weight: float
    metric: str
    validation: dict[str, float]
    blend_weight: float


def choose(task: str, labels, model, baseline, asked: str = "auto") -> Choice:
    """Choose among model, baseline and blend from validation data only.

    Args:
        task: ``classification`` (outputs: (N, C) probabilities; labels: class indices) or ``regression``.
        labels: the validation split's labels.
        model: the model's validation outputs.
        baseline: the baseline's validation outputs.
        asked: ``auto`` (the best validation metric; ties to the model, then the baseline), or ``model``,
            ``baseline``, ``blend`` (the blend at its best inner weight, 0.1 to 0.9).
    """
    if asked not in PREDICTORS:
        raise HubError(f"unknown predictor {asked!r}; expected one of {list(PREDICTORS)}")
    name, larger = selection_metric(task)
    model, baseline = np.asarray(model), np.asarray(baseline)
    if model.shape != baseline.shape:
        raise HubError(f"the model's validation outputs have shape {model.shape} but the baseline's {baseline.shape}; "
                       "they cannot be blended")
    value = {w: scores(task, labels, blend(model, baseline, w))[name] for w in WEIGHTS}

    def better(a: float, b: float) -> bool:  # strictly, beyond rounding (a blend of equal outputs ties); NaN is worst
        if np.isnan(a) or np.isnan(b):
            return not np.isnan(a) and np.isnan(b)
        return not np.isclose(a, b, rtol=1e-9, atol=1e-12) and (a > b if larger else a < b)

    inner = [w for w in WEIGHTS if 0 < w < 1]
    best_inner = inner[0]
    for w in sorted(inner, reverse=True):  # ties to the larger weight on the model
        if better(value[w], value[best_inner]) or (not better(value[best_inner], value[w]) and w > best_inner):
            best_inner = w
    validation = {"model": value[1.0], "baseline": value[0.0], "blend": value[best_inner]}
    if asked == "auto":
        chosen = "model"
        for member in ("baseline", "blend"):
            if better(validation[member], validation[chosen]):
                chosen = member
    else:
        chosen = asked
    weight = {"model": 1.0, "baseline": 0.0, "blend": best_inner}[chosen]
    return Choice(chosen, weight, f"val/{name}", validation, best_inner)


def predictor_entry(data, asked: str = "auto") -> dict[str, Any]:
    """``metrics.json``'s ``predictor``: the :class:`Choice` made on ``data``'s validation split (``asked``,
    ``chosen``, ``weight``, ``metric``, ``validation``, ``blend_weight``), then ``test``: the test metrics
    (``test/acc``, ...) of each member and of the chosen predictor.

    Args:
        data: a :class:`hub.kinds.PredictorData`.
        asked: one of :data:`PREDICTORS`.
    """
    choice = choose(data.task, data.labels["val"], data.model["val"], data.baseline["val"], asked)
    members = {"model": 1.0, "baseline": 0.0, "blend": choice.blend_weight, "chosen": choice.weight}
    test = {member: {f"test/{k}": v for k, v in scores(data.task, data.labels["test"],
                                                       blend(data.model["test"], data.baseline["test"], w)).items()}
            for member, w in members.items()}
    entry = {"asked": asked, **dataclasses.asdict(choice), "test": test}
    shift = getattr(data, "shift", None)
    if shift is not None:
        entry["guard"] = guard_entry(data.task, shift, choice.weight)
    return entry


def guard_entry(task: str, shift: dict[str, Any], weight: float) -> dict[str, Any] | None:
    """The member that answers the rows ``predict`` flags out of distribution, from held-out near-shift evidence
    built from the training data (``shift``: ``labels``, ``model``, ``baseline`` outputs on it, ``how`` it was
    built): of the weights on the model (:data:`WEIGHTS`) below the chosen predictor's ``weight`` (towards the
    baseline, the classic member: the issue's rule, and a guard never hands rows to a network that merely varies
    less), the one with the best metric there, when it is strictly better there than the chosen predictor (else
    None: flagged rows keep the chosen predictor; a chosen baseline has none). Returns
    ``weight``, ``member`` (model, baseline or blend), ``metric``, ``shift`` (that metric of the chosen predictor
    and of the guard on the near shift) and ``how``."""
    name, larger = selection_metric(task)
    toward = [w for w in WEIGHTS if w < weight]  # only towards the baseline: the classic member is the guard
    if not toward:
        return None
    value = {w: scores(task, shift["labels"], blend(shift["model"], shift["baseline"], w))[name]
             for w in (*toward, weight)}
    best = (max if larger else min)(toward, key=lambda w: (value[w] if not np.isnan(value[w]) else
                                                             (-np.inf if larger else np.inf)))
    if np.isclose(value[best], value[weight], rtol=1e-9, atol=1e-12) or not (
            value[best] > value[weight] if larger else value[best] < value[weight]):
        return None
    member = "model" if best == 1.0 else "baseline" if best == 0.0 else "blend"
    return {"weight": best, "member": member, "metric": f"shift/{name}",
            "shift": {"chosen": value[weight], "guard": value[best]}, "how": shift["how"]}


def member_name(weight: float) -> str:
    """The predictor at ``weight`` on the model, as ``predict``'s ``predictor`` column names it: ``model``,
    ``baseline`` or ``blend (w=0.7)``."""
    return "model" if weight == 1.0 else "baseline" if weight == 0.0 else f"blend (w={weight:g})"


def record_predictor(run_dir: Path, name: str, data, asked: str = "auto") -> dict[str, Any]:
    """Choose the run's predictor (:func:`predictor_entry`), save the fitted baseline into the run folder
    (``data.save``) and keep the choice with the file's name and sha256 under ``predictor`` in ``metrics.json`` and
    in the run's card (what ``predict`` follows). Returns that entry.

    Args:
        run_dir: the finished run folder.
        name: the baseline's name (e.g. HistGradientBoosting).
        data: the :class:`hub.kinds.PredictorData` of the run's baseline.
        asked: one of :data:`PREDICTORS`.
    """
    from hub.core.cards import read_card, write_card

    run_dir = Path(run_dir)
    entry = predictor_entry(data, asked)
    path = Path(data.save(run_dir))
    entry["baseline"] = {"name": name, "file": path.name, "sha256": sha256_bytes(path.read_bytes())}
    summary = json.loads((run_dir / "metrics.json").read_text())
    summary["predictor"] = entry
    atomic_write_bytes(run_dir / "metrics.json", (json.dumps(summary, indent=2) + "\n").encode())
    card = read_card(run_dir / "card.json")
    write_card(dataclasses.replace(card, predictor=entry, card_dir=""), run_dir / "card.json")
    return entry


def format_predictor(entry: dict[str, Any]) -> str:
    """One line: the chosen predictor, the validation metric of each member, and the chosen one's test metrics."""
    metric = entry["metric"]
    members = ", ".join(f"{m} {v:.4f}" if m != "blend" else f"blend (w={entry['blend_weight']:g}) {v:.4f}"
                        for m, v in entry["validation"].items())
    chosen = entry["chosen"] + (f" (w={entry['weight']:g} on the model)" if entry["chosen"] == "blend" else "")
    test = ", ".join(f"{k} {v:.4f}" for k, v in entry["test"]["chosen"].items())
    guard = entry.get("guard")
    guarded = "" if not guard else (
        f"; rows flagged out of distribution: {member_name(guard['weight'])} ({guard['metric']} "
        f"{guard['shift']['guard']:.4f} against {guard['shift']['chosen']:.4f} on a near shift of validation)")
    return (f"predictor: {chosen}, chosen on the validation split ({metric}: {members}); its test metrics: {test}; "
            f"predict follows it{guarded}")


def blend_of(card) -> tuple[float, Path, str] | None:
    """``(weight on the model, baseline file, its sha256)`` when the card's predictor is the baseline or a blend;
    None when it is the model (or the card records no predictor)."""
    entry = getattr(card, "predictor", None) or {}
    if entry.get("chosen", "model") == "model":
        return None
    baseline = entry.get("baseline") or {}
    if not baseline.get("file") or not baseline.get("sha256"):
        raise HubError(f"the card of {card.name} chooses the predictor {entry['chosen']!r} but names no baseline "
                       "file with its sha256")
    path = Path(card.card_dir or ".") / baseline["file"]
    if not path.is_file():
        raise HubError(f"{path} is missing: the card of {card.name} predicts with its baseline "
                       f"({entry['chosen']}), kept in that file")
    return float(entry["weight"]), path, baseline["sha256"]


class PredictorModule(torch.nn.Module):
    """A baseline or blend predictor as one module taking the model's input, for ``export``: ``weight`` times the
    model's outputs (a classifier's as the class probabilities of ``logits / temperature``, as ``predict`` gives
    them) plus ``1 - weight`` times the ``baseline`` module's.

    Args:
        model: the run's network.
        baseline: its input kind's ``baseline_module`` of the card.
        weight: the predictor's weight on the model (0 for the baseline alone).
        temperature: the card's temperature for a classifier; None for a model of values.
    """

    def __init__(self, model: torch.nn.Module, baseline: torch.nn.Module, weight: float, temperature: float | None):
        super().__init__()
        self.model, self.baseline, self.weight, self.temperature = model, baseline, weight, temperature

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x``: the model's one input tensor (a kind whose baseline exports reads that same input)."""
        theirs = self.baseline(x)
        if self.weight == 0:
            return theirs
        ours = self.model(x)
        ours = ours if self.temperature is None else (ours / self.temperature).softmax(-1)
        return self.weight * ours + (1 - self.weight) * theirs


def predictor_module(model: torch.nn.Module, card) -> torch.nn.Module:
    """The card's predictor as one module for ``export``: the model itself when the predictor is the model, else a
    :class:`PredictorModule` with the baseline from its input kind's ``baseline_module`` (a kind whose baseline has
    none raises, naming it)."""
    from hub.kinds import kind_of

    found = blend_of(card)
    if found is None:
        return model
    temperature = float(card.calibration.get("temperature", 1.0)) if card.label_names else None
    return PredictorModule(model, kind_of(card).baseline_module(card), found[0], temperature).eval()


def save_skops(obj: Any, path: Path) -> Path:
    """Write ``obj`` (a fitted scikit-learn model) as a skops file, atomically; returns ``path``."""
    import skops.io as sio

    atomic_write_bytes(path, sio.dumps(obj))
    return Path(path)


def load_skops(path: Path, sha256: str, trusted: Iterable[str]) -> Any:
    """The object in the skops file at ``path``, after its sha256 is checked (a mismatch names the file and both
    hashes) and every type skops does not trust by default is found in ``trusted``, the kind's explicit
    allow-list; a file holding any other type is refused, naming them. Nothing is unpickled."""
    import skops.io as sio

    data = read_verified(path, sha256)
    key = (sha256, tuple(sorted(trusted)))
    if key in _LOADED:  # these very bytes were checked and loaded before (serve reads the file per request)
        return _LOADED[key]
    try:
        untrusted = sio.get_untrusted_types(data=data)
    except Exception as err:  # a file skops cannot read at all
        raise HubError(f"{path} is not a valid skops file: {err}") from err
    refused = sorted(set(untrusted) - set(trusted))
    if refused:
        raise HubError(f"{path} holds types outside the allow-list of its input kind: {refused}; it is not loaded")
    if len(_LOADED) >= 8:
        _LOADED.clear()
    _LOADED[key] = sio.loads(data, trusted=list(untrusted))
    return _LOADED[key]


_LOADED: dict[tuple[str, tuple[str, ...]], Any] = {}  # load_skops's objects by their file's sha256 and allow-list


def save_arrays(arrays: dict[str, Any], path: Path) -> Path:
    """Write a fitted baseline's arrays (a linear or Cox model's coefficients, ...) as a safetensors file,
    atomically; returns ``path``."""
    from safetensors.numpy import save

    atomic_write_bytes(path, save({k: np.ascontiguousarray(v) for k, v in arrays.items()}))
    return Path(path)


def load_arrays(path: Path, sha256: str, names: Iterable[str]) -> dict[str, np.ndarray]:
    """The arrays of the safetensors file at ``path``, after its sha256 is checked (a mismatch names the file and
    both hashes); a file that is not safetensors, or lacks one of ``names``, is refused."""
    from safetensors.numpy import load

    data = read_verified(path, sha256)
    try:
        arrays = load(data)
    except Exception as err:  # safetensors raises its own SafetensorError on a bad header
        raise HubError(f"{path} is not a valid safetensors file: {err}") from err
    missing = sorted(set(names) - set(arrays))
    if missing:
        raise HubError(f"{path} lacks the arrays {missing} of its baseline (it holds {sorted(arrays)})")
    return arrays
