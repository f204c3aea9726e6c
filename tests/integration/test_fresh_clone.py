"""A fresh clone with no shared data (issue 72): every integration test either passes or skips naming the dataset it
lacks; none errors. The data tests run again in a child pytest with ``HUB_DATA_DIR`` an empty folder and
``HUB_DATA_GUARD=1`` (``tests/conftest.py``), which stops each test where its long work would start (a fit, an
export, a child process), so the guard takes minutes, not the integration layer's half hour."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import GUARD_REASON, REPO

SKIP_LINE = re.compile(r"^SKIPPED \[\d+\] (?P<where>\S+): (?P<reason>.*)$", re.MULTILINE)


@pytest.mark.slow
@pytest.mark.timeout(2400)  # the child runs the integration layer's set-up: 5-10 minutes on 2 cores
def test_every_data_test_skips_naming_its_dataset_without_the_shared_data(tmp_path):
    empty = tmp_path / "no_shared_data"
    empty.mkdir()
    env = {**os.environ, "HUB_DATA_DIR": str(empty), "HUB_DATA_GUARD": "1"}
    env.pop("HUB_REQUIRE_DATA", None)  # CI's: here a missing dataset must skip, which is what is checked
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/integration", "-q", "-rs", "-p", "no:cacheprovider",
         "--deselect", "tests/integration/test_fresh_clone.py"],
        cwd=REPO, env=env, capture_output=True, text=True)
    tail = result.stdout[-6000:] + result.stderr[-2000:]
    assert result.returncode == 0, f"a test errored instead of skipping without the shared data:\n{tail}"
    reasons = [m["reason"] for m in SKIP_LINE.finditer(result.stdout)]
    unnamed = [r for r in reasons if not (r.startswith(GUARD_REASON) or r.startswith("dataset "))]
    assert not unnamed, f"skips that name no dataset: {unnamed}"
    assert any(r.startswith("dataset ") for r in reasons), tail  # the guard did see data tests skip
    assert not list(empty.iterdir()), "a test wrote into the data folder"
