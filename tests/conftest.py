import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("HUB_DATA_DIR", str(REPO.parent / "shared" / "data"))


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Each test gets its own weight cache and runs offline unless it says otherwise."""
    monkeypatch.setenv("HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HUB_RUN_DIR", raising=False)


@pytest.fixture
def repo() -> Path:
    return REPO
