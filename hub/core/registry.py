"""The registries: model families, datasets and pretrained tags, all of one type, :class:`Registry`.

Names follow timm's grammar: ``family`` builds an untrained model, ``family.tag`` a pretrained
one whose weights and model card ship in ``<domain>/pretrained/family.tag.{safetensors,json}``.
Registration is data: domain packages decorate short entry functions that only list dimensions.
Every form of model name (those, run folders, ``hf-hub:`` and ``timm/`` names) is parsed once, by
:func:`hub.names.resolve`; :func:`model_card` gives the card of any name that has one.

Domain packages are imported on first use, and only the one that is needed: ``hub/index.json``
(written by ``python -m hub.core.index``) says which package registers each family and dataset, so
``hub.load("vit_digits.sklearn")`` imports ``vision.models`` only (a domain's ``__init__`` imports nothing; its
``REGISTERS`` names the modules that register, imported all when more than a family is needed), and listing reads
the index and the cards without importing any domain.
"""
from __future__ import annotations

import difflib
import fnmatch
import functools
import importlib
import importlib.util
import inspect
import json
import os
import pkgutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Generic, Iterator, TypeVar

from hub.errors import RegistryError, UnknownModelError
from hub.names import FAMILY_RE, ModelRef, RefKind, resolve

# Core modules that register demonstration models and datasets of their own (domain "core").
CORE_MODULES = ("hub.demos.set_tasks",)
CORE_DOMAIN = "core"

INDEX_PATH = Path(__file__).parents[1] / "index.json"
_index_disabled = False  # True while hub.core.index.build_index() rebuilds the file


@functools.cache
def _read_index_file() -> dict[str, dict[str, dict[str, Any]]]:
    return json.loads(INDEX_PATH.read_text())


def read_index() -> dict[str, dict[str, dict[str, Any]]]:
    """``hub/index.json`` (see :mod:`hub.core.index`): ``{"families": {name: record}, "datasets": {name: record}}``;
    empty when there is no index file."""
    if _index_disabled or not INDEX_PATH.is_file():
        return {"families": {}, "datasets": {}}
    return _read_index_file()


def domain_packages() -> list[str]:
    """The domain packages: those that ``hub/index.json`` says register families or datasets, less the core modules
    (a new domain enters with ``python -m hub.core.index --domain NAME``). Read from the file even while the index is
    being rebuilt, which imports them."""
    if not INDEX_PATH.is_file():
        return []
    return sorted({record["package"] for section in _read_index_file().values() for record in section.values()}
                  - set(CORE_MODULES))


def package_of(module: str) -> str:
    """The package whose import registers an entry defined in ``module``: its domain, or the core module."""
    top = module.split(".")[0]
    return module if top == "hub" else top


T = TypeVar("T")


def _origin(obj: Any) -> str:
    """Where a registered object was defined, for error messages: ``module.qualname``."""
    obj = getattr(obj, "builder", obj)
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


def closest_names(name: str, candidates: list[str]) -> str:
    """Up to five of ``candidates`` that look like ``name``, for 'unknown name' errors."""
    close = difflib.get_close_matches(name, candidates, n=5, cutoff=0.5)
    if not close:
        close = [c for c in candidates if c.split(".")[0].startswith(name.split(".")[0][:3])][:5]
    return ", ".join(close) if close else "none"


class Registry(Generic[T]):
    """Named entries of one kind (model families, datasets, tasks, input kinds, ...).

    A name registered twice raises naming both definitions; an unknown name raises listing the close ones.

    >>> tasks = Registry("task")
    >>> @tasks.decorator("double")
    ... def double(x): return 2 * x
    >>> tasks.get("double")(3), tasks.names()
    (6, ['double'])
    """

    def __init__(self, what: str):
        self.what = what
        self._entries: dict[str, T] = {}

    def register(self, name: str, entry: T) -> T:
        if name in self._entries:
            raise RegistryError(f"{self.what} {name!r} is registered twice: by {_origin(self._entries[name])} "
                                f"and by {_origin(entry)}")
        self._entries[name] = entry
        return entry

    def decorator(self, name: str) -> Callable[[T], T]:
        """``@registry.decorator(name)`` registers the decorated function or class under ``name``."""
        return lambda entry: self.register(name, entry)

    def get(self, name: str) -> T:
        if name not in self._entries:
            raise UnknownModelError(f"unknown {self.what} {name!r}; closest: {closest_names(name, self.names())}"
                                    f" (all: {', '.join(self.names()) or 'none registered'})")
        return self._entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def names(self, pattern: str | None = None) -> list[str]:
        """The registered names, sorted; with ``pattern``, those matching the glob (``"vit_*"``)."""
        return sorted(n for n in self._entries if pattern is None or fnmatch.fnmatch(n, pattern))


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


MODELS: Registry[ModelEntry] = Registry("model")
DATASETS: Registry[DatasetEntry] = Registry("dataset")
PRETRAINED: Registry[Any] = Registry("pretrained tag")  # "family.tag" -> hub.core.cards.PretrainedCfg
_imported: set[str] = set()  # packages imported for their registrations
_cards_read: set[str] = set()  # domains whose shipped cards are in PRETRAINED


def _domain_of(fn: Callable) -> str:
    return fn.__module__.split(".")[0]


def _check_index(section: str, name: str, fn: Callable) -> None:
    """A name the index gives to another package is taken, even while that package is not imported."""
    indexed = read_index()[section].get(name)
    if indexed is not None and indexed["package"] != package_of(fn.__module__):
        what = {"families": "model", "datasets": "dataset"}[section]
        raise RegistryError(f"{what} {name!r} is registered twice: by the {indexed['package']} package "
                            f"(hub/index.json) and by {_origin(fn)}")


def register_model(task: str, classifier: str | None = "head", domain: str | None = None):
    """Decorator registering a model family under the entry function's name.

    Example::

        @register_model(task="image-classification")
        def vit_digits(num_classes: int = 10, **kwargs):
            return _create_vit(img_size=8, patch_size=2, embed_dim=64, depth=4, num_heads=4, ...)
    """

    def decorator(fn: Callable) -> Callable:
        if not FAMILY_RE.match(fn.__name__):
            raise RegistryError(f"model family name {fn.__name__!r} must match {FAMILY_RE.pattern}")
        _check_index("families", fn.__name__, fn)
        MODELS.register(fn.__name__, ModelEntry(
            name=fn.__name__, builder=fn, domain=domain or _domain_of(fn), task=task, classifier=classifier,
            description=(inspect.getdoc(fn) or "").split("\n")[0]))
        return fn

    return decorator


def register_dataset(task: str, domain: str | None = None):
    """Decorator registering a dataset builder (returns a ``HubDataModule``) under its name."""

    def decorator(fn: Callable) -> Callable:
        _check_index("datasets", fn.__name__, fn)
        DATASETS.register(fn.__name__, DatasetEntry(
            name=fn.__name__, builder=fn, domain=domain or _domain_of(fn), task=task,
            description=(inspect.getdoc(fn) or "").split("\n")[0]))
        return fn

    return decorator


def domain_dir(domain: str) -> Path:
    """The folder of a domain package, found without importing it."""
    spec = importlib.util.find_spec(domain)
    if spec is None or not spec.submodule_search_locations:
        raise RegistryError(f"domain package {domain!r} is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def _read_cards(domain: str) -> None:
    """Put the cards shipped in ``<domain>/pretrained/`` into :data:`PRETRAINED` (reads JSON only)."""
    if domain in _cards_read:
        return
    _cards_read.add(domain)
    from hub.core.cards import read_card
    for card_path in sorted((domain_dir(domain) / "pretrained").glob("*.json")):
        card = read_card(card_path)
        if card.family not in read_index()["families"] and card.family not in MODELS:
            raise RegistryError(f"card {card_path.name} of {domain} names family {card.family!r}, which is not "
                                "registered")
        PRETRAINED.register(card.name, card)


def _import_package(package: str, part: str | None = None) -> None:
    """Import a domain package's registering modules (its ``REGISTERS``; with ``part``, that one only, e.g.
    ``models``) or a core module, so that their entries register, then read the domain's cards. A domain package's
    ``__init__`` imports nothing itself: loading a model imports ``<domain>.models`` and not the training data code."""
    if package in _imported or f"{package}.{part}" in _imported:
        return
    _imported.add(package if part is None else f"{package}.{part}")
    module = importlib.import_module(package)
    registers = getattr(module, "REGISTERS", ())  # a core module registers by being imported
    for name in registers if part is None or part not in registers else (part,):
        _import_with_submodules(f"{package}.{name}")
    if package in domain_packages():
        _read_cards(package)


def _import_with_submodules(name: str) -> None:
    """Import module ``name`` and, when it is a package (a domain's ``models``), every module in it: such a package
    imports none of its modules itself, so that one family can be imported alone (:func:`_import_family`)."""
    module = importlib.import_module(name)
    for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
        importlib.import_module(f"{name}.{info.name}")


def import_family_part(family: str, part: str) -> None:
    """Import the module ``part`` (``kinds``, ``tasks``, ...) of the domain that registers ``family`` (as the index
    says; else every domain), e.g. the input kinds of a loaded model without its domain's data modules."""
    package = read_index()["families"].get(family, {}).get("package")
    if package is None:
        import_domains()
    else:
        _import_package(package, part)


def import_domains(extra: tuple[str, ...] = ()) -> None:
    """Import every domain package (and ``extra`` ones, not indexed yet) and core module, so that everything they
    register (families, datasets, input kinds) is registered: for listing what the index does not know."""
    for package in (*CORE_MODULES, *domain_packages(), *extra):
        if package in CORE_MODULES and importlib.util.find_spec(package) is None:
            continue
        _import_package(package)


def _import_family(family: str) -> None:
    """Make ``family`` registered: import the package the index names for it, else every package."""
    if family in MODELS:
        return
    record = read_index()["families"].get(family, {})
    if "module" in record:  # its own module only: loading airbench_cbam_32 does not import timm for the ViTs
        importlib.import_module(record["module"])
        if record["package"] in domain_packages():
            _read_cards(record["package"])
    elif "package" in record:
        _import_package(record["package"], "models")
    if family not in MODELS:
        import_domains()


def _all_names() -> list[str]:
    for domain in domain_packages():
        _read_cards(domain)
    return sorted({*read_index()["families"], *MODELS.names(), *PRETRAINED.names()})


def _registered(name: str | ModelRef) -> ModelRef:
    """The reference of a family or ``family.tag`` name; any other form raises."""
    ref = resolve(name)
    if ref.family is None:
        raise UnknownModelError(f"{ref.name!r} names a {ref.kind.value}, not a registered family or pretrained tag")
    return ref


def get_model_entry(name: str | ModelRef) -> ModelEntry:
    """The family of ``name``, a family or a ``family.tag``."""
    ref = _registered(name)
    _import_family(ref.family)
    if ref.family not in MODELS:
        raise UnknownModelError(f"unknown model {ref.name!r}; closest names: {closest_names(ref.name, _all_names())}; "
                                "see `attnhub list`")
    return MODELS.get(ref.family)


def get_pretrained_cfg(name: str | ModelRef):
    """The card of a shipped tag; for an indexed family it reads only JSON (no domain is imported)."""
    ref = _registered(name)
    domain = read_index()["families"].get(ref.family, {}).get("domain")
    if domain in domain_packages():
        _read_cards(domain)
    if ref.name in PRETRAINED:
        return PRETRAINED.get(ref.name)
    entry = get_model_entry(ref)
    if entry.domain in domain_packages():
        _read_cards(entry.domain)
    if ref.name not in PRETRAINED:
        tags = pretrained_tags(entry.name)
        raise UnknownModelError(f"unknown pretrained tag {ref.name!r}; {entry.name!r} has tags: "
                                f"{', '.join(tags) if tags else 'none (build it untrained with the family name)'}")
    return PRETRAINED.get(ref.name)


def model_card(name: str | os.PathLike | ModelRef):
    """The card (:class:`hub.core.cards.PretrainedCfg`) of a pretrained tag (``"vit_digits.sklearn"``), of a run folder
    (``"./runs/..."``) or of a Hugging Face Hub repository (``"hf-hub:OWNER/REPO[@REVISION]"``: downloaded with the
    files it names, :mod:`hub.deploy.hf`). A tag's or run's card is read from JSON: no domain package is imported, nor
    torch."""
    ref = resolve(name)
    if ref.kind is RefKind.HF_HUB:
        from hub.deploy.hf import download_card
        return download_card(ref)
    if ref.kind is RefKind.RUN:
        from hub.core.cards import read_card
        if not (ref.path / "card.json").is_file():
            raise UnknownModelError(f"{ref.name} is not a run folder with a card.json")
        return read_card(ref.path / "card.json")
    if ref.kind is RefKind.TIMM:
        raise UnknownModelError(f"{ref.name!r} is a timm architecture and has no model card")
    if ref.kind is RefKind.FAMILY:
        raise UnknownModelError(f"{ref.name!r} is an untrained family and has no card; pretrained tags: "
                                f"{', '.join(pretrained_tags(ref.family)) or 'none'} (a run folder named {ref.name} "
                                f"is written ./{ref.name})")
    return get_pretrained_cfg(ref)


def get_dataset_entry(name: str) -> DatasetEntry:
    if name not in DATASETS:
        package = read_index()["datasets"].get(name, {}).get("package")
        if package is not None:
            _import_package(package)
        if name not in DATASETS:
            import_domains()
    if name not in DATASETS:
        raise UnknownModelError(f"unknown dataset {name!r}; closest names: "
                                f"{closest_names(name, DATASETS.names())}")
    return DATASETS.get(name)


def list_models(pattern: str | None = None, domain: str | None = None, task: str | None = None,
                pretrained: bool = False) -> list[str]:
    """Registered names matching a glob ``pattern`` (``"vit_*"``), a domain and a task.

    With ``pretrained=True`` the ``family.tag`` names of shipped weights are listed instead of families.
    Reads the index and the cards; imports no domain package.
    """
    domains = [*domain_packages(), CORE_DOMAIN]
    if domain is not None and domain not in domains:
        raise UnknownModelError(f"unknown domain {domain!r}; expected one of {', '.join(domains)}")
    families = {**read_index()["families"], **{n: {"domain": MODELS.get(n).domain, "task": MODELS.get(n).task}
                                                for n in MODELS.names()}}
    if pretrained:
        for d in domain_packages():
            _read_cards(d)
    names = PRETRAINED.names() if pretrained else sorted(families)
    return [name for name in names
            if (not pattern or fnmatch.fnmatch(name, pattern))
            and (not domain or families.get(name.split(".")[0], {}).get("domain") == domain)
            and (not task or families.get(name.split(".")[0], {}).get("task") == task)]


def list_datasets(domain: str | None = None) -> list[str]:
    datasets = {**read_index()["datasets"], **{n: {"domain": DATASETS.get(n).domain} for n in DATASETS.names()}}
    return sorted(n for n, e in datasets.items() if domain is None or e["domain"] == domain)


def pretrained_tags(family: str) -> list[str]:
    for domain in domain_packages():
        _read_cards(domain)
    return sorted(n for n in PRETRAINED.names() if n.split(".")[0] == family)
