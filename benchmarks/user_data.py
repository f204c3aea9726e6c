"""Every family from scratch on real data written the way a user holds it, against the classic baseline that
``attnhub finetune`` fits on the same split (issue 36). One function per domain writes its user-form data sets
under ``--out`` and runs the real CLI on them (``python -m hub finetune FAMILY --data FOLDER``), then prints one
markdown row per run: command, data, model metric, baseline metric, seeds.

    HUB_DATA_DIR=../shared/data python -m benchmarks.user_data timeseries [--out benchmarks/out/user_data]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path


def timeseries(out: Path = Path("benchmarks/out/user_data"), seeds: tuple[int, ...] = (1,)) -> list[str]:
    """RUL: the 100 FD001 training engines (HUB_DATA_DIR/cmapss) as one CSV per engine with its 21 sensors renamed
    (``temp_a``, ``pressure_b``, ...; the constant ones are dropped by the run), ``rul_attention`` from scratch;
    the run holds out 15% of the engines for test. Traffic: Los-loop (HUB_DATA_DIR/los_loop) as ``speeds.csv``
    (sensor ids as header, no time column: five-minute steps) and ``adjacency.csv`` (with the ids as header),
    ``traffic_gru`` from scratch. Both train on the CPU with the default recipe of their kind (early stopping)."""
    import numpy as np

    from hub.data import data_dir
    from timeseries.data import read_cmapss_units

    def _finetune(family: str, data: Path, runs: Path, seed: int, overrides: list[str]) -> dict:
        """``python -m hub finetune FAMILY --data DATA`` in a subprocess; the run's metrics.json (with its baseline)."""
        command = [sys.executable, "-m", "hub", "finetune", family, "--data", str(data), "--output-dir", str(runs),
                   "--no-progress", f"seed={seed}", *overrides]
        out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        run_dir = Path(out.split("run folder: ")[1].split()[0])
        return json.loads((run_dir / "metrics.json").read_text())


    def _row(command: str, data: str, results: list[dict], seeds: list[int]) -> str:
        """A markdown row: the compared metric of the model and of the baseline, per seed."""
        metric, name = results[0]["baseline"]["metric"], results[0]["baseline"]["name"]
        model = " / ".join(f"{r['test'][metric]:.3f}" for r in results)
        baseline = " / ".join(f"{r['baseline']['test'][metric]:.3f}" for r in results)
        return (f"| `{command}` | {data} | {metric} {model} | {name}: {baseline} | "
                f"{', '.join(map(str, seeds))} |")

    out = Path(out)
    units = out / "fd001_units"
    units.mkdir(parents=True, exist_ok=True)
    kinds = ("temp", "pressure", "speed", "ratio", "flow", "vibration", "current")
    sensors = [f"{kinds[i % len(kinds)]}_{'abcdefghijklmnopqrstu'[i]}" for i in range(21)]
    for unit, series in read_cmapss_units("train_FD001.txt").items():
        lines = [",".join(["cycle", *sensors])]
        lines += [",".join([str(cycle), *(repr(float(v)) for v in row)]) for cycle, row in enumerate(series, 1)]
        (units / f"engine_{unit:03d}.csv").write_text("\n".join(lines) + "\n")

    traffic = out / "los_loop_folder"
    traffic.mkdir(parents=True, exist_ok=True)
    source = data_dir() / "los_loop"
    (traffic / "speeds.csv").write_text((source / "los_speed.csv").read_text())  # header: the sensor ids
    ids = (source / "los_speed.csv").read_text().splitlines()[0]
    adjacency = np.loadtxt(source / "los_adj.csv", delimiter=",")
    np.savetxt(traffic / "adjacency.csv", adjacency, delimiter=",", header=ids, comments="", fmt="%.6g")

    rows = ["| command | data | model (test) | baseline (test) | seeds |", "|---|---|---|---|---|"]
    print("\n".join(rows), flush=True)
    for family, folder, data in [
        ("rul_attention", units, "FD001 training engines as 100 unit CSVs, 21 renamed sensors; 15 held-out test "
                                 "engines, every window"),
        ("traffic_gru", traffic, "Los-loop as speeds.csv (207 sensors, 2016 five-minute steps) + adjacency.csv; "
                                 "chronological 70/10/20"),
    ]:
        results = [_finetune(family, folder, out / "runs", seed, ["trainer.accelerator=cpu"]) for seed in seeds]
        rows.append(_row(f"attnhub finetune {family} --data {folder.name}", data, results, list(seeds)))
        print(rows[-1], flush=True)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("domains", nargs="+", help="the functions of this file to run (timeseries, ...)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/user_data"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    args = parser.parse_args()
    for domain in args.domains:
        globals()[domain](args.out, tuple(args.seeds))
