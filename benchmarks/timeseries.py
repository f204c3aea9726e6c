"""Time-series benchmark: training and inference windows/s and peak memory of the time-series families, and
TESTAM's cost as the number of sensors grows (207 to 2,000 sensors on generated road graphs).

* Families at their recipes' input sizes: ``rul_attention`` and ``rul_attention_gru`` on 30-cycle windows of 14
  sensors, ``testam`` and the ``traffic_gru`` baseline on 12 five-minute steps of Los-loop's 207 sensors.
* Sensors: TESTAM on generated road graphs (sensors at random points of a square, each linked to its 4 nearest
  neighbours, both ways), N = 207, 500, 1,000, 2,000, against the GRU baseline at the same N in the same run. The
  GRU treats sensors independently (cost O(N)); TESTAM's dynamic expert attends among all sensors and its static
  expert masks a dense (N, N) attention by the graph, so its cost grows as O(N^2) once those terms dominate
  (up to 2,000 sensors the per-sensor temporal attention still weighs most); the ratio column shows how much more
  a window costs.

Training is forward, the model's loss, backward and an AdamW step on a batch; inference a forward under
``inference_mode``. Times are medians of ``--repeats`` passes after a warm-up, peak memory by
:func:`benchmarks.timing.time_and_peak` (CPU: growth of the peak resident set; CUDA: ``max_memory_allocated``).

    python -m benchmarks.timeseries [--batch 8] [--repeats 3]     # writes benchmarks/results/timeseries_speed.md

Notes of the time-series experiments: ``docs/experiments/2026-12-timeseries.md``.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

import hub
from benchmarks import RESULTS
from benchmarks.timing import inference_pass, ratio, time_and_peak, training_pass
from timeseries.models.testam import TESTAM
from timeseries.tasks import masked_mae

OUT = RESULTS / "timeseries_speed.md"
SENSORS = (207, 500, 1000, 2000)


def road_like_graph(num_nodes: int, neighbours: int = 4, seed: int = 0) -> torch.Tensor:
    """A generated (N, N) road graph: random points in a square, each linked to its nearest neighbours."""
    points = torch.rand(num_nodes, 2, generator=torch.Generator().manual_seed(seed))
    distance = torch.cdist(points, points).fill_diagonal_(float("inf"))
    adjacency = torch.zeros(num_nodes, num_nodes)
    adjacency.scatter_(1, distance.topk(neighbours, largest=False).indices, 1.0)
    return ((adjacency + adjacency.T) > 0).float()


def training_loss(model, x, y):
    """The loss the model trains on: TESTAM's experts + router, masked MAE for traffic, MSE for RUL."""
    def loss():
        if isinstance(model, TESTAM):
            return model.loss(x, y)[0]
        return masked_mae(model(x), y) if x.ndim == 4 else F.mse_loss(model(x), y)
    return loss


def speed(model, x, y, device, repeats) -> tuple[float, float, float, float]:
    """(train s/batch, train peak MiB, inference s/batch, inference peak MiB)."""
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters())
    train_s, train_mib = time_and_peak(training_pass(training_loss(model, x, y), optimizer), device, repeats)
    model.eval()
    infer_s, infer_mib = time_and_peak(inference_pass(model, x), device, repeats)
    return train_s, train_mib, infer_s, infer_mib


def traffic_batch(batch: int, num_nodes: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.rand(batch, 12, num_nodes, 2, device=device)
    return x, torch.rand(batch, 12, num_nodes, device=device) * 60 + 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8, help="windows per batch")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per measurement (after a warm-up)")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    lines = [f"# Time-series speed ({device}, {torch.get_num_threads()} threads, batch {args.batch}, "
             f"torch {torch.__version__})", "", "Written by `python -m benchmarks.timeseries` (see its docstring).", "",
             "| model | input | params | train windows/s | train peak MiB | infer windows/s | infer peak MiB |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    families = [("rul_attention", "30 cycles x 14 sensors"), ("rul_attention_gru", "30 cycles x 14 sensors"),
                ("testam", "12 steps x 207 sensors"), ("traffic_gru", "12 steps x 207 sensors")]
    for name, shape in families:
        torch.manual_seed(0)
        model = hub.create_model(name, graph="") if name == "testam" else hub.create_model(name)
        if name.startswith("rul"):
            x = torch.randn(args.batch, 30, 14, device=device)
            y = torch.rand(args.batch, model.horizon, device=device) * 125
        else:
            x, y = traffic_batch(args.batch, 207, device)
        train_s, train_mib, infer_s, infer_mib = speed(model, x, y, device, args.repeats)
        params = sum(p.numel() for p in model.parameters())
        lines.append(f"| {name} | {shape} | {params / 1e3:.0f}k | {args.batch / train_s:.1f} | {train_mib:.0f} | "
                     f"{args.batch / infer_s:.1f} | {infer_mib:.0f} |")
        print(lines[-1], flush=True)
    lines += ["", "## TESTAM against the GRU baseline as the sensors grow (generated road graphs, 4 nearest "
              "neighbours)", "", "| sensors | TESTAM train windows/s | GRU train windows/s | train time ratio "
              "(TESTAM / GRU) | TESTAM train peak MiB | GRU train peak MiB | TESTAM infer windows/s | "
              "GRU infer windows/s | infer time ratio |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for num_nodes in SENSORS:
        torch.manual_seed(0)
        testam = TESTAM(num_nodes, road_like_graph(num_nodes), 12, 12, dim=16, num_heads=2, speed_mean=40.0,
                        speed_std=10.0)
        gru = hub.create_model("traffic_gru", num_nodes=num_nodes, speed_mean=40.0, speed_std=10.0)
        x, y = traffic_batch(args.batch, num_nodes, device)
        t_train, t_mib, t_infer, _ = speed(testam, x, y, device, args.repeats)
        g_train, g_mib, g_infer, _ = speed(gru, x, y, device, args.repeats)
        lines.append(f"| {num_nodes} | {args.batch / t_train:.2f} | {args.batch / g_train:.2f} | "
                     f"{ratio(t_train, g_train)} | {t_mib:.0f} | {g_mib:.0f} | {args.batch / t_infer:.2f} | "
                     f"{args.batch / g_infer:.2f} | {ratio(t_infer, g_infer)} |")
        print(lines[-1], flush=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
