"""Atomic file writes: every checkpoint, weight file, card, download and report of the hub is written to a unique
temporary file beside its destination, fsynced, then renamed over it, so a reader never sees half a file and a
crash leaves the previous version (or nothing) in place."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[BinaryIO]:
    """A binary file to write ``path`` through: a unique temporary file beside it (``.<name>.<random><suffix>``),
    fsynced and renamed over ``path`` when the block ends; removed, ``path`` left as it was, when the block raises."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would make shipped files unreadable to other users
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to a unique temporary file beside ``path``, fsync, then rename over it."""
    with atomic_file(path) as f:
        f.write(data)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike) -> Iterator[Path]:
    """A folder to fill for ``path``: a unique temporary folder beside it, renamed to ``path`` when the block ends;
    removed, with all it holds, when the block raises, so a reader finds either the whole folder or none. ``path``
    must not exist yet (a finished folder is reused by its callers, never overwritten)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}."))
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
