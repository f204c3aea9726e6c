import http.server
import os
import threading
from pathlib import Path

import pytest
from hypothesis import settings

import hub
from hub.errors import DatasetUnavailable

# CI replays the same examples every run (derandomize), so a red build always has a reproducible cause;
# HYPOTHESIS_PROFILE=explore draws fresh, more numerous examples to hunt for new failures.
settings.register_profile("ci", max_examples=40, derandomize=True, print_blob=True)
settings.register_profile("explore", max_examples=400, derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("HUB_DATA_DIR", str(REPO.parent / "shared" / "data"))
# CI sets HUB_REQUIRE_DATA=1: there a dataset that is missing fails its tests instead of skipping them, so a
# green CI run has run every test on real data. Elsewhere (a fresh clone, no ../shared, no network) they skip.
REQUIRE_DATA = os.environ.get("HUB_REQUIRE_DATA") == "1"
# HUB_DATA_GUARD=1 (set by tests/integration/test_fresh_clone.py, with HUB_DATA_DIR an empty folder): a test is stopped
# where its long work would start (a fit, an export, a child process), skipping with GUARD_REASON, so every data test's
# own set-up runs in seconds and only one that errors before finding its data, instead of skipping, fails.
DATA_GUARD = os.environ.get("HUB_DATA_GUARD") == "1"
GUARD_REASON = "HUB_DATA_GUARD: stopped at"


def pytest_configure(config):
    if DATA_GUARD:
        import subprocess

        import pytorch_lightning as pl
        import torch.export

        for owner, method, work in ((pl.Trainer, "fit", "training"), (torch.export, "export", "an export"),
                                    (subprocess.Popen, "__init__", "a child process")):
            def stop(*args, work=work, **kwargs):
                pytest.skip(f"{GUARD_REASON} {work}")

            setattr(owner, method, stop)


def _unavailable_dataset(err: BaseException | None) -> DatasetUnavailable | None:
    """The :class:`DatasetUnavailable` behind ``err`` (itself, its cause or its context), if any."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, DatasetUnavailable):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def _skip_when_data_is_missing():
    try:
        return (yield)
    except Exception as err:
        missing = _unavailable_dataset(err)
        if missing is None or REQUIRE_DATA:
            raise
        pytest.skip(f"dataset {missing.dataset!r} is not available (no local copy, no download): {missing}")


def pytest_collection_modifyitems(items):
    """Tests under tests/integration/ need real data, train, or start processes: marked, so `-m "not integration"`
    runs the unit layer alone."""
    for item in items:
        if "integration" in item.path.parts:
            item.add_marker(pytest.mark.integration)


# A test (or its fixture) that needs a dataset the loaders cannot find or download skips, naming the dataset.
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _skip_when_data_is_missing())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _skip_when_data_is_missing())


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Each test gets its own weight cache and runs offline unless it says otherwise."""
    monkeypatch.setenv("HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HUB_RUN_DIR", raising=False)


@pytest.fixture
def repo() -> Path:
    return REPO


# ---- downloads against a local HTTP server (tests/unit/test_weights.py, tests/integration/test_reliability_runs.py)

class _Handler(http.server.BaseHTTPRequestHandler):
    payload = b""
    truncate_to: int | None = None

    def do_GET(self):  # noqa: N802
        body = self.payload if self.truncate_to is None else self.payload[: self.truncate_to]
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.payload)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    """A local HTTP server of the digits tag's weights: ``(httpd, handler, url)``; set ``handler.truncate_to`` to cut
    the body short."""
    card = hub.model_card("vit_digits.sklearn")
    handler = type("Handler", (_Handler,), {"payload": card.local_file.read_bytes(), "truncate_to": None})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd, handler, f"http://127.0.0.1:{httpd.server_address[1]}/vit_digits.sklearn.safetensors"
    httpd.shutdown()
