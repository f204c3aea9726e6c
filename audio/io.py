"""Reading and checking the user's audio folder (``root/<class>/*.wav|flac``); the audio files themselves are
read by :func:`audio.features.read_audio`, shared with the features of the datasets and models."""
from __future__ import annotations

from pathlib import Path

from audio.features import AUDIO_SUFFIXES
from hub.errors import DataError


def scan_audio_folder(root: Path) -> dict[str, list[Path]]:
    """``root/<class>/*.wav|flac`` -> files per class, with errors for a missing root, no class
    folders, an empty class folder and a single class."""
    if not root.is_dir():
        raise DataError(f"audio folder {root} does not exist or is not a folder")
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    found = {c.name: sorted(f for f in c.rglob("*") if f.suffix.lower() in AUDIO_SUFFIXES) for c in classes}
    if not found:
        raise DataError(f"{root} has no class folders; expected one sub-folder per class (e.g. {root}/dog/*.wav)")
    empty = [name for name, files in found.items() if not files]
    if empty:
        raise DataError(f"class folders {empty} in {root} hold no audio (looked for {', '.join(AUDIO_SUFFIXES)})")
    if len(found) < 2:
        raise DataError(f"{root} has a single class {sorted(found)}; classification needs at least 2 class folders")
    return found
