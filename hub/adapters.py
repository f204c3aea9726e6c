"""User-data adapters, filled in by each domain and keyed by the model card's ``input_spec["kind"]``.

- a *finetune* adapter turns ``--data PATH`` into a recipe ``data`` section for that domain
  (an image folder, a CSV table, a folder of WAV files, ...);
- a *predict* adapter runs the model over input files (or a folder), streaming in batches, and
  yields ``(names, logits)``; a file that does not fit raises a clear error naming it;
- a *default recipe*, keyed by the family's domain, lets ``attnhub finetune FAMILY --data PATH`` train a family
  that has no pretrained tag (e.g. ``tabr`` on a CSV never seen before);
- an *explain* adapter draws what the model attends to for some inputs (image or audio files, node ids,
  unit numbers; default: a sample of the card's test data) and yields the figures' paths;
- a *baseline*, keyed by input kind, scores a classical model on the split of a finished run, for the report
  that ``finetune`` prints (e.g. HistGradientBoosting next to a tabular model).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable, Iterator

from hub.errors import DataError
from hub.registry import Registry

FINETUNE: Registry[Callable[..., dict[str, Any]]] = Registry("finetune adapter for input kind")
PREDICT: Registry[Callable[..., Iterator]] = Registry("predict adapter for input kind")
DEFAULT_RECIPE: Registry[Callable[..., dict[str, Any]]] = Registry("default recipe for domain")
BASELINE: Registry[Callable[..., tuple[str, dict[str, float]]]] = Registry("baseline for input kind")
EXPLAIN: Registry[Callable[..., Iterator]] = Registry("explain adapter for input kind")


def register_finetune_adapter(kind: str):
    return FINETUNE.decorator(kind)


def register_predict_adapter(kind: str):
    return PREDICT.decorator(kind)


def register_explain_adapter(kind: str):
    """``fn(card, model, inputs, out_dir, data=None) -> iterator of figure paths``."""
    return EXPLAIN.decorator(kind)


def register_default_recipe(domain: str):
    """``fn(family, path, **options) -> recipe dict`` for fine-tuning an untrained family of ``domain``."""
    return DEFAULT_RECIPE.decorator(domain)


def register_baseline(kind: str):
    """``fn(run_dir) -> (baseline name, test metrics)`` on the same split as the run."""
    return BASELINE.decorator(kind)


def _with_options(fn: Callable, where: str, args: tuple, options: dict[str, Any]):
    """Call ``fn`` with the options that were given (not None); one it does not take raises naming it."""
    given = {k: v for k, v in options.items() if v is not None}
    accepted = inspect.signature(fn).parameters
    unknown = sorted(k for k in given if k not in accepted)
    if unknown:
        raise DataError(f"option(s) {', '.join('--' + k for k in unknown)} do not apply to {where}")
    return fn(*args, **given)


def _kind(card) -> str:
    kind = card.input_spec.get("kind")
    if kind is None:
        raise DataError(f"the card of {card.name} has no input_spec.kind; cannot tell what data it takes")
    return kind


def finetune_data_section(card, path: str, **options) -> dict[str, Any]:
    """The recipe ``data`` section that reads the user's data at ``path`` for the model of ``card``;
    ``options`` (e.g. ``target``, ``task`` for tables) are passed on when given."""
    kind = _kind(card)
    if kind not in FINETUNE:
        raise DataError(f"fine-tuning on user data is not available for inputs of kind {kind!r} "
                        f"(available: {FINETUNE.names()})")
    return _with_options(FINETUNE.get(kind), f"inputs of kind {kind!r}", (card, path), options)


def default_recipe(family: str, path: str, **options) -> dict[str, Any]:
    """A recipe dict training the untrained ``family`` on the user's data at ``path``."""
    from hub.registry import get_model_entry

    domain = get_model_entry(family).domain
    if domain not in DEFAULT_RECIPE:
        raise DataError(f"{family!r} has no pretrained tag given and its domain {domain!r} has no default recipe for "
                        f"user data (available for: {DEFAULT_RECIPE.names()}); name a pretrained tag or a run folder")
    return _with_options(DEFAULT_RECIPE.get(domain), f"the {domain} domain", (family, path), options)


def baseline(card, run_dir) -> tuple[str, dict[str, float]] | None:
    """A classical baseline's test metrics on the split of ``run_dir``, or None when the input kind has none."""
    kind = card.input_spec.get("kind", "")
    return BASELINE.get(kind)(run_dir) if kind in BASELINE else None


def predict_logits(card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], Any]]:
    """Yield ``(names, logits)`` for the inputs, ``batch_size`` at a time."""
    kind = _kind(card)
    if kind not in PREDICT:
        raise DataError(f"prediction from files is not available for inputs of kind {kind!r} "
                        f"(available: {PREDICT.names()})")
    return PREDICT.get(kind)(card, model, paths, batch_size)


def explain_inputs(card, model, inputs: list[str], out_dir, data: str | None = None) -> Iterator:
    """Figures of what the model attends to for ``inputs`` (see the kind's adapter), written to ``out_dir``."""
    kind = _kind(card)
    if kind not in EXPLAIN:
        raise DataError(f"explanations are not available for inputs of kind {kind!r} (available: {EXPLAIN.names()})")
    return _with_options(EXPLAIN.get(kind), f"explaining inputs of kind {kind!r}", (card, model, inputs, out_dir),
                         {"data": data})
