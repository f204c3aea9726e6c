"""Reliability that takes other processes: ``attnhub predict`` on 10k inputs in bounded memory, and two processes
loading one card on a cold cache (in-process faults: tests/unit/test_reliability.py)."""
import multiprocessing
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from tests.unit.test_weights import _cache_files, _load_in_process, _url_card


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
    for i in range(10_000):  # 1,000 random images, each also under 9 more names (hard links: cheaper to write)
        path = folder / f"{i:05d}.png"
        if i < 1000:
            Image.fromarray(rng.integers(0, 256, (8, 8), dtype=np.uint8), mode="L").save(path)
        else:
            os.link(files[i % 1000], path)
        files.append(path)
    small = _peak_rss_kib(files[:1000], tmp_path / "small.csv")
    large = _peak_rss_kib(files, tmp_path / "large.csv")
    assert len((tmp_path / "large.csv").read_text().splitlines()) == 10_001
    assert large - small < 40 * 1024, f"peak RSS grew from {small} KiB to {large} KiB with 10x the inputs"


def test_two_processes_cold_cache_both_succeed(tmp_path, server):
    _, _, url = server
    _url_card(tmp_path, url)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_load_in_process, args=(str(tmp_path / "card.json"), str(tmp_path / "cache"), queue))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert sorted(queue.get() for _ in procs) == ["ok", "ok"]
    assert [p.name for p in _cache_files(tmp_path)] == ["vit_digits.sklearn.safetensors"]
