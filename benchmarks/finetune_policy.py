"""Issue 50: the fine-tune policy across data sizes. For each cell (a domain's data at one size) and seed,
``attnhub finetune SOURCE --data FOLDER`` with ``--policy auto`` trains the candidates that
:data:`hub.finetune.AUTO_RULE` gives for the size; each candidate's run folder holds its validation metric (what
``auto`` chooses on) and its test metric. Where ``auto``'s candidates do not include it, the previous default
(``--policy full-recipe-lr``: a full fine-tune at the card's own learning rate) is trained too, as the floor the
issue sets. The input kind's classical baseline is fitted on the same split by ``finetune`` itself. Every call passes
``cv_folds=0``: this compares the fine-tune policies' models on one split; the predictor's choice by folds (issue 68)
is measured by ``benchmarks.user_data``.

    HUB_DATA_DIR=../shared/data python -m benchmarks.finetune_policy tables audio images breastmnist --seeds 0 1
    python -m benchmarks.finetune_policy --report   # benchmarks/results/finetune_policy.md from the JSON

Cells (every test split fixed per cell, never trained on, the same for every seed):
- tables: rows the tag ``mlp.adult`` never saw (the published ``adult.test``) and the bank-churn table (another
  population and other columns: the tag's weights transfer where shapes match), at 500, 5,000 and all rows for
  training and validation (85/15), with 2,000 more rows in the same CSV and the split's fractions set so that its
  test split holds 2,000 rows;
- audio: FSDD digits 5-9 at 15, 50 and 150 clips per digit (george, jackson, lucas), tested on the 750 clips of the
  other three speakers, from ``ast_tiny`` pretrained on digits 0-4 alone (``recipes/audio/ast_tiny_fsdd_digits_0_4
  .yaml``, once, seed 0), so the digits are new to it;
- images: CIFAR-10 images from ``train_rest/`` (never seen by ``coat_lite_micro_32.cifar10_20k``, which was trained on
  ``train/``) at 100, 1,000 and 3,000 per class (all of ``train_rest/``: the issue's 5,000 would need images the tag
  was trained on), tested on 200 per class of the official test split;
- breastmnist: BreastMNIST's scans at 100 per class and all 546, from the same tag, tested on the official 156.
- breastmnist_cct: the same BreastMNIST folders (100 per class and all 546) fine-tuned from ``cct_4_3x2_32.cifar10``,
  a compact convolutional transformer of timm Blocks, so that the memory-token policy (issue 66) is compared with the
  probe, LP-FT and the full fine-tune from the same source (CoaT is not of timm Blocks);
- images_vit: the CIFAR-10 cells (100 per class by default) from ``vit_micro_patch4_32.cifar10``, trained on
  ``train/`` alone, a ViT of timm Blocks: memory tokens on the source's own classes, new images.
Results accumulate in ``benchmarks/results/finetune_policy.json`` (one entry per cell and seed, written after each).

``--policies memory`` trains these policies too, beside ``auto``'s candidates, in each cell and seed (a cell and seed
already in the results file keeps its candidates and gains the new ones: the runs are not repeated), with the
parameters each candidate trains (``parameters``: trained and total, per policy):

    HUB_DATA_DIR=../shared/data OMP_NUM_THREADS=1 python -m benchmarks.finetune_policy audio breastmnist_cct \
        --policies memory --seeds 0 1
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from hub.data import local_copy
from hub.finetune import finetune
from hub.io import atomic_write_bytes
from hub.models import load

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "finetune_policy.json"
TABLE_TEST_ROWS = 2000  # rows appended to each table cell as its test split
PREVIOUS_DEFAULT = "full-recipe-lr"
ADDED_POLICIES = ("memory",)  # trained beside auto's candidates (--policies), reported apart (added_report)
AUDIO_SOURCE = "RUN (ast_tiny pretrained on FSDD digits 0-4, seed 0)"  # the audio cells' source, named without its path


def run_cell(cell: dict, source: str, data: Path, seed: int, work: Path, overrides: list[str] = (),
             source_name: str | None = None, policies: tuple[str, ...] = (), **options) -> dict:
    """``finetune(source, data, policy="auto")`` for one seed, plus the previous default where ``auto`` did not train
    it; returns the cell's entry: each candidate's validation and test metric, epochs, seconds, the chosen policy,
    the baseline's test metric. ``source_name`` stands for a run folder ``source`` in the entry (no machine path).
    ``policies`` are trained too, each its own run, added to the candidates (not to ``auto``'s choice); where the
    results file has the cell and seed already, only they are trained, into its stored entry."""
    out = work / "runs"
    args = [*overrides, "trainer.accelerator=cpu", f"seed={seed}"]
    stored = _stored(cell["cell"], seed)
    entry = stored if stored is not None else _auto_entry(cell, source, data, seed, out, args, source_name, **options)
    for policy in policies:
        if policy in entry["candidates"]:
            continue
        run_dir, _ = finetune(source, str(data), args, str(out), progress=False, policy=policy, cv_folds=0, **options)
        kept = json.loads((run_dir / "metrics.json").read_text())["policy"]["candidates"][policy]
        entry["candidates"][policy] = {**_candidate(run_dir, kept, entry["metric"]), **trained_parameters(run_dir)}
    if policies:
        whole = trained_parameters(load(source, num_classes=entry["rule"]["classes"]))
        probe = trained_parameters(load(source, num_classes=entry["rule"]["classes"]), classifier_only=True)
        for policy, candidate in entry["candidates"].items():
            candidate.update({} if policy == "memory" else probe if policy == "linear-probe" else whole)
    return entry


def _stored(cell: str, seed: int) -> dict | None:
    """The results file's entry of ``cell`` and ``seed``, if any."""
    rows = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    return next((r for r in rows if (r["cell"], r["seed"]) == (cell, seed)), None)


def trained_parameters(model, classifier_only: bool = False) -> dict[str, int]:
    """``{"trained_params", "params"}``: the parameters a policy trains and all of the model it gives. ``model``: a
    run folder of memory tokens (its wrapper's own tensors train, not the frozen ``model.``), or the source model with
    the new task's classifier: whole (full fine-tunes, LP-FT) or, ``classifier_only``, its family's classifier (a
    linear probe)."""
    from hub.core.registry import get_model_entry

    if isinstance(model, Path):
        model = load(model)
    named = dict(model.named_parameters())
    if model.pretrained_cfg.memory_tokens:
        trained = [n for n in named if not n.startswith("model.")]
    elif classifier_only:
        prefix = get_model_entry(model.pretrained_cfg.family).classifier + "."
        trained = [n for n in named if (n + ".").startswith(prefix)]
    else:
        trained = list(named)
    return {"trained_params": sum(named[n].numel() for n in trained),
            "params": sum(p.numel() for p in named.values())}


def _auto_entry(cell: dict, source: str, data: Path, seed: int, out: Path, args: list[str],
                source_name: str | None, **options) -> dict:
    """The entry of ``auto``'s candidates and the previous default (:func:`run_cell`)."""
    started = time.time()
    run_dir, entry = finetune(source, str(data), args, str(out), progress=False, cv_folds=0, **options)
    seconds = time.time() - started
    metric = entry["metric"]
    policy = json.loads((run_dir / "metrics.json").read_text())["policy"]
    candidates = {p: _candidate(run_dir.parent / c["run"], c, metric) for p, c in policy["candidates"].items()}
    previous = candidates.get(PREVIOUS_DEFAULT)
    if previous is None:
        extra, _ = finetune(source, str(data), args, str(out), progress=False, policy=PREVIOUS_DEFAULT, cv_folds=0,
                              **options)
        kept = json.loads((extra / "metrics.json").read_text())["policy"]["candidates"][PREVIOUS_DEFAULT]
        previous = _candidate(extra, kept, metric)
    return {**cell, "source": source_name or source, "seed": seed, "metric": metric, "rule": policy["rule"],
            "candidates": candidates, "chosen": policy["chosen"], "previous_default": previous,
            "baseline": {"name": entry["name"], "test": entry["test"][metric]}, "seconds": round(seconds, 1)}


def _candidate(run_dir: Path, entry: dict, metric: str) -> dict:
    summary = json.loads((run_dir / "metrics.json").read_text())
    return {"val": entry["value"], "val_metric": entry["metric"], "test": summary["test"][metric],
            "epochs": entry["epochs"], "still_improving": entry["still_improving"],
            "seconds": summary.get("fit_seconds")}


def _save(entry: dict) -> None:
    """Append ``entry`` to the results file, or put it in the place of an earlier entry of the same cell and seed."""
    rows = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    key = (entry["cell"], entry["seed"])
    at = next((i for i, r in enumerate(rows) if (r["cell"], r["seed"]) == key), len(rows))
    rows[at:at + 1] = [entry]
    atomic_write_bytes(RESULTS, (json.dumps(rows, indent=1) + "\n").encode())


def tables(work: Path, seeds: list[int], policies: tuple[str, ...] = ()):
    """Adult's published test rows and the churn table at 500, 5,000 and all rows, each with 2,000 test rows more."""
    from tabular.data import ADULT_COLUMNS

    adult = pd.read_csv(local_copy("adult", "adult.test") / "adult.test", header=None, names=ADULT_COLUMNS,
                        skipinitialspace=True, skiprows=1, na_values="?")
    adult["income"] = adult["income"].str.rstrip(".")
    churn = pd.read_csv(local_copy("churn_modelling", "Churn_Modelling.csv") / "Churn_Modelling.csv").drop(
        columns=["RowNumber", "CustomerId", "Surname"])
    for name, frame, target in (("adult_test_rows", adult, "income"), ("churn", churn, "Exited")):
        order = np.random.default_rng(0).permutation(len(frame))
        test, pool = frame.iloc[order[:TABLE_TEST_ROWS]], frame.iloc[order[TABLE_TEST_ROWS:]]
        for rows in (500, 5000, len(pool)):
            table = pd.concat([pool.iloc[:rows], test])
            path = work / f"{name}_{rows}.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            table.to_csv(path, index=False)
            test_fraction = TABLE_TEST_ROWS / len(table)
            cell = {"cell": f"{name} {rows} rows", "domain": "tables", "size": rows}
            for seed in seeds:
                yield run_cell(cell, "mlp.adult", path, seed, work,
                               [f"data.args.test_fraction={test_fraction:.6f}",
                                f"data.args.val_fraction={0.15 * rows / len(table):.6f}"], target=target,
                               policies=policies)


def audio(work: Path, seeds: list[int], sizes: tuple[int, ...] = (15, 50, 150), policies: tuple[str, ...] = ()):
    """FSDD digits 5-9 at ``sizes`` clips per digit, from ast_tiny pretrained on digits 0-4 (one run, seed 0)."""
    from hub.run.train import train

    recordings = local_copy("fsdd", "recordings") / "recordings"
    pretrained = sorted((work / "pretrain").rglob("metrics.json"))  # train writes pretrain/RECIPE/RUN/
    source = pretrained[0].parent if pretrained else train(
        str(REPO / "recipes/audio/ast_tiny_fsdd_digits_0_4.yaml"), ["seed=0", f"output_dir={work / 'pretrain'}"],
        progress=False)
    for per_digit in sizes:
        root = work / f"fsdd_5_9_{per_digit}"
        for path in sorted(recordings.glob("*.wav")):
            digit, speaker, index = path.stem.split("_")
            train_speaker = speaker in ("george", "jackson", "lucas")
            if int(digit) < 5 or (train_speaker and int(index) >= per_digit // 3):
                continue
            folder = root / ("train" if train_speaker else "test") / digit
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, folder / path.name)
        cell = {"cell": f"FSDD digits 5-9, {per_digit} clips per digit", "domain": "audio", "size": per_digit}
        for seed in seeds:
            yield run_cell(cell, str(source), root, seed, work, source_name=AUDIO_SOURCE, policies=policies)


def images(work: Path, seeds: list[int], sizes: tuple[int, ...] = (100, 1000, 3000), policies: tuple[str, ...] = (),
           source: str = "coat_lite_micro_32.cifar10_20k"):
    """CIFAR-10 ``train_rest/`` images at ``sizes`` per class, tested on 200 per class of the official test split,
    from ``source`` (a tag trained on ``train/`` alone); the cells of another source than CoaT's are named after it."""
    cifar = local_copy("cifar10", "train_rest", "test")
    for per_class in sizes:
        root = work / f"cifar10_rest_{per_class}"
        for split, taken, count in (("train", "train_rest", per_class), ("test", "test", 200)):
            for folder in sorted((cifar / taken).iterdir()):
                target = root / split / folder.name
                target.mkdir(parents=True, exist_ok=True)
                for path in sorted(folder.glob("*.jpg"))[:count]:
                    shutil.copyfile(path, target / path.name)
        name = f"CIFAR-10 train_rest, {per_class} per class"
        cell = {"cell": name if source == "coat_lite_micro_32.cifar10_20k" else f"{name}, from {source}",
                "domain": "images", "size": per_class}
        for seed in seeds:
            yield run_cell(cell, source, root, seed, work, policies=policies)


def images_vit(work: Path, seeds: list[int], sizes: tuple[int, ...] = (100,), policies: tuple[str, ...] = ()):
    """The CIFAR-10 cells from ``vit_micro_patch4_32.cifar10`` (a ViT of timm Blocks trained on ``train/``'s 18,000
    images: ``train_rest/`` is unseen by it), so that memory tokens meet the source's own task on new images."""
    return images(work, seeds, sizes, policies, source="vit_micro_patch4_32.cifar10")


def breastmnist(work: Path, seeds: list[int], sizes: tuple[int | None, ...] = (100, None),
                policies: tuple[str, ...] = (),
                source: str = "coat_lite_micro_32.cifar10_20k"):
    """BreastMNIST as PNG class folders (:func:`benchmarks.user_data.breastmnist_folders`) at ``sizes`` training
    scans per class (None: all 546, 147 malignant), the official validation (78) and test (156) scans, fine-tuned
    from ``source`` (``coat_lite_micro_32.cifar10_20k``): grey ultrasound scans, far from the source's photos. The
    cells of another source are named after it."""
    from benchmarks.user_data import breastmnist_folders

    for per_class in sizes:
        root = breastmnist_folders(work / f"breastmnist_{per_class or 'all'}", per_class)
        name = f"BreastMNIST, {f'{per_class} per class' if per_class else 'all 546'} training scans"
        cell = {"cell": name if source == "coat_lite_micro_32.cifar10_20k" else f"{name}, from {source}",
                "domain": "images", "size": per_class or 546}
        for seed in seeds:
            yield run_cell(cell, source, root, seed, work, policies=policies)


def breastmnist_cct(work: Path, seeds: list[int], policies: tuple[str, ...] = ()):
    """The BreastMNIST cells from ``cct_4_3x2_32.cifar10`` (of timm Blocks: memory tokens apply)."""
    return breastmnist(work, seeds, policies=policies, source="cct_4_3x2_32.cifar10")


def report() -> str:
    """The markdown table of the results file: per cell, each candidate's test metric (mean ± std over seeds),
    ``auto``'s chosen run, the previous default and the baseline."""
    rows = json.loads(RESULTS.read_text())
    cells: dict[str, list[dict]] = {}
    for row in rows:
        cells.setdefault(row["cell"], []).append(row)
    lines = ["| cell | source | seeds | candidates: test (val), epochs | auto kept (per seed) | auto: test | "
             "previous default (full, recipe lr): test | baseline: test | minutes per seed |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for cell, entries in cells.items():
        metric = entries[0]["metric"]
        names = [p for p in entries[0]["candidates"] if p not in ADDED_POLICIES]
        text = "; ".join(f"{p} {_spread([e['candidates'][p]['test'] for e in entries])} "
                         f"({_spread([e['candidates'][p]['val'] for e in entries])}), "
                         f"{'/'.join(str(e['candidates'][p]['epochs']) for e in entries)}" for p in names)
        auto = [e["candidates"][e["chosen"]]["test"] for e in entries]
        lines.append(f"| {cell} | {entries[0]['source']} | {', '.join(str(e['seed']) for e in entries)} | "
                     f"{metric}: {text} | {', '.join(e['chosen'] for e in entries)} | {_spread(auto)} | "
                     f"{_spread([e['previous_default']['test'] for e in entries])} | {entries[0]['baseline']['name']}: "
                     f"{_spread([e['baseline']['test'] for e in entries])} | "
                     f"{statistics.mean(e['seconds'] for e in entries) / 60:.1f} |")
    return "\n".join(lines) + "\n"


def added_report(policy: str = "memory") -> str:
    """The markdown table of the cells where ``policy`` was trained beside ``auto``'s candidates (``--policies``),
    on the seeds it was: each policy's test metric, ``policy`` less the linear probe and less the full fine-tune at
    the card's rate, the parameters each trains (count and share of the model it gives) and its minutes per run."""
    rows = [r for r in json.loads(RESULTS.read_text()) if policy in r["candidates"]]
    cells: dict[str, list[dict]] = {}
    for row in rows:
        cells.setdefault(row["cell"], []).append(row)
    names = ["linear-probe", "lp-ft", "full-recipe-lr", policy]
    lines = [f"| cell | source | seeds | test: {', '.join(names)} | {policy} − probe | {policy} − full | parameters "
             f"trained: {', '.join(names)} | minutes per run: {', '.join(names)} |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for cell, entries in cells.items():
        tests = {p: [e["candidates"][p]["test"] for e in entries] for p in names}
        gain = {p: [m - b for m, b in zip(tests[policy], tests[p])] for p in ("linear-probe", "full-recipe-lr")}
        first = entries[0]["candidates"]
        share = {p: _percent(first[p]["trained_params"] / first[p]["params"]) for p in names}
        params = ", ".join(f"{first[p]['trained_params']:,} ({share[p]})" for p in names)
        minutes = ", ".join(f"{statistics.mean(e['candidates'][p]['seconds'] for e in entries) / 60:.1f}"
                            for p in names)
        lines.append(f"| {cell} | {entries[0]['source']} | {', '.join(str(e['seed']) for e in entries)} | "
                     f"{entries[0]['metric']}: {', '.join(_spread(tests[p]) for p in names)} | "
                     f"{_signed(gain['linear-probe'])} | {_signed(gain['full-recipe-lr'])} | {params} | {minutes} |")
    return "\n".join(lines) + "\n"


def _percent(share: float) -> str:
    """``0.5%``, ``0.044%``, ``100%``: two significant digits below 10%."""
    return f"{100 * share:.2g}%" if share < 0.1 else f"{100 * share:.0f}%"


def _signed(values: list[float]) -> str:
    """Differences in points (of a [0, 1] metric), mean and spread over seeds: ``+4.1 ± 1.2``."""
    mean = 100 * statistics.mean(values)
    return f"{mean:+.1f}" + (f" ± {100 * statistics.stdev(values):.1f}" if len(values) > 1 else "")


def _spread(values: list[float]) -> str:
    return f"{statistics.mean(values):.3f}" + (f" ± {statistics.stdev(values):.3f}" if len(values) > 1 else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("domains", nargs="*", help="cells to run: tables, audio, images, images_vit, breastmnist, "
                        "breastmnist_cct")
    parser.add_argument("--work", type=Path, help="folder for the written datasets and the runs (default: a temp)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--image-sizes", type=int, nargs="+", default=[100, 1000, 3000],
                        help="images per class of the image cells")
    parser.add_argument("--audio-sizes", type=int, nargs="+", default=[15, 50, 150],
                        help="clips per digit of the audio cells")
    parser.add_argument("--policies", nargs="+", default=[], choices=ADDED_POLICIES,
                        help="train these policies too in each cell and seed (added to a stored entry)")
    parser.add_argument("--report", action="store_true", help="print the markdown table of the results file")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="finetune_policy_"))
    for domain in args.domains:
        options = {"images": {"sizes": tuple(args.image_sizes)}, "images_vit": {"sizes": tuple(args.image_sizes)},
                   "audio": {"sizes": tuple(args.audio_sizes)}}.get(domain, {})
        options["policies"] = tuple(args.policies)
        for entry in globals()[domain](work / domain, args.seeds, **options):
            _save(entry)
            print(json.dumps({k: entry[k] for k in ("cell", "seed", "chosen", "seconds")}), flush=True)
    if args.report:
        print(report())
        print(added_report())


if __name__ == "__main__":
    main()
