"""Fine-tuning on the user's own data: a pretrained tag or run folder is trained further from its card's recipe on
the data at a path, or a bare family is trained from its domain's default recipe; the run's test metrics are then
set against the input kind's classical baseline fitted on the same split (HistGradientBoosting for tables, ...), and
the comparison is kept in the run's ``metrics.json`` with the baseline's predictions beside it."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from hub.errors import HubError
from hub.io import atomic_write_bytes
from hub.kinds import BaselineResult, baseline, default_recipe, finetune_data_section
from hub.models import load, model_card
from hub.recipe import Recipe, apply_overrides, validate_recipe
from hub.registry import get_model_entry, is_run_path, split_name
from hub.run.train import is_ddp_worker, train

# Fine-tune policies for a pretrained tag on small data (``--policy``; ``auto`` trains each that applies and keeps
# the one with the better validation metric): a linear probe (the classifier alone); a full fine-tune whose backbone
# learns at a tenth of the classifier's rate, layer-wise decayed for models whose layers timm orders; and LP-FT
# (Kumar et al., ICLR 2022, "Fine-Tuning can Distort Pretrained Features and Underperform Out-of-Distribution"): the
# same full fine-tune started from the linear probe's run, so that the backbone is not pulled about by the gradients
# of a random classifier in the first steps.
POLICIES = ("auto", "linear-probe", "full", "lp-ft")
POLICY_OVERRIDES = {"linear-probe": ["model.freeze_backbone=true"], "full": ["optimizer.backbone_lr_scale=0.1"],
                    "lp-ft": ["optimizer.backbone_lr_scale=0.1"]}
LAYER_DECAY = 0.75  # BEiT's
FINETUNE_MAX_EPOCHS, FINETUNE_PATIENCE = 30, 5  # small data: at most 30 epochs, stopped after 5 without progress
FINETUNE_MONITOR = "val/loss"  # unless the card's recipe names its own (see finetune_recipe)


def policies_for(name: str) -> list[str]:
    """The policies ``auto`` tries for the tag or run ``name``: a linear probe and LP-FT, which starts from it, when
    its family has a classifier to train alone; else the full fine-tune."""
    return ["linear-probe", "lp-ft"] if get_model_entry(model_card(name).family).classifier else ["full"]


def finetune_recipe(name: str, data: str, overrides: list[str] | None = None, output_dir: str | None = None,
                    policy: str = "full", probe: Path | None = None, **options) -> Recipe:
    """The recipe that fine-tunes ``name`` on the data at ``data``: a pretrained tag or run folder keeps its card's
    resolved recipe, with a data section reading ``data``, ``model.init_from: name``, at most
    :data:`FINETUNE_MAX_EPOCHS` epochs with early stopping (:data:`FINETUNE_PATIENCE` unless the card sets one) on
    the validation loss (unless the card names another metric), no weight EMA, and
    the ``policy``'s keys (:data:`POLICY_OVERRIDES`); ``"lp-ft"`` starts from ``probe`` instead, the run folder of
    ``name``'s linear probe on the same data. A bare family takes its domain's default recipe (``policy`` is
    not used). ``options`` (``target``, ``task``, ``time``, ``event``, ``genes``) go to the data section when given;
    ``overrides`` (``key.path=value``) are applied last. The run goes under ``output_dir`` (default ``runs``), never
    under a folder a card names (its publisher's machine)."""
    policy_keys: list[str] = []
    if _is_bare_family(name):  # train from scratch
        base = default_recipe(name, data, **options)
    else:
        card = model_card(name)
        base = dict(card.recipe.get("resolved") or {})
        if not base:
            raise HubError(f"the card of {name} holds no recipe to fine-tune from")
        base["data"] = finetune_data_section(card, data, **options)
        base["model"] = {**base["model"], "init_from": name}
        base["name"] = f"finetune-{card.family}"
        trainer = dict(base.get("trainer") or {})
        stopping = dict(trainer.get("early_stopping") or {})
        stopping["patience"] = stopping.get("patience") or FINETUNE_PATIENCE
        # no weight EMA: its decay suits the card's long run (0.998 averages ~500 steps), not a few hundred files,
        # whose fine-tune would be validated on weights that have barely left the pretrained ones. The validation
        # loss is monitored, and the policy chosen on it, unless the card names a metric: on a small validation
        # split the task's default, accuracy, moves in steps of 1/N and plateaus, so early stopping ended the run a
        # few epochs into its first plateau and kept that plateau's first, least trained, epoch (FSDD digits 5-9,
        # 23 validation clips: benchmarks/results/user_data.md)
        base["trainer"] = {**trainer, "max_epochs": min(trainer.get("max_epochs", FINETUNE_MAX_EPOCHS),
                                                        FINETUNE_MAX_EPOCHS), "early_stopping": stopping,
                           "ema_decay": None, "monitor": trainer.get("monitor") or FINETUNE_MONITOR}
        if policy not in POLICY_OVERRIDES:
            raise HubError(f"unknown fine-tune policy {policy!r}; expected one of {list(POLICIES)}")
        if (policy == "lp-ft") != (probe is not None):
            raise HubError(f"the fine-tune policy {policy!r} " + ("needs the linear probe's run folder (probe)"
                                                                   if probe is None else "starts from no probe"))
        if probe is not None:
            base["model"]["init_from"] = str(probe)
        policy_keys = list(POLICY_OVERRIDES[policy])
        if policy != "linear-probe" and hasattr(load(name, pretrained=False), "group_matcher"):
            policy_keys.append(f"optimizer.layer_decay={LAYER_DECAY}")
    base["output_dir"] = output_dir or "runs"
    return validate_recipe(apply_overrides(base, [*policy_keys, *(overrides or [])]), f"finetune of {name}")


# Metrics where a smaller value is better; every other metric (acc, auroc, f1, c_index, ...) is better larger.
LOWER_IS_BETTER = ("loss", "rmse", "mae", "mape", "mse", "nll", "ece", "brier")
BASELINE_PREDICTIONS = "baseline_predictions.csv"


def model_beats(metric: str, model: float, reference: float) -> bool:
    """Whether ``model`` is at least as good as ``reference`` on ``metric`` (e.g. ``test/rmse``: smaller)."""
    return model <= reference if metric.rsplit("/", 1)[-1] in LOWER_IS_BETTER else model >= reference


def compare_with_baseline(run_dir: Path, result: BaselineResult) -> dict:
    """Keep ``result`` in the run folder: its predictions in ``baseline_predictions.csv`` and, under ``baseline`` in
    ``metrics.json``, its name, test metrics and the verdict on the first of its metrics that the run also has.
    Returns that ``baseline`` entry."""
    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "metrics.json").read_text())
    shared = [k for k in result.metrics if k in summary.get("test", {})]
    if not shared:
        raise HubError(f"the baseline {result.name} reports {sorted(result.metrics)}, none of the run's test "
                       f"metrics {sorted(summary.get('test', {}))}; they cannot be compared")
    metric = shared[0]
    entry = {"name": result.name, "test": result.metrics, "metric": metric,
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


def format_comparison(run_dir: Path, entry: dict, model_value: float) -> str:
    """Two lines: the baseline's test metrics, and plainly which of the two is better on the compared metric."""
    metric, name = entry["metric"], entry["name"]
    scores = f"{name} on the same split: " + ", ".join(f"{k} {v:.4f}" for k, v in entry["test"].items())
    figures = f"{metric} {model_value:.4f} against {entry['test'][metric]:.4f}"
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


def finetune(name: str, data: str, overrides: list[str] | None = None, output_dir: str | None = None,
             progress: bool = True, policy: str = "auto", **options) -> tuple[Path, dict | None]:
    """Train :func:`finetune_recipe` into a new run folder, then fit the input kind's classical baseline on the same
    split (:func:`compare_with_baseline`). For a pretrained tag, ``policy="auto"`` trains each policy of
    :func:`policies_for` into its own run folder and keeps the one :func:`choose_policy` picks, recording the
    choice under ``policy`` in its ``metrics.json``; ``"lp-ft"`` trains its linear probe first (the candidate's when
    ``auto`` tries one). Returns the kept run folder and the ``baseline`` entry of its
    ``metrics.json``: None for an input kind without a baseline, and in a data-parallel worker process (the
    launching process alone reports)."""
    if policy not in POLICIES:
        raise HubError(f"unknown fine-tune policy {policy!r}; expected one of {list(POLICIES)}")
    if _is_bare_family(name):
        run_dir = train(recipe=finetune_recipe(name, data, overrides, output_dir, **options), progress=progress)
        if is_ddp_worker():
            return run_dir, None
    else:
        def run(p: str, probe: Path | None = None) -> Path:
            return train(recipe=finetune_recipe(name, data, overrides, output_dir, policy=p, probe=probe, **options),
                         progress=progress)

        runs: dict[str, Path] = {}
        for p in policies_for(name) if policy == "auto" else [policy]:
            runs[p] = run(p, runs.get("linear-probe") or run("linear-probe")) if p == "lp-ft" else run(p)
        if is_ddp_worker():
            return next(iter(runs.values())), None
        chosen = choose_policy(runs)
        run_dir = runs[chosen]
        summary = json.loads((run_dir / "metrics.json").read_text())
        summary["policy"] = {"chosen": chosen, "asked": policy, "candidates": {
            p: {"run": r.name, **json.loads((r / "metrics.json").read_text())["validation"]} for p, r in runs.items()}}
        atomic_write_bytes(run_dir / "metrics.json", (json.dumps(summary, indent=2) + "\n").encode())
    result = baseline(model_card(str(run_dir)), run_dir)
    return run_dir, None if result is None else compare_with_baseline(run_dir, result)


def _is_bare_family(name: str) -> bool:
    """A family name with no tag (``gat``): trained from scratch, not fine-tuned."""
    return not is_run_path(name) and split_name(name)[1] is None
