"""The shared folder and table helpers of :mod:`hub.data` (issue 49, item 5): tmp_path folders, nothing trained."""
from __future__ import annotations

import pytest

from hub.data import local_copy, row_numbers, scan_class_folders
from hub.errors import DataError, DatasetUnavailable
from hub.io import atomic_folder

SUFFIXES = (".wav", ".flac")


def _touch(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def test_scan_class_folders_sorted_classes_and_filtered_files(tmp_path):
    b1 = _touch(tmp_path / "b" / "1.WAV")
    a2 = _touch(tmp_path / "a" / "sub" / "2.flac")  # any depth below the class folder
    a1 = _touch(tmp_path / "a" / "1.wav")
    _touch(tmp_path / "a" / "notes.txt")  # another suffix: left out
    _touch(tmp_path / ".cache" / "x.wav")  # a hidden folder: no class
    _touch(tmp_path / "top.wav")  # a file beside the class folders: no class
    found = scan_class_folders(tmp_path, SUFFIXES, "audio", "audio", "dog/*.wav", min_classes=2)
    assert list(found) == ["a", "b"]
    assert found == {"a": [a1, a2], "b": [b1]}


@pytest.mark.parametrize("case, message", [
    ("missing", r"sound folder .*missing does not exist or is not a folder"),
    ("flat", r"has no class folders; expected one sub-folder per class \(e.g. .*/dog/\*\.wav\)"),
    ("hole", r"class folders \['b'\] in .* hold no sounds \(looked for \.wav, \.flac\)"),
    ("one", r"has a single class \['a'\]; classification needs at least 2 class folders"),
])
def test_scan_class_folders_errors(tmp_path, case, message):
    root = tmp_path / case
    if case == "flat":
        _touch(root / "1.wav")
    elif case == "hole":
        _touch(root / "a" / "1.wav")
        (root / "b").mkdir()
        _touch(root / "b" / "readme.txt")
    elif case == "one":
        _touch(root / "a" / "1.wav")
    with pytest.raises(DataError, match=message):
        scan_class_folders(root, SUFFIXES, "sound", "sounds", "dog/*.wav", min_classes=2)


def test_scan_class_folders_accepts_one_class_by_default(tmp_path):
    only = _touch(tmp_path / "a" / "1.wav")
    assert scan_class_folders(tmp_path, SUFFIXES, "sound", "sounds", "dog/*.wav") == {"a": [only]}


def test_row_numbers():
    assert row_numbers(3) == ["1", "2", "3"]  # data rows from 1, the header not counted
    assert row_numbers(2, first=2, source="p.csv") == ["p.csv:2", "p.csv:3"]  # the file's lines below a header
    assert row_numbers(0) == [] and row_numbers(-1, source="p.csv") == []


def test_local_copy_names_the_dataset_and_every_missing_part(tmp_path, monkeypatch):
    monkeypatch.setenv("HUB_DATA_DIR", str(tmp_path))
    _touch(tmp_path / "cifar10" / "test" / "cat" / "0.jpg")
    assert local_copy("cifar10", "test/cat") == tmp_path / "cifar10"
    with pytest.raises(DatasetUnavailable, match="train_rest, test/dog") as raised:
        local_copy("cifar10", "train_rest", "test/cat", "test/dog")
    assert raised.value.dataset == "cifar10"
    with pytest.raises(DatasetUnavailable) as raised:
        local_copy("fsdd")  # no parts: the dataset's folder itself
    assert raised.value.dataset == "fsdd"


def test_atomic_folder_is_whole_or_absent(tmp_path):
    target = tmp_path / "derived" / "six_classes"
    with pytest.raises(DatasetUnavailable):
        with atomic_folder(target) as written:
            _touch(written / "train" / "a.jpg")
            raise DatasetUnavailable("cifar10", "the source ran out half-way")
    assert not target.exists() and list((tmp_path / "derived").iterdir()) == []  # no half folder, no temporary one
    with atomic_folder(target) as written:
        _touch(written / "train" / "a.jpg")
    assert (target / "train" / "a.jpg").is_file() and list((tmp_path / "derived").iterdir()) == [target]
