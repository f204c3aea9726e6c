"""Audio benchmark: training and inference clips/s and peak memory of the audio families for 1, 5 and 10 s clips.

A clip of S seconds is a (128, 100 * S) log-mel input (10 ms frames); the models are built for that
frame count. Training is forward, cross-entropy, backward and an AdamW step on a batch; inference a
forward under ``inference_mode``. Times are medians of ``--repeats`` passes after a warm-up, peak
memory by :func:`benchmarks.timing.time_and_peak` (CPU: growth of the peak resident set; CUDA:
``max_memory_allocated``). Feature extraction (``audio.features.log_mel``) is timed on its own.

    python -m benchmarks.audio [--batch 8] [--repeats 3]     # writes benchmarks/results/audio.md
"""
from __future__ import annotations

import argparse
import statistics

import torch
import torch.nn.functional as F

import hub
from audio.features import log_mel
from benchmarks import RESULTS
from benchmarks.timing import inference_pass, time_and_peak, timed, training_pass

OUT = RESULTS / "audio.md"
FAMILIES = ("ast_tiny", "ssast_tiny", "timbre_attention")
SECONDS = (1, 5, 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    lines = [f"# Audio benchmark ({device}, {torch.get_num_threads()} threads, batch {args.batch}, "
             f"torch {torch.__version__})",
             "", "| model | clip | params | train clips/s | train peak MiB | infer clips/s | infer peak MiB |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for name in FAMILIES:
        for seconds in SECONDS:
            torch.manual_seed(0)
            model = hub.create_model(name, target_frames=100 * seconds).to(device)
            x = torch.randn(args.batch, 128, 100 * seconds, device=device)
            y = torch.randint(0, 10, (args.batch,), device=device)
            optimizer = torch.optim.AdamW(model.parameters())
            model.train()
            train_s, train_mib = time_and_peak(training_pass(lambda: F.cross_entropy(model(x), y), optimizer), device,
                                           args.repeats)
            model.eval()
            infer_s, infer_mib = time_and_peak(inference_pass(model, x), device, args.repeats)
            params = sum(p.numel() for p in model.parameters())
            lines.append(f"| {name} | {seconds} s | {params / 1e3:.0f}k | {args.batch / train_s:.1f} | "
                         f"{train_mib:.0f} | {args.batch / infer_s:.1f} | {infer_mib:.0f} |")
            print(lines[-1], flush=True)
    wave = torch.randn(16000 * 10)
    fbank_s = statistics.fmean(timed([lambda: log_mel(wave)], args.repeats, 0, "cpu")[0])  # no warm-up, as before
    lines += ["", f"Kaldi fbank of a 10 s clip: {fbank_s * 1000:.1f} ms "
              "(computed once per clip and cached by the data modules)."]
    OUT.write_text("\n".join(lines) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
