"""The image data path against the training step it feeds, in the same run: writes
``benchmarks/results/image_loader.md`` (``--device cuda``: the GPU rows go in a section of their own).

    HUB_DATA_DIR=../shared/data python -m benchmarks.image_loader [--device cuda] [--files 4000]

Rows, all on CIFAR-10's JPEG files and in images/s:
- ``per-file loader`` (the reference: the data path the recipes used before, torchvision's ``ImageFolder`` with a
  pad-and-crop, a flip and a normalisation per image in ``--workers`` loader processes, as in a typical training
  script);
- ``resident loader`` (:mod:`vision.resident`: decoded once, flipped and translated a batch at a time on the
  device; the first decoding, uncached, is its own row);
- ``training step`` alone, on one resident batch, for each model of ``--models`` (the recipe's precision: bf16
  autocast and channels_last on CUDA), and ``step fed by the resident loader``: the two together.

The ratio column divides a loader's rate by the slowest model's step: above 1, the loader keeps up.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from benchmarks import RESULTS
from benchmarks.timing import sync

DEFAULT_MODELS = ("airbench_cbam_32", "resnet_cbam18_32")


def cifar_files(count: int) -> list[Path]:
    """The first ``count`` training JPEGs of the local CIFAR-10 copy, the classes interleaved."""
    from hub.data import data_dir
    from hub.errors import DatasetUnavailable
    from vision.data import _class_files

    root = data_dir() / "cifar10" / "train"
    if not root.is_dir():
        raise DatasetUnavailable("cifar10", f"{root} not found: set HUB_DATA_DIR to the folder holding cifar10/")
    per_class = list(_class_files(root).values())
    files = [f for group in zip(*per_class) for f in group]
    return files[:count]


def per_file_rate(files: list[Path], batch_size: int, workers: int) -> float:
    """Images/s of torchvision's per-image pipeline over ``files`` in a ``DataLoader`` with ``workers`` processes."""
    from PIL import Image
    from torchvision import transforms

    from vision.data import CIFAR_MEAN, CIFAR_STD

    transform = transforms.Compose([transforms.RandomCrop(32, padding=2, padding_mode="reflect"),
                                    transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                                    transforms.Normalize(CIFAR_MEAN, CIFAR_STD)])

    class Files(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            return transform(Image.open(files[i]).convert("RGB")), 0

    loader = torch.utils.data.DataLoader(Files(), batch_size=batch_size, shuffle=True, num_workers=workers,
                                         persistent_workers=False)
    start = time.perf_counter()
    seen = sum(len(x) for x, _ in loader)
    return seen / (time.perf_counter() - start)


def resident_rates(files: list[Path], batch_size: int, device: torch.device) -> tuple[float, float, object]:
    """Images/s of decoding ``files`` (uncached) and of one augmented epoch of :class:`ImageBatches` on ``device``;
    returns the batches too."""
    import tempfile

    from vision.data import CIFAR_MEAN, CIFAR_STD
    from vision.io import image_spec
    from vision.resident import BatchAugment, ImageBatches, decode_images

    spec = image_spec(32, 32, 3, CIFAR_MEAN, CIFAR_STD)
    with tempfile.TemporaryDirectory() as cache:
        import os

        previous = os.environ.get("HUB_CACHE")
        os.environ["HUB_CACHE"] = cache  # an empty cache: the first decoding is timed
        try:
            start = time.perf_counter()
            images = decode_images(files, spec, progress=False)
            decode = len(files) / (time.perf_counter() - start)
        finally:
            os.environ.pop("HUB_CACHE") if previous is None else os.environ.__setitem__("HUB_CACHE", previous)
    batches = ImageBatches(images, torch.zeros(len(files), dtype=torch.long), CIFAR_MEAN, CIFAR_STD, batch_size,
                           BatchAugment(translate=2), shuffle=True, drop_last=True, device=device)
    for _ in batches:  # warm-up (kernels, allocator)
        break
    sync(device)
    start = time.perf_counter()
    seen = 0
    for x, _ in batches:
        seen += len(x)
    sync(device)
    return decode, seen / (time.perf_counter() - start), batches


def step_rates(name: str, batches, device: torch.device, steps: int) -> tuple[float, float]:
    """Images/s of ``name``'s training step (SGD) alone on one resident batch, and fed by ``batches``."""
    import hub

    model = hub.create_model(name, num_classes=10).to(device)
    cuda = device.type == "cuda"
    if cuda:
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model.train()

    def step(x, y):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    x, y = next(iter(batches))
    x = x.contiguous(memory_format=torch.channels_last) if cuda else x
    for _ in range(2):
        step(x, y)
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step(x, y)
    sync(device)
    alone = steps * len(x) / (time.perf_counter() - start)
    start, seen = time.perf_counter(), 0
    for i, (x, y) in enumerate(batches):
        if i == steps:
            break
        step(x.contiguous(memory_format=torch.channels_last) if cuda else x, y)
        seen += len(x)
    sync(device)
    return alone, seen / (time.perf_counter() - start)


def measure(device: str = "cpu", file_count: int = 4000, batch_size: int = 512, workers: int = 2,
            models: tuple[str, ...] = DEFAULT_MODELS, steps: int = 5) -> dict:
    """Every row of the report, as a dict (see the module's docstring)."""
    device = torch.device(device)
    files = cifar_files(file_count)
    per_file = per_file_rate(files, batch_size, workers)
    decode, resident, batches = resident_rates(files, batch_size, device)
    rows = {"per-file loader": per_file, "resident loader": resident, "first decoding (uncached)": decode}
    for name in models:
        rows[f"training step alone: {name}"], rows[f"step fed by the resident loader: {name}"] = step_rates(
            name, batches, device, steps)
    slowest = min(v for k, v in rows.items() if k.startswith("training step alone"))
    return {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "threads": torch.get_num_threads(), "workers": workers, "files": len(files), "batch_size": batch_size,
            "rows": rows, "slowest_step": slowest}


def format_report(result: dict) -> list[str]:
    lines = [f"### {result['device']} ({result['threads']} threads, {result['workers']} loader workers; "
             f"{result['files']} CIFAR-10 JPEGs, batches of {result['batch_size']})", "",
             "| path | images/s | / slowest training step |", "| --- | ---: | ---: |"]
    for name, rate in result["rows"].items():
        lines.append(f"| {name} | {rate:,.0f} | {rate / result['slowest_step']:.2f}x |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    parser.add_argument("--files", type=int, default=4000, help="CIFAR-10 training files read (default 4000)")
    parser.add_argument("--batch-size", type=int, default=512, help="images per batch (default 512)")
    parser.add_argument("--workers", type=int, default=2, help="processes of the per-file loader (default 2)")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help="families whose step is timed")
    parser.add_argument("--steps", type=int, default=5, help="timed training steps per model (default 5)")
    parser.add_argument("--out", default=str(RESULTS), help="folder of image_loader.md/.json (default: results)")
    args = parser.parse_args(argv)
    result = measure(args.device, args.files, args.batch_size, args.workers, tuple(args.models.split(",")),
                     args.steps)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    section = "gpu" if result["device"] != "cpu" else "cpu"
    store = out / "image_loader.json"
    results = json.loads(store.read_text()) if store.is_file() else {}
    results[section] = result
    from hub.io import atomic_write_bytes

    atomic_write_bytes(store, json.dumps(results, indent=1).encode())
    lines = ["# The image data path against the training step", "",
             "`python -m benchmarks.image_loader [--device cuda]`: see the script's docstring for the rows.", ""]
    for key in ("cpu", "gpu"):
        if key in results:
            lines += format_report(results[key]) + [""]
    atomic_write_bytes(out / "image_loader.md", "\n".join(lines).encode())
    print("\n".join(format_report(result)))


if __name__ == "__main__":
    main()
