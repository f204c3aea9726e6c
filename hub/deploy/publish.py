"""Publishing: run folders of one recipe (several seeds) become shipped weights plus a model card.

The weights (and the OOD statistics' sidecar, :mod:`hub.uncertainty.ood`, and the fitted baseline of the card's
predictor, :mod:`hub.predictor`, as ``<tag>.baseline.skops`` with its sha256) are the first run's best checkpoint's; the
card's metrics are the mean and std of the test metrics over all the runs, so every shipped weight is reproducible from
its recipe. Seeds run
later join a published card with ``add_seeds`` (``attnhub publish RUN... --name NAME --add-seeds``).
A published card holds no path of the machine that trained it: its recipe names the recipe file (relative) and
the overrides, not the run's output folder, and a card with any other absolute path is refused.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import statistics
from pathlib import Path

from pydantic import ValidationError

from hub.core.cards import absolute_paths, portable_recipe, read_card, write_card
from hub.core.registry import get_model_entry
from hub.core.weights import read_verified
from hub.errors import HubError
from hub.io import atomic_write_bytes
from hub.names import RefKind, resolve
from hub.recipe import Recipe
from hub.uncertainty.ood import sidecar_name


def _read_runs(runs: list[str]) -> tuple[list, list[dict]]:
    cards, summaries = [], []
    for run in runs:
        run_dir = Path(run)
        if not (run_dir / "card.json").is_file():
            raise HubError(f"{run_dir} is not a finished run folder (no card.json)")
        cards.append(read_card(run_dir / "card.json"))
        summaries.append(json.loads((run_dir / "metrics.json").read_text()))
    return cards, summaries


def _comparable(resolved: dict) -> dict:
    """A resolved recipe with the schema's defaults filled in (a key the schema gained after the recipe ran
    compares equal to its default), less the seed and the output folder."""
    try:
        full = Recipe.model_validate(resolved).to_dict()
    except ValidationError:
        full = resolved  # a recipe the present schema no longer reads compares as written
    return {k: v for k, v in full.items() if k not in ("seed", "output_dir")}


def _same_recipe(reference: dict, card, run: str, what: str) -> None:
    a, b = _comparable(reference), _comparable(card.recipe["resolved"])
    if a != b:
        differing = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        raise HubError(f"{run} was trained from a different recipe than {what} (beyond the seed): {differing} differ")


def _portable(card):
    """``card`` without its recipe's machine folders (:func:`hub.core.cards.portable_recipe`); one that still holds an
    absolute path (e.g. of the user's data) is refused, naming its keys."""
    card = dataclasses.replace(card, recipe=portable_recipe(card.recipe))
    found = absolute_paths(card.to_dict())
    if found:
        raise HubError(f"the card of {card.name} would hold paths of this machine: "
                       + ", ".join(f"{key}={value!r}" for key, value in found)
                       + "; a published card names data by dataset name or relative path")
    return card


def _summarise(values: list[float]) -> dict:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
            "n": len(values), "values": values}


def publish(runs: list[str], name: str, dest: str | None = None, notes: str = "",
            paper: list[str] | None = None, add_seeds: bool = False) -> Path:
    """Package ``runs`` (one recipe, several seeds) as ``name``; returns the card's path.

    ``add_seeds=True`` adds the runs' test metrics to the already published card ``name`` instead: its weights
    stay, the runs must come from the card's recipe with seeds it does not have yet, and ``notes`` (if given)
    replaces the card's notes."""
    ref = resolve(name)
    if ref.kind is not RefKind.TAG:
        raise HubError(f"publish needs a family.tag name, got {name!r}")
    family = ref.family
    entry = get_model_entry(family)
    cards, summaries = _read_runs(runs)
    out_dir = Path(dest) if dest else Path(importlib.import_module(entry.domain).__file__).parent / "pretrained"
    card_path = out_dir / f"{name}.json"
    for run, card in zip(runs, cards):
        if card.family != family:
            raise HubError(f"{run} trained {card.family!r}, not {family!r}")
    if add_seeds:
        if not card_path.is_file():
            raise HubError(f"--add-seeds: {card_path} does not exist; publish {name} first")
        published = read_card(card_path)
        seeds = list(published.recipe["seeds"])
        for run, card in zip(runs, cards):
            _same_recipe(published.recipe["resolved"], card, run, f"the card {name}")
            if card.recipe["resolved"]["seed"] in seeds:
                raise HubError(f"{run}: seed {card.recipe['resolved']['seed']} is already in {name}'s metrics")
            seeds.append(card.recipe["resolved"]["seed"])
        for run, summary in zip(runs, summaries):
            missing = sorted(set(published.metrics) - set(summary["test"]))
            if missing:
                raise HubError(f"{run} has no test figures for {missing}, which {name}'s card reports")
        metrics = {key: _summarise(list(value["values"]) + [s["test"][key] for s in summaries])
                   for key, value in published.metrics.items()}
        card = dataclasses.replace(published, metrics=metrics, notes=notes or published.notes,
                                   recipe={**published.recipe, "seeds": seeds}, card_dir="")
        write_card(_portable(card), card_path)
        return card_path
    first = cards[0]
    for run, card in zip(runs[1:], cards[1:]):
        _same_recipe(first.recipe["resolved"], card, run, runs[0])
    metrics = {key: _summarise([s["test"][key] for s in summaries]) for key in sorted(summaries[0]["test"])}
    paper_figures = {}
    for item in paper or []:
        key, _, value = item.partition("=")
        paper_figures[key] = float(value)
    card = _portable(dataclasses.replace(
        first, name=name, file=f"{name}.safetensors", metrics=metrics, paper=paper_figures,
        notes=notes or summaries[0].get("epoch_selection", ""),
        recipe={**first.recipe, "seeds": [c.recipe["resolved"]["seed"] for c in cards]}, card_dir=""))
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = read_verified(Path(runs[0]) / "model.safetensors", first.sha256)
    atomic_write_bytes(out_dir / f"{name}.safetensors", weights)
    if card.ood.get("file"):  # the run's OOD statistics go beside the weights too, named after the tag
        sidecar = Path(runs[0]) / first.ood["file"]
        if not sidecar.is_file():
            raise HubError(f"{sidecar} is missing: the card of {runs[0]} names it as its OOD statistics")
        card = dataclasses.replace(card, ood={**card.ood, "file": sidecar_name(card)})
        atomic_write_bytes(out_dir / card.ood["file"], read_verified(sidecar, first.ood["sha256"]))
    if card.predictor.get("baseline", {}).get("file"):  # the run's fitted baseline (hub.predictor) goes along too
        baseline = Path(runs[0]) / first.predictor["baseline"]["file"]
        if not baseline.is_file():
            raise HubError(f"{baseline} is missing: the card of {runs[0]} names it as its baseline "
                           f"(predictor {first.predictor.get('chosen')!r})")
        kept = {**card.predictor["baseline"], "file": f"{name}.{baseline.name}"}
        card = dataclasses.replace(card, predictor={**card.predictor, "baseline": kept})
        atomic_write_bytes(out_dir / kept["file"], read_verified(baseline, kept["sha256"]))
    write_card(card, card_path)
    return card_path
