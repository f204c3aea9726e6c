"""One performance report for every registered model: ``python -m benchmarks.run_all`` (or ``attnhub bench``).

For every registered model family, a fresh process builds the data and model of the family's recipe in
``recipes/`` (its CPU recipe, else its GPU recipe in fp32, else the recipe of a family from the same module
and task with the model swapped: see :func:`family_recipes`), takes one real training batch, and measures:

- parameters, and FLOPs per item of a forward and of a training step (torch's ``FlopCounterMode``, with a
  sparse operand of a matrix product counted by its stored entries; an item is what the task counts in a
  batch: an image, a node, a patient, a window);
- training items/s (forward, loss, backward, AdamW step) and inference items/s (forward under
  ``inference_mode``), medians over ``steps`` timed steps after warm-up;
- the memory of a training step: the peak growth of the resident set during the first step, when
  activations, gradients and optimizer state are all new (sampled every millisecond; CPU), or
  ``max_memory_allocated`` (CUDA);
- the achieved FLOP/s of a training step as a fraction of the machine's matrix-multiply peak, measured in the
  same process as the best of several sizes and repetitions of a float32 GEMM (:func:`benchmarks.timing.gemm_peak`),
  right before and right after the timed steps (the better of the two, so a burst of load on a shared machine
  during one of them does not lower the peak below what the steps had); a row above 100% is refused
  (:class:`ImplausibleRow`): its FLOP count or its peak is wrong;
- where a reference implementation exists (:mod:`benchmarks.references`), its training items/s in the same
  process as a ratio, one per form of the input both are fed (GAT: sparse CSR and dense features).

It also times ``import hub``, ``attnhub list``, ``attnhub info`` and ``attnhub --help`` against ``import torch`` in
fresh processes, interleaved round by round (medians of 5). Results go to
``<report>.md`` and ``<report>.json`` in ``benchmarks/results/`` (machine, torch version and thread count at the
top); recipes are named relative to the recipes folder's parent, so the report holds no path of the machine.
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import platform
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks import RESULTS, ROOT
from benchmarks.timing import GEMM_SIZES, PeakRSS, gemm_peak, timed
from hub.errors import HubError
from hub.io import atomic_write_bytes


class ImplausibleRow(HubError):
    """A measured row that cannot be right, such as a training step faster than the machine's GEMM peak."""


INFO_TAG = "vit_digits.sklearn"  # the digits tag (the quickstart trains on its data)
STARTUP_COMMANDS = {"import torch": ["-c", "import torch"], "import hub": ["-c", "import hub"],
                    "attnhub list": ["-m", "hub", "list"], f"attnhub info {INFO_TAG}": ["-m", "hub", "info", INFO_TAG],
                    "attnhub --help": ["-m", "hub", "--help"]}


def startup_times(repeats: int = 5) -> dict[str, float]:
    """Median wall time of each of :data:`STARTUP_COMMANDS` in a fresh interpreter (``attnhub X`` run as
    ``python -m hub X`` in the checkout, so the checkout's code is timed), the commands interleaved round by round
    after one warm-up round, so that a change of load on the machine falls on all of them alike."""
    def command(args: list[str]):
        return lambda: subprocess.run([sys.executable, *args], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)

    times = timed([command(args) for args in STARTUP_COMMANDS.values()], repeats, 1, "cpu")
    return {label: statistics.median(seconds) for label, seconds in zip(STARTUP_COMMANDS, times)}


def family_recipes(recipes_dir: Path, families: list[str]) -> dict[str, tuple[Path, str]]:
    """The recipe each family is measured with, and how it was chosen. In order of preference: the family's
    first CPU recipe (by sorted path), its first GPU recipe (``*_gpu.yaml``, measured on the bench's device
    in fp32), or the first recipe of a family built in the same Python module for the same task, with the
    model swapped (keeping the recipe's model arguments the family accepts). Families with none are left out."""
    import yaml

    from hub.core.registry import get_model_entry

    own: dict[str, dict[str, Path]] = {}
    for path in sorted(recipes_dir.rglob("*.yaml")):
        model = (yaml.safe_load(path.read_text()) or {}).get("model", {})
        if isinstance(model, dict) and model.get("name"):
            own.setdefault(model["name"], {}).setdefault("gpu" if path.stem.endswith("_gpu") else "cpu", path)
    kind_of = {name: (get_model_entry(name).builder.__module__, get_model_entry(name).task)
               for name in set(own) | set(families)}
    chosen: dict[str, tuple[Path, str]] = {}
    for family in families:
        if family in own:
            kind = "cpu" if "cpu" in own[family] else "gpu"
            chosen[family] = (own[family][kind], "own CPU recipe" if kind == "cpu" else "own GPU recipe, fp32")
            continue
        siblings = sorted((found.get("cpu", found.get("gpu")), name) for name, found in own.items()
                          if kind_of[name] == kind_of[family])
        if siblings:
            chosen[family] = (siblings[0][0], f"{siblings[0][1]}'s recipe")
    return chosen


def _mm_flops(a: torch.Tensor, b: torch.Tensor, *args, **kwargs) -> int:
    """FLOPs of ``a @ b`` (a: (n, k), b: (k, m)), a sparse operand counted by its stored entries:
    ``FlopCounterMode`` counts it as dense (GAT's bag-of-words features)."""
    if a.layout != torch.strided:
        return 2 * a._nnz() * b.shape[1]
    if b.layout != torch.strided:
        return 2 * b._nnz() * a.shape[0]
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


_mm_flops._get_raw = True  # FlopCounterMode passes the tensors themselves, not their shapes


def _count_flops(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False, custom_mapping={torch.ops.aten.mm: _mm_flops}) as counter:
        fn()
    return counter.get_total_flops()


def measure_family(recipe_path: Path, batch_size: int | None, steps: int, warmup: int,
                   device: str = "cpu", family: str | None = None) -> dict[str, Any]:
    """Measure one recipe's model on one real training batch (run in a fresh process by :func:`run`);
    ``family`` swaps in another model family on the recipe's data, keeping the recipe's model arguments that
    the family's builder accepts."""
    from benchmarks.references import reference_steps
    from hub.recipe import load_recipe
    from hub.run.module import seed_all
    from hub.run.train import build_data, build_model
    from hub.tasks import create_task

    overrides = [f"data.args.batch_size={batch_size}"] if batch_size else []
    recipe = load_recipe(str(recipe_path), overrides)
    if family and family != recipe.model.name:
        import inspect

        from hub.core.registry import get_model_entry

        accepted = inspect.signature(get_model_entry(family).builder).parameters
        kept = {k: v for k, v in recipe.model.args.items() if k in accepted}  # non-size options such as masking
        swapped = recipe.model.model_copy(update={"name": family, "args": kept, "init_from": None})
        recipe = recipe.model_copy(update={"model": swapped})
    seed_all(0)
    datamodule = build_data(recipe)
    model = build_model(recipe, datamodule).to(device)
    task = create_task(datamodule.task, **datamodule.task_args())
    batch = next(iter(datamodule.train_dataloader()))
    batch = _to(batch, device)
    items = task.batch_size(batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step_on(inputs) -> Callable[[], None]:
        def step():
            optimizer.zero_grad(set_to_none=True)
            loss, _, _ = task.step(model, inputs, "train")
            loss.backward()
            optimizer.step()
        return step

    train_step = step_on(batch)

    def infer_step():
        with torch.inference_mode():
            task.step(model, batch, "val")

    model.train()
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    with PeakRSS() as rss:  # the first step: activations, gradients and optimizer state are all new
        train_step()
    memory = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else rss.growth_mb
    forward_flops = _count_flops(lambda: task.step(model, batch, "train"))
    train_flops = _count_flops(train_step)

    comparisons = reference_steps(recipe.model.name, model, batch, step_on)
    peak_before = gemm_peak(device=device)
    steps_timed = [train_step, *(fn for _, ours, ref in comparisons for fn in ([ref] if ours is None else [ours, ref]))]
    times = iter(timed(steps_timed, steps, warmup, device))
    train_times = next(times)
    references = []
    for description, ours, _ in comparisons:
        ours_times = train_times if ours is None else next(times)
        reference_times = next(times)
        references.append({
            "reference": description, "reference_train_items_per_s": items / statistics.median(reference_times),
            # the ratio of each round's adjacent pair of steps, then the median: load drift cancels within a pair
            "speed_ratio": statistics.median(r / t for t, r in zip(ours_times, reference_times))})
    train_time = statistics.median(train_times)
    model.eval()
    infer_time = statistics.median(timed([infer_step], steps, warmup, device)[0])
    model.train()
    result = {
        "family": recipe.model.name, "recipe": str(recipe_path), "task": datamodule.task,
        "params": sum(p.numel() for p in model.parameters()), "items_per_batch": items,
        "forward_flops_per_item": forward_flops / items, "train_flops_per_item": train_flops / items,
        "train_items_per_s": items / train_time, "infer_items_per_s": items / infer_time,
        "train_flop_per_s": train_flops / train_time, "peak_memory_mb": memory,
        # in this process, right before and after the timed steps: the better of the two
        "gemm_peak_flop_per_s": max(peak_before, gemm_peak(device=device)), "references": references,
    }
    return result


def _to(batch, device: str):
    if device == "cpu":
        return batch
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to(v, device) for k, v in batch.items()}
    return batch.to(device)


def percent_of_peak(row: dict[str, Any]) -> float:
    """The row's training FLOP/s as a % of the GEMM peak measured in its process; :class:`ImplausibleRow` above
    100%, where the FLOP count or the peak must be wrong."""
    percent = 100 * row["train_flop_per_s"] / row["gemm_peak_flop_per_s"]
    if percent > 100:
        raise ImplausibleRow(
            f"{row['family']}: a training step at {row['train_flop_per_s'] / 1e9:.2f} GFLOP/s is {percent:.1f}% of "
            f"the GEMM peak measured in its process ({row['gemm_peak_flop_per_s'] / 1e9:.2f} GFLOP/s); above 100% "
            "the FLOP count or the peak is wrong, so the row is refused")
    return percent


def format_table(results: list[dict[str, Any]]) -> list[str]:
    """The report's table, one row per family; raises :class:`ImplausibleRow` for a row above the GEMM peak."""
    lines = ["| model | recipe | task | params | fwd MFLOP/item | items/batch | train items/s | infer items/s | "
             "train GFLOP/s | % of GEMM peak | peak mem (MB) | reference | ours / reference |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in results:
        choice = r.get("recipe_choice", "own CPU recipe")
        recipe = Path(r["recipe"]).stem + ("" if choice == "own CPU recipe" else f" ({choice})")
        if "error" in r:
            lines.append(f"| {r['family']} | {recipe} | | | | | | | | | | failed: {r['error']} | |")
            continue
        references = "; ".join(c["reference"] for c in r.get("references", []))
        ratios = "; ".join(f"{c['speed_ratio']:.2f}x" for c in r.get("references", []))
        lines.append(
            f"| {r['family']} | {recipe} | {r['task']} | {r['params']:,} | {r['forward_flops_per_item'] / 1e6:.2f} | "
            f"{r['items_per_batch']} | {r['train_items_per_s']:.1f} | {r['infer_items_per_s']:.1f} | "
            f"{r['train_flop_per_s'] / 1e9:.2f} | {percent_of_peak(r):.1f} | "
            f"{r['peak_memory_mb']:.0f} | {references} | {ratios} |")
    return lines


def run(pattern: str = "*", recipes_dir: str | Path = ROOT / "recipes", out_dir: str | Path = RESULTS, steps: int = 5,
        warmup: int = 2, batch_size: int | None = None, device: str = "cpu", progress: bool = True,
        import_repeats: int = 5, report: str = "RESULTS") -> Path:
    """Benchmark every family matching ``pattern`` (globs separated by commas; one fresh process each);
    write ``<report>.md`` and ``<report>.json`` into ``out_dir``."""
    from tqdm import tqdm

    from hub.core.registry import list_models

    recipes_dir = Path(recipes_dir).resolve()
    patterns = pattern.split(",")
    families = [f for f in list_models() if any(fnmatch.fnmatch(f, one) for one in patterns)]
    recipes = family_recipes(recipes_dir, families)
    if not recipes:
        raise HubError(f"no registered model family matching {pattern!r} has a recipe in {recipes_dir.name}/, "
                       "nor a sibling family's recipe")
    threads = torch.get_num_threads()
    results = []
    for family, (path, how) in tqdm(sorted(recipes.items()), unit="model", disable=not progress, file=sys.stderr):
        command = [sys.executable, "-m", "benchmarks.report", "--one", str(path), "--family", family,
                   "--steps", str(steps), "--warmup", str(warmup), "--device", device]
        if batch_size:
            command += ["--batch-size", str(batch_size)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)  # ROOT: where benchmarks lies
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        named = path.relative_to(recipes_dir.parent).as_posix()  # recipes/..., no path of this machine
        if done.returncode != 0 or not lines:
            error = (done.stderr.strip().splitlines() or ["no output"])[-1][:120]
            results.append({"family": family, "recipe": named, "recipe_choice": how, "error": error})
        else:
            results.append({**json.loads(lines[-1]), "recipe": named, "recipe_choice": how})
    table = format_table(results)  # refuses an implausible row before anything is written
    startup = startup_times(import_repeats)
    unmeasured = [f for f in families if f not in recipes]
    peaks = [r["gemm_peak_flop_per_s"] for r in results if "error" not in r]
    gemm = f"{'/'.join(map(str, GEMM_SIZES))} square float32, best of 5 each"
    machine = {"machine": platform.processor() or platform.machine(), "system": platform.platform(),
               "torch": torch.__version__, "threads": threads, "device": device,
               "gemm_peak_gflop_per_s": max(peaks, default=0.0) / 1e9, "gemm": gemm,
               "startup_s": startup}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / f"{report}.json", (json.dumps({"machine": machine, "models": results}, indent=2)
                                              + "\n").encode())
    peak_range = f"{min(peaks, default=0.0) / 1e9:.1f}-{max(peaks, default=0.0) / 1e9:.1f} GFLOP/s"
    text = [
        "# Attention Hub performance report (`attnhub bench`)", "",
        f"Machine: {machine['machine']} ({machine['system']}), torch {machine['torch']}, "
        f"{threads} thread(s), device {device}. Matrix-multiply peak ({gemm}), measured in each family's "
        f"process: {peak_range}.", "",
        f"Start-up, each in a fresh process (`attnhub X` run as `python -m hub X` in the checkout), the commands "
        f"interleaved round by round; medians of {import_repeats} rounds after a warm-up round:", "",
        "| command | seconds | / `import torch` |", "| --- | ---: | ---: |",
        *(f"| `{label}` | {seconds:.2f} | {seconds / startup['import torch']:.2f}x |"
          for label, seconds in startup.items()), "",
        f"One real training batch of each family's recipe; medians of {steps} steps after {warmup} warm-up. "
        "Items are what the task counts (images, nodes, patients, windows). Peak memory: growth of the resident "
        "set during the first training step (activations, gradients, optimizer state). FLOPs are counted by "
        "`FlopCounterMode`, a sparse operand of a matrix product by its stored entries (GAT's bag-of-words input); "
        "% of GEMM peak is against the peak measured in the same process (the better of a measurement right before "
        "and one right after the timed steps), and a row above 100% is refused. "
        "References run in the same process, their steps alternating with ours, both fed the same input (GAT: "
        "sparse CSR features, then dense ones, each pair with its own ratio); the ratio is the median over "
        "rounds of (reference step time / our step time): > 1, ours is faster.", "",
        *table, "",
        f"Not measured (no recipe in {recipes_dir.name}/ for them or a family of their module): "
        f"{', '.join(unmeasured) or 'none'}.", "",
        "Written by `python -m benchmarks.run_all` (`attnhub bench`).",
    ]
    atomic_write_bytes(out / f"{report}.md", ("\n".join(text) + "\n").encode())
    return out / f"{report}.md"


def _main() -> None:
    parser = argparse.ArgumentParser(description="measure one recipe's model (a process of benchmarks.report.run)")
    parser.add_argument("--one", required=True)
    parser.add_argument("--family")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    import logging

    logging.disable(logging.WARNING)
    print(json.dumps(measure_family(Path(args.one), args.batch_size, args.steps, args.warmup, args.device,
                                    args.family)))


if __name__ == "__main__":
    _main()
