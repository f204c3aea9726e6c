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


def _wall(command: list[str]) -> float:
    """Seconds of ``command`` run to its end in a fresh process (interpreter start included)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    subprocess.run(command, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


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
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.rounds):
        for name, command in commands.items():
            times[name].append(_wall(command))
    reference = min(times["timm: import + create_model('resnet18')"])
    lines = [f"# Cold start ({args.rounds} fresh processes each, interleaved; {os.cpu_count()} CPUs, shared)", "",
             "`python -m benchmarks.cold_start`: wall seconds of a fresh process running the command, interpreter "
             "start included.", "",
             "| command | min s | median s | min / timm's min |", "| --- | --- | --- | --- |"]
    for name, values in times.items():
        lines.append(f"| {name} | {min(values):.2f} | {statistics.median(values):.2f} | "
                     f"{min(values) / reference:.2f} |")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
