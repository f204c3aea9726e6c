"""PULSE on TROIKA (IEEE SPC 2015 training set), leaving each of the 12 recordings out, beside the spectral baseline.

For each recording in turn, the other 11 train ``pulse`` with the model, optimiser, schedule and time-stretch
augmentation of ``recipes/timeseries/pulse_troika.yaml`` (no validation recording; the last epoch is kept), from
``--seeds`` seeds; the held-out recording's windows (8 s every 2 s, :mod:`timeseries.signals`) are scored against
the ECG's heart rate (BPM0) by the mean absolute error in BPM:

* PULSE per window: the mean of the model's heart-rate bins, each window on its own;
* PULSE tracked: the bins' distributions followed over the recording by the causal HMM filter
  (:func:`timeseries.signals.track`, its default settings, fixed before this benchmark was run); each estimate reads
  only its window and the earlier ones;
* the spectral baseline: the largest PPG spectral peak in 40-200 BPM that is not an accelerometer peak
  (:func:`timeseries.signals.spectral_baseline`), per window, nothing fitted.

Anchors from the literature, on the same 12 recordings but not by this protocol: TROIKA 2.34 BPM (signal processing
tuned on these recordings; Zhang et al., IEEE TBME 2015) and PPGnet 3.36 ± 4.1 BPM subject-independent (Shyam et al.,
EMBC 2019). Writes ``benchmarks/results/troika_pulse.md`` and ``.json`` (``--out`` another name).

    HUB_DATA_DIR=../shared/data python -m benchmarks.troika_pulse --seeds 2
"""
from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np
import torch

import hub
from benchmarks import RESULTS
from hub.io import atomic_write_bytes
from hub.recipe import recipe_file
from timeseries.data import TROIKA_FILES, TROIKA_RATE, read_troika_recording
from timeseries.signals import prepare_segments, prepare_windows, spectral_baseline, stretch_windows, track

RECIPE = "timeseries/pulse_troika.yaml"
ANCHORS = {"TROIKA (Zhang et al., IEEE TBME 2015; tuned on these recordings)": "2.34",
           "PPGnet (Shyam et al., EMBC 2019; subject-independent)": "3.36 ± 4.1"}


def train_pulse(segments: torch.Tensor, bpm: torch.Tensor, seed: int, epochs: int | None = None):
    """The recipe's model, optimiser (AdamW, cosine after a linear warmup, clipping) and time-stretch augmentation on
    the training recordings' 10-s segments (W, 5, 250) and heart rates (W,)."""
    recipe = recipe_file(RECIPE)
    args, opt, trainer = recipe.data.args, recipe.optimizer, recipe.trainer
    epochs = epochs or trainer.max_epochs
    torch.manual_seed(seed)
    model = hub.create_model(recipe.model.name, **recipe.model.args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=opt.lr, weight_decay=opt.weight_decay)
    batches = math.ceil(len(bpm) / args["batch_size"])
    total, warmup = epochs * batches, max(1, round(recipe.scheduler.warmup_epochs * batches))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: (s + 1) / warmup if s < warmup else
                                                 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, total - warmup))))
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        for idx in torch.randperm(len(bpm), generator=generator).split(args["batch_size"]):
            factor = 1 + (torch.rand(len(idx), generator=generator) * 2 - 1) * args["stretch"]
            loss, _ = model.loss(stretch_windows(segments[idx], factor), bpm[idx] * factor)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), trainer.gradient_clip_val)
            optimizer.step()
            schedule.step()
    return model.eval()


def pulse_estimates(model, windows: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(per-window BPM, tracked BPM) of one recording's prepared windows (W, 5, T)."""
    with torch.no_grad():
        logits = model.bin_logits(windows)
    per_window = (logits.softmax(-1) @ model.bpm).numpy()
    return per_window, track(logits.log_softmax(-1).numpy(), model.bpm.numpy())


def mean_std(values) -> str:
    values = np.asarray(values, dtype=float)
    return f"{values.mean():.2f} ± {values.std():.2f}" if len(values) > 1 else f"{values[0]:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=2, help="training seeds per held-out recording (default 2)")
    parser.add_argument("--recordings", default=None,
                        help="comma-separated recordings to hold out (default: all 12), e.g. 05_TYPE02")
    parser.add_argument("--epochs", type=int, default=None, help="epochs (default: the recipe's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--out", default="troika_pulse", help="results name under benchmarks/results/")
    options = parser.parse_args(argv)
    torch.set_num_threads(options.threads)
    held_out = options.recordings.split(",") if options.recordings else list(TROIKA_FILES)
    recordings = {name: read_troika_recording(name) for name in TROIKA_FILES}
    windows = {n: torch.from_numpy(prepare_windows(s, TROIKA_RATE)) for n, (s, _) in recordings.items()}
    segments = {n: torch.from_numpy(prepare_segments(s, TROIKA_RATE)).float() for n, (s, _) in recordings.items()}
    refs = {n: b for n, (_, b) in recordings.items()}
    rows, start = {}, time.perf_counter()
    for held in held_out:
        train = [n for n in recordings if n != held]
        seg = torch.cat([segments[n] for n in train])
        bpm = torch.from_numpy(np.concatenate([refs[n] for n in train])).float()
        baseline = spectral_baseline(windows[held].numpy())
        row = {"windows": len(refs[held]), "spectral": float(np.abs(baseline - refs[held]).mean()),
               "pulse_window": [], "pulse_tracked": []}
        for seed in range(options.seeds):
            per_window, tracked = pulse_estimates(train_pulse(seg, bpm, seed, options.epochs), windows[held])
            row["pulse_window"].append(float(np.abs(per_window - refs[held]).mean()))
            row["pulse_tracked"].append(float(np.abs(tracked - refs[held]).mean()))
        rows[held] = row
        print(f"{held}: spectral {row['spectral']:.2f}, PULSE {mean_std(row['pulse_window'])}, tracked "
              f"{mean_std(row['pulse_tracked'])} ({time.perf_counter() - start:.0f} s)", flush=True)
    per_seed = {key: [float(np.mean([rows[r][key][s] for r in rows])) for s in range(options.seeds)]
                for key in ("pulse_window", "pulse_tracked")}
    spectral_mean = float(np.mean([r["spectral"] for r in rows.values()]))
    recipe = recipe_file(RECIPE)
    lines = ["# PULSE on TROIKA: heart rate (BPM), leaving one recording out", "",
             "IEEE SPC 2015 training set (TROIKA): 12 treadmill runs, 2-channel wrist PPG and a 3-axis accelerometer",
             "at 125 Hz, the ECG's heart rate per 8-s window every 2 s. Each recording is held out in turn; the 11",
             f"others train `pulse` ({RECIPE}: {options.epochs or recipe.trainer.max_epochs} epochs, time-stretch 1 ± "
             f"{recipe.data.args['stretch']}, no validation recording), {options.seeds} seed(s) per recording,",
             "mean ± std over the seeds. Mean absolute error in BPM over the held-out recording's windows. 'Tracked':",
             "the model's heart-rate distributions followed by a causal HMM filter (each estimate reads its window and",
             "the earlier ones). The spectral baseline: the largest PPG peak in 40-200 BPM that is not an",
             "accelerometer peak, per window. Anchors: published figures on these recordings by their own protocols",
             "(TROIKA tunes its signal processing on them; PPGnet is subject-independent).",
             f"`HUB_DATA_DIR=../shared/data python -m benchmarks.troika_pulse --seeds {options.seeds}` "
             f"({time.perf_counter() - start:.0f} s at {options.threads} thread(s) on a shared 2-core CPU)", "",
             "| held-out recording | windows | spectral baseline | PULSE per window | PULSE tracked |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['windows']} | {row['spectral']:.2f} | {mean_std(row['pulse_window'])} | "
                     f"{mean_std(row['pulse_tracked'])} |")
    lines.append(f"| **mean over recordings** | {sum(r['windows'] for r in rows.values())} | {spectral_mean:.2f} | "
                 f"**{mean_std(per_seed['pulse_window'])}** | **{mean_std(per_seed['pulse_tracked'])}** |")
    for name, figure in ANCHORS.items():
        lines.append(f"| anchor: {name} | | | {figure} | |")
    text = "\n".join(lines) + "\n"
    summary = {"protocol": "leave one recording out", "seeds": options.seeds,
               "epochs": options.epochs or recipe.trainer.max_epochs, "recordings": rows,
               "mean": {"spectral": spectral_mean, **{k: {"per_seed": v, "mean": float(np.mean(v)),
                                                          "std": float(np.std(v))} for k, v in per_seed.items()}},
               "anchors": ANCHORS}
    atomic_write_bytes(RESULTS / f"{options.out}.md", text.encode())
    atomic_write_bytes(RESULTS / f"{options.out}.json", (json.dumps(summary, indent=2) + "\n").encode())
    print(text)


if __name__ == "__main__":
    main()
