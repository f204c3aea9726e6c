"""Model cards: the frozen metadata of a pretrained tag or of a run's trained model.

A card is kept apart from architecture code (timm's ``PretrainedCfg`` idea) and stored as JSON
beside its safetensors file, so publishing a run is a data operation, not a code edit.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from hub.errors import WeightsError
from hub.io import atomic_write_bytes


@dataclass(frozen=True)
class PretrainedCfg:
    """Everything needed to rebuild, verify and trust a trained model.

    ``file`` is relative to the card's folder; ``url`` is used when the file is not there.
    ``label_names`` names the classes of a classifier; ``output_names`` names the values a regression or forecast
    model outputs per input, in order (``rul``, ``rul_plus_1``, ...; ``speed_5min``, ...; ``risk``; a table's target
    column): ``predict`` writes them as its CSV header. ``recipe`` is ``{"path": the recipe file relative to the
    repository, "overrides": [key=value, ...], "resolved": the validated recipe less its output_dir and tracking
    (:data:`LOCAL_KEYS`), "seeds"}``: a card holds no path of the machine that made it (:func:`portable_recipe`,
    :func:`absolute_paths`).
    ``metrics`` maps a metric name to ``{"mean", "std", "n", "values"}`` over seeds. ``calibration`` holds
    the temperature that ``predict`` divides the logits by and the ``conformal`` interval half widths it writes
    beside a regression's outputs (:mod:`hub.uncertainty.conformal`, :mod:`hub.uncertainty.calibration`), with their
    figures. ``ood`` names the out-of-distribution scores of :mod:`hub.uncertainty.ood`, their threshold, the sidecar
    file of their statistics with its sha256, and the test split's false-alarm rate. ``predictor``
    (:mod:`hub.predictor`) says whether ``predict`` uses the model, the input kind's classical baseline or their blend
    (its weight), chosen on the validation split, with the baseline's file and its sha256 and each member's metrics;
    empty: the model. ``memory_tokens`` (:mod:`hub.attention.memory_tokens`), for a run fine-tuned by learnable memory
    tokens: ``policy`` (``memory``), the ``source`` it froze (a tag, or a run folder's portable path), its
    ``tokens_per_layer``, and the source task's ``source_label_names`` and ``source_calibration``; the weights are
    then the wrapper's, the frozen source under ``model.``, and ``model_args`` the source family's with the new task's
    ``num_classes``. Empty: a model as its family builds it.
    """

    name: str
    sha256: str
    num_bytes: int
    task: str
    model_args: dict[str, Any]
    file: str | None = None
    url: str | None = None
    input_spec: dict[str, Any] = field(default_factory=dict)
    label_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    num_params: int = 0
    data: dict[str, Any] = field(default_factory=dict)
    recipe: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    paper: dict[str, Any] = field(default_factory=dict)
    notes: str = ""
    calibration: dict[str, Any] = field(default_factory=dict)  # hub.uncertainty: temperature or intervals, figures
    ood: dict[str, Any] = field(default_factory=dict)  # hub.uncertainty.ood: scores, threshold, sidecar
    predictor: dict[str, Any] = field(default_factory=dict)  # hub.predictor: model, baseline or blend, and its file
    memory_tokens: dict[str, Any] = field(default_factory=dict)  # the source task kept by memory tokens (above)
    card_dir: str = ""  # where the card was read from; not written

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def local_file(self) -> Path | None:
        return Path(self.card_dir) / self.file if self.file and self.card_dir else None

    def headline_metric(self) -> str:
        """``"test/acc 0.978 ± 0.004 (n=3)"`` for the first test metric on the card other than the loss."""
        for key, value in self.metrics.items():
            if key.startswith("test/") and not key.endswith("loss"):
                return f"{key} {value['mean']:.4g} ± {value['std']:.2g} (n={value['n']})"
        return ""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("card_dir")
        return out


REPO_ROOT = Path(__file__).resolve().parents[2]
_ABSOLUTE_PATH = re.compile(r"^(/|~/|\\\\|[A-Za-z]:[\\/])|/(home|Users|root|tmp|work)/")


def portable_path(path: str | os.PathLike) -> str:
    """``path`` as a card may hold it, POSIX style: relative to the repository or the working folder; else, for a
    file of another checkout's ``recipes/`` folder, from ``recipes/`` on; else only its file name."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    for base in (REPO_ROOT, Path.cwd()):
        if path.resolve().is_relative_to(base.resolve()):
            return path.resolve().relative_to(base.resolve()).as_posix()
    if "recipes" in path.parts[:-1]:
        last = len(path.parts) - 1 - path.parts[::-1].index("recipes")
        return Path(*path.parts[last:]).as_posix()
    return path.name


DATA_ELSEWHERE = "<data>"  # stands for the folders above a data path outside the working folder


def portable_data_path(path: str | os.PathLike) -> str:
    """A data path (``--data``, a dataset's ``root``) as a card holds it, POSIX style: as given when relative;
    relative to the working folder when it lies under it; else ``<data>/`` and its final name (``--data
    /home/me/fd001_units`` run from elsewhere is recorded as ``<data>/fd001_units``: the folders above it are the
    machine's). A run folder's own ``recipe.yaml`` keeps the path as given (:func:`hub.recipe.card_data` reads it)."""
    path = Path(path)
    if not path.is_absolute():
        return path.as_posix()
    cwd = Path.cwd().resolve()
    if path.resolve().is_relative_to(cwd):
        return path.resolve().relative_to(cwd).as_posix()
    return f"{DATA_ELSEWHERE}/{path.name}"


def portable_data(value: Any) -> Any:
    """``value`` (a data section: dataset arguments, the data module's info; walked through dicts and lists) with
    every absolute path in it made portable (:func:`portable_data_path`)."""
    if isinstance(value, dict):
        return {k: portable_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [portable_data(v) for v in value]
    return portable_data_path(value) if isinstance(value, str) and os.path.isabs(value) else value


# where a run's outputs and tracking went on the machine that trained it, not what it trains: no part of a card
LOCAL_KEYS = ("output_dir", "trainer.loggers", "trainer.mlflow_uri")


def _without_keys(section: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """``section`` less the dotted ``keys`` (``a.b`` drops ``b`` from the sub-section ``a``)."""
    out = {}
    for name, value in section.items():
        if name in keys:
            continue
        nested = [key.partition(".")[2] for key in keys if key.startswith(f"{name}.")]
        out[name] = _without_keys(value, nested) if nested and isinstance(value, dict) else value
    return out


def portable_recipe(recipe: dict[str, Any]) -> dict[str, Any]:
    """A card's ``recipe`` section without the folders of the machine that trained it: the :data:`LOCAL_KEYS`
    (``output_dir``, the loggers and MLflow's store) are dropped from ``resolved`` and from the overrides (a run goes
    where its user says, ``./runs`` by default), ``path`` is made relative (:func:`portable_path`) and the data
    paths of ``resolved``'s data section and of the ``data.`` overrides portable (:func:`portable_data_path`), as is
    an absolute ``model.init_from`` (a run folder, :func:`portable_path`); everything else is kept."""
    out = dict(recipe)
    if out.get("path"):
        out["path"] = portable_path(out["path"])
    if "overrides" in out:
        out["overrides"] = [_portable_override(o) for o in out["overrides"]
                            if o.partition("=")[0].strip() not in LOCAL_KEYS]
    if isinstance(out.get("resolved"), dict):
        out["resolved"] = _without_keys(out["resolved"], list(LOCAL_KEYS))
        if "data" in out["resolved"]:
            out["resolved"]["data"] = portable_data(out["resolved"]["data"])
        model = out["resolved"].get("model")
        init_from = model.get("init_from") if isinstance(model, dict) else None
        if isinstance(init_from, str) and Path(init_from).is_absolute():
            # a run folder fine-tuned from (LP-FT's linear probe, a pretraining run): named, not located
            out["resolved"]["model"] = {**model, "init_from": portable_path(init_from)}
    return out


def _portable_override(override: str) -> str:
    """``data.args.root=/abs/folder`` -> ``data.args.root=<data>/folder`` (:func:`portable_data_path`); other
    overrides as given."""
    key, _, value = override.partition("=")
    if key.strip().startswith("data.") and os.path.isabs(value.strip()):
        return f"{key}={portable_data_path(value.strip())}"
    return override


def absolute_paths(value: Any, key: str = "") -> list[tuple[str, str]]:
    """``(dotted key, value)`` of every string in ``value`` (walked through dicts and lists) that holds an
    absolute path: one starting with ``/``, ``~/``, ``\\\\`` or a drive letter (``C:\\``), or naming a home,
    temporary or work folder anywhere in it (``/home/``, ``/Users/``, ``/root/``, ``/tmp/``, ``/work/``)."""
    if isinstance(value, dict):
        return [hit for k, v in value.items() for hit in absolute_paths(v, f"{key}.{k}" if key else str(k))]
    if isinstance(value, list):
        return [hit for i, v in enumerate(value) for hit in absolute_paths(v, f"{key}[{i}]")]
    if isinstance(value, str) and _ABSOLUTE_PATH.search(value):
        return [(key, value)]
    return []


def read_card(path: str | os.PathLike) -> PretrainedCfg:
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise WeightsError(f"cannot read model card {path}: {err}") from err
    known = {f.name for f in fields(PretrainedCfg)} - {"card_dir"}
    unknown = sorted(set(raw) - known)
    missing = sorted(k for k in ("name", "sha256", "num_bytes", "task", "model_args") if k not in raw)
    if unknown or missing:
        raise WeightsError(f"model card {path}: unknown keys {unknown}, missing keys {missing}; "
                           f"allowed keys: {sorted(known)}")
    return PretrainedCfg(**raw, card_dir=str(path.parent))


def write_card(card: PretrainedCfg, path: str | os.PathLike) -> None:
    atomic_write_bytes(path, (json.dumps(card.to_dict(), indent=2, sort_keys=False) + "\n").encode())
