"""Cost against problem size, one panel per domain, with the expected complexity drawn beside it.

Each point is the median time of a forward + backward pass (training mode) over generated inputs:

- core: Set Transformer SAB vs ISAB (16 inducing points) over the set size N: O(N^2) vs O(N m);
- graph: GAT on random graphs of N nodes and mean degree 10 (64 features): O(E) = O(N);
- audio: AST over the clip length (patches grow linearly with frames): O(P^2) attention + O(P) rest;
- tabular: TabR retrieval over the number of candidate rows R (exact search): O(R) per query batch;
- timeseries: TESTAM over the number of sensors N (the dynamic expert attends among all sensors): O(N^2).

    python -m benchmarks.scaling    # writes benchmarks/results/scaling.md and benchmarks/results/scaling.png

The dashed line of each panel is the expected complexity, scaled to pass through the largest point.
"""
from __future__ import annotations

import argparse

import torch

import hub
from benchmarks import RESULTS
from benchmarks.timing import median_seconds
from hub.plotting import save_figure


def _seconds(step) -> float:
    """Median of 3 passes after a warm-up."""
    return median_seconds(step, repeats=3, warmup=1)


def _backward(model, *inputs):
    def step():
        model.zero_grad(set_to_none=True)
        out = model(*inputs)
        (out[0] if isinstance(out, tuple) else out).float().sum().backward()
    return step


def set_sizes():
    sab, isab = hub.create_model("set_transformer_max"), hub.create_model("set_transformer_max", num_inds=16)
    for n in (64, 128, 256, 512, 1024, 2048):
        x, mask = torch.randn(8, n, 1), torch.ones(8, n, dtype=torch.bool)
        yield n, {"SAB": _seconds(_backward(sab, x, mask)), "ISAB (m=16)": _seconds(_backward(isab, x, mask))}


def graph_sizes():
    model = hub.create_model("gat", in_channels=64, num_classes=7)
    generator = torch.Generator().manual_seed(0)
    for n in (1_000, 4_000, 16_000, 64_000):
        x = torch.randn(n, 64, generator=generator)
        edges = torch.randint(0, n, (2, 5 * n), generator=generator)
        yield n, {"GAT": _seconds(_backward(model, x, torch.cat([edges, edges.flip(0)], 1)))}


def audio_sizes():
    for seconds in (1, 2, 4, 8):
        frames = 100 * seconds  # 10 ms shift
        model = hub.create_model("ast_tiny", target_frames=frames)
        yield frames, {"AST tiny": _seconds(_backward(model, torch.randn(4, 128, frames)))}


def tabular_sizes():
    for rows in (1_000, 4_000, 16_000, 64_000):
        model = hub.create_model("tabr", num_numeric=8, num_classes=2, num_candidates=rows)
        generator = torch.Generator().manual_seed(0)
        model.set_candidates(torch.randn(rows, 8, generator=generator), torch.zeros(rows, 0, dtype=torch.int32),
                             torch.randint(0, 2, (rows,), generator=generator))
        yield rows, {"TabR": _seconds(_backward(model, torch.randn(256, 8)))}


def timeseries_sizes():
    for n in (25, 50, 100, 200, 400):
        model = hub.create_model("testam", num_nodes=n, graph="")
        yield n, {"TESTAM": _seconds(_backward(model, torch.randn(8, 12, n, 2)))}


PANELS = [  # (title, size label, expected exponent per series, measure)
    ("core: set size", "N (set elements)", {"SAB": 2, "ISAB (m=16)": 1}, set_sizes),
    ("graph: nodes", "N (nodes, mean degree 10)", {"GAT": 1}, graph_sizes),
    ("audio: clip length", "frames (10 ms)", {"AST tiny": 2}, audio_sizes),
    ("tabular: candidate rows", "R (candidates)", {"TabR": 1}, tabular_sizes),
    ("timeseries: sensors", "N (sensors)", {"TESTAM": 2}, timeseries_sizes),
]


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.6))
    lines = ["# Cost against problem size (forward + backward, training mode)", "",
             f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), CPU. Median of 3 after a warm-up. "
             "`python -m benchmarks.scaling` rewrites this file and `scaling.png`. The dashed lines of the plot are "
             "the expected complexity through the largest point. A measured slope below the expected exponent means "
             "terms of lower order (per-row encoders, per-sensor temporal attention) still dominate at these sizes.",
             "",
             "| panel | series | size | seconds | expected | measured slope (log-log, last two points) |",
             "| --- | --- | ---: | ---: | --- | ---: |"]
    for ax, (title, xlabel, expected, measure) in zip(axes, PANELS):
        points = list(measure())
        sizes = [size for size, _ in points]
        for series, exponent in expected.items():
            seconds = [values[series] for _, values in points]
            ax.loglog(sizes, seconds, marker="o", label=series)
            scale = seconds[-1] / sizes[-1] ** exponent
            ax.loglog(sizes, [scale * s**exponent for s in sizes], "--", color="0.6",
                      label=f"O(n^{exponent})" if exponent > 1 else "O(n)")
            slope = (torch.tensor(seconds[-1] / seconds[-2]).log() / torch.tensor(sizes[-1] / sizes[-2]).log()).item()
            for size, value in zip(sizes, seconds):
                shown = f"{slope:.2f}" if size == sizes[-1] else ""
                lines.append(f"| {title} | {series} | {size:,} | {value:.4f} | O(n^{exponent}) | {shown} |")
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("seconds per step")
        ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, RESULTS / "scaling.png")
    (RESULTS / "scaling.md").write_text("\n".join(lines) + "\n![scaling](scaling.png)\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
