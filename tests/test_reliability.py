"""Runs and predictions hold up under faults: SIGKILL and resume, failed checkpoint writes, 10k inputs."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from PIL import Image

from hub.training import AtomicCheckpointIO, train
from hub.weights import load_state_dict

EPOCHS = ["trainer.max_epochs=3", "trainer.limit_val_batches=2"]


@pytest.mark.slow
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted(repo, tmp_path):
    recipe = str(repo / "recipes" / "quickstart.yaml")
    straight = train(recipe, [*EPOCHS, f"output_dir={tmp_path / 'a'}"], progress=False)

    cmd = [sys.executable, "-m", "hub", "train", recipe, *EPOCHS, f"output_dir={tmp_path / 'b'}", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    metrics = None
    while time.time() < deadline and proc.poll() is None:
        found = list((tmp_path / "b").rglob("metrics.csv"))
        if found and len(found[0].read_text().strip().splitlines()) >= 2:  # epoch 0 done, now inside epoch 1
            metrics = found[0]
            time.sleep(0.3)
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.02)
    proc.wait(60)
    assert metrics is not None and proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    run = metrics.parent
    assert not (run / "metrics.json").exists()
    resumed = train(resume=str(run), progress=False)
    a = load_state_dict(straight / "model.safetensors", None)
    b = load_state_dict(resumed / "model.safetensors", None)
    for key in a:  # tolerance: exact up to float32 rounding of the same operations
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6)
    test_a = json.loads((straight / "metrics.json").read_text())["test"]
    test_b = json.loads((resumed / "metrics.json").read_text())["test"]
    assert test_a == pytest.approx(test_b, abs=1e-6)


def test_failed_checkpoint_write_keeps_previous_last(tmp_path, monkeypatch):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": torch.tensor(1)}, path)

    def crash(fd):
        raise OSError("disk vanished mid-write")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError):
        io.save_checkpoint({"step": torch.tensor(2)}, path)
    monkeypatch.undo()
    assert io.load_checkpoint(path)["step"].item() == 1
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def _peak_rss_kib(files, out_csv):
    code = ("import resource, sys; from hub.cli import main; "
            f"rc = main(['predict', 'vit_digits.sklearn', '--out', {str(out_csv)!r}, '--batch-size', '256', "
            "'--no-progress', *sys.argv[1:]]); "
            "print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(rc)")
    result = subprocess.run([sys.executable, "-c", code, *map(str, files)], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.splitlines()) == len(files)
    return int(result.stderr.rsplit("PEAK", 1)[1].split()[0])


@pytest.mark.slow
def test_predict_10k_inputs_streams_with_bounded_memory(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "images"
    folder.mkdir()
    files = []
    for i in range(10_000):
        path = folder / f"{i:05d}.png"
        Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8), mode="L").save(path)
        files.append(path)
    small = _peak_rss_kib(files[:1000], tmp_path / "small.csv")
    large = _peak_rss_kib(files, tmp_path / "large.csv")
    assert len((tmp_path / "large.csv").read_text().splitlines()) == 10_001
    assert large - small < 40 * 1024, f"peak RSS grew from {small} KiB to {large} KiB with 10x the inputs"
