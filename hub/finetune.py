"""Fine-tuning on the user's own data: a pretrained tag or run folder is trained further from its card's recipe on
the data at a path, or a bare family (tabular) is trained from its domain's default recipe; the run's test metrics
can then be set against the input kind's classical baseline on the same split (HistGradientBoosting for tables)."""
from __future__ import annotations

from pathlib import Path

from hub.errors import HubError
from hub.kinds import baseline, default_recipe, finetune_data_section
from hub.models import model_card
from hub.recipe import Recipe, apply_overrides, validate_recipe
from hub.registry import is_run_path, split_name
from hub.run.train import is_ddp_worker, train


def finetune_recipe(name: str, data: str, overrides: list[str] | None = None, output_dir: str | None = None,
                    **options) -> Recipe:
    """The recipe that fine-tunes ``name`` on the data at ``data``: a pretrained tag or run folder keeps its card's
    resolved recipe, with a data section reading ``data`` and ``model.init_from: name``; a bare family takes its
    domain's default recipe. ``options`` (``target``, ``task``, ``time``, ``event``, ``genes``) go to the data
    section when given; ``overrides`` (``key.path=value``) are applied last. The run goes under ``output_dir``
    (default ``runs``), never under a folder a card names (its publisher's machine)."""
    if not is_run_path(name) and split_name(name)[1] is None:  # a bare family: train from scratch
        base = default_recipe(name, data, **options)
    else:
        card = model_card(name)
        base = dict(card.recipe.get("resolved") or {})
        if not base:
            raise HubError(f"the card of {name} holds no recipe to fine-tune from")
        base["data"] = finetune_data_section(card, data, **options)
        base["model"] = {**base["model"], "init_from": name}
        base["name"] = f"finetune-{card.family}"
    base["output_dir"] = output_dir or "runs"
    return validate_recipe(apply_overrides(base, overrides or []), f"finetune of {name}")


def finetune(name: str, data: str, overrides: list[str] | None = None, output_dir: str | None = None,
             progress: bool = True, **options) -> tuple[Path, tuple[str, dict[str, float]] | None]:
    """Train :func:`finetune_recipe` into a new run folder. Returns the run folder and the classical baseline's
    ``(name, test metrics)`` on the run's split: None for an input kind without one, and in a data-parallel
    worker process (the launching process alone reports)."""
    run_dir = train(recipe=finetune_recipe(name, data, overrides, output_dir, **options), progress=progress)
    if is_ddp_worker():
        return run_dir, None
    return run_dir, baseline(model_card(str(run_dir)), run_dir)
