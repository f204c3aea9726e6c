"""Model names as users write them, resolved once into a :class:`ModelRef`.

A name is one of five forms, told apart by its form alone, never by looking at the disk (so a folder in the working
directory cannot shadow a family):

- a family, ``gat``: an untrained model built from the registry;
- a pretrained tag, ``gat.cora`` (timm's grammar ``family.tag``): shipped weights and their card;
- a run folder, a path with a ``/`` or starting with ``.`` or ``~`` (``runs/x``, ``./x``, ``/abs/x``): its card and
  best weights;
- ``hf-hub:OWNER/REPO[@REVISION]``: a Hugging Face Hub repository written by ``attnhub publish --to-hf``;
- ``timm/ARCH``: any timm architecture.

:func:`resolve` parses the name, raising :class:`~hub.errors.RegistryError` (or, for a malformed repository,
:class:`~hub.errors.UnknownModelError`) for one that is none of these; the rest of the hub takes the
:class:`ModelRef` and reads its parts.

>>> ref = resolve("gat.cora")
>>> ref.kind, ref.family, ref.tag
(<RefKind.TAG: 'pretrained tag'>, 'gat', 'cora')
"""
from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hub.errors import RegistryError, UnknownModelError

FAMILY_RE = re.compile(r"^[a-z][a-z0-9_]*$")
TAG_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]*$")
REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")
TIMM_PREFIX = "timm/"
HF_HUB_PREFIX = "hf-hub:"


class RefKind(enum.Enum):
    """What a model name names (the value says it in words, for messages)."""

    FAMILY = "family"  # an untrained registered family
    TAG = "pretrained tag"  # shipped weights and card
    RUN = "run folder"  # its card.json and best weights
    HF_HUB = "Hugging Face Hub repository"  # written by publish --to-hf
    TIMM = "timm architecture"


@dataclass(frozen=True)
class ModelRef:
    """A model name resolved by :func:`resolve`; ``str(ref)`` is the name as given."""

    name: str  # the name as the user gave it
    kind: RefKind
    family: str | None = None  # FAMILY and TAG: the registered family
    tag: str | None = None  # TAG: the part after the family's dot
    path: Path | None = None  # RUN: the folder, ``~`` expanded
    repo: str | None = None  # HF_HUB: OWNER/REPO
    revision: str | None = None  # HF_HUB: a branch, tag or commit; None: the default branch
    arch: str | None = None  # TIMM: the timm architecture

    def __str__(self) -> str:
        return self.name

    @property
    def has_card(self) -> bool:
        """Whether the name has a model card: a tag, a run folder or a Hub repository (not a family nor timm)."""
        return self.kind in (RefKind.TAG, RefKind.RUN, RefKind.HF_HUB)

    def card_path(self, card: Any) -> Path:
        """The file that ``card`` (read for this name) is written back to: a run folder's ``card.json``, else the
        ``<name>.json`` beside its weights."""
        return Path(card.card_dir) / ("card.json" if self.kind is RefKind.RUN else f"{card.name}.json")


def check_repo_id(repo_id: str, name: str) -> str:
    """``repo_id`` (``OWNER/REPO``) when well formed, else an error quoting ``name``, the name it came from."""
    if not REPO_ID_RE.match(repo_id):
        raise UnknownModelError(f"malformed Hugging Face Hub repository {name!r}: expected OWNER/REPO (letters, "
                                "digits, '-', '_' and '.'), e.g. 'hf-hub:alice/vit-digits' or "
                                "'hf-hub:alice/vit-digits@v1'")
    return repo_id


def _is_path(name: str) -> bool:
    return "/" in name or os.sep in name or name.startswith((".", "~"))


def resolve(name: str | os.PathLike | ModelRef) -> ModelRef:
    """The :class:`ModelRef` of a model name (see the module docstring); a ``ModelRef`` is returned as is, and a
    path object (``pathlib.Path``) always names a run folder.

    Raises:
        RegistryError: a name that is no family, ``family.tag``, ``timm/ARCH``, run folder nor Hub repository.
        UnknownModelError: an ``hf-hub:`` name whose repository is not ``OWNER/REPO``.
    """
    if isinstance(name, ModelRef):
        return name
    if isinstance(name, os.PathLike):
        return ModelRef(os.fspath(name), RefKind.RUN, path=Path(name).expanduser())
    if name.startswith(HF_HUB_PREFIX):
        repo, _, revision = name.removeprefix(HF_HUB_PREFIX).partition("@")
        return ModelRef(name, RefKind.HF_HUB, repo=check_repo_id(repo, name), revision=revision or None)
    if name.startswith(TIMM_PREFIX):
        arch = name.removeprefix(TIMM_PREFIX)
        if not arch:
            raise RegistryError(f"malformed model name {name!r}: expected 'timm/<arch>', e.g. 'timm/resnet18'")
        return ModelRef(name, RefKind.TIMM, arch=arch)
    if _is_path(name):
        return ModelRef(name, RefKind.RUN, path=Path(name).expanduser())
    family, dot, tag = name.partition(".")
    if not FAMILY_RE.match(family) or (dot and not TAG_RE.match(tag)):
        raise RegistryError(f"malformed model name {name!r}: expected 'family' or 'family.tag' in lower case "
                            "letters, digits and underscores, 'timm/<arch>', 'hf-hub:OWNER/REPO[@REVISION]', or a "
                            "run folder's path ('./NAME', 'runs/...', an absolute path)")
    if tag:
        return ModelRef(name, RefKind.TAG, family=family, tag=tag)
    return ModelRef(name, RefKind.FAMILY, family=family)
