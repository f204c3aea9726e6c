"""Model cards: the frozen metadata of a pretrained tag or of a run's trained model.

A card is kept apart from architecture code (timm's ``PretrainedCfg`` idea) and stored as JSON
beside its safetensors file, so publishing a run is a data operation, not a code edit.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from hub.errors import WeightsError


@dataclass(frozen=True)
class PretrainedCfg:
    """Everything needed to rebuild, verify and trust a trained model.

    ``file`` is relative to the card's folder; ``url`` is used when the file is not there.
    ``metrics`` maps a metric name to ``{"mean", "std", "n", "values"}`` over seeds. ``calibration`` holds
    the temperature that ``predict`` divides the logits by, when ``attnhub calibrate`` fitted one.
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
    num_params: int = 0
    data: dict[str, Any] = field(default_factory=dict)
    recipe: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, Any] = field(default_factory=dict)
    paper: dict[str, Any] = field(default_factory=dict)
    notes: str = ""
    calibration: dict[str, Any] = field(default_factory=dict)  # hub.calibration: temperature and its figures
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


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a unique temporary file beside ``path``, fsync, then rename over it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would make shipped files unreadable to other users
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_card(card: PretrainedCfg, path: str | os.PathLike) -> None:
    atomic_write_bytes(path, (json.dumps(card.to_dict(), indent=2, sort_keys=False) + "\n").encode())
