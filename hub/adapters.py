"""User-data adapters, filled in by each domain and keyed by the model card's ``input_spec["kind"]``.

- a *finetune* adapter turns ``--data PATH`` into a recipe ``data`` section for that domain
  (an image folder, a CSV table, a folder of WAV files, ...);
- a *predict* adapter runs the model over input files (or a folder), streaming in batches, and
  yields ``(names, logits)``; a file that does not fit raises a clear error naming it.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from hub.errors import DataError, RegistryError

_FINETUNE: dict[str, Callable[..., dict[str, Any]]] = {}
_PREDICT: dict[str, Callable[..., Iterator]] = {}


def register_finetune_adapter(kind: str):
    def decorator(fn):
        if kind in _FINETUNE:
            raise RegistryError(f"finetune adapter for input kind {kind!r} is registered twice")
        _FINETUNE[kind] = fn
        return fn

    return decorator


def register_predict_adapter(kind: str):
    def decorator(fn):
        if kind in _PREDICT:
            raise RegistryError(f"predict adapter for input kind {kind!r} is registered twice")
        _PREDICT[kind] = fn
        return fn

    return decorator


def _kind(card) -> str:
    kind = card.input_spec.get("kind")
    if kind is None:
        raise DataError(f"the card of {card.name} has no input_spec.kind; cannot tell what data it takes")
    return kind


def finetune_data_section(card, path: str) -> dict[str, Any]:
    """The recipe ``data`` section that reads the user's data at ``path`` for the model of ``card``."""
    kind = _kind(card)
    if kind not in _FINETUNE:
        raise DataError(f"fine-tuning on user data is not available for inputs of kind {kind!r} "
                        f"(available: {sorted(_FINETUNE)})")
    return _FINETUNE[kind](card, path)


def predict_logits(card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], Any]]:
    """Yield ``(names, logits)`` for the inputs, ``batch_size`` at a time."""
    kind = _kind(card)
    if kind not in _PREDICT:
        raise DataError(f"prediction from files is not available for inputs of kind {kind!r} "
                        f"(available: {sorted(_PREDICT)})")
    return _PREDICT[kind](card, model, paths, batch_size)
