"""One performance report for every registered model: ``attnhub bench [PATTERN]``.

For every registered model family, a fresh process builds the data and model of the family's recipe in
``recipes/`` (its CPU recipe, else its GPU recipe in fp32, else the recipe of a family from the same module
and task with the model swapped: see :func:`family_recipes`), takes one real training batch, and measures:

- parameters, and FLOPs per item of a forward and of a training step (torch's ``FlopCounterMode``;
  an item is what the task counts in a batch: an image, a node, a patient, a window);
- training items/s (forward, loss, backward, AdamW step) and inference items/s (forward under
  ``inference_mode``), medians over ``steps`` timed steps after warm-up;
- the memory of a training step: the peak growth of the resident set during the first step, when
  activations, gradients and optimizer state are all new (sampled every millisecond; CPU), or
  ``max_memory_allocated`` (CUDA);
- the achieved FLOP/s of a training step as a fraction of the machine's matrix-multiply peak, measured
  in the same run with a large GEMM of the same dtype and thread count;
- where a reference implementation exists, its training items/s in the same process as a ratio:
  for timm architectures the same module in a bare loop (``model(x)``, cross-entropy, AdamW: what the
  hub's task and step add), for GAT a minimal PyG GAT (PyG's example in the paper's setup).

It also times ``import hub`` against ``import torch`` in fresh processes (medians of 5). Results go to
``RESULTS.md`` and ``RESULTS.json`` (machine, torch version and thread count at the top).

    attnhub bench                     # every registered family
    attnhub bench 'vit_*' --steps 5   # a subset
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch

from hub.io import atomic_write_bytes

GEMM_SIZE = 2048


def write_page(path: Path, generated: str, notes_heading: str) -> None:
    """Write a benchmark page: ``generated`` (tables a script makes), then ``notes_heading`` and the hand-written
    text that followed it in the page's previous version, so that rerunning a script keeps the notes."""
    kept = path.read_text().partition(notes_heading)[2] if path.is_file() else "\n"
    atomic_write_bytes(path, (generated + notes_heading + kept).encode())


def gemm_peak(dtype: torch.dtype = torch.float32, size: int = GEMM_SIZE, repeats: int = 5,
              device: str = "cpu") -> float:
    """The machine's matrix-multiply throughput in FLOP/s: best of ``repeats`` (size x size) products."""
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    best = float("inf")
    for _ in range(repeats + 1):
        _sync(device)
        start = time.perf_counter()
        a @ b
        _sync(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def import_times(repeats: int = 5) -> dict[str, float]:
    """Median wall time of ``import torch`` and of ``import hub`` in fresh interpreters."""
    result = {}
    for module in ("torch", "hub"):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", f"import {module}"], check=True)
            times.append(time.perf_counter() - start)
        result[module] = statistics.median(times)
    return result


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def family_recipes(recipes_dir: Path, families: list[str]) -> dict[str, tuple[Path, str]]:
    """The recipe each family is measured with, and how it was chosen. In order of preference: the family's
    first CPU recipe (by sorted path), its first GPU recipe (``*_gpu.yaml``, measured on the bench's device
    in fp32), or the first recipe of a family built in the same Python module for the same task, with the
    model swapped (keeping the recipe's model arguments the family accepts). Families with none are left out."""
    import yaml

    from hub.registry import get_model_entry

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


class _PeakRSS:
    """Peak resident-set growth over a block, sampled every millisecond from ``/proc/self/statm``."""

    def __init__(self):
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.peak = self.start = 0
        self._stop = threading.Event()

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._rss())
            time.sleep(0.001)

    def __enter__(self):
        self.start = self.peak = self._rss()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.start) / 2**20


def timed(fns: list, steps: int, warmup: int, device: str) -> list[list[float]]:
    """Seconds of each call of each function (one list per function); calls interleaved round by round,
    so a change in the machine's load during the run falls on all of them alike."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(steps):
        for fn, log in zip(fns, times):
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            log.append(time.perf_counter() - start)
    return times


def _reference(family: str, model: torch.nn.Module, batch, task) -> tuple[str, Any] | None:
    """``(description, train_step)`` of the reference implementation for this family, or None."""
    import timm
    import torch.nn.functional as F

    if isinstance(model, timm.models.VisionTransformer | timm.models.CoaT | timm.models.ByobNet | timm.models.ResNet):
        x, y = batch
        reference = _clone(model)
        optimizer = torch.optim.AdamW(reference.parameters())

        def bare_step():
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(reference(x), y).backward()
            optimizer.step()

        return "the same timm module, bare loop", bare_step
    if family == "gat":
        graph = batch
        reference = PlainGAT(graph.x.shape[1], model.num_classes)
        x = graph.x.to_dense() if graph.x.layout != torch.strided else graph.x
        optimizer = torch.optim.Adam(reference.parameters(), lr=0.005, weight_decay=5e-4)

        def pyg_step():
            optimizer.zero_grad(set_to_none=True)
            out = reference(x, graph.edge_index)
            F.cross_entropy(out[graph.train_mask], graph.y[graph.train_mask]).backward()
            optimizer.step()

        return "minimal PyG GAT", pyg_step
    return None


def _clone(model: torch.nn.Module) -> torch.nn.Module:
    import copy

    return copy.deepcopy(model)


class PlainGAT(torch.nn.Module):
    """The minimal PyG GAT (PyG's ``examples/gat.py`` in the paper's setup): the reference for ``gat``."""

    def __init__(self, in_channels: int, num_classes: int):
        from torch_geometric.nn import GATConv

        super().__init__()
        self.conv1 = GATConv(in_channels, 8, heads=8, dropout=0.6)
        self.conv2 = GATConv(64, num_classes, heads=1, concat=False, dropout=0.6)

    def forward(self, x, edge_index):
        import torch.nn.functional as F

        x = F.elu(self.conv1(F.dropout(x, 0.6, self.training), edge_index))
        return self.conv2(F.dropout(x, 0.6, self.training), edge_index)


def measure_family(recipe_path: Path, batch_size: int | None, steps: int, warmup: int,
                   device: str = "cpu", family: str | None = None) -> dict[str, Any]:
    """Measure one recipe's model on one real training batch (run in a fresh process by :func:`run`);
    ``family`` swaps in another model family on the recipe's data, keeping the recipe's model arguments that
    the family's builder accepts."""
    from torch.utils.flop_counter import FlopCounterMode

    from hub.recipe import load_recipe
    from hub.run.module import seed_all
    from hub.run.train import build_data, build_model
    from hub.tasks import create_task

    overrides = [f"data.args.batch_size={batch_size}"] if batch_size else []
    recipe = load_recipe(str(recipe_path), overrides)
    if family and family != recipe.model.name:
        import inspect

        from hub.registry import get_model_entry

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

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        loss, _, _ = task.step(model, batch, "train")
        loss.backward()
        optimizer.step()

    def infer_step():
        with torch.inference_mode():
            task.step(model, batch, "val")

    model.train()
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    with _PeakRSS() as rss:  # the first step: activations, gradients and optimizer state are all new
        train_step()
    memory = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else rss.growth_mb
    with FlopCounterMode(display=False) as counter:
        task.step(model, batch, "train")
    forward_flops = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        train_step()
    train_flops = counter.get_total_flops()

    reference = _reference(recipe.model.name, model, batch, task)
    train_times, *reference_times = timed([train_step, *([reference[1]] if reference else [])], steps, warmup, device)
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
    }
    if reference is not None:
        result["reference"] = reference[0]
        result["reference_train_items_per_s"] = items / statistics.median(reference_times[0])
        # the ratio of each round's adjacent pair of steps, then the median: load drift cancels within a pair
        result["speed_ratio"] = statistics.median(r / t for t, r in zip(train_times, reference_times[0]))
    return result


def _to(batch, device: str):
    if device == "cpu":
        return batch
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to(v, device) for k, v in batch.items()}
    return batch.to(device)


def _format_table(results: list[dict[str, Any]], peak: float) -> list[str]:
    lines = ["| model | recipe | task | params | fwd MFLOP/item | items/batch | train items/s | infer items/s | "
             "train GFLOP/s | % of GEMM peak | peak mem (MB) | reference | ours / reference |",
             "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: |"]
    for r in results:
        choice = r.get("recipe_choice", "own CPU recipe")
        recipe = Path(r["recipe"]).stem + ("" if choice == "own CPU recipe" else f" ({choice})")
        if "error" in r:
            lines.append(f"| {r['family']} | {recipe} | | | | | | | | | | failed: {r['error']} | |")
            continue
        ratio = f"{r['speed_ratio']:.2f}x" if "speed_ratio" in r else ""
        lines.append(
            f"| {r['family']} | {recipe} | {r['task']} | {r['params']:,} | {r['forward_flops_per_item'] / 1e6:.2f} | "
            f"{r['items_per_batch']} | {r['train_items_per_s']:.1f} | {r['infer_items_per_s']:.1f} | "
            f"{r['train_flop_per_s'] / 1e9:.2f} | {100 * r['train_flop_per_s'] / peak:.1f} | "
            f"{r['peak_memory_mb']:.0f} | {r.get('reference', '')} | {ratio} |")
    return lines


def run(pattern: str = "*", recipes_dir: str = "recipes", out_dir: str = "benchmarks", steps: int = 5,
        warmup: int = 2, batch_size: int | None = None, device: str = "cpu", progress: bool = True,
        import_repeats: int = 5, report: str = "RESULTS") -> Path:
    """Benchmark every family matching ``pattern`` (globs separated by commas; one fresh process each);
    write ``<report>.md`` and ``<report>.json`` into ``out_dir``."""
    from tqdm import tqdm

    from hub.registry import list_models

    patterns = pattern.split(",")
    families = [f for f in list_models() if any(fnmatch.fnmatch(f, one) for one in patterns)]
    recipes = family_recipes(Path(recipes_dir), families)
    if not recipes:
        from hub.errors import HubError

        raise HubError(f"no registered model family matching {pattern!r} has a recipe in {recipes_dir}, "
                       "nor a sibling family's recipe")
    threads = torch.get_num_threads()
    peak = gemm_peak(device=device)
    results = []
    for family, (path, how) in tqdm(sorted(recipes.items()), unit="model", disable=not progress, file=sys.stderr):
        command = [sys.executable, "-m", "hub.bench", "--one", str(path), "--family", family, "--steps", str(steps),
                   "--warmup", str(warmup), "--device", device]
        if batch_size:
            command += ["--batch-size", str(batch_size)]
        done = subprocess.run(command, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            error = (done.stderr.strip().splitlines() or ["no output"])[-1][:120]
            results.append({"family": family, "recipe": str(path), "recipe_choice": how, "error": error})
        else:
            results.append({**json.loads(lines[-1]), "recipe_choice": how})
    imports = import_times(import_repeats)
    unmeasured = [f for f in families if f not in recipes]
    machine = {"machine": platform.processor() or platform.machine(), "system": platform.platform(),
               "torch": torch.__version__, "threads": threads, "device": device,
               "gemm_peak_gflop_per_s": peak / 1e9, "gemm": f"{GEMM_SIZE}x{GEMM_SIZE} float32",
               "import_torch_s": imports["torch"], "import_hub_s": imports["hub"]}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out / f"{report}.json", (json.dumps({"machine": machine, "models": results}, indent=2)
                                              + "\n").encode())
    text = [
        "# Attention Hub performance report (`attnhub bench`)", "",
        f"Machine: {machine['machine']} ({machine['system']}), torch {machine['torch']}, "
        f"{threads} thread(s), device {device}. Matrix-multiply peak ({machine['gemm']}): "
        f"{peak / 1e9:.1f} GFLOP/s.", "",
        f"`import torch`: {imports['torch']:.2f} s, `import hub`: {imports['hub']:.2f} s "
        f"({imports['hub'] / imports['torch']:.2f}x; medians of {import_repeats} fresh processes).", "",
        f"One real training batch of each family's recipe; medians of {steps} steps after {warmup} warm-up. "
        "Items are what the task counts (images, nodes, patients, windows). Peak memory: growth of the resident "
        "set during the first training step (activations, gradients, optimizer state). FLOPs are counted by "
        "`FlopCounterMode`, which counts a sparse-times-dense product as dense (GAT's bag-of-words input), so "
        "the % of peak of such models is overstated. References run in the same process, their steps alternating "
        "with ours; the ratio is the median over rounds of (reference step time / our step time): > 1, ours is "
        "faster.", "",
        *_format_table(results, peak), "",
        f"Not measured (no recipe in {recipes_dir} for them or a family of their module): "
        f"{', '.join(unmeasured) or 'none'}.", "",
        "Written by `attnhub bench` (`python benchmarks/run_all.py`).",
    ]
    atomic_write_bytes(out / f"{report}.md", ("\n".join(text) + "\n").encode())
    return out / f"{report}.md"


def _main() -> None:
    parser = argparse.ArgumentParser(description="measure one recipe's model (used by attnhub bench)")
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
