"""A run folder and the files in it: a new folder per run, the resolved recipe, the per-epoch ``metrics.csv``, the
training curves, ``metrics.json`` and the best weights with their model card draft. Written by global rank zero
alone, atomically (:mod:`hub.io`)."""
from __future__ import annotations

import csv
import io
import json
import math
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from hub.core.cards import PretrainedCfg, portable_data, portable_path, portable_recipe, write_card
from hub.core.registry import get_model_entry
from hub.core.weights import save_state_dict, sha256_bytes
from hub.errors import TrainingError
from hub.io import atomic_write_bytes
from hub.plotting import save_figure
from hub.recipe import Recipe


def new_run_dir(output_dir: str, recipe_name: str, seed: int) -> Path:
    """Create a fresh run folder; ``mkdir`` without ``exist_ok`` makes two runs never share one."""
    base = Path(output_dir) / recipe_name
    base.mkdir(parents=True, exist_ok=True)
    stem = f"{time.strftime('%Y%m%d-%H%M%S')}-s{seed}"
    for n in range(1000):
        candidate = base / (stem if n == 0 else f"{stem}-{n}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            continue
    raise TrainingError(f"could not create a new run folder under {base}")


def write_recipe(run_dir: Path, recipe: Recipe) -> None:
    """``recipe.yaml``: the resolved recipe, which ``--resume`` reads back."""
    atomic_write_bytes(run_dir / "recipe.yaml", yaml.safe_dump(recipe.to_dict(), sort_keys=False).encode())


def write_metrics_csv(path: Path, rows: list[dict[str, float]]) -> None:
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys)
    writer.writeheader()
    writer.writerows(rows)
    atomic_write_bytes(path, buffer.getvalue().encode())


def plot_curves(rows: list[dict[str, float]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = sorted({k.split("/", 1)[1] for row in rows for k in row if k.split("/", 1)[0] in ("train", "val")})
    fig, axes = plt.subplots(1, max(1, len(metrics)), figsize=(4 * max(1, len(metrics)), 3.2), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for stage in ("train", "val"):  # validation may run every few epochs only: its epochs are plotted
            points = [(r["epoch"], r[f"{stage}/{metric}"]) for r in rows if f"{stage}/{metric}" in r]
            if points and not all(math.isnan(v) for _, v in points):
                ax.plot(*zip(*points), label=stage, marker="." if len(points) < 30 else None)
        ax.set_title(metric)
        ax.set_xlabel("epoch")
        ax.legend()
    fig.tight_layout()
    save_figure(fig, path)


def make_card(recipe: Recipe, datamodule, model: torch.nn.Module, weights: bytes, name: str,
              metrics: dict[str, float], recipe_path: str | None, overrides: list[str] | None = None) -> PretrainedCfg:
    """The draft card of a run: its recipe as the recipe file, the overrides and the resolved recipe, without
    the run's output folder (:func:`hub.core.cards.portable_recipe`); the data module's names of its outputs. Data paths
    are made portable (:func:`hub.core.cards.portable_data_path`); the run's ``recipe.yaml`` keeps them as given."""
    return PretrainedCfg(
        name=name, sha256=sha256_bytes(weights), num_bytes=len(weights), file="model.safetensors",
        task=get_model_entry(recipe.model.name).task,
        model_args={**recipe.model.args, **{k: v for k, v in datamodule.model_args().items()
                                            if k in get_model_entry(recipe.model.name).arg_names()}},
        input_spec=portable_data(datamodule.input_spec), label_names=list(datamodule.label_names),
        output_names=list(datamodule.output_names),
        num_params=sum(p.numel() for p in model.parameters()),
        data=portable_data({"name": recipe.data.name, "args": recipe.data.args, **datamodule.info}),
        recipe=portable_recipe({"path": recipe_path, "overrides": list(overrides or []), "resolved": recipe.to_dict()}),
        metrics={k: {"mean": v, "std": 0.0, "n": 1, "values": [v]} for k, v in metrics.items()},
        memory_tokens=memory_section(recipe, model),
    )


def memory_section(recipe: Recipe, model: torch.nn.Module) -> dict[str, Any]:
    """The card's ``memory_tokens`` of a run fine-tuned by memory tokens (``model.memory_tokens``; else empty): the
    source it froze (a run folder's path made portable), the tokens per block, and what answering the source task
    needs: its classes, their number and its temperature."""
    if not recipe.model.memory_tokens:
        return {}
    source = model.model.pretrained_cfg  # the card hub.models.load gave the frozen source model
    name = recipe.model.init_from
    temperature = source.calibration.get("temperature")
    return {"policy": "memory", "source": portable_path(name) if Path(name).is_absolute() else name,
            "tokens_per_layer": recipe.model.memory_tokens,
            "source_num_classes": source.model_args.get("num_classes"),
            "source_label_names": list(source.label_names),
            "source_calibration": {} if temperature is None else {"temperature": temperature}}


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """``metrics.json``: the final epoch's row, the best monitored value and the test metrics of a run."""
    atomic_write_bytes(run_dir / "metrics.json", (json.dumps(summary, indent=2) + "\n").encode())


def write_model(run_dir: Path, recipe: Recipe, datamodule, model: torch.nn.Module, metrics: dict[str, float],
                recipe_path: str | None, overrides: list[str] | None) -> None:
    """``model.safetensors`` (``model``'s weights) and ``card.json``, the draft card of :func:`make_card` with the
    test ``metrics``: what ``hub.load(run_dir)`` loads."""
    save_state_dict(model.state_dict(), run_dir / "model.safetensors")
    weights = (run_dir / "model.safetensors").read_bytes()
    card = make_card(recipe, datamodule, model, weights, f"{recipe.model.name}.run", metrics, recipe_path, overrides)
    write_card(card, run_dir / "card.json")
