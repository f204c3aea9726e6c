"""Fine-tuning on the user's own data: a pretrained tag or run folder is trained further from its card's recipe on
the data at a path, or a bare family is trained from its domain's default recipe; the run's test metrics are then
set against the input kind's classical baseline fitted on the same split (HistGradientBoosting for tables, ...), and
the comparison is kept in the run's ``metrics.json`` with the baseline's predictions beside it. Where the kind's
baseline can predict (tables, survival tables, RUL sensor units, traffic folders, image and audio folders, ICU
stays), the run's predictor is then chosen on the validation split among the model, the baseline and their blend
(:mod:`hub.predictor`, ``--predictor``), and the fitted baseline is saved in the run folder.

From a pretrained tag, ``--policy auto`` picks its candidates by the size of the training split (:data:`AUTO_RULE`),
counted once before training (:func:`count_training_data`): a classifier's linear probe, LP-FT and
``full-recipe-lr`` (a full fine-tune at the card's own learning rate) at every size. A family without a classifier
(no linear probe) trains ``full``, and from 50 training examples also ``full-recipe-lr``, counting its training
examples (rows, a graph's labelled nodes, sensor units, forecast windows) as one class. Each
candidate trains into its own run folder within its budget, said before training: its most epochs
(:data:`MAX_EPOCHS`), its time (:data:`FINETUNE_BUDGET_MINUTES`), and early stopping on the validation loss that
waits for a third of the epochs (:func:`stopping_for`); the one with the better validation metric is kept
(:func:`choose_policy`). Training from scratch is not among ``auto``'s candidates, nor ``memory`` (learnable memory
tokens on the frozen model, which keeps answering its own task: asked for by name, see :data:`AUTO_RULE`).
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from hub.core.registry import get_model_entry
from hub.crossval import CV_BELOW, CV_FOLDS, cv_budget_line, cv_entry, fold_indices, out_of_fold
from hub.errors import HubError
from hub.io import atomic_write_bytes
from hub.kinds import (
    BaselineResult,
    CrossValidation,
    baseline,
    default_recipe,
    finetune_data_section,
    kind_of,
)
from hub.models import load, model_card
from hub.names import ModelRef, RefKind, resolve
from hub.predictor import PREDICTORS, blend, guard_entry, record_predictor, scores
from hub.recipe import Recipe, apply_overrides, load_recipe, recipe_from_dict, validate_recipe
from hub.run.train import build_data, is_ddp_worker, train
from hub.uncertainty.conformal import fit_predictor_run

# Fine-tune policies for a pretrained tag (``--policy``; ``auto`` trains the candidates of AUTO_RULE and keeps the
# one with the better validation metric): a linear probe (the classifier alone); a full fine-tune whose backbone
# learns at a tenth of the classifier's rate, layer-wise decayed for models whose layers timm orders; LP-FT
# (Kumar et al., ICLR 2022, "Fine-Tuning can Distort Pretrained Features and Underperform Out-of-Distribution"): the
# same full fine-tune started from the linear probe's run, so that the backbone is not pulled about by the gradients
# of a random classifier in the first steps; and full-recipe-lr, a full fine-tune at the card's own learning rate
# (the backbone's too, not layer-wise decayed); and memory (Sandler et al., CVPR 2022, "Fine-tuning Image Transformers
# using Learnable Memory"; hub.attention.memory_tokens): the whole model frozen, answering its own task bit for bit,
# while a few learnable tokens per block, a new class token and a new head learn the data's task at the card's rate.
POLICIES = ("auto", "linear-probe", "full", "lp-ft", "full-recipe-lr", "memory")
LAYER_DECAY = 0.75  # BEiT's
MEMORY_TOKENS = 5  # memory tokens per block of the memory policy, unless finetune is given another (Sandler et al.'s)


@dataclass(frozen=True)
class PolicyChanges:
    """What a fine-tune policy changes in the card's recipe; None keeps the card's own value."""

    freeze_backbone: bool | None = None  # model.freeze_backbone: train the classifier alone, the rest frozen
    backbone_lr_scale: float | None = None  # optimizer.backbone_lr_scale: the backbone's rate over the classifier's
    # optimizer.layer_decay: True gives LAYER_DECAY to a model whose layers timm orders (its group_matcher; others
    # keep the card's), False none
    layer_decay: bool | None = None
    memory: bool = False  # model.memory_tokens: the model frozen whole, the data's task learnt by memory tokens

    def applied(self, recipe: Recipe, name: ModelRef, memory_tokens: int = MEMORY_TOKENS) -> Recipe:
        """``recipe`` with these changes; ``name`` (the pretrained tag) is built, untrained, to find its layers.
        ``memory_tokens``: the tokens per block where the policy learns by memory tokens."""
        model, optimizer = recipe.model, recipe.optimizer
        if self.memory:
            model = model.replace(memory_tokens=memory_tokens)
        if self.freeze_backbone is not None:
            model = model.replace(freeze_backbone=self.freeze_backbone)
        if self.backbone_lr_scale is not None:
            optimizer = optimizer.replace(backbone_lr_scale=self.backbone_lr_scale)
        if self.layer_decay is False:
            optimizer = optimizer.replace(layer_decay=None)
        elif self.layer_decay and hasattr(load(name, pretrained=False), "group_matcher"):
            optimizer = optimizer.replace(layer_decay=LAYER_DECAY)
        return recipe.replace(model=model, optimizer=optimizer)


POLICY_CHANGES = {"linear-probe": PolicyChanges(freeze_backbone=True),
                  "full": PolicyChanges(backbone_lr_scale=0.1, layer_decay=True),
                  "lp-ft": PolicyChanges(backbone_lr_scale=0.1, layer_decay=True),
                  "full-recipe-lr": PolicyChanges(backbone_lr_scale=1.0, layer_decay=False),
                  "memory": PolicyChanges(memory=True, backbone_lr_scale=1.0, layer_decay=False)}
# auto's candidates by training examples per class (a classifier's training examples over its classes; else all its
# training examples as one class): (from this many per class, the candidates of a family with a classifier, those of
# one without); the last row the data reaches applies. A linear probe and LP-FT suit small data; on a medium image
# folder (5,000 photos in 10 classes) coat_lite_micro_32.cifar10_20k reached 0.640 test accuracy fine-tuned whole at
# its card's learning rate and 0.562 with LP-FT, whose backbone at a tenth of it was still underfitting. A
# classifier's full fine-tune at the recipe's rate is a candidate at every size: on FSDD digits 5-9 at 15 clips per
# digit (benchmarks/results/finetune_policy.md) it reached 0.688 against LP-FT's 0.625, and its validation loss
# (0.265, 0.562) was below LP-FT's (0.884, 0.779) on both seeds; small data makes the third run cheap. Memory tokens
# are not a candidate: on the grid's cells where they apply (FSDD digits 5-9 from ast_tiny, BreastMNIST from
# cct_4_3x2_32.cifar10, CIFAR-10 from vit_micro_patch4_32.cifar10) their validation loss was above the kept
# candidate's on every seed, so auto would have paid a
# fourth run to keep the same one; what they add is the source task kept bit for bit, which a user asks for by name
# (--policy memory).
AUTO_RULE = ((0, ("linear-probe", "lp-ft", "full-recipe-lr"), ("full",)),
             (50, ("linear-probe", "lp-ft", "full-recipe-lr"), ("full", "full-recipe-lr")))
# each run's most epochs: the card's own max_epochs, at most these (a linear probe trains a few thousand weights)
MAX_EPOCHS = {"linear-probe": 30, "full": 60, "lp-ft": 60, "full-recipe-lr": 60, "memory": 60}
FINETUNE_BUDGET_MINUTES = 30.0  # each run's time budget (trainer.max_minutes), unless finetune is given another
FINETUNE_MONITOR = "val/loss"  # unless the card's recipe names its own (see finetune_recipe)


def stopping_for(max_epochs: int) -> tuple[int, int]:
    """Early stopping scaled to a run of at most ``max_epochs`` epochs: its patience (epochs without progress, at
    least 5) and its minimum epochs (a third), so that a long schedule is not cut in its first plateau.

    Args:
        max_epochs: the run's most epochs.
    """
    return max(5, max_epochs // 6), max_epochs // 3


def auto_candidates(per_class: float, classifier: bool) -> list[str]:
    """The policies ``auto`` trains (:data:`AUTO_RULE`).

    Args:
        per_class: training examples per class (a family without a classifier: all its training examples).
        classifier: whether the family has a classifier to train alone (a linear probe).
    """
    reached = [row for row in AUTO_RULE if per_class >= row[0]]
    return list(reached[-1][1 if classifier else 2])


def rule_text(classifier: bool, per_class: bool = True) -> str:
    """:data:`AUTO_RULE` in words, e.g. "fewer than 50 training examples: full; 50 or more: full, full-recipe-lr",
    or "at any number of training examples per class: linear-probe, lp-ft, full-recipe-lr".

    Args:
        classifier: the rule's candidates for a family with a classifier, else for one without.
        per_class: whether the examples are counted per class (a classifier's data).
    """
    unit = "training examples" + (" per class" if per_class else "")
    column = 1 if classifier else 2
    if len({row[column] for row in AUTO_RULE}) == 1:  # the same candidates at every size
        return f"at any number of {unit}: {', '.join(AUTO_RULE[0][column])}"
    bounds = [row[0] for row in AUTO_RULE[1:]]
    parts = [f"fewer than {bounds[0]} {unit}"] + [f"{b} or more" for b in bounds]
    return "; ".join(f"{part}: {', '.join(row[column])}" for part, row in zip(parts, AUTO_RULE))


def count_training_data(recipe: Recipe) -> dict[str, Any]:
    """What :data:`AUTO_RULE` counts in the training split of ``recipe``'s data, set up once for it (image decoding
    is cached, so the training that follows reads the images again cheaply).

    Args:
        recipe: a fine-tune recipe (its data section).

    Returns:
        ``train`` (how many), ``counted`` (of what: examples, a graph's labelled nodes, sensor units, forecast
        windows), ``classes`` (a classifier's; else None) and ``per_class`` (train over classes, else train).
    """
    datamodule = build_data(recipe)
    info = datamodule.info
    if "sizes" in info:  # [train, val, test]
        train, counted = info["sizes"][0], "examples"
    elif isinstance(info.get("split"), dict):  # a graph's labelled nodes per split
        train, counted = info["split"]["train"], "nodes"
    elif "units" in info:  # run-to-failure units per split
        train, counted = len(info["units"]["train"]), "units"
    elif "samples" in info:  # forecast windows per split
        train, counted = info["samples"][0], "windows"
    else:
        raise HubError(f"{type(datamodule).__name__} reports no training size (its info has {sorted(info)}); "
                       f"name a fine-tune policy other than auto: {list(POLICIES[1:])}")
    classes = datamodule.num_classes if (datamodule.num_classes or 0) > 1 else None
    return {"train": int(train), "counted": counted, "classes": classes,
            "per_class": int(train) / classes if classes else float(train)}


def finetune_recipe(name: str | ModelRef, data: str, overrides: list[str] | None = None, output_dir: str | None = None,
                    policy: str = "full", probe: Path | None = None,
                    budget_minutes: float | None = FINETUNE_BUDGET_MINUTES, memory_tokens: int = MEMORY_TOKENS,
                    **options) -> Recipe:
    """The recipe that fine-tunes ``name`` on the data at ``data``. A pretrained tag or run folder keeps its card's
    resolved recipe, with a data section reading ``data``, ``model.init_from: name``, no weight EMA, the ``policy``'s
    changes (:data:`POLICY_CHANGES`) and its budget: the card's max_epochs, at most the policy's
    :data:`MAX_EPOCHS`; ``trainer.max_minutes: budget_minutes``; early stopping on the validation loss (unless the
    card names another metric) with the card's patience and minimum epochs, else :func:`stopping_for` the run's
    max_epochs (an overridden one). A bare family takes its domain's default recipe (``policy`` and the budget are
    not used).

    Args:
        name: a pretrained tag, a run folder, or a bare family (trained from scratch).
        data: the path of the user's data.
        overrides: recipe overrides (``key.path=value``), applied last.
        output_dir: where the run goes (default ``runs``), never under a folder a card names (its publisher's).
        policy: one of :data:`POLICY_CHANGES`.
        probe: ``"lp-ft"`` starts from this run folder, ``name``'s linear probe on the same data (other policies
            take none).
        budget_minutes: the run's time budget (None: no limit).
        memory_tokens: memory tokens per block of the ``"memory"`` policy (:func:`check_memory_tokens` first).
        **options: ``target``, ``task``, ``time``, ``event``, ``genes``, ...: to the data section when given.
    """
    ref = resolve(name)
    if ref.kind is RefKind.FAMILY:  # train from scratch
        recipe = default_recipe(ref.family, data, **options)
    else:
        if policy not in POLICY_CHANGES:
            raise HubError(f"unknown fine-tune policy {policy!r}; expected one of {list(POLICIES)}")
        if (policy == "lp-ft") != (probe is not None):
            raise HubError(f"the fine-tune policy {policy!r} " + ("needs the linear probe's run folder (probe)"
                                                                   if probe is None else "starts from no probe"))
        if POLICY_CHANGES[policy].memory:
            check_memory_tokens(ref, memory_tokens)
        card = model_card(ref)
        if not card.recipe.get("resolved"):
            raise HubError(f"the card of {ref} holds no recipe to fine-tune from")
        recipe = recipe_from_dict(card.recipe["resolved"], f"the recipe of {ref}'s card")
        trainer = recipe.trainer
        # no weight EMA: its decay suits the card's long run (0.998 averages ~500 steps), not a few hundred files,
        # whose fine-tune would be validated on weights that have barely left the pretrained ones. The validation
        # loss is monitored, and the policy chosen on it, unless the card names a metric: on a small validation
        # split the task's default, accuracy, moves in steps of 1/N and plateaus, so early stopping ended the run a
        # few epochs into its first plateau and kept that plateau's first, least trained, epoch (FSDD digits 5-9,
        # 23 validation clips: benchmarks/results/user_data.md)
        recipe = recipe.replace(
            name=f"finetune-{card.family}", data=finetune_data_section(card, data, **options),
            model=recipe.model.replace(init_from=str(probe) if probe is not None else ref.name),
            trainer=trainer.replace(max_epochs=min(trainer.max_epochs, MAX_EPOCHS[policy]), ema_decay=None,
                                    monitor=trainer.monitor or FINETUNE_MONITOR, max_minutes=budget_minutes))
        recipe = POLICY_CHANGES[policy].applied(recipe, ref, memory_tokens)
        recipe = _with_stopping(recipe, _overridden(recipe, overrides, ref).trainer.max_epochs)
    return _overridden(recipe.replace(output_dir=output_dir or "runs"), overrides, ref)


def check_memory_tokens(name: ModelRef, tokens_per_layer: int) -> None:
    """Raise, before any training, unless ``name`` can learn by memory tokens: a transformer of timm Blocks (ViT,
    CCT, AST), not itself a memory-token run, and ``tokens_per_layer`` >= 1; the error lists the pretrained tags that
    can."""
    from hub.attention.memory_tokens import fits_memory_tokens
    from hub.core.registry import list_models

    if tokens_per_layer < 1:
        raise HubError(f"--memory-tokens {tokens_per_layer}: expected at least 1 token per block")
    card = model_card(name)
    if card.memory_tokens:
        raise HubError(f"{name} was fine-tuned by memory tokens already; start from its source, "
                       f"{card.memory_tokens['source']}")
    model = load(name, pretrained=False)
    if not fits_memory_tokens(model):
        fit = [tag for tag in list_models(pretrained=True) if fits_memory_tokens(load(tag, pretrained=False))]
        raise HubError(f"--policy memory needs a transformer of timm Blocks (ViT, CCT, AST); {card.family} "
                       f"({type(model).__name__}) is not one. Pretrained tags that can: {', '.join(fit)}")


def _overridden(recipe: Recipe, overrides: list[str] | None, name: ModelRef) -> Recipe:
    """``recipe`` with the user's ``key=value`` overrides applied last, validated whole."""
    return validate_recipe(apply_overrides(recipe.to_dict(), overrides or []), f"finetune of {name}")


def _with_stopping(recipe: Recipe, max_epochs: int) -> Recipe:
    """``recipe`` with the card's patience and minimum epochs, else those of :func:`stopping_for` ``max_epochs``."""
    patience, min_epochs = stopping_for(max_epochs)
    trainer = recipe.trainer
    stopping = trainer.early_stopping.replace(patience=trainer.early_stopping.patience or patience)
    return recipe.replace(trainer=trainer.replace(early_stopping=stopping, min_epochs=trainer.min_epochs or min_epochs))


def budget_line(policy: str, recipe: Recipe) -> str:
    """One line saying the budget of ``policy``'s run: its most epochs, its time, its early stopping."""
    cfg = recipe.trainer
    time = f"{cfg.max_minutes:g} minutes" if cfg.max_minutes is not None else "no time limit"
    patience = cfg.early_stopping.patience
    stopping = "no early stopping" if patience is None else (
        f"stops after {patience} epochs without progress on {cfg.monitor}"
        + (f", not before epoch {cfg.min_epochs}" if cfg.min_epochs else ""))
    return f"  {policy}: at most {cfg.max_epochs} epochs or {time}; {stopping}"


# Metrics where a smaller value is better; every other metric (acc, auroc, f1, c_index, ...) is better larger.
LOWER_IS_BETTER = ("loss", "rmse", "mae", "mape", "mse", "nll", "ece", "brier")
BASELINE_PREDICTIONS = "baseline_predictions.csv"


def model_beats(metric: str, model: float, reference: float) -> bool:
    """Whether ``model`` is at least as good as ``reference`` on ``metric`` (e.g. ``test/rmse``: smaller)."""
    return model <= reference if metric.rsplit("/", 1)[-1] in LOWER_IS_BETTER else model >= reference


def compare_with_baseline(run_dir: Path, result: BaselineResult) -> dict:
    """Keep ``result`` in the run folder: its predictions in ``baseline_predictions.csv`` and, under ``baseline`` in
    ``metrics.json``, its name, test metrics and the verdict on the first of its metrics that the run also has
    (``model``: the run's figure of it; a refit by folds keeps this entry, its own test figures being in-sample).
    Returns that ``baseline`` entry."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "metrics.json").read_text())
    shared = [k for k in result.metrics if k in summary.get("test", {})]
    if not shared:
        raise HubError(f"the baseline {result.name} reports {sorted(result.metrics)}, none of the run's test "
                       f"metrics {sorted(summary.get('test', {}))}; they cannot be compared")
    metric = shared[0]
    entry = {"name": result.name, "test": result.metrics, "metric": metric, "model": summary["test"][metric],
             "model_is_better": model_beats(metric, summary["test"][metric], result.metrics[metric])}
    if result.predictions:
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(result.predictions)
        writer.writerows(zip(*result.predictions.values()))
        atomic_write_bytes(run_dir / BASELINE_PREDICTIONS, text.getvalue().encode())
        entry["predictions"] = BASELINE_PREDICTIONS
    summary["baseline"] = entry
    atomic_write_bytes(run_dir / "metrics.json", (json.dumps(summary, indent=2) + "\n").encode())
    return entry


def format_comparison(run_dir: Path, entry: dict) -> str:
    """Two lines: the baseline's test metrics, and plainly which of the two is better on the compared metric."""
    metric, name = entry["metric"], entry["name"]
    scores = f"{name} on the same split: " + ", ".join(f"{k} {v:.4f}" for k, v in entry["test"].items())
    figures = f"{metric} {entry['model']:.4f} against {entry['test'][metric]:.4f}"
    if entry["model_is_better"]:
        return f"{scores}\nthe model is at least as good as {name}: {figures}"
    kept = f"; its test predictions are in {Path(run_dir) / entry['predictions']}" if "predictions" in entry else ""
    return (f"{scores}\nWARNING: {name} beats the model on this split ({figures}); consider keeping the "
            f"baseline{kept}")


def choose_policy(runs: dict[str, Path]) -> str:
    """The policy whose run has the better validation metric (``metrics.json``'s ``validation``); the first on a
    tie or when none was measured."""
    scores = {p: json.loads((r / "metrics.json").read_text())["validation"] for p, r in runs.items()}
    best = None
    for policy, entry in scores.items():
        value, kept = entry["value"], scores[best]["value"] if best else None
        if value is not None and (kept is None or (value > kept if entry["mode"] == "max" else value < kept)):
            best = policy
    return best or next(iter(runs))


def candidate_entry(run_dir: Path) -> dict[str, Any]:
    """What ``metrics.json``'s ``policy.candidates`` keeps of a candidate's run: its folder's name, its validation
    metric (``metric``, ``mode``, ``value``), ``epochs`` trained, and ``still_improving``: whether its best
    validation epoch is its last (it was stopped by its epochs or its time while improving).

    Args:
        run_dir: the candidate's run folder.
    """
    summary = json.loads((Path(run_dir) / "metrics.json").read_text())
    last, best = summary["final"].get("epoch"), summary["best"]["epoch"]
    return {"run": Path(run_dir).name, **summary["validation"], "epochs": 0 if last is None else last + 1,
            "still_improving": last is not None and best == last}


def still_improving_line(policy: str, entry: dict[str, Any], recipe: Recipe) -> str:
    """The line saying that ``policy``'s run was still improving when it stopped, with the key that gives it more.

    Args:
        policy: the candidate's policy.
        entry: its :func:`candidate_entry`.
        recipe: the recipe it trained.
    """
    cfg = recipe.trainer
    more = (f"more epochs (trainer.max_epochs={2 * cfg.max_epochs})" if entry["epochs"] >= cfg.max_epochs
            else f"more time (--budget-minutes {2 * cfg.max_minutes:g})" if cfg.max_minutes is not None
            else "a longer run")
    return f"  {policy} was still improving at its last epoch ({entry['epochs']}); {more} may help"


def finetune(name: str | ModelRef, data: str, overrides: list[str] | None = None, output_dir: str | None = None,
             progress: bool = True, policy: str = "auto", budget_minutes: float | None = FINETUNE_BUDGET_MINUTES,
             report: Callable[[str], None] | None = None, predictor: str = "auto", cv_folds: int = CV_FOLDS,
             memory_tokens: int = MEMORY_TOKENS, **options) -> tuple[Path, dict | None]:
    """Train :func:`finetune_recipe` into a new run folder, then fit the input kind's classical baseline on the same
    split (:func:`compare_with_baseline`). For a pretrained tag, each candidate policy trains into its own run folder
    and the one :func:`choose_policy` picks is kept, with the choice under ``policy`` in its ``metrics.json``
    (``chosen``, ``asked``, ``rule``: the rule and the counted training data, None unless ``auto``; ``candidates``:
    :func:`candidate_entry` of each); ``"lp-ft"`` trains its linear probe first (the candidate's when ``auto`` has
    one).

    Args:
        name: a pretrained tag, a run folder, or a bare family (trained from scratch).
        data: the path of the user's data.
        overrides: recipe overrides (``key.path=value``), applied last.
        output_dir: where the run folders go (default ``runs``).
        progress: show progress bars.
        policy: one of :data:`POLICIES`; ``auto``: the candidates of :data:`AUTO_RULE` for the training data's size.
        budget_minutes: each run's time budget from a pretrained tag (None: no limit).
        report: called with each line to tell the user, before training (the rule, each run's budget) and after
            each candidate (whether it was still improving); not called in a data-parallel worker.
        predictor: what ``predict`` uses (:mod:`hub.predictor`): ``auto`` (default) the best on the validation split
            of the model, the baseline and their blend; or ``model``, ``baseline``, ``blend``. Recorded under
            ``predictor`` in ``metrics.json`` and the run's card, with the baseline saved in the run folder; a kind
            whose baseline cannot predict keeps the model (asking for ``baseline`` or ``blend`` then raises).
        cv_folds: below :data:`hub.crossval.CV_BELOW` labelled items, on a kind that supports it
            (``InputKind.cross_validation``), the predictor is chosen by ``cv_folds``-fold cross-validation and
            refitted on every labelled item (:func:`choose_by_folds`; the refit's run folder is returned); 0 turns
            this off (the choice on the validation split).
        memory_tokens: memory tokens per block of the ``"memory"`` policy.
        **options: to the data section (:func:`finetune_recipe`).

    Returns:
        The kept run folder and the ``baseline`` entry of its ``metrics.json``: None for an input kind without a
        baseline, and in a data-parallel worker process (the launching process alone reports).
    """
    if policy not in POLICIES:
        raise HubError(f"unknown fine-tune policy {policy!r}; expected one of {list(POLICIES)}")
    if predictor not in PREDICTORS:
        raise HubError(f"unknown predictor {predictor!r}; expected one of {list(PREDICTORS)}")
    ref = resolve(name)
    if ref.kind is RefKind.FAMILY:
        run_dir = train(recipe=finetune_recipe(ref, data, overrides, output_dir, **options), progress=progress)
        if is_ddp_worker():
            return run_dir, None
    else:
        make = partial(finetune_recipe, ref, data, overrides, output_dir, budget_minutes=budget_minutes,
                       memory_tokens=memory_tokens, **options)
        say = report if report is not None and not is_ddp_worker() else _silent
        run_dir = _train_candidates(make, ref, policy, progress, say)
        if is_ddp_worker():
            return run_dir, None
    if cv_folds < 0 or cv_folds == 1:
        raise HubError(f"--cv-folds {cv_folds}: expected 0 (no cross-validated choice) or at least 2 folds")
    result = baseline(model_card(run_dir), run_dir)
    entry = None if result is None else compare_with_baseline(run_dir, result)
    folded = kind_of(model_card(run_dir)).cross_validation(run_dir) if cv_folds and result is not None else None
    if folded is not None and len(folded.labels) < CV_BELOW:
        say = report if report is not None else _silent
        run_dir = choose_by_folds(run_dir, folded, cv_folds, predictor, progress, say, result)
    elif result is not None and result.predictor is not None:
        chosen = record_predictor(run_dir, result.name, result.predictor, predictor)
        fit_predictor_run(run_dir, result.predictor, chosen)
    elif predictor in ("baseline", "blend"):
        raise HubError(f"--predictor {predictor}: the input kind of {run_dir} has no baseline that predicts; the run "
                       "keeps its model")
    return run_dir, entry


def choose_by_folds(run_dir: Path, folded: CrossValidation, k: int, asked: str, progress: bool,
                    say: Callable[[str], None], held_out: BaselineResult | None = None) -> Path:
    """The cross-validated choice of :mod:`hub.crossval` after the run ``run_dir``: its recipe trains once per fold
    (each in its own run folder, validated on its fold, early-stopped on it as the run was), the kind's baselines
    are fitted out of fold, :func:`hub.crossval.cv_entry` chooses among the model, the best baseline and their
    blend on every folded item, and the test split (which took no part) scores the members fitted without it.
    Then the choice is refitted on every labelled item: the model trains again from the same start for the median
    of the fold runs' best epochs, without early stopping, keeping its last epoch (and the run's temperature); the
    chosen baseline is fitted again. The refit's run folder is returned,
    with the choice under ``predictor`` in its ``metrics.json`` and card: ``selection: cross-validation``,
    ``cv`` (each member's mean ± std over the folds), ``test`` (held-out, members fitted before the refit),
    ``refit`` and ``figures`` (which figures are cross-validated, which held out).

    Args:
        run_dir: the finished run (its recipe, split and model's test outputs).
        folded: its kind's :class:`~hub.kinds.CrossValidation`.
        k: the number of folds.
        asked: one of :data:`hub.predictor.PREDICTORS`.
        progress: show progress bars.
        say: called with each line to tell the user (the budget first).
        held_out: the run's baseline on its own split, with its members' outputs (``predictor``), or None: where
            it is the baseline chosen here, a regression's intervals are fitted again on the validation residuals
            of the chosen predictor (a baseline or blend); otherwise the refit keeps the run's held-out
            temperature and intervals (the model's), not its own in-sample ones.
    """
    from hub.core.cards import read_card, write_card
    from hub.core.weights import sha256_bytes
    from hub.uncertainty.conformal import with_calibration

    run_dir = Path(run_dir)
    recipe = load_recipe(run_dir / "recipe.yaml")
    seed = recipe.seed
    folds = fold_indices(folded.task, folded.labels, folded.groups, k, seed, folded.label_names,
                         warn=lambda line: say(f"WARNING: {line}"))
    say(cv_budget_line(len(folds), len(folded.labels), recipe.trainer.max_minutes))
    fold_runs: list[Path] = []

    def fold_model(train_items, val_items):  # trains fold len(fold_runs) of the same folds
        overrides = folded.fold_overrides(len(folds), len(fold_runs), seed)
        fold_runs.append(train(recipe=_overridden(recipe, overrides, run_dir), progress=progress))
        return folded.fold_outputs(fold_runs[-1])

    model = out_of_fold(fold_model, folds)
    entry = cv_entry(folded.task, folded.labels, folds, model, folded.baselines(folds, seed), asked)
    if folded.near_shift is not None:
        entry["guard"] = guard_entry(folded.task, folded.near_shift(fold_runs, folds, seed, entry["baseline_name"]),
                                     entry["weight"])
    weights = {"model": 1.0, "baseline": 0.0, "blend": entry["blend_weight"], "chosen": entry["weight"]}
    test = None
    if folded.test is not None:
        labels, ours, theirs = folded.test(entry["baseline_name"])
        test = {m: {f"test/{key}": v for key, v in scores(folded.task, labels, blend(ours, theirs, w)).items()}
                for m, w in weights.items()}
    best_epochs = [json.loads((f / "metrics.json").read_text())["best"]["epoch"] for f in fold_runs]
    epochs = max(1, int(round(float(np.median([e for e in best_epochs if e is not None] or [0])))) + 1)
    # the model trains again on every labelled item, also when the baseline alone predicts: the run folder that
    # predict reads then holds one preprocessing (a survival table's standardisation), fitted on every item
    refit = [*folded.refit_overrides, f"trainer.max_epochs={epochs}", f"trainer.min_epochs={epochs}",
             "trainer.early_stopping.patience=null", "trainer.test_checkpoint=last"]
    final = train(recipe=_overridden(recipe, refit, run_dir), progress=progress)
    # its validation items trained: a temperature or intervals fitted on them would be overconfident, so the run's
    # own (fitted on held-out validation items) are kept
    card, first = read_card(final / "card.json"), read_card(run_dir / "card.json").calibration
    calibration = {key: first[key] for key in ("temperature", "conformal") if key in first}
    if calibration:
        write_card(with_calibration(card, calibration), final / "card.json")
    path = Path(folded.refit(entry["baseline_name"], final))
    entry.update({
        "selection": "cross-validation", "test": test,
        "baseline": {"name": entry["baseline_name"], "file": path.name, "sha256": sha256_bytes(path.read_bytes())},
        "refit": {"items": "every labelled item", "model_epochs": epochs,
                  "from": run_dir.name, "folds": [f.name for f in fold_runs]},
        "figures": {"cv": f"{len(folds)}-fold cross-validation over the {entry['items']} labelled items outside the "
                          "test split (out-of-fold predictions)",
                    "test": "held out: the test split, scored by the members fitted without it, before the refit"
                    if test else None,
                    "weights": "refitted on every labelled item (test included); its run's own test figures are "
                               "in-sample"}})
    summary = json.loads((final / "metrics.json").read_text())
    first = json.loads((run_dir / "metrics.json").read_text())  # the run's comparison with its baseline, kept along
    summary.update({key: first[key] for key in ("baseline", "policy", "calibration", "intervals") if key in first})
    if (run_dir / BASELINE_PREDICTIONS).is_file():
        atomic_write_bytes(final / BASELINE_PREDICTIONS, (run_dir / BASELINE_PREDICTIONS).read_bytes())
    summary["predictor"] = entry
    atomic_write_bytes(final / "metrics.json", (json.dumps(summary, indent=2) + "\n").encode())
    card = read_card(final / "card.json")
    write_card(dataclasses.replace(card, predictor=entry, card_dir=""), final / "card.json")
    if held_out is not None and held_out.predictor is not None and held_out.name == entry["baseline_name"]:
        fit_predictor_run(final, held_out.predictor, entry)
    return final


def _train_candidates(make: Callable[..., Recipe], name: ModelRef, policy: str, progress: bool,
                      say: Callable[[str], None]) -> Path:
    """Train the candidates of ``policy`` (``make(policy, probe)`` gives each recipe), saying each run's budget first
    and whether each candidate was still improving after it; returns the kept run folder, its ``policy`` recorded."""
    rule = None
    if policy == "auto":
        classifier = get_model_entry(model_card(name).family).classifier is not None
        counted = count_training_data(make("full"))
        rule = {"text": rule_text(classifier, counted["classes"] is not None), **counted}
        candidates = auto_candidates(counted["per_class"], classifier)
        say(f"fine-tune policy auto: {_counted_text(counted)}; candidates {', '.join(candidates)} (rule: "
            f"{rule['text']})")
    else:
        candidates = [policy]
    probe_first = "lp-ft" in candidates and "linear-probe" not in candidates  # LP-FT alone: its probe trains first
    trained = ["linear-probe", *candidates] if probe_first else candidates
    say("budgets, each run in its own run folder:")
    for p in trained:  # LP-FT's probe is not trained yet: a stand-in names it (its budget does not depend on it)
        say(budget_line(p, make(p, Path("linear-probe")) if p == "lp-ft" else make(p)))
    runs: dict[str, Path] = {}
    probe = None
    for p in trained:
        recipe = make(p, probe) if p == "lp-ft" else make(p)
        run_dir = train(recipe=recipe, progress=progress)
        probe = run_dir if p == "linear-probe" else probe
        if p in candidates:
            runs[p] = run_dir
            if not is_ddp_worker() and (entry := candidate_entry(run_dir))["still_improving"]:
                say(still_improving_line(p, entry, recipe))
    if is_ddp_worker():
        return next(iter(runs.values()))
    chosen = choose_policy(runs)
    summary = json.loads((runs[chosen] / "metrics.json").read_text())
    summary["policy"] = {"chosen": chosen, "asked": policy, "rule": rule,
                         "candidates": {p: candidate_entry(r) for p, r in runs.items()}}
    atomic_write_bytes(runs[chosen] / "metrics.json", (json.dumps(summary, indent=2) + "\n").encode())
    return runs[chosen]


def _counted_text(counted: dict[str, Any]) -> str:
    """:func:`count_training_data`'s count in words, e.g. "4000 training examples, 400 per class (10 classes)"."""
    text = f"{counted['train']} training {counted['counted']}"
    return f"{text}, {counted['per_class']:.4g} per class ({counted['classes']} classes)" if counted["classes"] \
        else text


def _silent(line: str) -> None:
    """A ``report`` that tells nothing."""

