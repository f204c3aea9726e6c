"""A prepared GPU session of at most nine minutes: CIFAR-10's data path, a bare training loop and the Lightning
training of two recipes on one GPU, the trained models published, everything packed to come back.

    python -m benchmarks.gpu_session --out DIR [--smoke] [--budget-s 540] [--data-archive PART...]

Stages, each timed and logged (printed, and appended to ``DIR/session.log`` with the budget left):

a. environment: the device, torch's version and the imports of the training path. Without pydantic (the device
   machine's image has none) it stops at once, naming the wheels to carry (:data:`WHEELS`).
b. data: CIFAR-10 under ``HUB_DATA_DIR``, or the ``--data-archive`` parts (one tar of ``cifar10/``, gzip or xz,
   split into pieces, checked against ``--data-sha256``) extracted into a temporary folder that becomes
   ``HUB_DATA_DIR``; the 60,000 images decoded once (cached under ``HUB_CACHE/images``).
c. the loader benchmark (:func:`benchmarks.image_loader.measure`) on the session's device.
d. a bare training loop per model (plain SGD on the resident, augmented batches; bf16 autocast and channels_last
   on CUDA): images/s, FLOPs per training image, and the share of the bf16 matrix-multiply peak measured in the
   same process (:func:`benchmarks.timing.gemm_peak`).
e. training ``recipes/vision/resnet_cbam18_cifar10_gpu.yaml`` then ``recipes/vision/vit_tiny_cifar10_gpu.yaml``
   through :func:`hub.run.train.train`. The epochs come from the budget: the bare loop's rate (then the first run's
   measured Lightning/bare ratio and overhead) says how many of each recipe's epochs fit (the ResNet first, in
   full if a third of the ViT's still fits; :func:`plan_epochs`); the warmup is scaled with them. SM utilisation
   is sampled every 0.5 s (nvidia-smi) during each fit; Lightning's images/s is training images x epochs / fit
   seconds.
f. each run published as ``resnet_cbam18_32.cifar10_gpu`` and ``vit_tiny_patch4_32.cifar10_gpu``, then
   everything packed (again after each run, so a session killed mid-way still returns the earlier model): one
   gzipped tar split into ``DIR/bundle.tgz.partNN`` of at most 15 MiB (``cat bundle.tgz.part* | tar xz``, as
   ``DIR/README.txt`` says). The tar is gzipped because the two models' fp32 weights (45 + 21.5 MB) and their
   sidecars exceed the 64 MiB that comes back uncompressed; if even gzipped it does not fit, the later models'
   weights are left out (the ResNet is kept) and the log says so.
g. ``DIR/gpu_section.md``, a section for ``benchmarks/results/RESULTS.md``: stage seconds, loader rows,
   bare/Lightning ratio, SM utilisation, bf16 peak share, test accuracy against 0.94 (ResNet) and 0.90 (ViT).

``DIR`` ends with at most eight files: ``session.log``, ``gpu_section.md``, ``README.txt`` and at most five parts
(the device tool returns eight files of at most 16 MiB, 64 MiB together). Run folders live in a temporary folder.

``--smoke`` runs the same path on the CPU, in seconds: the micro families
(``resnet_cbam_micro_32``, ``vit_micro_patch4_32``), a 30-images-per-class copy of CIFAR-10 (train, train_rest
and test), 256 training images, one epoch, fp32 (``tests/integration/test_gpu_session_data.py``). On a CPU busy
with other work, ``OMP_NUM_THREADS=1`` makes it several times faster (15 s against 50-100 s on two cores).

The device machine (one H200; torch 2.11, Lightning, timm, no pydantic, no network) receives the checkout and the
carried paths, 64 MiB in all per call. The shipped weights are 63 MiB of the 65 MiB checkout (2026-12-06), so they
are set aside for the calls, and CIFAR-10's JPEGs (18.6 MB as .tar.xz) then travel in the session's one call:

1. Here, once: ``HUB_DATA_DIR=../shared/data bash benchmarks/gpu_pack.sh``. It writes ``.gpu/whl/`` (the wheels),
   ``.gpu/cifar10.tar.xz`` with its ``.sha256``, ``.gpu/parts/cifar10.tar.xz.partNN`` sized to what a call can
   carry beside the checkout without its weights, and ``.gpu/CALLS.txt``: the exact ``run`` calls, in order (one,
   with the weights aside; more parts, each staged by a call of its own, if the checkout grows).
   Then ``bash benchmarks/gpu_pack.sh --aside``: the shipped weights move to ``.gpu_aside/`` (ignored).
2. On the device, the call of ``.gpu/CALLS.txt`` (one line; wrapped here)::

     run(command="mkdir -p .gpu_stage && cp .gpu/parts/cifar10.tar.xz.part00 .gpu_stage/ && python3 -m pip install
         -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .gpu/whl/*.whl && export
         PYTHONPATH=/tmp/site:$PWD && PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu_session --out $OUT
         --data-archive .gpu_stage/cifar10.tar.xz.part* --data-sha256 $(cat .gpu/cifar10.tar.xz.sha256)",
         carry=[".gpu/whl", ".gpu/cifar10.tar.xz.sha256", ".gpu/parts/cifar10.tar.xz.part00"], timeout_s=600)

   A part lost to a machine that went cold (several parts) fails the sha256 check before anything runs.
   Here, after the calls: ``bash benchmarks/gpu_pack.sh --restore`` (checked against git).
3. Here: ``cat bundle.tgz.part* | tar xz`` in the fetched folder; ``cards/`` holds the published models (copy them
   into ``vision/pretrained/``), ``gpu_section.md`` the section for ``benchmarks/results/RESULTS.md``.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import importlib.util
import io
import json
import os
import platform
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from benchmarks import ROOT
from hub.errors import DatasetUnavailable, HubError

# the wheels pydantic needs on a machine without it: the versions of this checkout's .venv (gpu_pack.sh downloads
# them; the integration test checks they match the .venv)
WHEELS = {"pydantic": "2.14.4", "pydantic-core": "2.50.5", "annotated-types": "0.8.0",
          "typing-inspection": "0.4.5", "typing-extensions": "4.16.0"}
REQUIRED_MODULES = ("pydantic", "pytorch_lightning", "torchmetrics", "torchvision", "timm", "safetensors", "yaml",
                    "PIL", "sklearn", "matplotlib", "tqdm")
CIFAR_FOLDERS = ("train", "train_rest", "test")
SMOKE_IMAGES_PER_CLASS = 30  # per class and folder of the smoke run's CIFAR-10 copy
SMOKE_OVERRIDES = ["data.args.train_subset=256", "trainer.max_epochs=1", "trainer.accelerator=cpu",
                   "trainer.precision=32-true"]
PART_BYTES = 15 * 2**20  # the bundle's parts
RETURN_BYTES = 64 * 2**20  # what comes back from the device in all
RETURN_FILES = 8  # ... in at most this many files
PLAIN_FILES = ("session.log", "gpu_section.md", "README.txt")  # beside the parts
PLAIN_BYTES = 2**18  # kept for them (the log grows a little after the last pack)
SIDECAR_BYTES = 2 * 2**20  # a run's OOD sidecar, card and metrics, at most (the bundle's estimate)
LIGHTNING_SHARE = 0.8  # Lightning's images/s over the bare loop's, assumed until the first run measures it
RUN_OVERHEAD_S = 30.0  # a run's seconds outside fit (setup, test, calibration, OOD fit), until one is measured
RESERVE_END_S = 45.0  # kept for the last publish, section and pack, and as a margin on the plan
LOADER_S, BARE_S = 20.0, 25.0  # the expected seconds of stages c and d on the GPU
MIN_TRAIN_S = 300.0  # stage c runs only if it leaves training (and the last stages) at least this long
MIN_LATER_SHARE = 1 / 3  # the first job trains in full if the later ones keep this share of their epochs


class SessionError(HubError):
    """The session cannot go on: what is wrong, and what to do."""


@dataclass(frozen=True)
class Job:
    """One recipe trained in stage e: its GPU family and tag, the micro family of the smoke run, its target."""

    recipe: str  # relative to the checkout
    family: str
    smoke_family: str
    target: float  # test accuracy the GPU schedule aims at

    def model(self, smoke: bool) -> str:
        return self.smoke_family if smoke else self.family

    def name(self, smoke: bool) -> str:
        return f"{self.model(smoke)}.{'smoke' if smoke else 'cifar10_gpu'}"


JOBS = (Job("recipes/vision/resnet_cbam18_cifar10_gpu.yaml", "resnet_cbam18_32", "resnet_cbam_micro_32", 0.94),
        Job("recipes/vision/vit_tiny_cifar10_gpu.yaml", "vit_tiny_patch4_32", "vit_micro_patch4_32", 0.90))


@dataclass(frozen=True)
class Sizes:
    """The measurement sizes of the GPU session and of the smoke run."""

    loader_files: int
    loader_batch: int
    loader_workers: int
    loader_steps: int
    bare_batch: int | None  # None: the recipe's batch size
    bare_seconds: float  # the bare loop's timed steps last at least this long ...
    bare_steps: int  # ... and count at least this many
    gemm_sizes: tuple[int, ...]


GPU_SIZES = Sizes(4000, 512, 8, 20, None, 5.0, 30, (4096, 8192))
SMOKE_SIZES = Sizes(64, 16, 0, 1, 32, 0.0, 2, (128,))


class Session:
    """The session's clock, log (printed and appended to ``out/session.log``) and results."""

    def __init__(self, out: Path, budget_s: float, smoke: bool):
        self.out, self.budget_s, self.smoke = out, budget_s, smoke
        self.start = time.perf_counter()
        self.results: dict = {"budget_s": budget_s, "smoke": smoke, "stages": {}, "errors": {}, "runs": {}}

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def remaining(self) -> float:
        return self.budget_s - self.elapsed()

    def log(self, message: str) -> None:
        line = f"[{self.elapsed():6.1f} s] {message}"
        print(line, flush=True)
        with open(self.out / "session.log", "a") as log:
            log.write(line + "\n")

    @contextlib.contextmanager
    def stage(self, name: str, essential: bool = True):
        """Time and log the block as stage ``name``; an error in a non-essential stage is logged and recorded,
        and the session goes on."""
        self.log(f"stage {name}: start, {self.remaining():.0f} s of the budget left")
        start = time.perf_counter()
        try:
            yield
        except BaseException as err:  # SystemExit too: the log says why the session stopped
            self._record(name, start, "failed")
            self.log(f"stage {name}: FAILED: {type(err).__name__}: {err}\n{traceback.format_exc()}")
            if essential or not isinstance(err, Exception):
                raise
            self.results["errors"][name] = f"{type(err).__name__}: {err}"
        else:
            self._record(name, start, "done")

    def _record(self, name: str, start: float, status: str) -> None:
        seconds = time.perf_counter() - start
        self.results["stages"][name] = {"seconds": seconds, "status": status}
        self.log(f"stage {name}: {status} in {seconds:.1f} s, {self.remaining():.0f} s left")

    def skip(self, name: str, why: str) -> None:
        self.results["stages"][name] = {"seconds": 0.0, "status": f"skipped: {why}"}
        self.log(f"stage {name}: SKIPPED: {why}")


@contextlib.contextmanager
def restored_environment(name: str):
    """Put the environment variable ``name`` back as it was when the block ends."""
    previous = os.environ.get(name)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = previous


# --- a. environment ---------------------------------------------------------------------------------------------

def check_environment(device_type: str) -> dict:
    """The device, torch's version and the training path's imports; stops early without pydantic."""
    missing = [m for m in REQUIRED_MODULES if importlib.util.find_spec(m) is None]
    if "pydantic" in missing:
        wheels = ", ".join(f"{n}=={v}" for n, v in WHEELS.items())
        raise SystemExit(f"pydantic is not installed (hub.recipe needs it): carry the wheels {wheels} "
                         "(bash benchmarks/gpu_pack.sh writes them to .gpu/whl) and install them with "
                         "`python3 -m pip install --no-index --no-deps --target /tmp/site .gpu/whl/*.whl`, "
                         "then PYTHONPATH=/tmp/site:$PWD")
    if missing:
        raise SessionError(f"the training path needs the modules {missing}, which are not installed")
    import torch

    import benchmarks.image_loader  # noqa: F401  (the imports of stages c-f, checked now)
    import hub.deploy.publish  # noqa: F401
    import hub.run.train  # noqa: F401
    import vision.data  # noqa: F401

    if device_type == "cuda" and not torch.cuda.is_available():
        raise SessionError("no CUDA device: the session trains on a GPU (use --smoke on a CPU)")
    name = torch.cuda.get_device_name(0) if device_type == "cuda" else f"cpu ({platform.machine()})"
    if device_type == "cuda":
        torch.backends.cudnn.benchmark = True  # fixed shapes: let cuDNN pick its kernels (Lightning keeps it)
    return {"device": name, "torch": torch.__version__, "python": platform.python_version(),
            "cuda": torch.version.cuda, "threads": torch.get_num_threads()}


# --- b. data ----------------------------------------------------------------------------------------------------

def extract_archive(parts: list[Path], sha256: str | None, dest: Path, option: str = "--data-archive") -> None:
    """Concatenate the archive ``parts`` (in order), check their sha256 when given, extract into ``dest``; errors
    name the command-line ``option`` that gave the parts."""
    absent = [str(p) for p in parts if not p.is_file()]
    if absent:
        raise SessionError(f"{option}: {absent} not found")
    dest.mkdir(parents=True, exist_ok=True)
    joined, digest = dest / "cifar10-archive", hashlib.sha256()
    with open(joined, "wb") as out:
        for part in parts:
            data = part.read_bytes()
            digest.update(data)
            out.write(data)
    if sha256 and digest.hexdigest() != sha256.strip().lower():
        sizes = [p.stat().st_size for p in parts]
        raise SessionError(f"{option}: the {len(parts)} parts ({sizes} bytes) have sha256 {digest.hexdigest()}, "
                           f"not {sha256}: a part is missing or corrupt; stage them all again")
    with tarfile.open(joined, "r:*") as archive:
        archive.extractall(dest, filter="data")
    joined.unlink()


def miniature_cifar(root: Path, dest: Path, per_class: int) -> Path:
    """A copy of the first ``per_class`` files of every class of ``root``'s train, train_rest and test folders
    under ``dest/cifar10``; returns ``dest`` (a data folder)."""
    for folder in CIFAR_FOLDERS:
        for source in sorted(d for d in (root / folder).iterdir() if d.is_dir()):
            target = dest / "cifar10" / folder / source.name
            target.mkdir(parents=True)
            for file in sorted(source.iterdir())[:per_class]:
                shutil.copyfile(file, target / file.name)
    return dest


def prepare_data(archives: list[Path] | None, sha256: str | None, smoke: bool, scratch: Path) -> Path:
    """The data folder holding ``cifar10/`` (the archive's, or ``HUB_DATA_DIR``'s; a miniature in smoke runs)."""
    from hub.data import data_dir

    folder = data_dir()
    if archives:
        folder = scratch / "data"
        extract_archive(archives, sha256, folder)
    root = folder / "cifar10"
    missing = [f for f in CIFAR_FOLDERS if not (root / f).is_dir()]
    if missing:
        raise DatasetUnavailable("cifar10", f"{root} lacks {missing}: set HUB_DATA_DIR to the folder holding "
                                            "cifar10/ or pass --data-archive (bash benchmarks/gpu_pack.sh makes one)")
    return miniature_cifar(root, scratch / "mini", SMOKE_IMAGES_PER_CLASS) if smoke else folder


def decoded_cifar():
    """All of CIFAR-10's training and test images decoded (and cached), as the recipes' data module holds them."""
    from hub.core.registry import get_dataset_entry

    datamodule = get_dataset_entry("cifar10").builder(full_train=True, num_workers=0)
    datamodule.setup("fit")
    return datamodule


# --- c. loader benchmark ----------------------------------------------------------------------------------------

def loader_benchmark(session: Session, device: str, sizes: Sizes) -> None:
    from benchmarks.image_loader import format_report, measure

    models = tuple(job.model(session.smoke) for job in JOBS)
    result = measure(device, sizes.loader_files, sizes.loader_batch, sizes.loader_workers, models, sizes.loader_steps)
    session.results["loader"] = result
    for line in format_report(result):
        session.log(line)


# --- d. bare loop -----------------------------------------------------------------------------------------------

def endless(batches):
    """The batches of epoch after epoch."""
    epoch = 0
    while True:
        batches.sampler.set_epoch(epoch)
        yield from batches
        epoch += 1


def train_flops_per_image(family: str) -> float:
    """FLOPs of one training step (forward and backward) per 32x32 image (torch's FlopCounterMode)."""
    import torch

    import hub
    from benchmarks.report import _count_flops

    model = hub.create_model(family, num_classes=10)
    x = torch.randn(2, 3, 32, 32)
    return _count_flops(lambda: model(x).sum().backward()) / len(x)


def bare_loop(family: str, recipe_path: Path, overrides: list[str], train_set, device, sizes: Sizes) -> dict:
    """Images/s of ``family`` trained by plain SGD on ``train_set``'s resident batches, augmented as the recipe's
    data, after 3 warm-up steps; on CUDA in bf16 autocast and channels_last, as the recipes (on a CPU,
    channels_last made this step ten times slower: fp32, contiguous)."""
    import torch
    import torch.nn.functional as F

    import hub
    from benchmarks.timing import sync
    from hub.core.registry import get_dataset_entry
    from hub.recipe import load_recipe

    recipe = load_recipe(str(recipe_path), overrides)
    data = get_dataset_entry("cifar10").builder(**recipe.data.args)  # its batch size and augmentation; no setup
    batch = sizes.bare_batch or data.batch_size
    stream = endless(train_set.batches(batch, data.augment, shuffle=True, drop_last=True, device=device))
    cuda = device.type == "cuda"
    layout = torch.channels_last if cuda else torch.contiguous_format
    model = hub.create_model(family, num_classes=10).to(device, memory_format=layout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        x, y = next(stream)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            loss = F.cross_entropy(model(x.contiguous(memory_format=layout)), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    sync(device)
    start, steps = time.perf_counter(), 0
    while steps < sizes.bare_steps or time.perf_counter() - start < sizes.bare_seconds:
        for _ in range(max(1, sizes.bare_steps // 3)):
            step()
            steps += 1
        sync(device)
    seconds = time.perf_counter() - start
    return {"images_per_s": steps * batch / seconds, "batch_size": batch, "steps": steps,
            "params": sum(p.numel() for p in model.parameters()),
            "train_flops_per_image": train_flops_per_image(family)}


def bare_stage(session: Session, device, sizes: Sizes, train_set) -> None:
    import torch

    from benchmarks.timing import gemm_peak

    peak = gemm_peak(torch.bfloat16, sizes.gemm_sizes, repeats=5, device=device.type)
    session.results["bf16_peak_flops"] = peak
    session.log(f"bf16 matmul peak: {peak / 1e12:.1f} TFLOP/s (sizes {sizes.gemm_sizes})")
    for job in JOBS:
        family = job.model(session.smoke)
        with UtilisationSampler(device) as sampler:
            row = bare_loop(family, ROOT / job.recipe, session_overrides(session.smoke, job), train_set, device, sizes)
        row["peak_share"] = row["train_flops_per_image"] * row["images_per_s"] / peak
        row["sm_utilisation"] = sampler.summary()
        session.results.setdefault("bare", {})[family] = row
        session.log(f"bare loop {family}: {row['images_per_s']:,.0f} images/s (batch {row['batch_size']}, "
                    f"{row['steps']} steps), {row['train_flops_per_image'] / 1e9:.2f} GFLOP per image, "
                    f"{row['peak_share']:.1%} of the bf16 peak, SM {format_utilisation(row['sm_utilisation'])}")


# --- e. training ------------------------------------------------------------------------------------------------

class UtilisationSampler:
    """The GPU's SM utilisation (%) every 0.5 s while in the block, read from ``nvidia-smi``; no samples on a CPU
    (or without nvidia-smi). :meth:`summary` takes the samples of a time span."""

    def __init__(self, device):
        self.enabled = device.type == "cuda" and shutil.which("nvidia-smi") is not None
        self.index = device.index or 0
        self.samples: list[tuple[float, int]] = []

    def __enter__(self) -> "UtilisationSampler":
        if self.enabled:
            self.process = subprocess.Popen(
                ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "500",
                 "-i", str(self.index)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.thread = threading.Thread(target=self._read, daemon=True)
            self.thread.start()
        return self

    def _read(self) -> None:
        for line in self.process.stdout:
            if line.strip().isdigit():
                self.samples.append((time.perf_counter(), int(line)))

    def __exit__(self, *exc) -> None:
        if self.enabled:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.thread.join(timeout=10)

    def summary(self, start: float = float("-inf"), end: float = float("inf")) -> dict | None:
        values = [v for t, v in self.samples if start <= t <= end]
        if not values:
            return None
        return {"mean": statistics.fmean(values), "median": statistics.median(values), "samples": len(values)}


def format_utilisation(summary: dict | None) -> str:
    return "n/a" if summary is None else f"mean {summary['mean']:.0f}%, median {summary['median']:.0f}%"


@contextlib.contextmanager
def fit_clock():
    """The ``(start, end)`` times of every ``Trainer.fit`` called in the block (train() builds its own trainer)."""
    import pytorch_lightning as pl

    spans: list[tuple[float, float]] = []
    fit = pl.Trainer.fit

    def timed_fit(trainer, *args, **kwargs):
        start = time.perf_counter()
        try:
            return fit(trainer, *args, **kwargs)
        finally:
            spans.append((start, time.perf_counter()))

    with mock.patch.object(pl.Trainer, "fit", timed_fit):
        yield spans


def session_overrides(smoke: bool, job: Job) -> list[str]:
    """The overrides of every use of ``job``'s recipe in this session (the smoke run's micro family and sizes)."""
    return [f"model.name={job.smoke_family}", *SMOKE_OVERRIDES] if smoke else []


def plan_epochs(session: Session, jobs: list[Job], train_images: int) -> int:
    """Epochs for ``jobs[0]``, from the seconds each job left needs for its recipe's epochs (at the bare loop's
    rate times the Lightning share, measured once a run has finished) and the budget left after each job's overhead
    outside fit and the reserve of the last stages. The first job gets all its epochs if that leaves the later
    ones at least :data:`MIN_LATER_SHARE` of theirs (the ResNet's target is the reachable one); else every job
    gets the same share. ``train_images``: the full training split's size."""
    from hub.recipe import load_recipe

    share = session.results.get("lightning_share", LIGHTNING_SHARE)
    overhead = session.results.get("run_overhead_s", RUN_OVERHEAD_S)
    wanted, seconds = [], []
    for job in jobs:
        recipe = load_recipe(str(ROOT / job.recipe), session_overrides(session.smoke, job))
        images = min(train_images, recipe.data.args.get("train_subset") or train_images)
        rate = session.results["bare"][job.model(session.smoke)]["images_per_s"] * share
        wanted.append(recipe.trainer.max_epochs)
        seconds.append(recipe.trainer.max_epochs * images / rate)
    available = session.remaining() - RESERVE_END_S - overhead * len(jobs)
    first_in_full = seconds[0] + MIN_LATER_SHARE * sum(seconds[1:]) <= available
    scale = 1.0 if first_in_full else max(0.0, available) / sum(seconds)
    epochs = min(wanted[0], int(wanted[0] * scale))
    session.log(f"plan: {available:.0f} s for {len(jobs)} run(s) needing {sum(seconds):.0f} s at full length "
                f"(Lightning share {share:.2f}, overhead {overhead:.0f} s each): {epochs} of {wanted[0]} epochs "
                f"for {jobs[0].model(session.smoke)}")
    return epochs


def job_overrides(job: Job, epochs: int, run_root: Path, smoke: bool) -> list[str]:
    """``epochs`` epochs, validation at the last only, the warmup scaled with the epochs, runs under ``run_root``."""
    from hub.recipe import load_recipe

    recipe = load_recipe(str(ROOT / job.recipe))
    warmup = recipe.scheduler.warmup_epochs * epochs / recipe.trainer.max_epochs
    return [*session_overrides(smoke, job), f"trainer.max_epochs={epochs}",
            f"trainer.check_val_every_n_epoch={epochs}", f"scheduler.warmup_epochs={warmup:.4g}",
            f"output_dir={run_root}"]


def train_job(session: Session, job: Job, epochs: int, device, run_root: Path) -> Path:
    """Train ``job``'s recipe for ``epochs`` epochs; record its throughput, utilisation and test accuracy."""
    from hub.run.train import train

    overrides = job_overrides(job, epochs, run_root, session.smoke)
    session.log(f"train {job.recipe} with {overrides}")
    start = time.perf_counter()
    with fit_clock() as spans, UtilisationSampler(device) as sampler:
        run_dir = train(str(ROOT / job.recipe), overrides, progress=False)
    total = time.perf_counter() - start
    fit_start, fit_end = spans[-1]
    card = json.loads((run_dir / "card.json").read_text())
    test = json.loads((run_dir / "metrics.json").read_text())["test"]
    train_images = card["data"]["sizes"][0]
    family = job.model(session.smoke)
    bare = session.results["bare"][family]
    rate = train_images * epochs / (fit_end - fit_start)
    row = {"name": job.name(session.smoke), "recipe": job.recipe, "epochs": epochs, "train_images": train_images,
           "fit_s": fit_end - fit_start, "total_s": total, "images_per_s": rate,
           "bare_images_per_s": bare["images_per_s"], "lightning_over_bare": rate / bare["images_per_s"],
           "peak_share": bare["train_flops_per_image"] * rate / session.results["bf16_peak_flops"],
           "sm_utilisation": sampler.summary(fit_start, fit_end), "test_acc": test["test/acc"],
           "target": job.target, "overrides": overrides}
    session.results["runs"][family] = row
    session.results["lightning_share"] = row["lightning_over_bare"]
    session.results["run_overhead_s"] = total - row["fit_s"]
    session.log(f"{family}: {epochs} epoch(s) of {train_images} images in {row['fit_s']:.1f} s of fit "
                f"({total:.1f} s in all): {rate:,.0f} images/s, {row['lightning_over_bare']:.2f}x the bare loop, "
                f"SM {format_utilisation(row['sm_utilisation'])}, test accuracy {row['test_acc']:.4f} "
                f"(target {job.target:.2f})")
    return run_dir


# --- f. publishing and packing ----------------------------------------------------------------------------------

RUN_FILES = ("metrics.json", "metrics.csv", "recipe.yaml", "card.json", "curves.png")  # of each run, in the bundle


def publish_run(session: Session, job: Job, run_dir: Path, bundle: Path) -> None:
    """Publish ``run_dir`` as ``job``'s tag into ``bundle/cards`` and copy its summary files to ``bundle/runs``."""
    from hub.deploy.publish import publish

    card = publish([str(run_dir)], name=job.name(session.smoke), dest=str(bundle / "cards"))
    runs = bundle / "runs" / job.model(session.smoke)
    runs.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:
        if (run_dir / name).is_file():
            shutil.copyfile(run_dir / name, runs / name)
    session.log(f"published {card.name}: {sorted(p.name for p in card.parent.glob(job.name(session.smoke) + '.*'))}")


def check_bundle_estimate(session: Session) -> None:
    """Before training: fail if the first model's files cannot come back; warn if all of them may not (fp32
    weights from the bare loop's parameter counts, plus :data:`SIDECAR_BYTES` each)."""
    sizes = [4 * session.results["bare"][job.model(session.smoke)]["params"] + SIDECAR_BYTES for job in JOBS]
    limit = RETURN_BYTES - PLAIN_BYTES
    session.log(f"bundle estimate: {sum(sizes) / 2**20:.1f} MiB uncompressed for {RETURN_BYTES / 2**20:.0f} MiB")
    if sizes[0] > limit:
        raise SessionError(f"the first model's weights and files ({sizes[0] / 2**20:.1f} MiB) cannot come back in "
                           f"{RETURN_BYTES / 2**20:.0f} MiB: nothing trained")
    if sum(sizes) > limit:
        session.log("WARNING: the models' files exceed 64 MiB uncompressed; if gzip does not save enough, the later "
                    "models' weights will be left out of the bundle (the ResNet is kept)")


def tar_bytes(folder: Path, leave_out: set[str]) -> bytes:
    """A gzipped tar of ``folder``'s files (paths relative to it), without the relative paths in ``leave_out``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=6) as archive:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            name = path.relative_to(folder).as_posix()
            if name not in leave_out:
                archive.add(path, arcname=name)
    return buffer.getvalue()


def pack(session: Session, bundle: Path) -> None:
    """Snapshot the log, the section and the results into ``bundle``, tar and gzip it into ``out/bundle.tgz.partNN``
    (at most :data:`PART_BYTES` each) with a README; leave out the later models' weights if it would not come back."""
    out = session.out
    for old in out.glob("bundle.tgz.part*"):
        old.unlink()
    for name in ("session.log", "gpu_section.md"):
        if (out / name).is_file():
            shutil.copyfile(out / name, bundle / name)
    (bundle / "results.json").write_text(json.dumps(session.results, indent=1, default=str))
    room = min(RETURN_BYTES - PLAIN_BYTES, (RETURN_FILES - len(PLAIN_FILES)) * PART_BYTES)
    leave_out: set[str] = set()
    data = tar_bytes(bundle, leave_out)
    for job in JOBS[1:]:
        if len(data) <= room:
            break
        leave_out.add(f"cards/{job.name(session.smoke)}.safetensors")
        session.log(f"BUNDLE TOO LARGE ({len(data) / 2**20:.1f} MiB gzipped for {room / 2**20:.0f} MiB): left out "
                    f"the weights {sorted(leave_out)}; the ResNet's are kept")
        data = tar_bytes(bundle, leave_out)
    if len(data) > room:
        raise SessionError(f"the bundle is {len(data) / 2**20:.1f} MiB gzipped even without {sorted(leave_out)}: "
                           f"it cannot come back in {room / 2**20:.0f} MiB")
    parts = [data[i:i + PART_BYTES] for i in range(0, len(data), PART_BYTES)]
    for i, part in enumerate(parts):
        (out / f"bundle.tgz.part{i:02d}").write_bytes(part)
    session.results["bundle"] = {"bytes": len(data), "parts": [len(p) for p in parts], "left_out": sorted(leave_out)}
    (out / "README.txt").write_text(
        f"The GPU session's bundle (python -m benchmarks.gpu_session), {len(data):,} bytes of gzipped tar in "
        f"{len(parts)} part(s).\nReassemble and extract in this folder:\n\n    cat bundle.tgz.part* | tar xz\n\n"
        "cards/: the published models (weights, card, OOD sidecar); runs/: each run's metrics, recipe and card;\n"
        "session.log, gpu_section.md (for benchmarks/results/RESULTS.md), results.json: every figure.\n"
        + (f"Left out, the bundle being too large: {sorted(leave_out)}\n" if leave_out else ""))
    session.log(f"packed {len(data) / 2**20:.2f} MiB into {len(parts)} part(s) "
                f"{[f'{len(p) / 2**20:.2f} MiB' for p in parts]}")


# --- g. the section for RESULTS.md ------------------------------------------------------------------------------

def _rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def section_lines(session: Session) -> list[str]:
    r = session.results
    env = r.get("environment", {})
    command = "`python -m benchmarks.gpu_session --smoke` (tiny sizes on the CPU: not a result)" if r["smoke"] \
        else "`python -m benchmarks.gpu_session`"
    lines = [f"## GPU session: {env.get('device', '?')} (torch {env.get('torch', '?')}, "
             f"{datetime.date.today().isoformat()})", "",
             f"{command}: budget {r['budget_s']:.0f} s, {session.elapsed():.0f} s used when this was written.", "",
             "| stage | seconds | status |", "| --- | ---: | --- |"]
    lines += [f"| {name} | {s['seconds']:.1f} | {s['status']} |" for name, s in r["stages"].items()]
    lines += ["", "### Image loader (benchmarks.image_loader, the session's device)", ""]
    if "loader" in r:
        from benchmarks.image_loader import format_report

        lines += format_report(r["loader"])
    else:
        lines.append("not measured")
    peak = r.get("bf16_peak_flops")
    lines += ["", "### Training throughput", "",
              f"bf16 matrix-multiply peak measured in the session: {peak / 1e12:.1f} TFLOP/s." if peak else "", "",
              "| model | loop | epochs | images/s | Lightning / bare | SM util. mean | median | bf16 peak share |",
              "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for family, bare in r.get("bare", {}).items():
        lines.append(_throughput_row(family, "bare (SGD, resident batches)", "", bare["images_per_s"], "",
                                     bare["sm_utilisation"], bare["peak_share"]))
        run = r["runs"].get(family)
        if run:
            lines.append(_throughput_row(family, "Lightning (the recipe)", run["epochs"], run["images_per_s"],
                                         f"{run['lightning_over_bare']:.2f}x", run["sm_utilisation"],
                                         run["peak_share"]))
    lines += ["", "### Test accuracy (CIFAR-10, the full 10,000 test images; last epoch's weights)", "",
              "| model | recipe | epochs | test accuracy | target | |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for job in JOBS:
        run = r["runs"].get(job.model(r["smoke"]))
        acc = run["test_acc"] if run else None
        verdict = "met" if acc is not None and acc >= job.target else "missed"
        lines.append(f"| {job.name(r['smoke'])} | {job.recipe} | {run['epochs'] if run else 'not trained'} | "
                     f"{'n/a' if acc is None else f'{acc:.4f}'} | {job.target:.2f} | {verdict} |")
    if r["errors"]:
        lines += ["", "Errors: " + "; ".join(f"{k}: {v}" for k, v in r["errors"].items())]
    return lines


def _throughput_row(family, loop, epochs, rate, ratio, utilisation, share) -> str:
    mean, median = ("n/a", "n/a") if utilisation is None else (f"{utilisation['mean']:.0f}%",
                                                              f"{utilisation['median']:.0f}%")
    return f"| {family} | {loop} | {epochs} | {_rate(rate)} | {ratio} | {mean} | {median} | {share:.1%} |"


def write_section(session: Session) -> None:
    (session.out / "gpu_section.md").write_text("\n".join(section_lines(session)) + "\n")


# --- the session ------------------------------------------------------------------------------------------------

def run_session(session: Session, args: argparse.Namespace, scratch: Path) -> None:
    import torch

    device = torch.device("cpu" if args.smoke else "cuda")
    sizes = SMOKE_SIZES if args.smoke else GPU_SIZES
    with session.stage("a. environment"):
        session.results["environment"] = check_environment(device.type)
        session.log(f"environment: {session.results['environment']}")
    with session.stage("b. data"):
        os.environ["HUB_DATA_DIR"] = str(prepare_data(args.data_archive, args.data_sha256, args.smoke, scratch))
        datamodule = decoded_cifar()
        session.log(f"CIFAR-10 in {os.environ['HUB_DATA_DIR']}: {datamodule.info['sizes']} train/val/test images")
    if session.remaining() - LOADER_S - BARE_S >= MIN_TRAIN_S:
        with session.stage("c. loader benchmark", essential=False):
            loader_benchmark(session, device.type, sizes)
    else:
        session.skip("c. loader benchmark", f"{session.remaining():.0f} s left: kept for training")
    with session.stage("d. bare loop"):
        bare_stage(session, device, sizes, datamodule.train_set)
        check_bundle_estimate(session)
    train_images = len(datamodule.train_set)
    del datamodule
    bundle = scratch / "bundle"
    bundle.mkdir()
    for i, job in enumerate(JOBS):
        name = f"e. training {job.model(args.smoke)}"
        epochs = plan_epochs(session, list(JOBS[i:]), train_images)
        if epochs < 1:
            session.skip(name, f"not one epoch fits the {session.remaining():.0f} s left")
            continue
        with session.stage(name, essential=False):
            run_dir = train_job(session, job, epochs, device, scratch / "runs")
        if job.model(args.smoke) in session.results["runs"]:
            with session.stage(f"f. publish and pack {job.model(args.smoke)}", essential=False):
                publish_run(session, job, run_dir, bundle)
                write_section(session)
                pack(session, bundle)
    with session.stage("g. section and final pack"):
        write_section(session)
        pack(session, bundle)
    verdict = "within" if session.remaining() >= 0 else "OVER"
    session.log(f"session done in {session.elapsed():.0f} s, {verdict} the {session.budget_s:.0f} s budget")


def main(argv: list[str] | None = None) -> dict:
    """Run the session (see the module's docstring); returns its results."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder of the session's log, section and bundle")
    parser.add_argument("--smoke", action="store_true", help="the same stages on the CPU, tiny sizes")
    parser.add_argument("--budget-s", type=float, default=540.0, help="seconds the whole session may take (540)")
    parser.add_argument("--data-archive", nargs="+", type=Path,
                        help="the parts, in order, of a .tar.xz or .tgz of cifar10/ (train, train_rest, test)")
    parser.add_argument("--data-sha256", help="the sha256 of the whole archive (gpu_pack.sh writes it)")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    session = Session(out, args.budget_s, args.smoke)
    session.log(f"gpu_session {'--smoke ' if args.smoke else ''}--out {out} --budget-s {args.budget_s:.0f}")
    with tempfile.TemporaryDirectory(prefix="gpu_session-") as scratch, restored_environment("HUB_DATA_DIR"):
        run_session(session, args, Path(scratch))
    return session.results


if __name__ == "__main__":
    main()
