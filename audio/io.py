"""Reading and checking the user's audio folder (``root/<class>/*.wav|flac``); the audio files themselves are
read by :func:`audio.features.read_audio`, shared with the features of the datasets and models."""
from __future__ import annotations

from pathlib import Path

from audio.features import AUDIO_SUFFIXES
from hub.datafiles import scan_class_folders


def scan_audio_folder(root: Path) -> dict[str, list[Path]]:
    """``root/<class>/*.wav|flac`` -> files per class, with errors for a missing root, no class
    folders, an empty class folder and a single class (:func:`hub.data.scan_class_folders`)."""
    return scan_class_folders(root, AUDIO_SUFFIXES, "audio", "audio", "dog/*.wav", min_classes=2)
