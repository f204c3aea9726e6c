"""Publishing: run folders of one recipe (several seeds) become shipped weights plus a model card.

The weights are the first run's best checkpoint; the card's metrics are the mean and std of the
test metrics over all the runs, so every shipped weight is reproducible from its recipe.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import statistics
from pathlib import Path

from hub.cards import atomic_write_bytes, read_card, write_card
from hub.errors import HubError
from hub.registry import get_model_entry, split_name
from hub.weights import read_verified


def publish(runs: list[str], name: str, dest: str | None = None, notes: str = "",
            paper: list[str] | None = None) -> Path:
    family, tag = split_name(name)
    if tag is None:
        raise HubError(f"publish needs a family.tag name, got {name!r}")
    entry = get_model_entry(family)
    cards, summaries = [], []
    for run in runs:
        run_dir = Path(run)
        if not (run_dir / "card.json").is_file():
            raise HubError(f"{run_dir} is not a finished run folder (no card.json)")
        cards.append(read_card(run_dir / "card.json"))
        summaries.append(json.loads((run_dir / "metrics.json").read_text()))
    first = cards[0]
    if first.family != family:
        raise HubError(f"{runs[0]} trained {first.family!r}, not {family!r}")
    for run, card in zip(runs[1:], cards[1:]):
        a = {k: v for k, v in first.recipe["resolved"].items() if k not in ("seed", "output_dir")}
        b = {k: v for k, v in card.recipe["resolved"].items() if k not in ("seed", "output_dir")}
        if a != b:
            raise HubError(f"{run} was trained from a different recipe than {runs[0]} (beyond the seed)")
    keys = sorted(summaries[0]["test"])
    metrics = {}
    for key in keys:
        values = [s["test"][key] for s in summaries]
        metrics[key] = {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else 0.0,
                        "n": len(values), "values": values}
    paper_figures = {}
    for item in paper or []:
        key, _, value = item.partition("=")
        paper_figures[key] = float(value)
    out_dir = Path(dest) if dest else Path(importlib.import_module(entry.domain).__file__).parent / "pretrained"
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = read_verified(Path(runs[0]) / "model.safetensors", first.sha256)
    atomic_write_bytes(out_dir / f"{name}.safetensors", weights)
    card = dataclasses.replace(
        first, name=name, file=f"{name}.safetensors", metrics=metrics, paper=paper_figures,
        notes=notes or summaries[0].get("epoch_selection", ""),
        recipe={**first.recipe, "seeds": [c.recipe["resolved"]["seed"] for c in cards]}, card_dir="")
    card_path = out_dir / f"{name}.json"
    write_card(card, card_path)
    return card_path
