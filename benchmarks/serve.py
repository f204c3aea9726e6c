"""Serving throughput (issue 69): ``attnhub serve`` on loopback, answering the same bounded load (``--requests``
one-image requests from ``--clients`` concurrent clients) once at ``--max-batch-size 1`` (one model call per
request) and once batched; requests/s, latency p50 and p99, and failed requests. Writes
``benchmarks/results/serve.md``.

    python -m benchmarks.serve [--tag airbench_cbam_32.cifar10] [--requests 400] [--clients 32]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image

RESULTS = Path(__file__).parent / "results" / "serve.md"
REPO = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def served(tag: str, *options: str):
    """The URL and process id of ``attnhub serve TAG`` on a free loopback port, stopped on exit."""
    import httpx

    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "HUB_OFFLINE": "1"}
    server = subprocess.Popen([sys.executable, "-m", "hub.cli", "serve", tag, "--port", str(port), *options],
                              cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            if server.poll() is not None:
                raise RuntimeError(f"the server exited with {server.returncode}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                    break
            time.sleep(0.5)
        yield url, server.pid
    finally:
        server.terminate()
        server.wait(timeout=30)


async def load(url: str, images: list[bytes], requests: int, clients: int) -> tuple[float, list[float], int]:
    """Seconds for ``requests`` one-image POSTs from ``clients`` concurrent clients, each request's latency, and
    how many failed (not 200)."""
    import httpx

    latencies, failed = [], 0
    queue = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(images[i % len(images)])

    async def client(http):
        nonlocal failed
        while not queue.empty():
            blob = queue.get_nowait()
            start = time.perf_counter()
            response = await http.post(f"{url}/predict", files=[("files", ("x.png", blob, "image/png"))])
            latencies.append(time.perf_counter() - start)
            failed += response.status_code != 200

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        for _ in range(2):  # warm up
            await http.post(f"{url}/predict", files=[("files", ("x.png", images[0], "image/png"))])
        start = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(clients)))
        return time.perf_counter() - start, latencies, failed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tags", default="airbench_cbam_32.cifar10,vit_digits.sklearn",
                        help="served tags, comma-separated (default: the issue's, and the small digits ViT)")
    parser.add_argument("--requests", type=int, default=400, help="requests per setting (default 400)")
    parser.add_argument("--clients", type=int, default=32, help="concurrent clients (default 32)")
    parser.add_argument("--batch-size", type=int, default=64, help="the batched setting's --max-batch-size")
    args = parser.parse_args(argv)
    lines = [f"# Serving: {args.requests} one-image requests per setting, {args.clients} concurrent clients, "
             "loopback", "", f"`python -m benchmarks.serve`; {os.cpu_count()} CPUs, shared with the load generator "
             "(and, where it ran, other work: the load average is printed). The server's CPU milliseconds per request "
             "(its process's user + system time over the run, warm-up included) hardly depend on that sharing: "
             "their ratio is the capacity batching gives on cores of its own.", ""]
    for tag in args.tags.split(","):
        lines += [f"## {tag}", "", f"load average at the start: {os.getloadavg()[0]:.1f}", "",
                  "| setting | requests/s | p50 ms | p99 ms | failed | requests/s / batch 1's | server CPU ms per "
                  "request | batch 1's CPU per request / this |",
                  "| --- | --- | --- | --- | --- | --- | --- | --- |", *_rows(tag, args), ""]
        print("\n".join(lines), flush=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text("\n".join(lines))


def _rows(tag: str, args) -> list[str]:
    """The table rows of one tag: batch 1, then batched."""
    side, mode = (8, "L") if tag.startswith("vit_digits") else (32, "RGB")
    rng = np.random.default_rng(0)
    images = []
    for _ in range(16):
        stream = io.BytesIO()
        shape = (side, side) if mode == "L" else (side, side, 3)
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode=mode).save(stream, format="PNG")
        images.append(stream.getvalue())
    rows = []
    for label, options in [("batch 1", ["--max-batch-size", "1", "--max-wait-ms", "0"]),
                           (f"batched (<= {args.batch_size}, 10 ms)",
                            ["--max-batch-size", str(args.batch_size), "--max-wait-ms", "10"])]:
        with served(tag, *options, "--max-queue", str(args.requests)) as (url, pid):
            before = _cpu_seconds(pid)
            seconds, latencies, failed = asyncio.run(load(url, images, args.requests, args.clients))
            cpu_ms = (_cpu_seconds(pid) - before) * 1000 / (args.requests + 2)
        rows.append((label, args.requests / seconds, np.percentile(latencies, 50) * 1000,
                     np.percentile(latencies, 99) * 1000, failed, cpu_ms))
    return [f"| {label} | {rate:.1f} | {p50:.0f} | {p99:.0f} | {failed} | {rate / rows[0][1]:.2f} | {cpu:.1f} | "
            f"{rows[0][5] / cpu:.2f} |" for label, rate, p50, p99, failed, cpu in rows]


def _cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, all threads) the process ``pid`` has used so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
