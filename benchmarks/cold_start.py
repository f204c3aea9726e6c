"""Cold start (issue 69): ``hub.load(tag)`` against timm's ``import timm; timm.create_model("resnet18")``, and
``attnhub predict`` of one image, each in fresh processes, rounds interleaved so that the machine's load falls on all
alike; the minimum of the rounds (the least disturbed run) and the median. Writes ``benchmarks/results/cold_start.md``.

    python -m benchmarks.cold_start [--tag airbench_cbam_32.cifar10] [--rounds 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

RESULTS = Path(__file__).parent / "results" / "cold_start.md"
REPO = Path(__file__).resolve().parents[1]


def _run(command: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, from the kernel's accounting of the child) of ``command`` run to
    its end in a fresh process, interpreter start included. CPU time barely moves when other processes share the
    cores; wall time does."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    child = subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"{command} exited with {child.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tag", default="airbench_cbam_32.cifar10", help="the hub tag loaded (default: the issue's)")
    parser.add_argument("--rounds", type=int, default=5, help="fresh processes per command (default 5)")
    args = parser.parse_args(argv)
    image = Path(tempfile.mkdtemp()) / "image.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(image)
    commands = {
        "timm: import + create_model('resnet18')": [sys.executable, "-c",
                                                     "import timm; timm.create_model('resnet18')"],
        f"hub.load('{args.tag}')": [sys.executable, "-c", f"import hub; hub.load({args.tag!r})"],
        "python -c 'import torch' (floor)": [sys.executable, "-c", "import torch"],
        f"attnhub predict {args.tag} image.png": [sys.executable, "-m", "hub.cli", "predict", args.tag, str(image),
                                                   "--no-progress"],
    }
    walls: dict[str, list[float]] = {name: [] for name in commands}
    cpus: dict[str, list[float]] = {name: [] for name in commands}
    load = os.getloadavg()[0]
    for _ in range(args.rounds):
        for name, command in commands.items():
            wall, cpu = _run(command)
            walls[name].append(wall)
            cpus[name].append(cpu)
    timm = "timm: import + create_model('resnet18')"
    lines = [f"# Cold start ({args.rounds} fresh processes each, interleaved; {os.cpu_count()} CPUs)", "",
             "`python -m benchmarks.cold_start`: a fresh process running the command, interpreter start included, "
             "one thread (`OMP_NUM_THREADS=1`): its wall seconds and its CPU seconds (user + system), minimum of the "
             f"rounds. Load average at the start: {load:.1f} (other work on the machine stretches wall time, "
             "hardly CPU time).", "",
             "| command | wall min s | wall median s | CPU min s | wall min / timm's | CPU min / timm's |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name in commands:
        lines.append(f"| {name} | {min(walls[name]):.2f} | {statistics.median(walls[name]):.2f} | "
                     f"{min(cpus[name]):.2f} | {min(walls[name]) / min(walls[timm]):.2f} | "
                     f"{min(cpus[name]) / min(cpus[timm]):.2f} |")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
