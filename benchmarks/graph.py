"""Benchmark: our GAT against a minimal PyG GAT, same run, same graph, same hyperparameters.

Both are the paper's transductive GAT (8 heads x 8 hidden, ELU, one output head, dropout 0.6 on the
inputs and the attention, Adam lr 0.005, L2 5e-4). The baseline is PyG's example: dense features
and ``F.dropout`` over the whole feature matrix. Ours (``hub.create_model("gat")``) keeps bag-of-words
features as a sparse CSR matrix and draws the input-dropout mask over its nonzero entries only.

Measured: the time of one training epoch (full batch: forward, backward, Adam step; median of
``--steps``), and the peak memory of the training steps (CUDA: ``max_memory_allocated``; CPU: the
peak resident set of a fresh process running the steps, less its size before the graph is loaded),
on Cora and on a generated graph of 100k nodes; then the test accuracy of both on Cora (public
split, best validation accuracy over ``--epochs`` epochs) for ``--seeds`` seeds.

    python -m benchmarks.graph          # writes benchmarks/results/graph.md
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks import RESULTS, ROOT
from benchmarks.references import PlainGAT  # the minimal PyG GAT, shared with attnhub bench
from benchmarks.timing import median_seconds, rss_bytes


def load_graph(name: str):
    """-> (x dense, edge_index, y, masks). ``cora`` from HUB_DATA_DIR, ``random100k`` generated."""
    if name == "cora":
        from graph.data import cora

        data = cora()
        data.setup("fit")
        g = data.graph
        return g.x.to_dense(), g.edge_index, g.y, (g.train_mask, g.val_mask, g.test_mask)
    generator = torch.Generator().manual_seed(0)
    n, features, classes, degree = 100_000, 500, 7, 10
    x = (torch.rand(n, features, generator=generator) < 0.01).float()  # bag-of-words density ~1%
    x = x / x.sum(1, keepdim=True).clamp(min=1)
    edge_index = torch.randint(0, n, (2, n * degree // 2), generator=generator)
    edge_index = torch.cat([edge_index, edge_index.flip(0)], 1)
    y = torch.randint(0, classes, (n,), generator=generator)
    train = torch.zeros(n, dtype=torch.bool)
    train[: 20 * classes] = True
    return x, edge_index, y, (train, ~train, ~train)


def build(model_name: str, x: torch.Tensor, num_classes: int):
    import hub

    if model_name == "pyg":
        return PlainGAT(x.shape[1], num_classes), x
    return hub.create_model("gat", in_channels=x.shape[1], num_classes=num_classes), x.to_sparse_csr()


def train_step(model, optimizer, x, edge_index, y, mask) -> float:
    model.train()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x, edge_index)[mask], y[mask])
    loss.backward()
    optimizer.step()
    return loss.item()


def measure(model_name: str, graph_name: str, steps: int, device: str) -> dict:
    """One (model, graph) measurement; on CPU run in a fresh process (see ``--child``)."""
    before = rss_bytes() / 2**20
    x, edge_index, y, (train, _, _) = load_graph(graph_name)
    torch.manual_seed(0)
    model, features = build(model_name, x, int(y.max()) + 1)
    del x
    model, features, edge_index, y, train = (t.to(device) for t in (model, features, edge_index, y, train))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    epoch_s = median_seconds(lambda: train_step(model, optimizer, features, edge_index, y, train), steps,
                             warmup=2, device=device)
    peak = (torch.cuda.max_memory_allocated() / 2**20 if device == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - before)
    return {"epoch_s": epoch_s, "peak_mb": peak}


def measure_isolated(model_name: str, graph_name: str, steps: int, device: str, threads: int) -> dict:
    if device == "cuda":
        return measure(model_name, graph_name, steps, device)
    out = subprocess.run([sys.executable, "-m", "benchmarks.graph", "--child", model_name, graph_name, str(steps),
                          str(threads)], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def accuracy(model_name: str, seed: int, epochs: int, device: str) -> float:
    """Test accuracy on Cora at the epoch of best validation accuracy."""
    x, edge_index, y, (train, val, test) = load_graph("cora")
    torch.manual_seed(seed)
    model, features = build(model_name, x, int(y.max()) + 1)
    model, features, edge_index, y = (t.to(device) for t in (model, features, edge_index, y))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
    best_val, best_test = -1.0, 0.0
    for _ in range(epochs):
        train_step(model, optimizer, features, edge_index, y, train)
        model.eval()
        with torch.no_grad():
            pred = model(features, edge_index).argmax(-1)
        val_acc = (pred[val] == y[val]).float().mean().item()
        if val_acc > best_val:
            best_val, best_test = val_acc, (pred[test] == y[test]).float().mean().item()
    return best_test


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (1: steadier on a shared machine)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=str(RESULTS / "graph.md"))
    parser.add_argument("--child", nargs=4, metavar=("MODEL", "GRAPH", "STEPS", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model_name, graph_name, steps, threads = args.child
        torch.set_num_threads(int(threads))
        print(json.dumps(measure(model_name, graph_name, int(steps), "cpu")))
        return
    torch.set_num_threads(args.threads)
    lines = [f"# GAT: ours vs a minimal PyG GAT ({args.device}, {args.threads} CPU thread(s), "
             f"torch {torch.__version__})",
             "", "Epoch = one full-batch training step (forward, backward, Adam). Ratio = PyG / ours "
             "(> 1: ours is faster or smaller).", "",
             "| graph | PyG epoch (s) | ours epoch (s) | speed-up | PyG peak (MB) | ours peak (MB) | memory ratio |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for graph_name in ("cora", "random100k"):
        pyg = measure_isolated("pyg", graph_name, args.steps, args.device, args.threads)
        ours = measure_isolated("ours", graph_name, args.steps, args.device, args.threads)
        lines.append(f"| {graph_name} | {pyg['epoch_s']:.4f} | {ours['epoch_s']:.4f} | "
                     f"{pyg['epoch_s'] / ours['epoch_s']:.2f}x | {pyg['peak_mb']:.0f} | {ours['peak_mb']:.0f} | "
                     f"{pyg['peak_mb'] / max(ours['peak_mb'], 1e-9):.2f}x |")
        print(lines[-1], flush=True)
    lines += ["", f"Cora test accuracy at the best validation epoch of {args.epochs} ({args.seeds} seeds):", "",
              "| model | test accuracy (mean ± std) | per seed |", "| --- | --- | --- |"]
    for model_name in ("pyg", "ours"):
        accs = [accuracy(model_name, seed, args.epochs, args.device) for seed in range(args.seeds)]
        std = statistics.stdev(accs) if len(accs) > 1 else 0.0
        lines.append(f"| {model_name} | {100 * statistics.fmean(accs):.1f} ± {100 * std:.1f} | "
                     f"{', '.join(f'{100 * a:.1f}' for a in accs)} |")
        print(lines[-1], flush=True)
    lines += ["", "The graph `random100k`: 100,000 nodes, 500 bag-of-words features at 1% density, mean degree 10 "
              "(uniform random edges, both directions). Generated by this script; `python -m benchmarks.graph` "
              "rewrites this file."]
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
