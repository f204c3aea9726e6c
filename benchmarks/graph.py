"""Benchmark: our GAT against a minimal PyG GAT, same process, same graph, same input, same hyperparameters.

Both are the paper's transductive GAT (8 heads x 8 hidden, ELU, one output head, dropout 0.6 on the
inputs and the attention, Adam lr 0.005, L2 5e-4). The baseline is PyG's example
(:class:`benchmarks.references.PlainGAT`); ours is ``hub.create_model("gat")``. Each is fed the same features in
two forms: dense, and sparse CSR (PyG's ``GATConv`` takes it; the input dropout is then drawn over the stored
entries in both, since the example's ``F.dropout`` has no sparse kernel).

Measured, in one process with the four (model, input) training steps interleaved round by round: the time of one
training epoch (full batch: forward, backward, Adam step; median of ``--steps``), the ratio PyG / ours for each
input form (the median over rounds of the ratio of the pair's adjacent steps, so that load drift on a shared
machine cancels), and the peak memory of one training step after warm-up (:func:`benchmarks.timing.call_peak`:
CUDA ``max_memory_allocated``; CPU the growth of the peak resident set over its size before the step); on Cora
and on a generated graph of 100k nodes. Then the test accuracy of both on Cora (public split, best validation
accuracy over ``--epochs`` epochs) for ``--seeds`` seeds, PyG on dense features as its example, ours on sparse CSR
ones as the hub's data gives them.

    python -m benchmarks.graph          # writes benchmarks/results/graph.md
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks import RESULTS
from benchmarks.references import PlainGAT  # the minimal PyG GAT, shared with attnhub bench
from benchmarks.timing import call_peak, timed
from hub.io import atomic_write_bytes

LAYOUTS = {"dense": torch.Tensor.to_dense, "sparse CSR": torch.Tensor.to_sparse_csr}


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


def build(model_name: str, in_channels: int, num_classes: int) -> torch.nn.Module:
    import hub

    if model_name == "pyg":
        return PlainGAT(in_channels, num_classes)
    return hub.create_model("gat", in_channels=in_channels, num_classes=num_classes)


def train_step(model, optimizer, x, edge_index, y, mask) -> float:
    model.train()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x, edge_index)[mask], y[mask])
    loss.backward()
    optimizer.step()
    return loss.item()


def measure(graph_name: str, steps: int, device: str) -> dict[tuple[str, str], dict[str, float]]:
    """``{(model, input form): {"epoch_s", "peak_mb", "ratio"}}`` for PyG and ours on dense and sparse CSR
    features, their training steps interleaved round by round in this process; ``ratio`` (PyG's rows): the median
    over rounds of PyG's step time / ours on the same input."""
    x, edge_index, y, (train, _, _) = load_graph(graph_name)
    edge_index, y, train = (t.to(device) for t in (edge_index, y, train))
    steps_of = {}
    for layout, convert in LAYOUTS.items():
        features = convert(x).to(device)
        for model_name in ("pyg", "ours"):
            torch.manual_seed(0)
            model = build(model_name, x.shape[1], int(y.max()) + 1).to(device)
            optimizer = torch.optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
            steps_of[model_name, layout] = (lambda m=model, o=optimizer, f=features:
                                            train_step(m, o, f, edge_index, y, train))
    del x
    times = dict(zip(steps_of, timed(list(steps_of.values()), steps, 2, device)))
    result = {key: {"epoch_s": statistics.median(seconds), "peak_mb": call_peak(steps_of[key], torch.device(device))[1]}
              for key, seconds in times.items()}
    for layout in LAYOUTS:
        result["pyg", layout]["ratio"] = statistics.median(
            pyg / ours for pyg, ours in zip(times["pyg", layout], times["ours", layout]))
    return result


def accuracy(model_name: str, seed: int, epochs: int, device: str) -> float:
    """Test accuracy on Cora at the epoch of best validation accuracy."""
    x, edge_index, y, (train, val, test) = load_graph("cora")
    torch.manual_seed(seed)
    model = build(model_name, x.shape[1], int(y.max()) + 1)
    features = x if model_name == "pyg" else x.to_sparse_csr()  # PyG's example: dense; the hub's data: sparse CSR
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
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    lines = [f"# GAT: ours vs a minimal PyG GAT ({args.device}, {args.threads} CPU thread(s), "
             f"torch {torch.__version__})",
             "", "Epoch = one full-batch training step (forward, backward, Adam), median of "
             f"{args.steps} after 2 warm-up. PyG and ours are fed the same features, dense or sparse CSR "
             "(PyG's `GATConv` takes a sparse CSR input; its example's `F.dropout` does not, so on that input both "
             "drop over the stored entries). The four steps of a graph alternate round by round in one process; "
             "speed-up = the median over rounds of PyG's step time / ours on the same input (> 1: ours is faster). "
             "Peak = growth of the resident set during one training step after warm-up (CUDA: "
             "`max_memory_allocated`); memory ratio = PyG / ours (> 1: ours is smaller).", "",
             "| graph | input | PyG epoch (s) | ours epoch (s) | speed-up | PyG peak (MB) | ours peak (MB) | "
             "memory ratio |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for graph_name in ("cora", "random100k"):
        measured = measure(graph_name, args.steps, args.device)
        for layout in LAYOUTS:
            pyg, ours = measured["pyg", layout], measured["ours", layout]
            lines.append(f"| {graph_name} | {layout} | {pyg['epoch_s']:.4f} | {ours['epoch_s']:.4f} | "
                         f"{pyg['ratio']:.2f}x | {pyg['peak_mb']:.0f} | {ours['peak_mb']:.0f} | "
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
    atomic_write_bytes(Path(args.out), ("\n".join(lines) + "\n").encode())


if __name__ == "__main__":
    main()
