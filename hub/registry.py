"""The model and dataset registries.

Names follow timm's grammar: ``family`` builds an untrained model, ``family.tag`` a pretrained
one whose weights and model card ship in ``<domain>/pretrained/family.tag.{safetensors,json}``.
Registration is data: domain packages decorate short entry functions that only list dimensions.
Domain packages are imported on first use, so ``import hub`` stays light.
"""
from __future__ import annotations

import difflib
import fnmatch
import importlib
import importlib.util
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hub.errors import RegistryError, UnknownModelError

DOMAINS = ("vision", "graph", "audio", "tabular", "medical", "timeseries")
# Core modules that register demonstration models and datasets of their own (domain "core").
CORE_MODULES = ("hub.demos.set_tasks",)
_FAMILY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_TAG_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")


@dataclass(frozen=True)
class ModelEntry:
    """A registered model family: the builder and what it is for."""

    name: str
    builder: Callable[..., Any]
    domain: str
    task: str
    classifier: str | None = "head"  # state-dict prefix of the classifier, re-initialised on a new num_classes
    description: str = ""

    def arg_names(self) -> list[str]:
        return list(inspect.signature(self.builder).parameters)


@dataclass(frozen=True)
class DatasetEntry:
    """A registered dataset: a builder returning a :class:`hub.data.HubDataModule`."""

    name: str
    builder: Callable[..., Any]
    domain: str
    task: str
    description: str = ""

    def arg_names(self) -> list[str]:
        return list(inspect.signature(self.builder).parameters)


@dataclass
class _Registry:
    models: dict[str, ModelEntry] = field(default_factory=dict)
    datasets: dict[str, DatasetEntry] = field(default_factory=dict)
    pretrained: dict[str, Any] = field(default_factory=dict)  # "family.tag" -> PretrainedCfg
    discovered: bool = False


_REGISTRY = _Registry()


def _domain_of(fn: Callable) -> str:
    return fn.__module__.split(".")[0]


def register_model(task: str, classifier: str | None = "head", domain: str | None = None):
    """Decorator registering a model family under the entry function's name.

    Example::

        @register_model(task="image-classification")
        def vit_digits(num_classes: int = 10, **kwargs):
            return _create_vit(img_size=8, patch_size=2, embed_dim=64, depth=4, num_heads=4, ...)
    """

    def decorator(fn: Callable) -> Callable:
        name = fn.__name__
        if not _FAMILY_RE.match(name):
            raise RegistryError(f"model family name {name!r} must match {_FAMILY_RE.pattern}")
        if name in _REGISTRY.models:
            other = _REGISTRY.models[name].builder
            raise RegistryError(
                f"model {name!r} is registered twice: by {other.__module__}.{other.__qualname__} "
                f"and by {fn.__module__}.{fn.__qualname__}"
            )
        _REGISTRY.models[name] = ModelEntry(
            name=name, builder=fn, domain=domain or _domain_of(fn), task=task, classifier=classifier,
            description=(inspect.getdoc(fn) or "").split("\n")[0],
        )
        return fn

    return decorator


def register_dataset(task: str, domain: str | None = None):
    """Decorator registering a dataset builder (returns a ``HubDataModule``) under its name."""

    def decorator(fn: Callable) -> Callable:
        name = fn.__name__
        if name in _REGISTRY.datasets:
            raise RegistryError(f"dataset {name!r} is registered twice")
        _REGISTRY.datasets[name] = DatasetEntry(
            name=name, builder=fn, domain=domain or _domain_of(fn), task=task,
            description=(inspect.getdoc(fn) or "").split("\n")[0],
        )
        return fn

    return decorator


def _discover() -> None:
    """Import the domain packages (which register their models) and read their shipped cards."""
    if _REGISTRY.discovered:
        return
    _REGISTRY.discovered = True
    from hub.cards import read_card

    for name in CORE_MODULES:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name)
    for domain in DOMAINS:
        module = importlib.import_module(domain)
        pretrained_dir = Path(module.__file__).parent / "pretrained"
        for card_path in sorted(pretrained_dir.glob("*.json")):
            card = read_card(card_path)
            family = card.name.split(".")[0]
            if family not in _REGISTRY.models:
                raise RegistryError(f"card {card_path} names family {family!r}, which is not registered")
            if card.name in _REGISTRY.pretrained:
                raise RegistryError(f"pretrained tag {card.name!r} is shipped twice")
            _REGISTRY.pretrained[card.name] = card


def split_name(name: str) -> tuple[str, str | None]:
    """``"gat.cora"`` -> ``("gat", "cora")``; ``"gat"`` -> ``("gat", None)``."""
    family, _, tag = name.partition(".")
    if not _FAMILY_RE.match(family) or (tag and not _TAG_RE.match(tag)):
        raise RegistryError(f"malformed model name {name!r}: expected 'family' or 'family.tag' "
                            "in lower case letters, digits and underscores")
    return family, tag or None


def _closest(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=5, cutoff=0.5)
    if not close:
        close = [c for c in candidates if c.split(".")[0].startswith(name.split(".")[0][:3])][:5]
    return ", ".join(close) if close else "none; see `attnhub list`"


def get_model_entry(name: str) -> ModelEntry:
    _discover()
    family, _ = split_name(name)
    if family not in _REGISTRY.models:
        raise UnknownModelError(f"unknown model {name!r}; closest names: "
                                f"{_closest(name, sorted(_REGISTRY.models) + sorted(_REGISTRY.pretrained))}")
    return _REGISTRY.models[family]


def get_pretrained_cfg(name: str):
    entry = get_model_entry(name)
    if name not in _REGISTRY.pretrained:
        tags = sorted(t for t in _REGISTRY.pretrained if t.split(".")[0] == entry.name)
        raise UnknownModelError(f"unknown pretrained tag {name!r}; {entry.name!r} has tags: "
                                f"{', '.join(tags) if tags else 'none (build it untrained with the family name)'}")
    return _REGISTRY.pretrained[name]


def get_dataset_entry(name: str) -> DatasetEntry:
    _discover()
    if name not in _REGISTRY.datasets:
        raise UnknownModelError(f"unknown dataset {name!r}; closest names: {_closest(name, sorted(_REGISTRY.datasets))}")
    return _REGISTRY.datasets[name]


def list_models(pattern: str | None = None, domain: str | None = None, task: str | None = None,
                pretrained: bool = False) -> list[str]:
    """Registered names matching a glob ``pattern`` (``"vit_*"``), a domain and a task.

    With ``pretrained=True`` the ``family.tag`` names of shipped weights are listed instead of families.
    """
    _discover()
    if domain is not None and domain not in DOMAINS + ("core",):
        raise UnknownModelError(f"unknown domain {domain!r}; expected one of {', '.join(DOMAINS + ('core',))}")
    names = sorted(_REGISTRY.pretrained) if pretrained else sorted(_REGISTRY.models)
    out = []
    for name in names:
        entry = _REGISTRY.models[name.split(".")[0]]
        if pattern and not fnmatch.fnmatch(name, pattern):
            continue
        if domain and entry.domain != domain:
            continue
        if task and entry.task != task:
            continue
        out.append(name)
    return out


def list_datasets(domain: str | None = None) -> list[str]:
    _discover()
    return sorted(n for n, e in _REGISTRY.datasets.items() if domain is None or e.domain == domain)


def pretrained_tags(family: str) -> list[str]:
    _discover()
    return sorted(n for n in _REGISTRY.pretrained if n.split(".")[0] == family)
