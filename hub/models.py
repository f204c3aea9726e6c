"""Building and loading models: registry families, pretrained tags, run folders, Hugging Face Hub repositories and
timm names (resolved once by :func:`hub.names.resolve`)."""
from __future__ import annotations

import inspect
import logging
import os
from pathlib import Path

import torch

from hub.core.cards import PretrainedCfg, read_card
from hub.core.registry import get_model_entry, model_card
from hub.core.weights import apply_state_dict, fetch, is_offline, load_state_dict
from hub.errors import HubError, OfflineError, UnknownModelError, WeightsError
from hub.names import ModelRef, RefKind, resolve

log = logging.getLogger("hub")


def create_model(name: str | ModelRef, num_classes: int | None = None, **model_args) -> torch.nn.Module:
    """Build the untrained model of a registered family (``"vit_digits"``) with the given arguments."""
    entry = get_model_entry(name)
    accepted = inspect.signature(entry.builder).parameters
    if num_classes is not None:
        if "num_classes" not in accepted:
            raise HubError(f"model {entry.name!r} takes no num_classes; its arguments: {list(accepted)}")
        model_args["num_classes"] = num_classes
    takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in accepted.values())
    unknown = sorted(k for k in model_args if k not in accepted)
    if unknown and not takes_kwargs:
        raise HubError(f"model {entry.name!r} got unknown arguments {unknown}; its arguments: {list(accepted)}")
    try:
        return entry.builder(**model_args)
    except ValueError as err:  # the layers' checks of their arguments: a HubError, so the CLI prints it in one line
        raise HubError(f"model {entry.name!r}: {err}") from err


def load_from_card(card: PretrainedCfg, pretrained: bool = True, num_classes: int | None = None,
                   **model_args) -> torch.nn.Module:
    entry = get_model_entry(card.family)
    args = {**card.model_args, **model_args}
    card_classes = args.get("num_classes")
    reset_head = num_classes is not None and num_classes != card_classes
    if num_classes is not None:
        args["num_classes"] = num_classes
    model = _memory_model(card, args) if card.memory_tokens else create_model(card.family, **args)
    if pretrained:
        if card.local_file is not None and card.local_file.is_file():
            path = card.local_file
        elif card.url:
            path = fetch(card.url, card.sha256, card.num_bytes)
        else:
            raise WeightsError(f"weights of {card.name} not found: {card.local_file} is missing "
                               "and the card has no url")
        state = load_state_dict(path, card.sha256)
        skip = entry.classifier if reset_head else None
        if reset_head:
            if entry.classifier is None:
                raise HubError(f"{card.family} has no classifier to re-initialise for num_classes={num_classes}")
            log.warning("%s: loaded all weights but the classifier '%s', re-initialised for %d classes (card: %s)",
                        card.name, entry.classifier, num_classes, card_classes)
        apply_state_dict(model, state, skip_prefix=skip, source=str(path))
        model.eval()
    model.pretrained_cfg = card
    return model


def _memory_model(card: PretrainedCfg, args: dict) -> torch.nn.Module:
    """The untrained :class:`~hub.attention.memory_tokens.MemoryTokens` of a run fine-tuned by memory tokens (its
    card's ``memory_tokens``): the source family with the source task's classes, wrapped for the new task's."""
    from hub.attention.memory_tokens import MemoryTokens

    memory = card.memory_tokens
    source = create_model(card.family, **{**args, "num_classes": memory["source_num_classes"]})
    return MemoryTokens(source, args["num_classes"], memory["tokens_per_layer"])


def _load_timm(arch: str, pretrained: bool, num_classes: int | None, **model_args) -> torch.nn.Module:
    import timm

    if arch not in timm.list_models():
        import difflib
        close = difflib.get_close_matches(arch, timm.list_models(), n=5)
        raise UnknownModelError(f"timm has no model {arch!r}; closest: {', '.join(close) or 'none'}")
    if num_classes is not None:
        model_args["num_classes"] = num_classes
    if pretrained and is_offline():
        import huggingface_hub.constants

        os.environ["HF_HUB_OFFLINE"] = "1"  # for processes started from here
        huggingface_hub.constants.HF_HUB_OFFLINE = True  # read at import: an earlier import would miss the variable
    try:
        return timm.create_model(arch, pretrained=pretrained, **model_args)
    except Exception as err:
        if not pretrained:
            raise
        from huggingface_hub.constants import HF_HUB_CACHE
        kind = OfflineError if is_offline() else WeightsError
        raise kind(f"timm's pretrained weights for {arch!r} are not in the cache ({HF_HUB_CACHE}) and could not be "
                   f"downloaded ({type(err).__name__}: {err}); go online once, or pass pretrained=False") from err


def load(name: str | os.PathLike | ModelRef, pretrained: bool = True, num_classes: int | None = None,
         **model_args) -> torch.nn.Module:
    """Build a model by name and load its weights.

    ``name`` is a family (``"vit_digits"``: untrained), a pretrained tag (``"vit_digits.sklearn"``:
    weights checked against the card's sha256), a run folder (``"runs/quickstart/..."``: its best
    weights), ``"hf-hub:OWNER/REPO[@REVISION]"`` (a repository written by ``attnhub publish --to-hf``: its card and
    weights downloaded into the Hugging Face cache, the sha256 checked as for a tag; :mod:`hub.deploy.hf`), or
    ``"timm/<arch>"`` for any timm architecture; or a :class:`hub.names.ModelRef` of one, or a path object (a run
    folder). With ``num_classes`` different from the card's, everything but the classifier is loaded and the
    classifier is re-initialised. Pretrained models are returned in eval mode.

    >>> model = load("vit_digits.sklearn")
    >>> model(torch.zeros(2, 1, 8, 8)).shape
    torch.Size([2, 10])
    """
    ref = resolve(name)
    if ref.kind is RefKind.TIMM:
        return _load_timm(ref.arch, pretrained, num_classes, **model_args)
    if ref.kind is RefKind.FAMILY:
        return create_model(ref, num_classes=num_classes, **model_args)
    return load_from_card(model_card(ref), pretrained, num_classes, **model_args)


def load_run(path: str | os.PathLike, pretrained: bool = True, num_classes: int | None = None,
             **model_args) -> torch.nn.Module:
    """The model of a finished run folder (its ``card.json`` and best weights), whatever the folder is named."""
    card_path = Path(path).expanduser() / "card.json"
    if not card_path.is_file():
        raise UnknownModelError(f"{path} is not a finished run folder: it has no card.json")
    return load_from_card(read_card(card_path), pretrained, num_classes, **model_args)
