"""Benchmark of the attention core: SAB vs ISAB as the set grows, and SDPA vs a naive attention.

Writes ``benchmarks/results/attention_core.md``. Each row is one forward+backward pass (median of a few),
and its peak memory (:func:`benchmarks.timing.time_and_peak`): on GPU ``torch.cuda.max_memory_allocated``; on
CPU the growth of the process's peak resident set size (``VmHWM``) over the resident size before the pass, i.e.
what the pass takes from the machine (tensors, autograd buffers, allocator slack; a few MiB of noise). A SAB
size is skipped once the previous one took longer than ``--sab-seconds`` (time grows ~4x per doubling) or ran
out of memory.

    python -m benchmarks.attention_core [--max-n 16384] [--sab-seconds 4]
"""
from __future__ import annotations

import argparse
import math

import torch
import torch.nn.functional as F

from benchmarks import RESULTS
from benchmarks.timing import ratio, time_and_peak
from hub.attention import ISAB, SAB

OUT = RESULTS / "attention_core.md"


def set_block_pass(block, x):
    def run():
        block(x).sum().backward()
        block.zero_grad(set_to_none=True)
    return run


def naive_attention(q, k, v):
    return (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1) @ v


def attention_pass(fn, q, k, v):
    def run():
        fn(q, k, v).sum().backward()
        for t in (q, k, v):
            t.grad = None
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-n", type=int, default=16384)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--inducing", type=int, default=32)
    parser.add_argument("--sab-seconds", type=float, default=4.0, help="skip larger SAB sizes after a pass this slow")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    where = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    memory = "torch.cuda.max_memory_allocated growth" if device.type == "cuda" else "peak RSS growth (VmHWM)"
    lines = [f"# Attention core benchmark ({where}, torch {torch.__version__})", "",
             f"Forward+backward of one set (batch 1), width {args.dim}, {args.heads} heads, ISAB with "
             f"{args.inducing} inducing points; time is the median of repeats, memory the {memory} "
             "(ratios of memory below 1 MiB are not shown).", "",
             "## SAB vs ISAB", "", "| n | SAB ms | ISAB ms | SAB/ISAB time | SAB MiB | ISAB MiB | SAB/ISAB memory |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    sab = SAB(args.dim, args.dim, args.heads).to(device)
    isab = ISAB(args.dim, args.dim, args.heads, args.inducing).to(device)
    sab_note, n = "", 256
    while n <= args.max_n:
        x = torch.randn(1, n, args.dim, device=device)
        repeats = 5 if n <= 1024 else 3 if n <= 4096 else 1
        isab_t, isab_m = time_and_peak(set_block_pass(isab, x), device, repeats)
        sab_cell = ["skipped"] * 2 + ["-"] * 2
        if not sab_note:
            try:
                sab_t, sab_m = time_and_peak(set_block_pass(sab, x), device, repeats)
                sab_cell = [f"{sab_t * 1e3:.1f}", ratio(sab_t, isab_t), f"{sab_m:.1f}", ratio(sab_m, isab_m, 1.0)]
                if sab_t > args.sab_seconds:
                    sab_note = f"SAB stopped after n={n}: a pass took {sab_t:.1f} s (> {args.sab_seconds} s cap)"
            except torch.OutOfMemoryError:
                sab_note = f"SAB ran out of memory at n={n}"
                sab_cell = ["OOM"] * 2 + ["-"] * 2
        lines.append(f"| {n} | {sab_cell[0]} | {isab_t * 1e3:.1f} | {sab_cell[1]} | {sab_cell[2]} | {isab_m:.1f} | "
                     f"{sab_cell[3]} |")
        print(lines[-1], flush=True)
        n *= 2
    if sab_note:
        lines += ["", sab_note + "."]
    lines += ["", "SAB calls the fused SDPA kernel, which never stores the n x n scores: its memory grows linearly "
              "and its n² cost shows in time; the table below shows the n² memory that a naive attention would take."]
    lines += ["", "## SDPA vs naive softmax(QKᵀ/√d)V", "",
              f"q, k, v of shape (1, {args.heads}, n, {args.dim // args.heads}), forward+backward.", "",
              "| n | SDPA ms | naive ms | naive/SDPA time | SDPA MiB | naive MiB | naive/SDPA memory |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for n in (256, 1024, 4096):
        q, k, v = (torch.randn(1, args.heads, n, args.dim // args.heads, device=device, requires_grad=True)
                   for _ in range(3))
        fused_t, fused_m = time_and_peak(attention_pass(F.scaled_dot_product_attention, q, k, v), device, 5)
        naive_t, naive_m = time_and_peak(attention_pass(naive_attention, q, k, v), device, 5)
        lines.append(f"| {n} | {fused_t * 1e3:.1f} | {naive_t * 1e3:.1f} | {ratio(naive_t, fused_t)} | {fused_m:.1f} | "
                     f"{naive_m:.1f} | {ratio(naive_m, fused_m, 1.0)} |")
        print(lines[-1], flush=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
