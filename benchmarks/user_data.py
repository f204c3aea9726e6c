"""Issue 36 item 5: every family trained from scratch on real data written the way a user holds it, each run beside
the classical baseline that ``attnhub finetune`` fits on the same split. One function per domain prints one markdown
row per run: the command, the data, the model's test metric, the baseline's, the seed.

    python -c "from benchmarks.user_data import medical; medical()"
"""
from __future__ import annotations


def medical(out_dir: str = "runs/user_data", seeds: tuple[int, ...] = (0,), overrides: tuple[str, ...] = ()) -> None:
    """SUPPORT, GBSG (Rotterdam + GBSG) and WHAS of the DeepSurv files as plain CSVs with readable column names (those
    of ``medical.data.DEEPSURV_SETS``, after PROVENANCE.md; the published train and test parts together, since the
    user's table is split by ``survival_csv``: 20% test, stratified by event, then 20% of the rest validates; a code
    column that PROVENANCE.md reads as categorical is written as text, so it goes through the categorical encoding),
    then ``attnhub finetune survival_fusion|deepsurv_mlp --data X.csv --time ... --event ...`` from scratch with the
    default recipe; the row gives the model's test Harrell's C and CoxPH's on the same split."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import h5py
    import numpy as np
    import pandas as pd

    from medical.data import DEEPSURV_SETS, deepsurv_file

    # set -> (time column, event column, {column written as text: prefix of its category names})
    layouts = {"support": ("days", "died", {"race": "race_code_"}),
               "gbsg": ("months", "event", {"tumour_size_category": "size_"}),
               "whas": ("days", "died", {})}
    root = Path(out_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    print("| command | data | model test/cindex | CoxPH test/cindex | seed |\n| --- | --- | ---: | ---: | ---: |")
    for name, (time, event, as_text) in layouts.items():
        with h5py.File(deepsurv_file(name), "r") as f:
            parts = [(f[s]["x"][:], f[s]["t"][:], f[s]["e"][:]) for s in ("train", "test")]
        table = pd.DataFrame(np.concatenate([p[0] for p in parts]), columns=DEEPSURV_SETS[name][5])
        for column, prefix in as_text.items():
            table[column] = [f"{prefix}{int(v)}" for v in table[column]]
        table[time] = np.concatenate([p[1] for p in parts])
        table[event] = np.concatenate([p[2] for p in parts]).astype(int)
        path = root / f"{name}.csv"
        table.to_csv(path, index=False)
        for family in ("survival_fusion", "deepsurv_mlp"):
            for seed in seeds:
                command = ["attnhub", "finetune", family, "--data", path.name, "--time", time, "--event", event]
                run = subprocess.run([sys.executable, "-m", "hub", "finetune", family, "--data", str(path),
                                      *command[5:], "--no-progress", "--output-dir", str(root / "runs"),
                                      "trainer.accelerator=cpu", f"seed={seed}", *overrides],
                                     cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True)
                if run.returncode:
                    raise RuntimeError(f"{' '.join(command)} failed:\n{run.stderr[-2000:]}")
                run_dir = Path(run.stdout.split("run folder: ")[1].split()[0])  # absolute: under root
                metrics = json.loads((run_dir / "metrics.json").read_text())
                data = (f"DeepSurv {name.upper()} as `{path.name}` ({len(table)} patients, "
                        f"{len(DEEPSURV_SETS[name][5])} covariates)")
                print(f"| `{' '.join(command + list(overrides))}` | {data} | {metrics['test']['test/cindex']:.4f} "
                      f"| {metrics['baseline']['test']['test/cindex']:.4f} | {seed} |", flush=True)
