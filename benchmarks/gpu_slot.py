"""Slot Attention's GPU recipe across several device calls: each call trains at most ``--minutes`` from where the
last one stopped and sends the run folder back, to be carried into the next call.

    python -m benchmarks.gpu_slot --out DIR [--state PART ...] [--state-sha256 HEX] [--minutes 8] [--smoke]

Why calls in a chain: ``recipes/vision/slot_autoencoder_shapes_gpu.yaml`` (the paper's model and batch, 200 epochs
of 50,000 scenes, about 156k steps) trains at about 62 steps/s on one H200, so about 42 minutes, and a device call
may run 10 (9 planned). No schedule known here reaches the paper's FG-ARI in one call: on the CPU, the micro
recipe's shorter schedules and larger learning rates all peaked at 0.60-0.68 (the micro recipe's header), and the
paper trains 500k steps. So each call:

1. starts the run (no ``--state``) or extracts the run folder of the previous call from its parts (checked against
   ``--state-sha256``) and resumes it, as ``attnhub train --resume RUN_DIR`` does, with ``trainer.max_minutes``
   set to ``--minutes``: the time budget of one call (:class:`hub.run.train.Timer`), checked after each epoch
   (12-13 s of this recipe on an H200), when ``checkpoints/last.ckpt`` is saved;
2. ends as every run does: the weights of the best validation FG-ARI so far are tested (1,000 scenes) and the card
   and OOD sidecar written;
3. packs the run folder into ``DIR/state.tgz.partNN`` (gzipped tar, at most 15 MiB a part) with ``DIR/state.sha256``
   and ``DIR/progress.md`` (epochs done, steps/s, the FG-ARI against the paper's 0.91 and the target 0.85);
4. once the last epoch is done, also publishes the run as ``slot_autoencoder_64.shapes_gpu`` into ``DIR/cards.tgz``
   (copy its files into ``vision/pretrained/`` to ship it).

Between calls, here: ``rm -rf .gpu/slot_state && mkdir -p .gpu/slot_state`` then copy the returned ``state.*`` files
into it; ``.gpu/CALLS.txt`` (``benchmarks/gpu_pack.sh``) has the exact calls. The run folder holds two checkpoints
with Adam's moments (about 8 MiB each) and the weights: about 20 MiB travels each way.

``--smoke`` runs the same path on the CPU in seconds: the micro model, 64 training scenes, three epochs of which
each call trains one (``--minutes`` is then 1e-6: every epoch's end is past the budget), fp32
(``tests/integration/test_gpu_session_data.py``).
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import json
import tempfile
from pathlib import Path

from benchmarks.gpu_session import (
    PART_BYTES,
    ROOT,
    Session,
    SessionError,
    check_environment,
    extract_archive,
    tar_bytes,
)

RECIPE = "recipes/vision/slot_autoencoder_shapes_gpu.yaml"
TAG = "slot_autoencoder_64.shapes_gpu"
PAPER_FG_ARI, TARGET_FG_ARI = 0.91, 0.85  # Locatello et al. 2020, Multi-dSprites; issue 51's target
SMOKE_OVERRIDES = ["model.name=slot_autoencoder_micro_64", "data.args.train_size=64", "data.args.val_size=16",
                   "data.args.test_size=16", "data.args.batch_size=16", "data.args.num_workers=0",
                   "trainer.max_epochs=3", "scheduler.warmup_epochs=1", "trainer.accelerator=cpu",
                   "trainer.precision=32-true", "trainer.channels_last=false"]
SMOKE_TAG = "slot_autoencoder_micro_64.smoke"


def restore_run(parts: list[Path], sha256: str | None, scratch: Path) -> Path:
    """The run folder packed by the previous call, extracted from its ``parts`` under ``scratch/runs``."""
    runs = scratch / "runs"
    extract_archive(parts, sha256, runs, option="--state")
    folders = [p.parent for p in runs.glob("*/recipe.yaml")]
    if len(folders) != 1:
        raise SessionError(f"--state: the parts hold {len(folders)} run folders, expected one")
    return folders[0]


def epochs_done(run_dir: Path) -> int:
    """Training epochs the run folder's ``metrics.csv`` records."""
    with open(run_dir / "metrics.csv", newline="") as table:
        return len({row["epoch"] for row in csv.DictReader(table)})


def pack_state(run_dir: Path, out: Path) -> list[int]:
    """The run folder as ``out/state.tgz.partNN`` and its sha256 as ``out/state.sha256``; returns the parts' sizes."""
    data = tar_bytes(run_dir.parent, set())
    parts = [data[i:i + PART_BYTES] for i in range(0, len(data), PART_BYTES)]
    for i, part in enumerate(parts):
        (out / f"state.tgz.part{i:02d}").write_bytes(part)
    (out / "state.sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")
    return [len(p) for p in parts]


def publish_finished(run_dir: Path, tag: str, out: Path, scratch: Path) -> None:
    """Publish the finished run as ``tag`` and write its files into ``out/cards.tgz``."""
    from hub.deploy.publish import publish

    cards = scratch / "cards"
    publish([str(run_dir)], name=tag, dest=str(cards))
    (out / "cards.tgz").write_bytes(tar_bytes(cards, set()))


def progress_lines(run_dir: Path, tag: str, max_epochs: int, fit_s: float, steps_before: int,
                   session: Session) -> list[str]:
    summary = json.loads((run_dir / "metrics.json").read_text())
    final = summary.get("final", {})
    steps = int(final.get("step", 0))
    done = epochs_done(run_dir)
    fg_ari = summary["test"].get("test/fg_ari")
    verdict = "n/a" if fg_ari is None else ("met" if fg_ari >= TARGET_FG_ARI else "not yet")
    return [f"# {tag}: {done} of {max_epochs} epochs", "",
            f"- this call: {steps - steps_before} steps in {fit_s:.0f} s of fit "
            f"({(steps - steps_before) / max(fit_s, 1e-9):.1f} steps/s), {session.elapsed():.0f} s in all",
            f"- best validation FG-ARI so far: {summary['best']['value']} (epoch {summary['best']['epoch']})",
            f"- test FG-ARI of those weights: {fg_ari} (target {TARGET_FG_ARI}: {verdict}; paper {PAPER_FG_ARI})",
            f"- {'finished: published into cards.tgz' if done >= max_epochs else 'to go on: carry state.* next call'}"]


def run_call(session: Session, args: argparse.Namespace, scratch: Path) -> None:
    import torch

    from hub.recipe import load_recipe
    from hub.run.train import train

    with session.stage("a. environment"):
        session.log(f"environment: {check_environment('cpu' if args.smoke else 'cuda')}")
        if not args.smoke:
            torch.backends.cudnn.benchmark = True
    budget = ["trainer.max_minutes=1e-6" if args.smoke else f"trainer.max_minutes={args.minutes}"]
    with session.stage("b. training"):
        if args.state:
            run_dir = restore_run(args.state, args.state_sha256, scratch)
            steps_before = int(json.loads((run_dir / "metrics.json").read_text())["final"].get("step", 0))
            session.log(f"resuming {run_dir.name} after {epochs_done(run_dir)} epochs ({steps_before} steps)")
            start = session.elapsed()
            run_dir = train(resume=str(run_dir), overrides=budget, progress=False)
        else:
            steps_before = 0
            overrides = [*(SMOKE_OVERRIDES if args.smoke else []), *budget, f"output_dir={scratch / 'runs'}"]
            session.log(f"starting {RECIPE} with {overrides}")
            start = session.elapsed()
            run_dir = train(str(ROOT / RECIPE), overrides, progress=False)
        fit_s = json.loads((run_dir / "metrics.json").read_text())["fit_seconds"]
        session.log(f"trained in {session.elapsed() - start:.0f} s ({fit_s:.0f} s of fit)")
    max_epochs = load_recipe(run_dir / "recipe.yaml").trainer.max_epochs
    tag = SMOKE_TAG if args.smoke else TAG
    with session.stage("c. pack"):
        sizes = pack_state(run_dir, session.out)
        session.log(f"state: {sum(sizes) / 2**20:.1f} MiB in {len(sizes)} part(s)")
        if epochs_done(run_dir) >= max_epochs:
            publish_finished(run_dir, tag, session.out, scratch)
            session.log("finished: published into cards.tgz")
        lines = progress_lines(run_dir, tag, max_epochs, fit_s, steps_before, session)
        (session.out / "progress.md").write_text("\n".join(lines) + "\n")
        for line in lines:
            session.log(line)


def main(argv: list[str] | None = None) -> Session:
    """Run one call of the chain (see the module's docstring); returns its session (log and results)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="folder of the call's log, state parts and progress")
    parser.add_argument("--state", nargs="+", type=Path, help="the previous call's state.tgz.partNN files, in order")
    parser.add_argument("--state-sha256", help="the previous call's state.sha256 (its content)")
    parser.add_argument("--minutes", type=float, default=8.0, help="training time of this call (8)")
    parser.add_argument("--smoke", action="store_true", help="the same path on the CPU, tiny sizes, one epoch a call")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("state.*"), out / "cards.tgz", out / "progress.md"]:
        old.unlink(missing_ok=True)
    session = Session(out, args.minutes * 60 + 60, args.smoke)
    session.log(f"gpu_slot {'--smoke ' if args.smoke else ''}--out {out} --minutes {args.minutes}"
                f"{' (resuming)' if args.state else ''}")
    with tempfile.TemporaryDirectory(prefix="gpu_slot-") as scratch:
        run_call(session, args, Path(scratch))
    return session


if __name__ == "__main__":
    main()
