"""Data-parallel scaling on CPU: training throughput per process with 1 process against 2 (DDP over gloo, as a
multi-node run on loopback trains, docs/recipes.md "Several processes and machines").

Each process takes the same batch (weak scaling: 2 processes train a global batch twice as large) and one intra-op
thread; a step is forward, cross-entropy, backward (under DDP with the all-reduce of the gradients) and an AdamW
step, on generated inputs of the family's shape. One process trains plainly (no DDP): the reference. Times are the
median step after warm-up steps; the 2 processes' medians are averaged.

    python -m benchmarks.data_parallel    # writes benchmarks/results/data_parallel.md

Per-process throughput near 1x means the second process adds a full process's work (the ideal); below it, the
gradients' all-reduce and the share of the machine's cores (and of their memory bandwidth) cost the difference.
"""
from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

from benchmarks import RESULTS
from benchmarks.timing import timed

# family -> (model arguments, shape of one input, number of classes)
FAMILIES = {
    "cct_digits": ({}, (1, 8, 8), 10),  # the quickstart's model (0.1M parameters)
    "ast_tiny": ({"target_frames": 64}, (128, 64), 10),  # the FSDD recipe's AST (0.8M parameters)
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, family: str, batch: int, steps: int, warmup: int, results) -> None:
    import hub

    torch.set_num_threads(1)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    args, shape, classes = FAMILIES[family]
    model = hub.create_model(family, num_classes=classes, **args).train()
    net = torch.nn.parallel.DistributedDataParallel(model) if world > 1 else model
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(rank)
    x, y = torch.randn(batch, *shape, generator=generator), torch.randint(0, classes, (batch,), generator=generator)

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        optimizer.step()

    seconds = timed([step], steps, warmup, "cpu")[0]
    results.put((rank, statistics.median(seconds)))
    if world > 1:
        torch.distributed.destroy_process_group()


def step_seconds(family: str, world: int, batch: int, steps: int, warmup: int) -> float:
    """The median step time of ``world`` processes (their medians averaged)."""
    context = mp.get_context("spawn")
    results = context.Queue()
    port = _free_port()
    processes = [context.Process(target=_worker, args=(r, world, port, family, batch, steps, warmup, results))
                 for r in range(world)]
    for p in processes:
        p.start()
    medians = [results.get(timeout=900)[1] for _ in processes]
    for p in processes:
        p.join(60)
    return statistics.mean(medians)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES),
                        help="model families to time")
    parser.add_argument("--batch", type=int, default=64, help="inputs per process and step")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--note", default="", help="a line on the machine's load while measuring, for the table")
    args = parser.parse_args(argv)

    rows = []
    for family in args.families:
        one = step_seconds(family, 1, args.batch, args.steps, args.warmup)
        two = step_seconds(family, 2, args.batch, args.steps, args.warmup)
        rows.append(f"| {family} | {args.batch} | {args.batch / one:.0f} | {args.batch / two:.0f} | "
                    f"{one / two:.2f}x | {2 * one / two:.2f}x |")
        print(rows[-1], flush=True)
    lines = [
        "# Data-parallel scaling on CPU: 1 against 2 processes",
        "",
        "`python -m benchmarks.data_parallel` (benchmarks/data_parallel.py): training steps (forward, backward, AdamW)",
        "of each family on generated inputs, the same batch per process, one intra-op thread per process; 2",
        "processes train under DDP over gloo on loopback (what 2 nodes of 1 process do), 1 process plainly. Median",
        f"step after {args.warmup} warm-up steps, {args.steps} timed; throughput in samples per second.",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, torch {torch.__version__}. {args.note}".rstrip(),
        "",
        "| family | batch / process | 1 process: samples/s | 2 processes: samples/s per process | per process, "
        "2 vs 1 | total, 2 vs 1 |",
        "| --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]
    (RESULTS / "data_parallel.md").write_text("\n".join(lines))
    print(f"wrote {RESULTS / 'data_parallel.md'}")


if __name__ == "__main__":
    main()
