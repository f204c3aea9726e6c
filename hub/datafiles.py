"""Reading the user's and the datasets' files: CSV rows and frames with clear errors, where datasets are found,
class folders, row names. Light (no Lightning, no torch): the input kinds' readers, which ``predict`` and ``serve``
use, import it, while :mod:`hub.data` (the training data modules) re-exports it."""
from __future__ import annotations

import os
from pathlib import Path

from hub.errors import DataError, DatasetUnavailable, DownloadError, OfflineError


def read_csv_rows(path: str | Path, expected: str) -> list[list[str]]:
    """The rows of a user's CSV file (header first), read as UTF-8 (a byte-order mark is allowed).

    A missing, unreadable, non-UTF-8 or empty file raises a :class:`DataError` naming the file and
    ``expected``, a description of what the file should hold.
    """
    import csv

    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.reader(f))
    except FileNotFoundError:
        raise DataError(f"{path} not found; expected {expected}") from None
    except UnicodeDecodeError as err:
        raise DataError(f"{path} is not UTF-8 text (byte {err.start}: {err.reason}); expected a CSV file with "
                        f"{expected}") from None
    except (OSError, csv.Error) as err:
        raise DataError(f"cannot read {path} as CSV ({err}); expected {expected}") from None
    if not rows or not any(cell.strip() for cell in rows[0]):
        raise DataError(f"{path} is empty or has a blank header row; expected {expected}")
    return rows


def read_csv_frame(path: str | Path, expected: str, **read_csv_args):
    """A user's CSV file as a pandas DataFrame (``read_csv_args`` go to ``pandas.read_csv``), with the same
    clear errors as :func:`read_csv_rows`."""
    import pandas as pd

    path = Path(path)
    try:
        frame = pd.read_csv(path, encoding="utf-8-sig", **read_csv_args)
    except FileNotFoundError:
        raise DataError(f"{path} not found; expected {expected}") from None
    except UnicodeDecodeError as err:
        raise DataError(f"{path} is not UTF-8 text (byte {err.start}: {err.reason}); expected a CSV file with "
                        f"{expected}") from None
    except pd.errors.EmptyDataError:
        raise DataError(f"{path} is empty; expected {expected}") from None
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise DataError(f"cannot read {path} as CSV ({str(err).strip()}); expected {expected}") from None
    if frame.empty:
        raise DataError(f"{path} has a header but no data rows; expected {expected}")
    return frame


def data_dir() -> Path:
    """Where local copies of datasets are looked for first (``HUB_DATA_DIR``), else the download cache."""
    return Path(os.environ.get("HUB_DATA_DIR", download_dir()))


def download_dir() -> Path:
    """Where downloaded datasets are kept: ``data`` in the hub's cache (``HUB_CACHE``), never in ``HUB_DATA_DIR``,
    which may be a shared read-only folder of local copies."""
    from hub.core.weights import cache_dir

    return cache_dir() / "data"


def dataset_file(dataset: str, local: Path, url: str | None, sha256: str, num_bytes: int | None = None) -> Path:
    """The file of a public dataset: ``local`` (under :func:`data_dir`) when present, else ``url`` downloaded
    into the cache (``hub.core.weights.fetch``). The caller checks the sha256 of what it reads.

    Raises :class:`DatasetUnavailable` naming ``dataset`` when there is no local copy and no download (offline,
    no network, or no public ``url``)."""
    from hub.core.weights import fetch

    if local.is_file():
        return local
    if url is None:
        raise DatasetUnavailable(dataset, f"{dataset}: {local} not found and there is no public download; put the "
                                          "file there (see the dataset's PROVENANCE.md) or set HUB_DATA_DIR")
    try:
        return fetch(url, sha256, num_bytes)
    except (OfflineError, DownloadError) as err:
        raise DatasetUnavailable(dataset, f"{dataset}: {local} not found (set HUB_DATA_DIR to a folder with a "
                                          f"local copy) and {err}") from err


def local_copy(dataset: str, *parts: str) -> Path:
    """The local copy of ``dataset`` (``data_dir() / dataset``), checked to hold every one of ``parts`` (files or
    folders relative to it, e.g. ``"train_rest"``) before anything is built from it.

    Raises :class:`DatasetUnavailable` naming ``dataset`` and the missing parts, so code that writes derived data
    (benchmark folders, near shifts) stops before writing, and a test suite skips it naming the dataset."""
    root = data_dir() / dataset
    missing = [part for part in parts or (".",) if not (root / part).exists()]
    if missing:
        raise DatasetUnavailable(dataset, f"{dataset}: {root} lacks {', '.join(missing)}; set HUB_DATA_DIR to the "
                                          f"folder holding {dataset}/ (see the dataset's PROVENANCE.md)")
    return root


def scan_class_folders(root: Path, suffixes: tuple[str, ...], what: str, files_noun: str, example: str,
                       min_classes: int = 1) -> dict[str, list[Path]]:
    """The files of each class folder of a user's folder ``root/<class>/...``, for any file type.

    Args:
        root: the folder of class folders; sub-folders whose name starts with ``.`` are no classes.
        suffixes: the file suffixes to take, lower case with the dot (``(".wav", ".flac")``); a file's suffix is
            compared in lower case.
        what: what the folder holds, for the message of a missing folder (``"image"``: "image folder ... does not
            exist").
        files_noun: the files in the message of an empty class folder (``"images"``: "... hold no images").
        example: a class folder and file pattern shown when there is no class folder (``"cat/*.png"``).
        min_classes: the fewest classes accepted (2 where the scan alone must make a classification task).

    Returns:
        ``{class name: files}``, the class names sorted; each class's files are those at any depth below its folder
        with one of ``suffixes``, sorted.

    Raises:
        DataError: ``root`` is not a folder; it has no class folder; a class folder holds no file with one of
            ``suffixes`` (the message names those classes and the suffixes); fewer than ``min_classes`` classes
            ("... has a single class [...]; classification needs at least 2 class folders").
    """
    if not root.is_dir():
        raise DataError(f"{what} folder {root} does not exist or is not a folder")
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DataError(f"{root} has no class folders; expected one sub-folder per class (e.g. {root}/{example})")
    found = {c.name: sorted(f for f in c.rglob("*") if f.suffix.lower() in suffixes) for c in classes}
    empty = [name for name, files in found.items() if not files]
    if empty:
        raise DataError(f"class folders {empty} in {root} hold no {files_noun} (looked for {', '.join(suffixes)})")
    if len(found) < min_classes:
        what_found = f"a single class {sorted(found)}" if len(found) == 1 else f"the classes {sorted(found)}"
        raise DataError(f"{root} has {what_found}; classification needs at least {min_classes} class folders")
    return found


def row_numbers(count: int, first: int = 1, source: str | None = None) -> list[str]:
    """Names for the ``count`` rows of a user's table in prediction output, in order: ``str(first + i)``, or
    ``f"{source}:{first + i}"`` with ``source`` (e.g. a file's path, ``first=2`` giving its line numbers below a
    header). The default numbers data rows from 1, the header not counted. Raises nothing; ``count <= 0`` gives
    ``[]``."""
    return [f"{source}:{first + i}" if source is not None else str(first + i) for i in range(max(count, 0))]
