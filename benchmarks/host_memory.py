"""A CPU training step under glibc's default allocator settings against :func:`hub.run.host_memory.keep_freed_memory`
(what ``attnhub train`` sets), in the same run: writes ``benchmarks/results/host_memory.md``.

    python -m benchmarks.host_memory [--models airbench_halo_32,airbench_cbam_32] [--batch-size 1024] [--steps 4]

Each (model, setting) runs in a fresh process (glibc's thresholds are per process and move on their own once set
by use): SGD steps on one random batch of 32x32 images, channels_last as the airbench recipes train. Columns: the
median step after one warm-up step, the process's system CPU time (the kernel mapping and zeroing pages: what the
setting removes) and its peak resident memory (what it costs); the ratio is the default's step over the kept one's.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from benchmarks import RESULTS

DEFAULT_MODELS = ("airbench_halo_32", "airbench_cbam_32", "cct_4_3x2_32", "halonet_micro_32")
SETTINGS = ("glibc default", "keep_freed_memory")

CHILD = """
import json, resource, sys, time
import torch
import hub, vision  # noqa: F401  (registers the vision families)
from hub.run.host_memory import keep_freed_memory
name, batch_size, steps, keep = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
if keep:
    keep_freed_memory()
torch.manual_seed(0)
model = hub.create_model(name, num_classes=10).to(memory_format=torch.channels_last).train()
x = torch.randn(batch_size, 3, 32, 32).contiguous(memory_format=torch.channels_last)
y = torch.randint(0, 10, (batch_size,))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
seconds = []
for _ in range(steps + 1):
    start = time.perf_counter()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    seconds.append(time.perf_counter() - start)
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"steps": seconds[1:], "system_s": usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024}))
"""


def measure_one(name: str, batch_size: int, steps: int, keep: bool) -> dict:
    """One fresh process's step times, system CPU seconds and peak resident MB."""
    out = subprocess.run([sys.executable, "-c", CHILD, name, str(batch_size), str(steps), str(int(keep))],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def measure(models: tuple[str, ...], batch_size: int, steps: int) -> dict:
    import torch

    rows = {name: {setting: measure_one(name, batch_size, steps, setting == SETTINGS[1]) for setting in SETTINGS}
            for name in models}
    return {"threads": torch.get_num_threads(), "batch_size": batch_size, "steps": steps, "rows": rows}


def format_report(result: dict) -> list[str]:
    lines = [f"CPU, {result['threads']} threads, batches of {result['batch_size']}, median of {result['steps']} steps "
             "after a warm-up step.", "",
             "| model | allocator | step (s) | system CPU (s) | peak RSS (MB) | default / kept |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for name, by_setting in result["rows"].items():
        default, kept = (statistics.median(by_setting[s]["steps"]) for s in SETTINGS)
        for setting in SETTINGS:
            row = by_setting[setting]
            ratio = f"{default / kept:.2f}x" if setting == SETTINGS[1] else ""
            lines.append(f"| {name} | {setting} | {statistics.median(row['steps']):.2f} | {row['system_s']:.1f} | "
                         f"{row['peak_rss_mb']:,.0f} | {ratio} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help="families whose step is timed")
    parser.add_argument("--batch-size", type=int, default=1024, help="images per batch (default 1024)")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per process (default 4)")
    parser.add_argument("--out", default=str(RESULTS), help="folder of host_memory.md/.json (default: results)")
    args = parser.parse_args(argv)
    result = measure(tuple(args.models.split(",")), args.batch_size, args.steps)
    from hub.io import atomic_write_bytes

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / "host_memory.json", json.dumps(result, indent=1).encode())
    lines = ["# A CPU training step: glibc's allocator defaults against keep_freed_memory", "",
             "`python -m benchmarks.host_memory`: see the script's docstring for the columns.", "",
             *format_report(result), ""]
    atomic_write_bytes(out / "host_memory.md", "\n".join(lines).encode())
    print("\n".join(format_report(result)))


if __name__ == "__main__":
    main()
