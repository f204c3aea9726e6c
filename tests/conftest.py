import os
from pathlib import Path

import pytest
from hypothesis import settings

# CI replays the same examples every run (derandomize), so a red build always has a reproducible cause;
# HYPOTHESIS_PROFILE=explore draws fresh, more numerous examples to hunt for new failures.
settings.register_profile("ci", max_examples=40, derandomize=True, print_blob=True)
settings.register_profile("explore", max_examples=400, derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

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
