"""The registry's index: which package registers each model family and dataset, and what listing shows.

``hub/index.json`` lets :mod:`hub.core.registry` import only the domain a name needs, and lets ``attnhub list``
and ``attnhub info`` answer from JSON without importing torch-heavy domain packages. It is generated from
the registry itself; ``tests/unit/test_registry.py`` fails when it is out of date. Regenerate it with::

    python -m hub.core.index

The domain packages are those the index names (:func:`hub.core.registry.domain_packages`); a new domain enters it once
with ``python -m hub.core.index --domain NAME``.
"""
from __future__ import annotations

import json
from typing import Any


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
    """The index record of a :class:`hub.core.registry.ModelEntry` (builds the model on the meta device)."""
    from hub.core.registry import package_of

    return {"package": package_of(entry.builder.__module__), "module": entry.builder.__module__,
            "domain": entry.domain, "task": entry.task,
            "description": entry.description, "arguments": entry.arg_names(),
            "params": _count_params(entry.builder)}


def family_info(family: str) -> dict[str, Any]:
    """What the index (or, for a family it does not know, the registry) says of a family: ``domain``,
    ``task``, ``description``, ``arguments``, ``params``, without importing its domain when indexed."""
    from hub.core.registry import get_model_entry, read_index

    info = read_index()["families"].get(family)
    return dict(info) if info is not None else family_record(get_model_entry(family))


def family_rows(pattern: str | None = None, domain: str | None = None, task: str | None = None,
                pretrained: bool = False) -> list[dict[str, Any]]:
    """What ``attnhub list`` shows of each family matching ``pattern`` (a glob), ``domain`` and ``task``: its
    ``name``, ``domain``, ``task``, ``params``, ``tags`` (its pretrained tags, ``family.tag``) and ``metric`` (the
    headline metric of its first tag's card, else ""); with ``pretrained``, only families with tags. Reads the index
    and the cards: imports no domain package, nor torch."""
    from hub.core.registry import list_models, model_card, pretrained_tags

    rows = []
    for name in list_models(pattern, domain=domain, task=task):
        info, tags = family_info(name), pretrained_tags(name)
        if tags or not pretrained:
            rows.append({"name": name, "domain": info["domain"], "task": info["task"], "params": info["params"],
                         "tags": tags, "metric": model_card(tags[0]).headline_metric() if tags else ""})
    return rows


def describe(name: str) -> dict[str, Any]:
    """What ``attnhub info`` shows of ``name``: a family's ``name``, ``domain``, ``task``, ``description``,
    ``arguments``, ``params`` and ``pretrained`` tags, else the card of the tag, run folder or Hub repository as a
    dict. A family or tag is read from JSON: no domain package is imported, nor torch."""
    from hub.core.registry import model_card, pretrained_tags
    from hub.names import RefKind, resolve

    ref = resolve(name)
    if ref.kind is not RefKind.FAMILY:
        return model_card(ref).to_dict()
    info = family_info(ref.family)
    return {"name": ref.name, "domain": info["domain"], "task": info["task"], "description": info["description"],
            "arguments": info["arguments"], "params": info["params"], "pretrained": pretrained_tags(ref.family)}


def build_index(new_domains: tuple[str, ...] = ()) -> dict[str, dict[str, dict[str, Any]]]:
    """The index of everything registered, after importing every domain package: those of the current index and
    ``new_domains`` (packages that register families or datasets and are not indexed yet)."""
    from hub.core import registry

    registry._index_disabled = True  # the file being replaced says nothing of what registers
    try:
        registry.import_domains(new_domains)
    finally:
        registry._index_disabled = False
    # not what a user or a test registered at run time
    shipped = {*registry.domain_packages(), *new_domains, *registry.CORE_MODULES}
    models = [registry.MODELS.get(n) for n in registry.MODELS.names()]
    datasets = [registry.DATASETS.get(n) for n in registry.DATASETS.names()]
    return {"families": {e.name: family_record(e) for e in models
                         if registry.package_of(e.builder.__module__) in shipped},
            "datasets": {e.name: {"package": registry.package_of(e.builder.__module__), "domain": e.domain,
                                  "task": e.task, "description": e.description}
                         for e in datasets if registry.package_of(e.builder.__module__) in shipped}}


def index_text(index: dict) -> str:
    return json.dumps(index, indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> None:
    import argparse

    from hub.core.registry import INDEX_PATH, _read_index_file
    from hub.io import atomic_write_bytes

    parser = argparse.ArgumentParser(prog="python -m hub.core.index", description=__doc__.split("\n\n")[0])
    parser.add_argument("--domain", action="append", default=[], metavar="PACKAGE",
                        help="a new domain package to index (repeatable); indexed domains are imported anyway")
    args = parser.parse_args(argv)
    atomic_write_bytes(INDEX_PATH, index_text(build_index(tuple(args.domain))).encode())
    _read_index_file.cache_clear()
    print(f"wrote {INDEX_PATH.name}")


if __name__ == "__main__":
    main()
