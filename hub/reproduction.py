"""One-command reproduction: retrain a pretrained tag from the recipe on its card and compare with the card (and, for a
card that predicts with its baseline or a blend, the predictor chosen again on the new run).

``reproduce("vit_digits.sklearn")`` (``attnhub reproduce vit_digits.sklearn``) trains the card's recipe file with the
card's overrides, for the card's first seed (``seeds=[0, 1, 2]`` for more), then puts each new test metric beside
the card's mean ± std over seeds: a metric is *within* when it lies within 2 std of the card's mean, or, when the
card has one seed or a std of 0, within an absolute tolerance (:data:`ABSOLUTE_TOLERANCE`, said in the report).

The recipe file is the card's ``recipe.path``, relative to the repository: looked up in the working folder, then in
the repository the package is installed from; when it is in neither, the card's ``recipe.resolved`` (the complete
validated recipe) is trained instead, and the report says so. Runs go under ``./runs`` or ``output_dir``; the
report is written as ``reproduce.json`` in the first new run folder.

This module imports only light modules at import time (``import hub`` imports it): training is imported when used.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from hub.core.cards import DATA_ELSEWHERE, REPO_ROOT, atomic_write_bytes
from hub.errors import HubError
from hub.names import ModelRef, resolve

ABSOLUTE_TOLERANCE = 0.01  # allowed |new - card mean| of a metric whose card has n=1 or std 0
REPORT_FILE = "reproduce.json"


def verdict(value: float, mean: float, std: float, n: int, tolerance: float = ABSOLUTE_TOLERANCE) -> dict[str, Any]:
    """Whether a new metric ``value`` reproduces a card's ``mean ± std`` over ``n`` seeds.

    Within when ``|value - mean| <= 2 * std``; when the card has ``n == 1`` or ``std == 0`` its std says nothing
    about the spread over seeds, so ``|value - mean| <= tolerance`` instead. A value on the bound is within (floating
    point rounding aside); a NaN value never is.
    Returns ``{"within", "difference", "allowed", "rule"}`` (``rule`` says which test was applied, in words).
    """
    if n > 1 and std > 0:
        allowed, rule = 2 * std, "2 std of the card"
    else:
        why = "one seed (n=1)" if n <= 1 else "std 0"
        allowed, rule = tolerance, f"absolute tolerance {tolerance:g}, as the card has {why}"
    difference = abs(value - mean)
    within = difference <= allowed or math.isclose(difference, allowed)  # on the bound is within, rounding aside
    return {"within": bool(within), "difference": difference, "allowed": allowed, "rule": rule}


def parse_seeds(text: str) -> list[int]:
    """``"1,2,3"`` -> ``[1, 2, 3]``; anything else is an error naming the expected form."""
    try:
        seeds = [int(part) for part in text.split(",")]
    except ValueError:
        raise HubError(f"--seeds takes whole numbers separated by commas, e.g. 1,2,3; got {text!r}") from None
    if len(set(seeds)) != len(seeds):
        raise HubError(f"--seeds names a seed twice: {text!r}")
    return seeds


def locate_recipe(card) -> tuple[Path | None, str]:
    """The card's recipe file and a note saying where it was found: ``recipe.path`` under the working folder,
    else under the repository the package is installed from; ``(None, note)`` when it is in neither and the card
    holds a complete ``recipe.resolved`` to train instead. A card with neither is an error."""
    recipe = card.recipe
    relative = recipe.get("path")
    if relative:
        for base, where in ((Path.cwd(), "the working folder"), (REPO_ROOT, "the installed repository")):
            if (base / relative).is_file():
                return base / relative, f"recipe file {relative} (from {where})"
    if not recipe.get("resolved"):
        raise HubError(f"the card of {card.name} holds no recipe to reproduce: its recipe file "
                       f"{relative or '(none named)'} is not here and it has no resolved recipe")
    where = (f"recipe file {relative} is neither in the working folder nor in the installed repository" if relative
             else "the card names no recipe file")
    return None, f"{where}: trained the card's resolved recipe"


def run_overrides(card, seed: int, overrides: list[str], output_dir: str) -> list[str]:
    """The overrides of one run: the card's (less its seed), this seed, the user's, then the output folder."""
    how = {"seed": "--seeds 1,2,3 (seeds=[1, 2, 3] in Python)", "output_dir": "--output-dir DIR (output_dir=DIR)"}
    for item in overrides:
        key = item.partition("=")[0].strip()
        if key in how:
            raise HubError(f"override {item!r}: give the {key} with {how[key]}, not as a key=value override")
    card_overrides = [o for o in card.recipe.get("overrides", []) if o.partition("=")[0].strip() not in how]
    return [*card_overrides, f"seed={seed}", *overrides, f"output_dir={output_dir}"]


def check_data_given(card, overrides: list[str]) -> None:
    """Refuse, before any training, a card whose data path stands for folders of its publisher's machine
    (``<data>/NAME``: a fine-tune on the publisher's own data, :func:`hub.core.cards.portable_data_path`) when the
    user's ``overrides`` do not give that key a path of theirs."""
    given = {item.partition("=")[0].strip() for item in overrides}
    args = (card.recipe.get("resolved") or {}).get("data", {}).get("args", {})
    recorded = {f"data.args.{k}": v for k, v in args.items()}
    recorded.update(item.split("=", 1) for item in card.recipe.get("overrides", []) if "=" in item)
    for key, value in recorded.items():
        if isinstance(value, str) and value.startswith(DATA_ELSEWHERE) and key not in given:
            raise HubError(f"the card of {card.name} was trained on its publisher's own data ({key}={value}); "
                           f"give your copy of it: attnhub reproduce {card.name} {key}=PATH")


def _train_one(card, recipe_path: Path | None, overrides: list[str], progress: bool) -> Path:
    from hub.recipe import apply_overrides, validate_recipe
    from hub.run.train import train

    if recipe_path is not None:
        return train(str(recipe_path), overrides, progress=progress)
    recipe = validate_recipe(apply_overrides(card.recipe["resolved"], overrides), f"the resolved recipe of {card.name}")
    return train(recipe=recipe, progress=progress)


def _spread(values: list[float]) -> dict[str, Any]:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values), "values": values}


def _chosen_by_folds(card) -> bool:
    """Whether the card's predictor was chosen by cross-validation and refitted on every labelled item
    (:func:`hub.finetune.choose_by_folds`): its recipe reproduces the refit's weights, but its predictor's test
    figures were scored before the refit, by members that did not see the test split; the refit's own test split is
    in-sample, so a predictor chosen again on it would not compare. ``reproduce`` compares the model's metrics then,
    and says so."""
    return (getattr(card, "predictor", None) or {}).get("selection") == "cross-validation"


def refit_predictor(card, run_dir: Path) -> dict[str, Any] | None:
    """For a card whose predictor was chosen among its model, the input kind's baseline and their blend
    (:mod:`hub.predictor`, a published fine-tune): the baseline fitted again on the new run's split and the predictor
    chosen again as the card's was asked (``auto``, ``baseline``, ...); returns ``{"chosen", "weight", "test"}`` (the
    chosen predictor's test metrics), or None for a card without a predictor.

    Args:
        card: the card being reproduced.
        run_dir: the new run folder.
    """
    asked = (getattr(card, "predictor", None) or {}).get("asked")
    if asked is None or _chosen_by_folds(card):
        return None
    from hub.kinds import baseline
    from hub.models import model_card
    from hub.predictor import record_predictor
    from hub.uncertainty.conformal import fit_predictor_run

    result = baseline(model_card(run_dir), run_dir)
    if result is None or result.predictor is None:
        raise HubError(f"the card of {card.name} predicts with {card.predictor['chosen']!r}, but the input kind of the "
                       f"new run {run_dir} fitted no baseline that predicts")
    entry = record_predictor(run_dir, result.name, result.predictor, asked)
    fit_predictor_run(run_dir, result.predictor, entry)
    return {"chosen": entry["chosen"], "weight": entry["weight"], "test": entry["test"]["chosen"]}


def compare_predictor(card, runs: list[dict[str, Any]], tolerance: float = ABSOLUTE_TOLERANCE
                      ) -> dict[str, dict[str, Any]]:
    """Per test metric of the card's chosen predictor (one run's figures: compared within ``tolerance``), the new
    runs' (their mean over seeds) and the :func:`verdict`; keys are prefixed ``predictor:``. Empty for a card without
    a predictor, or one chosen by cross-validation (:func:`_chosen_by_folds`)."""
    entry = getattr(card, "predictor", None) or {}
    chosen = {} if _chosen_by_folds(card) else (entry.get("test") or {}).get("chosen", {})
    out = {}
    for key, value in chosen.items():
        new = _spread([run["predictor"]["test"][key] for run in runs])
        out[f"predictor:{key}"] = {"card": {"mean": value, "std": 0.0, "n": 1}, "new": new,
                                   **verdict(new["mean"], value, 0.0, 1, tolerance)}
    return out


def compare(card_metrics: dict[str, Any], runs: list[dict[str, Any]],
            tolerance: float = ABSOLUTE_TOLERANCE) -> dict[str, dict[str, Any]]:
    """Per test metric of the card: the card's figures, the new runs' (their mean ± std over seeds) and the
    :func:`verdict` of the new mean. A metric the new runs lack is not within."""
    out = {}
    for key, figures in card_metrics.items():
        if not key.startswith("test/"):
            continue
        card = {k: figures[k] for k in ("mean", "std", "n")}
        values = [run["test"][key] for run in runs if key in run["test"]]
        if len(values) < len(runs):
            out[key] = {"card": card, "new": None, "within": False, "difference": None, "allowed": None,
                        "rule": "missing from the new runs' test metrics"}
            continue
        new = _spread(values)
        out[key] = {"card": card, "new": new, **verdict(new["mean"], card["mean"], card["std"], card["n"], tolerance)}
    return out


def reproduce(name: str | ModelRef, seeds: list[int] | None = None, overrides: list[str] | None = None,
              output_dir: str | None = None, tolerance: float = ABSOLUTE_TOLERANCE,
              progress: bool = True) -> dict[str, Any]:
    """Retrain pretrained tag ``name`` from its card's recipe and compare the test metrics with the card's.

    ``seeds`` default to the card's first seed; ``overrides`` (``key.path=value``) apply after the card's;
    runs go under ``output_dir`` (default ``./runs``). Returns the report (also written as ``reproduce.json`` in
    the first new run folder, whose path is the report's ``report_file``; there each ``run_dir`` is relative to
    the output folder)::

        {"name", "recipe": {"path", "source": "file" | "resolved", "note"}, "seeds", "card_seeds", "overrides",
         "tolerance", "card_predictor" (the card's chosen predictor, or None), "cross_validated" (whether it was
         chosen by cross-validation and refitted: then not chosen again),
         "runs": [{"seed", "run_dir", "test": {metric: value}[, "predictor": {"chosen", "weight", "test"}]}],
         "metrics": {metric: {"card": {"mean", "std", "n"}, "new": {"mean", "std", "n", "values"},
                              "within", "difference", "allowed", "rule"}},

    A card whose predictor was chosen among model, baseline and blend (a published fine-tune) has its baseline
    fitted again on each new run and its predictor chosen again (:func:`refit_predictor`); the chosen predictor's
    test metrics are compared too, as ``predictor:test/...`` (:func:`compare_predictor`).
         "all_within", "report_file"}
    """
    from hub.core.registry import model_card

    ref = resolve(name)
    card = model_card(ref)
    card_seeds = list(card.recipe.get("seeds") or [card.recipe.get("resolved", {}).get("seed", 0)])
    seeds = list(seeds) if seeds else card_seeds[:1]
    overrides = list(overrides or [])
    output_dir = output_dir or "runs"  # never a folder named by the card (its publisher's machine)
    recipe_path, note = locate_recipe(card)
    check_data_given(card, overrides)
    runs = []
    for seed in seeds:
        run_dir = _train_one(card, recipe_path, run_overrides(card, seed, overrides, output_dir), progress)
        test = json.loads((run_dir / "metrics.json").read_text())["test"]
        predictor = refit_predictor(card, run_dir)
        runs.append({"seed": seed, "run_dir": str(run_dir), "test": test,
                     **({"predictor": predictor} if predictor else {})})
    metrics = {**compare(card.metrics, runs, tolerance), **compare_predictor(card, runs, tolerance)}
    report = {
        "name": ref.name,
        "recipe": {"path": card.recipe.get("path"), "source": "file" if recipe_path else "resolved",
                   "note": note},
        "seeds": seeds, "card_seeds": card_seeds, "overrides": overrides, "tolerance": tolerance,
        "runs": runs, "metrics": metrics, "all_within": all(m["within"] for m in metrics.values()),
        "card_predictor": (getattr(card, "predictor", None) or {}).get("chosen"),
        "cross_validated": _chosen_by_folds(card),
    }
    report_file = Path(runs[0]["run_dir"]) / REPORT_FILE
    # the file holds no path of this machine: its run folders are relative to the output folder
    portable = {**report, "runs": [{**run, "run_dir": Path(run["run_dir"]).relative_to(output_dir).as_posix()}
                                   for run in runs]}
    atomic_write_bytes(report_file, (json.dumps(portable, indent=2) + "\n").encode())
    return {**report, "report_file": str(report_file)}


def format_report(report: dict[str, Any]) -> str:
    """The report as text: what was trained, one line per test metric (card, new, verdict), where the file is."""
    seeds, card_seeds = report["seeds"], report["card_seeds"]
    lines = [f"reproducing {report['name']}: {report['recipe']['note']}",
             f"overrides: {' '.join(report['overrides']) or '(none)'}; seeds: {','.join(map(str, seeds))}"]
    if len(seeds) == 1 and len(card_seeds) > 1:
        lines.append(f"  (one seed; the card has {len(card_seeds)}: --seeds {','.join(map(str, card_seeds))} runs "
                     "them all)")
    rows = [("metric", "card mean ± std (n)", "new", "verdict")]
    for key, m in report["metrics"].items():
        card = f"{m['card']['mean']:.4f} ± {m['card']['std']:.4f} (n={m['card']['n']})"
        if m["new"] is None:
            rows.append((key, card, "-", f"MISSING: {m['rule']}"))
            continue
        new = f"{m['new']['mean']:.4f}" + (f" ± {m['new']['std']:.4f} (n={m['new']['n']})" if m["new"]["n"] > 1 else "")
        word = "within" if m["within"] else "NOT within"
        rows.append((key, card, new, f"{word}: |new - card| {m['difference']:.4f}, allowed {m['allowed']:.4f} "
                                     f"({m['rule']})"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines += ["  ".join([*(c.ljust(w) for c, w in zip(row[:3], widths)), row[3]]) for row in rows]
    within = sum(m["within"] for m in report["metrics"].values())
    lines.append(f"{within}/{len(report['metrics'])} test metrics reproduced"
                 + ("" if len(seeds) == 1 else " (the new mean over seeds is compared)"))
    chosen = [run["predictor"]["chosen"] for run in report["runs"] if "predictor" in run]
    if report.get("cross_validated"):
        lines.append(f"predictor: {report['card_predictor']}, chosen by cross-validation before the refit (the card's "
                     "'cv' and 'test' figures); its folds are not run again, and the refit's own test split is "
                     "in-sample, so the model's metrics above are what is compared")
    if chosen:
        lines.append(f"predictor chosen again on the new run(s): {', '.join(chosen)} (the card's: "
                     f"{report['card_predictor']})")
    lines.append(f"runs: {', '.join(run['run_dir'] for run in report['runs'])}")
    lines.append(f"report: {report['report_file']}")
    return "\n".join(lines)
