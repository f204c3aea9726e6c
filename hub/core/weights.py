"""Safetensors weights: fetch, verify the full sha256 at every load, and load with named key errors.

Sources are a file beside the model card (shipped in the package or in a run folder), a local
path, or an http(s) URL downloaded into the cache (``HUB_CACHE``, default
``~/.cache/attention-hub``). Downloads go to a unique temporary file in the cache folder and are
renamed only once their size and hash check out, so an interrupted download leaves nothing and two
processes fetching the same file both end with one valid copy. ``HUB_OFFLINE=1`` never opens a
socket. Pickle checkpoints are never read here; ``torch.load`` is used elsewhere only with
``weights_only=True``.
"""
from __future__ import annotations

import hashlib
import logging
import os
import urllib.error
import urllib.request
from pathlib import Path
from typing import Mapping

import torch
from safetensors.torch import load as safetensors_load
from safetensors.torch import save as safetensors_save

from hub.errors import DownloadError, OfflineError, WeightsError
from hub.io import atomic_file, atomic_write_bytes

log = logging.getLogger("hub")


def cache_dir() -> Path:
    return Path(os.environ.get("HUB_CACHE", Path.home() / ".cache" / "attention-hub"))


def env_flag(name: str) -> bool:
    """Whether the environment variable ``name`` is set to 1, true or yes."""
    return os.environ.get(name, "0").lower() in ("1", "true", "yes")


def is_offline() -> bool:
    return env_flag("HUB_OFFLINE")


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _download(url: str, dest: Path, expected_bytes: int | None, timeout: float = 60.0) -> None:
    """Stream ``url`` to a unique temporary file beside ``dest`` and rename it once complete."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    received = 0
    try:
        with atomic_file(dest, suffix=".part") as f, urllib.request.urlopen(url, timeout=timeout) as response:
            announced = response.headers.get("Content-Length")
            while chunk := response.read(1 << 20):
                f.write(chunk)
                received += len(chunk)
            expected = expected_bytes if expected_bytes is not None else (int(announced) if announced else None)
            if expected is not None and received != expected:
                raise DownloadError(f"download of {url} is incomplete: received {received} bytes, expected {expected}")
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise DownloadError(f"download of {url} failed after {received} bytes"
                           f"{f' of {expected_bytes}' if expected_bytes else ''}: {err}") from err


def fetch(source: str | os.PathLike, sha256: str | None = None, num_bytes: int | None = None) -> Path:
    """Return a local path for ``source`` (a path or an http(s) URL), downloading into the cache."""
    source = str(source)
    if not source.startswith(("http://", "https://")):
        path = Path(source)
        if not path.is_file():
            raise WeightsError(f"weight file {path} does not exist")
        return path
    name = source.rstrip("/").rsplit("/", 1)[-1]
    dest = cache_dir() / (sha256[:16] if sha256 else sha256_bytes(source.encode())[:16]) / name
    if dest.is_file():
        return dest
    if is_offline():
        raise OfflineError(f"{source} is not in the cache ({dest}) and HUB_OFFLINE=1 forbids downloading; "
                           "unset HUB_OFFLINE or copy the file there")
    _download(source, dest, num_bytes)
    return dest


def read_verified(path: str | os.PathLike, sha256: str | None) -> bytes:
    """Read a file and check its full sha256 (every load, not only after download)."""
    path = Path(path)
    data = path.read_bytes()
    actual = sha256_bytes(data)
    if sha256 is not None and actual != sha256:
        raise WeightsError(f"sha256 mismatch for {path}: expected {sha256}, got {actual}; "
                           "the file is corrupt or was tampered with, delete it and fetch it again")
    return data


def load_state_dict(path: str | os.PathLike, sha256: str | None) -> dict[str, torch.Tensor]:
    data = read_verified(path, sha256)
    try:
        return safetensors_load(data)
    except Exception as err:  # safetensors raises its own SafetensorError on a bad header
        raise WeightsError(f"{path} is not a valid safetensors file: {err}") from err


def save_state_dict(state_dict: Mapping[str, torch.Tensor], path: str | os.PathLike,
                    metadata: dict[str, str] | None = None) -> str:
    """Write a state dict as safetensors atomically; returns the file's sha256.

    Tensors that share memory (timm's CoaT reuses one convolution under several names) are written
    once per name: safetensors refuses aliases, and a copy per name keeps every key loadable strictly.
    """
    tensors, seen = {}, set()
    for key, value in state_dict.items():
        value = value.detach().cpu().contiguous()
        storage = value.untyped_storage().data_ptr()
        tensors[key] = value.clone() if storage in seen else value
        seen.add(storage)
    data = safetensors_save(tensors, metadata=metadata)
    atomic_write_bytes(path, data)
    return sha256_bytes(data)


def apply_state_dict(model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor],
                     skip_prefix: str | None = None, source: str = "weights") -> None:
    """Load ``state_dict`` strictly, raising with the names of missing, unexpected and mis-shaped keys.

    Keys under ``skip_prefix`` (a re-initialised classifier) are neither loaded nor required.
    """
    def skipped(key: str) -> bool:
        return skip_prefix is not None and (key == skip_prefix or key.startswith(skip_prefix + "."))

    own = {k: v for k, v in model.state_dict().items() if not skipped(k)}
    given = {k: v for k, v in state_dict.items() if not skipped(k)}
    missing = sorted(set(own) - set(given))
    unexpected = sorted(set(given) - set(own))
    mis_shaped = [f"{k}: model {tuple(own[k].shape)} vs file {tuple(given[k].shape)}"
                  for k in sorted(set(own) & set(given)) if own[k].shape != given[k].shape]
    if missing or unexpected or mis_shaped:
        parts = []
        if missing:
            parts.append(f"missing keys {missing}")
        if unexpected:
            parts.append(f"unexpected keys {unexpected}")
        if mis_shaped:
            parts.append(f"mis-shaped keys {mis_shaped}")
        raise WeightsError(f"{source} does not fit the model: " + "; ".join(parts))
    model.load_state_dict(given, strict=False)
