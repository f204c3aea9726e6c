"""Timing and memory measurement shared by the benchmarks: interleaved timed calls, the peak memory of a call
(CPU: resident set; CUDA: ``max_memory_allocated``) and the machine's matrix-multiply peak."""
from __future__ import annotations

import ctypes
import os
import re
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch

GEMM_SIZES = (512, 1024, 2048)


def sync(device: str | torch.device) -> None:
    """Wait for the device's queued work (CUDA), so that a clock read after it covers that work."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def timed(fns: list[Callable[[], object]], steps: int, warmup: int, device: str | torch.device) -> list[list[float]]:
    """Seconds of each call of each function (one list per function); calls interleaved round by round,
    so a change in the machine's load during the run falls on all of them alike."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(steps):
        for fn, log in zip(fns, times):
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            log.append(time.perf_counter() - start)
    return times


def median_seconds(fn: Callable[[], object], repeats: int, warmup: int = 1,
                   device: str | torch.device = "cpu") -> float:
    """Median seconds of ``repeats`` calls of ``fn`` after ``warmup`` calls."""
    return statistics.median(timed([fn], repeats, warmup, device)[0])


def rss_bytes() -> int:
    """The process's resident set size now, from ``/proc/self/statm``."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class PeakRSS:
    """Peak resident-set growth over a block, sampled every millisecond from ``/proc/self/statm``."""

    def __init__(self):
        self.peak = self.start = 0
        self._stop = threading.Event()

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(0.001)

    def __enter__(self):
        self.start = self.peak = rss_bytes()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def growth_mb(self) -> float:
        return (self.peak - self.start) / 2**20


def _status_kib(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def call_peak(fn: Callable[[], object], device: torch.device) -> tuple[float, float]:
    """Seconds and peak MiB of one call of ``fn()``. Peak memory: on CUDA the growth of ``max_memory_allocated``; on
    CPU the growth of the peak resident set (``VmHWM``, reset through ``/proc/self/clear_refs``) over the resident
    size before the call, after ``malloc_trim`` has handed the memory freed by earlier calls back to the system:
    what the call takes from the machine."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        ctypes.CDLL("libc.so.6").malloc_trim(0)  # give freed heap pages back, so reuse is not hidden
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak resident set size
        base = _status_kib("VmRSS") * 1024
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = _status_kib("VmHWM") * 1024 - base
    return time.perf_counter() - start, peak / 2**20


def time_and_peak(fn: Callable[[], object], device: torch.device, repeats: int) -> tuple[float, float]:
    """Median seconds and peak MiB (:func:`call_peak`) of ``fn()`` over ``repeats`` calls after one warm-up call."""
    fn()  # warm-up
    times, peaks = zip(*(call_peak(fn, device) for _ in range(repeats)))
    return statistics.median(times), max(peaks)


def training_pass(loss: Callable[[], torch.Tensor], optimizer: torch.optim.Optimizer) -> Callable[[], None]:
    """One training step for :func:`time_and_peak`: ``loss()`` (forward and loss), backward, an optimizer step."""
    def run():
        loss().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return run


def inference_pass(model: torch.nn.Module, x: torch.Tensor) -> Callable[[], None]:
    """One forward for :func:`time_and_peak`, under ``inference_mode``."""
    def run():
        with torch.inference_mode():
            model(x)
    return run


def ratio(a: float, b: float, floor: float = 0.0) -> str:
    """``a / b`` as ``"4.2x"``; ``"-"`` when ``b`` is at or below the measurement floor."""
    return f"{a / b:.1f}x" if b > floor else "-"


def gemm_peak(dtype: torch.dtype = torch.float32, sizes: tuple[int, ...] = GEMM_SIZES, repeats: int = 5,
              device: str = "cpu") -> float:
    """The machine's matrix-multiply throughput in FLOP/s, in this process: the best over ``sizes`` of
    ``repeats`` (n x n) @ (n x n) products each, after a warm-up product of each size."""
    best = 0.0
    for size in sizes:
        a = torch.randn(size, size, dtype=dtype, device=device)
        b = torch.randn(size, size, dtype=dtype, device=device)
        seconds = min(timed([lambda: a @ b], repeats, 1, device)[0])
        best = max(best, 2 * size**3 / seconds)
    return best
