"""Benchmark: ``attnhub finetune FAMILY --data PATH`` from scratch on real data written the way a user holds it,
against the classical baseline that ``finetune`` fits on the same split. One function per domain; each writes its
user-form data set into a temporary folder, runs the command for each seed and prints a markdown row per run:
command, data, model metric, baseline metric, seed. Run from the root of a source checkout with
``HUB_DATA_DIR`` set, e.g. ``python -c "from benchmarks.user_data import graph; graph()"``.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path


def graph(seeds: tuple[int, ...] = (1, 2, 3), family: str = "gat", overrides: tuple[str, ...] = (),
          work_dir: str | None = None) -> list[dict]:
    """CiteSeer (Planetoid files in ``$HUB_DATA_DIR/planetoid``) as a user's graph folder: nodes.csv with string
    ids ``paper-<index>``, the 3,703 word columns ``w0``..., a ``label`` column (``topic-<class>``; blank for the
    15 isolated nodes the Planetoid files give no label) and the public split (120/500/1000) as a ``split``
    column; edges.csv with each undirected edge once. Then ``attnhub finetune FAMILY --data DIR seed=S`` per seed,
    CPU, the default recipe otherwise (``overrides`` are appended). Returns one dict per run."""
    from graph.data import read_planetoid
    from hub.data import data_dir

    raw = read_planetoid("CiteSeer")
    test_index = [int(line) for line in (data_dir() / "planetoid" / "ind.citeseer.test.index").read_text().split()]
    unlabelled = set(range(min(test_index), max(test_index) + 1)) - set(test_index)  # padded by PyG's reader
    root = Path(work_dir or tempfile.mkdtemp(prefix="user_graph_"))
    folder = root / "citeseer"
    folder.mkdir(parents=True, exist_ok=True)
    split = [next((s for s in ("train", "val", "test") if raw[f"{s}_mask"][i]), "") for i in range(raw.num_nodes)]
    features = raw.x  # (N, 3703) dense 0/1 word indicators
    with open(folder / "nodes.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", *[f"w{j}" for j in range(features.shape[1])], "label", "split"])
        for i, row in enumerate(features.tolist()):
            label = "" if i in unlabelled else f"topic-{int(raw.y[i])}"
            writer.writerow([f"paper-{i}", *[f"{v:g}" for v in row], label, split[i]])
    src, dst = raw.edge_index
    with open(folder / "edges.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["src", "dst"])
        writer.writerows([f"paper-{a}", f"paper-{b}"] for a, b in zip(src.tolist(), dst.tolist()) if a <= b)
    results = []
    print("| command | data | model test/acc | baseline test/acc | seed |\n| --- | --- | --- | --- | --- |")
    for seed in seeds:
        options = [f"seed={seed}", "trainer.accelerator=cpu", *overrides]
        out = subprocess.run([sys.executable, "-m", "hub", "finetune", family, "--data", str(folder), *options,
                              "--no-progress", "--output-dir", str(root / "runs")],
                             capture_output=True, text=True, check=True).stdout
        summary = json.loads((Path(out.split("run folder: ")[1].split()[0]) / "metrics.json").read_text())
        result = {"command": " ".join(["attnhub finetune", family, "--data citeseer/", *options]), "seed": seed,
                  "model": summary["test"]["test/acc"],
                  "baseline": summary["baseline"]["test"]["test/acc"], "epoch": summary["best"]["epoch"]}
        results.append(result)
        print(f"| `{result['command']}` | CiteSeer as nodes.csv/edges.csv, string ids, public split column "
              f"(120/500/1000) | {result['model']:.4f} | {result['baseline']:.4f} | {seed} |", flush=True)
    return results
