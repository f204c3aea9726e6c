"""``attnhub finetune FAMILY --data my.csv --target COLUMN`` for a tabular family with no pretrained tag: a
default recipe (the family's default dimensions, AdamW, early stopping on the validation metric), and the
HistGradientBoosting baseline on the run's own split for the report printed at the end.

>>> default_tabular_recipe("mlp", "my.csv", target="y")["data"]
{'name': 'tabular_csv', 'args': {'path': 'my.csv', 'target': 'y', 'task': 'auto'}}
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hub.adapters import register_baseline, register_default_recipe
from hub.errors import DataError

LEARNING_RATES = {"mlp": 1e-3, "tabm": 2e-3, "tab_transformer": 1e-3, "tabr": 5e-4}


@register_default_recipe("tabular")
def default_tabular_recipe(family: str, path: str, target: str | None = None, task: str = "auto") -> dict[str, Any]:
    if target is None:
        raise DataError(f"training {family!r} from scratch on {path} needs --target COLUMN (the column to predict)")
    return {
        "name": f"finetune-{family}",
        "model": {"name": family, "args": {}},
        "data": {"name": "tabular_csv", "args": {"path": str(path), "target": target, "task": task}},
        "optimizer": {"name": "adamw", "lr": LEARNING_RATES.get(family, 1e-3), "weight_decay": 1e-5},
        "trainer": {"max_epochs": 50, "accelerator": "auto", "devices": 1, "early_stopping": {"patience": 5},
                    "log_every_n_steps": 10},
    }


@register_baseline("table")
def gbdt_on_run_split(run_dir) -> tuple[str, dict[str, float]]:
    """HistGradientBoosting fitted on the training split of the run (its resolved recipe rebuilds the split)."""
    from hub.recipe import load_recipe
    from hub.run.train import build_data
    from tabular.baselines import gbdt_metrics

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    return "HistGradientBoosting", gbdt_metrics(build_data(recipe), recipe.seed)
