"""The registry's index: which package registers each model family and dataset, and what listing shows.

``hub/index.json`` lets :mod:`hub.registry` import only the domain a name needs, and lets ``attnhub list``
and ``attnhub info`` answer from JSON without importing torch-heavy domain packages. It is generated from
the registry itself; ``tests/test_registry.py`` fails when it is out of date. Regenerate it with::

    python -m hub.index
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

INDEX_PATH = Path(__file__).with_name("index.json")


@functools.cache
def read_index() -> dict[str, dict[str, dict[str, Any]]]:
    """``{"families": {name: record}, "datasets": {name: record}}``; empty when no index file exists."""
    if not INDEX_PATH.is_file():
        return {"families": {}, "datasets": {}}
    return json.loads(INDEX_PATH.read_text())


def package_of(module: str) -> str:
    """The package whose import registers an entry defined in ``module``: its domain, or the core module."""
    top = module.split(".")[0]
    return module if top == "hub" else top


def _count_params(builder) -> int | None:
    """Parameters of the family's default build, or None when it needs arguments or data to be built.

    The build sees no dataset (an empty data dir, offline), so the count does not depend on the machine that
    wrote the index: a family whose default build reads a dataset (e.g. a road graph) gets None."""
    import os
    import tempfile

    import torch

    from hub.errors import HubError

    saved = {key: os.environ.get(key) for key in ("HUB_DATA_DIR", "HUB_OFFLINE")}
    with tempfile.TemporaryDirectory() as empty:
        os.environ.update(HUB_DATA_DIR=empty, HUB_OFFLINE="1")
        try:
            with torch.device("meta"):  # counts parameters without allocating them
                model = builder()
        except (TypeError, HubError):
            return None
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
    return sum(p.numel() for p in model.parameters())


def family_record(entry) -> dict[str, Any]:
    """The index record of a :class:`hub.registry.ModelEntry` (builds the model on the meta device)."""
    return {"package": package_of(entry.builder.__module__), "domain": entry.domain, "task": entry.task,
            "description": entry.description, "arguments": entry.arg_names(),
            "params": _count_params(entry.builder)}


def build_index() -> dict[str, dict[str, dict[str, Any]]]:
    """The index of everything registered, after importing every domain package."""
    from hub.registry import DATASETS, MODELS, _discover

    _discover()
    return {"families": {name: family_record(MODELS.get(name)) for name in MODELS.names()},
            "datasets": {name: {"package": package_of(e.builder.__module__), "domain": e.domain, "task": e.task,
                                "description": e.description}
                         for name, e in ((n, DATASETS.get(n)) for n in DATASETS.names())}}


def index_text(index: dict) -> str:
    return json.dumps(index, indent=1, sort_keys=True) + "\n"


def main() -> None:
    from hub.cards import atomic_write_bytes

    atomic_write_bytes(INDEX_PATH, index_text(build_index()).encode())
    read_index.cache_clear()
    print(f"wrote {INDEX_PATH.name}")


if __name__ == "__main__":
    main()
