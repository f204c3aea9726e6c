"""benchmarks.gpu_session --smoke: every stage of the prepared GPU session on the CPU at tiny sizes, fed a CIFAR-10
archive in parts as the device is, ends with a bundle that reassembles into both published cards and a section
with the accuracy rows; the wheels it names for the device are this environment's versions."""
import hashlib
import io
import os
import re
import tarfile
from importlib import metadata

import pytest

from benchmarks import gpu_session
from hub.errors import DatasetUnavailable


def test_the_wheels_named_for_the_device_are_this_environments_versions():
    assert gpu_session.WHEELS == {name: metadata.version(name) for name in gpu_session.WHEELS}


@pytest.fixture
def archive_parts(tmp_path):
    """A .tgz of a 30-images-per-class copy of the local CIFAR-10, in two parts, and its sha256."""
    from hub.data import data_dir

    root = data_dir() / "cifar10"
    if not all((root / f).is_dir() for f in gpu_session.CIFAR_FOLDERS):
        raise DatasetUnavailable("cifar10", f"{root} lacks one of {gpu_session.CIFAR_FOLDERS}")
    mini = gpu_session.miniature_cifar(root, tmp_path / "mini", 30)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        archive.add(mini / "cifar10", arcname="cifar10")
    data = buffer.getvalue()
    parts = [tmp_path / "cifar10.tgz.part00", tmp_path / "cifar10.tgz.part01"]
    parts[0].write_bytes(data[:len(data) // 2])
    parts[1].write_bytes(data[len(data) // 2:])
    return [str(p) for p in parts], hashlib.sha256(data).hexdigest()


@pytest.fixture
def one_thread():
    """One intra-op thread: on two cores busy with other work, two threads wait on each other at every barrier (the
    smoke run took 50-100 s with two, 15 s with one)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_smoke_session_logs_every_stage_and_packs_both_cards(tmp_path, archive_parts, one_thread):
    parts, sha256 = archive_parts
    out = tmp_path / "out"
    data_dir_before = os.environ.get("HUB_DATA_DIR")
    results = gpu_session.main(["--out", str(out), "--smoke", "--data-archive", *parts, "--data-sha256", sha256])
    assert os.environ.get("HUB_DATA_DIR") == data_dir_before
    assert results["errors"] == {}
    log = (out / "session.log").read_text()
    families = [job.model(smoke=True) for job in gpu_session.JOBS]
    stages = ["a. environment", "b. data", "c. loader benchmark", "d. bare loop",
              *(f"{s} {f}" for f in families for s in ("e. training", "f. publish and pack")),
              "g. section and final pack"]
    for stage in stages:
        assert f"stage {stage}: done" in log, stage
    assert "within the 540 s budget" in log

    bundle = sorted(out.glob("bundle.tgz.part*"))
    assert bundle and all(p.stat().st_size <= gpu_session.PART_BYTES for p in bundle)
    assert len(list(out.iterdir())) <= gpu_session.RETURN_FILES
    assert "cat bundle.tgz.part* | tar xz" in (out / "README.txt").read_text()
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in bundle)), mode="r:gz") as archive:
        names = set(archive.getnames())
    for job in gpu_session.JOBS:
        name = job.name(smoke=True)
        assert {f"cards/{name}.json", f"cards/{name}.safetensors"} <= names
        assert f"runs/{job.model(smoke=True)}/metrics.json" in names
    assert {"session.log", "gpu_section.md", "results.json"} <= names

    section = (out / "gpu_section.md").read_text()
    for job in gpu_session.JOBS:
        assert re.search(rf"\| {re.escape(job.name(smoke=True))} \| {re.escape(job.recipe)} \| 1 \| 0\.\d{{4}} \| "
                         rf"{job.target:.2f} \| (met|missed) \|", section), section
    assert "Lightning (the recipe)" in section and "bf16 matrix-multiply peak" in section


def test_a_missing_part_fails_the_checksum_before_training(tmp_path, archive_parts):
    parts, sha256 = archive_parts
    with pytest.raises(gpu_session.SessionError, match="a part is missing or corrupt"):
        gpu_session.main(["--out", str(tmp_path / "out"), "--smoke", "--data-archive", parts[0], "--data-sha256",
                          sha256])
    assert "stage b. data: failed" in (tmp_path / "out" / "session.log").read_text()


def test_pack_leaves_out_the_later_weights_when_the_bundle_would_not_come_back(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_session, "RETURN_BYTES", 3 * 2**20)
    monkeypatch.setattr(gpu_session, "PART_BYTES", 2**20)
    first, later = (job.name(smoke=True) for job in gpu_session.JOBS)
    bundle = tmp_path / "bundle"
    (bundle / "cards").mkdir(parents=True)
    (bundle / "cards" / f"{first}.safetensors").write_bytes(os.urandom(2**20))  # random: gzip cannot shrink it
    (bundle / "cards" / f"{later}.safetensors").write_bytes(os.urandom(2 * 2**20))
    (tmp_path / "out").mkdir()
    session = gpu_session.Session(tmp_path / "out", 540, smoke=True)
    gpu_session.pack(session, bundle)
    assert session.results["bundle"]["left_out"] == [f"cards/{later}.safetensors"]
    parts = sorted((tmp_path / "out").glob("bundle.tgz.part*"))
    assert len(parts) == 2
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in parts)), mode="r:gz") as archive:
        names = set(archive.getnames())
    assert f"cards/{first}.safetensors" in names and f"cards/{later}.safetensors" not in names
    assert "BUNDLE TOO LARGE" in (tmp_path / "out" / "session.log").read_text()
    assert later in (tmp_path / "out" / "README.txt").read_text()


def test_slot_chain_resumes_across_calls_keeps_its_best_epoch_and_publishes_at_the_end(tmp_path, one_thread):
    """benchmarks.gpu_slot --smoke three times, each call fed the state parts the previous one returned (as the
    device calls are): one epoch a call, the best validation epoch carried across the moves, the tag published by the
    call that finishes the schedule, every output file small enough to come back."""
    import csv
    import json

    from benchmarks import gpu_slot

    state: list[str] = []
    for call in range(1, 4):
        out = tmp_path / f"call{call}"
        chained = ["--state", *state, "--state-sha256", (tmp_path / f"call{call - 1}" / "state.sha256").read_text()] \
            if state else []
        gpu_slot.main(["--out", str(out), "--smoke", *chained])
        progress = (out / "progress.md").read_text()
        assert f"{gpu_slot.SMOKE_TAG}: {call} of 3 epochs" in progress
        assert (out / "cards.tgz").is_file() == (call == 3)
        assert len(list(out.iterdir())) <= gpu_session.RETURN_FILES
        assert all(p.stat().st_size <= gpu_session.PART_BYTES for p in out.iterdir())
        state = [str(p) for p in sorted(out.glob("state.tgz.part*"))]
    run = tmp_path / "run"
    run.mkdir()
    with tarfile.open(fileobj=io.BytesIO(b"".join(open(p, "rb").read() for p in state)), mode="r:gz") as archive:
        archive.extractall(run, filter="data")
    (folder,) = [p.parent for p in run.glob("*/recipe.yaml")]
    with open(folder / "metrics.csv", newline="") as table:
        scores = [float(row["val/fg_ari"]) for row in csv.DictReader(table)]
    best = json.loads((folder / "metrics.json").read_text())["best"]
    assert len(scores) == 3 and best["value"] == pytest.approx(max(scores))
    assert best["epoch"] == scores.index(max(scores))
    with tarfile.open(tmp_path / "call3" / "cards.tgz", mode="r:gz") as archive:
        assert {f"{gpu_slot.SMOKE_TAG}.json", f"{gpu_slot.SMOKE_TAG}.safetensors"} <= set(archive.getnames())
