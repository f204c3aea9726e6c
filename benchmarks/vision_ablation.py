"""Ablation rows of the seeded vision systems (issue 66), every variant trained by its tag's own CPU recipe:

* ``residual_attention`` (``recipes/vision/residual_attention_small_cifar10.yaml``): attention residual learning
  ``(1 + M) * T`` (the paper's), naive attention learning ``M * T`` and the trunk alone (no soft-mask branch), as in
  Wang et al.'s Tables 1 and 3;
* ``patchconvnet`` (``recipes/vision/patchconvnet_small_cifar10.yaml``): learned attention-based aggregation (the
  paper's) against the average pool of the same trunk.

Each variant is ``attnhub train RECIPE OVERRIDES seed=S`` (a run folder of its own); a finished run is reused with
``--use VARIANT:SEED=RUN_DIR`` (the tag's own runs). The table gives CIFAR-10 test accuracy, parameters, the run's
wall minutes (from its folder's start stamp to its card) and ``trainer.fit``'s, and the load average when it
started: on the 2 CPU cores here a run sharing the machine takes longer. Writes
``benchmarks/results/vision_ablation_SYSTEM.md``.

    HUB_DATA_DIR=../shared/data python -m benchmarks.vision_ablation residual_attention [--seeds 0 1]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
from pathlib import Path

import hub
from benchmarks import RESULTS
from hub.io import atomic_write_bytes
from hub.recipe import RECIPES_DIR
from hub.run.train import train

SYSTEMS = {  # system -> (recipe, {variant: overrides}), the paper's variant first
    "residual_attention": ("vision/residual_attention_small_cifar10.yaml", {
        "attention residual learning (1 + M) * T": [],
        "naive attention learning M * T": ["model.args.combine=naive"],
        "trunk alone (no mask branch)": ["model.args.combine=trunk"]}),
    "patchconvnet": ("vision/patchconvnet_small_cifar10.yaml", {
        "learned attention-based aggregation": [],
        "average pooling": ["model.args.pool=avg"]}),
}


def run_minutes(run_dir: Path) -> float:
    """Wall minutes of a finished run: from its folder's start stamp (``YYYYmmdd-HHMMSS-sS``) to its card."""
    start = datetime.datetime.strptime("-".join(run_dir.name.split("-")[:2]), "%Y%m%d-%H%M%S")
    end = datetime.datetime.fromtimestamp((run_dir / "card.json").stat().st_mtime)
    return (end - start).total_seconds() / 60


def row(variant: str, overrides: list[str], seed: int, run_dir: Path, load: str) -> str:
    summary = json.loads((run_dir / "metrics.json").read_text())
    card = hub.model_card(str(run_dir))
    params = sum(p.numel() for p in hub.load(str(run_dir)).parameters())
    return (f"| {variant} | `{' '.join(overrides) or '(the recipe)'}` | {seed} | {summary['test']['test/acc']:.4f} | "
            f"{params / 1e6:.2f}M | {run_minutes(run_dir):.1f} | {summary['fit_seconds'] / 60:.1f} | {load} | "
            f"{card.name} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("system", choices=sorted(SYSTEMS), help="which system's variants to train")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="seeds per variant (default 0)")
    parser.add_argument("--use", nargs="*", default=[], metavar="VARIANT_INDEX:SEED=RUN_DIR",
                        help="reuse finished runs, e.g. 0:0=runs/residual_attention_small_cifar10/20261207-204228-s0 "
                             "(variant 0 is the paper's)")
    parser.add_argument("--output-dir", default="runs", help="where the new run folders go (default ./runs)")
    options = parser.parse_args(argv)
    recipe, variants = SYSTEMS[options.system]
    reused = {tuple(int(v) for v in key.split(":")): Path(path)
              for key, path in (item.split("=", 1) for item in options.use)}
    rows = []
    for index, (variant, overrides) in enumerate(variants.items()):
        for seed in options.seeds:
            load = "reused" if (index, seed) in reused else f"{os.getloadavg()[0]:.1f}"
            run_dir = reused.get((index, seed)) or train(
                str(RECIPES_DIR / recipe), [*overrides, f"seed={seed}", f"output_dir={options.output_dir}"])
            rows.append(row(variant, overrides, seed, Path(run_dir), load))
            print(rows[-1], flush=True)
    lines = [f"# Ablation of {options.system} on CIFAR-10 (issue 66)", "",
             f"`python -m benchmarks.vision_ablation {options.system}`: each variant trained by `recipes/{recipe}` "
             "(the tag's CPU recipe, all 50,000 training images, the 10,000 test images, the last epoch tested) on "
             "the 2-core CPU; wall minutes from the run folder's start to its card, fit minutes of `trainer.fit` "
             "alone; the load average when the run started ('reused': the tag's own run).", "",
             "| variant | overrides | seed | test acc | parameters | wall min | fit min | load | run |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |", *rows, ""]
    atomic_write_bytes(RESULTS / f"vision_ablation_{options.system}.md", "\n".join(lines).encode())


if __name__ == "__main__":
    main()
