"""Conformal intervals from cross-fitted residuals, for a model whose validation split is too small to calibrate on.

Split conformal (:mod:`hub.uncertainty.conformal`) calibrates a regression's intervals on its validation split. When
that split holds few units of a grouped dataset, the residuals are those of a few units: ``rul_attention.fd001`` holds
out 5 of FD001's 100 training engines (959 windows), whose errors were smaller than most engines' (validation RMSE
11.4, against 12.4 and 13.6 on 25 held-out engines of two other splits), and its 90% intervals covered 86.5% of the
100 test engines.

:func:`fit_card` trains the card's recipe ``runs`` more times, each holding out another random ``val_fraction`` of
the units (``data.args.val_fraction=F data.args.split_seed=k`` for k = 1..runs, the rest as the card's recipe),
and fits the intervals of the published weights on the pooled residuals of those runs on their held-out units:
each residual comes from a model that did not train on its unit (the cross-validation residuals of Barber et al.,
"Predictive inference with the jackknife+", Annals of Statistics 2021; Vovk, "Cross-conformal predictors", 2015).
Those models train on fewer units than the published one, so their residuals are if anything larger. The bins of
the predicted value are :mod:`hub.uncertainty.conformal`'s. The card's ``conformal.fitted_on`` names the runs'
overrides; its weights are untouched. The runs themselves go to a temporary folder and are deleted.

>>> held_out_overrides(0.25, 2)
[['data.args.val_fraction=0.25', 'data.args.split_seed=1', 'trainer.calibrate=false'], \
['data.args.val_fraction=0.25', 'data.args.split_seed=2', 'trainer.calibrate=false']]
"""
from __future__ import annotations

import inspect
import tempfile
from pathlib import Path
from typing import Any

import torch

from hub.errors import HubError

SPLIT_ARGS = ("val_fraction", "split_seed")  # the data arguments that choose the held-out units


def held_out_overrides(val_fraction: float, runs: int) -> list[list[str]]:
    """Per cross-fit run, the overrides that hold out another random ``val_fraction`` of the units."""
    if not 0 < val_fraction < 1 or runs < 1:
        raise HubError(f"cross-fitting takes 0 < val_fraction < 1 and at least one run, got {val_fraction}, {runs}")
    return [[f"data.args.val_fraction={val_fraction}", f"data.args.split_seed={k}", "trainer.calibrate=false"]
            for k in range(1, runs + 1)]


def _recipe_of(card, overrides: list[str], output_dir: str):
    """The card's recipe (a run folder's own ``recipe.yaml``, else the card's resolved recipe) with ``overrides``."""
    from hub.recipe import apply_overrides, parse_yaml, validate_recipe

    run_recipe = Path(card.card_dir) / "recipe.yaml" if card.card_dir else None
    base = parse_yaml(run_recipe.read_text(), str(run_recipe)) if run_recipe and run_recipe.is_file() \
        else card.recipe.get("resolved")
    if not base:
        raise HubError(f"the card of {card.name} holds no recipe to cross-fit its intervals with")
    return validate_recipe(apply_overrides(base, [*overrides, f"output_dir={output_dir}"]), f"cross-fit of {card.name}")


def held_out_outputs(card, val_fraction: float, runs: int, progress: bool = True) -> tuple[torch.Tensor, torch.Tensor,
                                                                                           str]:
    """``(outputs (N, K), targets (N, K), described)``: the validation outputs and targets of ``runs`` trainings of
    the card's recipe, each on its own held-out units (:func:`held_out_overrides`), pooled."""
    from hub.core.registry import get_dataset_entry
    from hub.models import load_from_card, model_card
    from hub.recipe import card_data
    from hub.run.train import train
    from hub.uncertainty.calibration import model_outputs

    dataset = get_dataset_entry(card.data["name"])
    missing = [a for a in SPLIT_ARGS if a not in inspect.signature(dataset.builder).parameters]
    if missing:
        raise HubError(f"the dataset {card.data['name']!r} of {card.name} takes no {missing} argument(s); "
                       f"cross-fitting holds out units through data.args.{SPLIT_ARGS[0]} and data.args.{SPLIT_ARGS[1]}")
    outputs, targets, points = [], [], []
    with tempfile.TemporaryDirectory(prefix="cross-fit-") as work:
        for overrides in held_out_overrides(val_fraction, runs):
            run = train(recipe=_recipe_of(card, overrides, work), progress=progress)
            run_card = model_card(run)
            datamodule = card_data(run_card)
            datamodule.setup("fit")
            out, _, y = model_outputs(load_from_card(run_card).eval(), datamodule.val_dataloader(), "val", progress,
                                      None, "cpu")
            outputs.append(out)
            targets.append(y)
            points.append(len(y))
    recipe = card.recipe.get("path") or "the card's resolved recipe"
    overrides = [*card.recipe.get("overrides", []), f"data.args.val_fraction={val_fraction}",
                 f"data.args.split_seed=1..{runs}"]
    described = f"held-out units of {runs} more runs of {recipe} ({' '.join(overrides)}): {points} validation items"
    return torch.cat(outputs), torch.cat(targets), described


def fit_card(name: str, val_fraction: float = 0.25, runs: int = 4, progress: bool = True) -> dict[str, Any]:
    """The ``conformal`` intervals of the tag or run folder ``name`` fitted on cross-fitted residuals
    (:func:`held_out_outputs`), written into its card (weights untouched); returns them."""
    from hub.core.cards import write_card
    from hub.models import load_from_card, model_card
    from hub.names import resolve
    from hub.recipe import card_data
    from hub.tasks import create_task
    from hub.uncertainty import conformal

    ref = resolve(name)
    card = model_card(ref)
    if not card.output_names:
        raise HubError(f"{name} has no named regression outputs; cross-fitted intervals are for regressions")
    held_out = held_out_outputs(card, val_fraction, runs, progress)
    datamodule = card_data(card)
    datamodule.setup("fit")
    task = create_task(datamodule.task, **datamodule.task_args())
    calibration = conformal.fit(load_from_card(card), datamodule, task, progress=progress, held_out=held_out)
    if "half_width" not in calibration.get("conformal", {}):
        raise HubError(f"{name}: no interval was fitted ({calibration.get('conformal', {}).get('skipped', '')})")
    path = ref.card_path(card)
    write_card(conformal.with_calibration(card, calibration), path)
    return calibration
