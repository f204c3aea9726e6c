"""The CLI keeps Lightning's tips and device banners out of the terminal unless ``--verbose`` (issue 69). A Trainer
is built (not fitted) in a fresh interpreter after the CLI's logging set-up, as ``attnhub train`` does."""
import os
import subprocess
import sys

import pytest

SCRIPT = """
import sys
if sys.argv[2] == "first":  # a script that imports Lightning before calling the CLI's main
    import pytorch_lightning
from hub.cli import _configure_logging
_configure_logging(sys.argv[1] == "verbose")
import pytorch_lightning as pl
pl.Trainer(accelerator="cpu", devices=1, enable_checkpointing=False, enable_progress_bar=False)
print("built")
"""


def _output(mode: str, lightning: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", SCRIPT, mode, lightning], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout + done.stderr


@pytest.mark.parametrize("lightning", ["after", "first"])
@pytest.mark.parametrize("mode", ["quiet", "verbose"])
def test_lightning_banners_only_with_verbose(mode, lightning):
    out = _output(mode, lightning)
    assert "built" in out
    shown = "GPU available" in out
    assert shown == (mode == "verbose"), out
    if mode == "quiet":
        assert "Tip:" not in out and "litlogger" not in out, out
