"""Wrist PPG and accelerometer signals for heart-rate tracking: windows, their preprocessing, the spectral baseline and
causal tracking, shared by the data (``troika``, a user's recordings), the ``pulse`` family's inputs and the benchmark.

A recording is ``(5, N)`` at ``rate`` Hz: PPG channels 1-2, then accelerometer x, y, z. Windows are 8 s long every
2 s (the IEEE SPC 2015 / TROIKA convention: window k covers seconds [2k, 2k + 8), and its reference heart rate is the
ECG's over the same seconds). Each window is prepared on its own (no sample outside it is read, so a window predicts
alike in a recording and alone), in this order:

1. each channel's mean removed, then a zero-phase 4th-order Butterworth band-pass of 0.5-4 Hz (30-240 BPM);
2. decimated to 25 Hz (every ``rate / 25``-th sample; the band-pass is the anti-aliasing filter);
3. each channel divided by its standard deviation over the window (per-window, per-channel normalisation; a flat
   channel stays zero).

Shapes: a recording (5, N) -> windows (W, 5, 200), W = floor((N / rate - 8) / 2) + 1.

>>> x = np.random.default_rng(0).normal(size=(5, 125 * 20))
>>> prepare_windows(x, 125.0).shape
(7, 5, 200)
"""
from __future__ import annotations

import numpy as np
import torch

from hub.errors import DataError

WINDOW_S, STEP_S, MODEL_RATE = 8.0, 2.0, 25.0  # seconds per window, seconds between windows, Hz after decimation
BAND_HZ = (0.5, 4.0)  # the band-pass, Hz
CHANNELS = ["ppg1", "ppg2", "acc_x", "acc_y", "acc_z"]
PPG_CHANNELS, ACC_CHANNELS = 2, 3
BPM_RANGE = (40.0, 200.0)  # the heart rates searched by the spectral baseline and scored by the model's bins


def window_count(num_samples: int, rate: float) -> int:
    """Windows of ``WINDOW_S`` every ``STEP_S`` in ``num_samples`` samples (TROIKA's n = floor((N/rate - 8)/2) + 1).

    >>> window_count(37937, 125.0)
    148
    """
    return max(0, int(np.floor((num_samples / rate - WINDOW_S) / STEP_S)) + 1)


def prepare_windows(signals: np.ndarray, rate: float) -> np.ndarray:
    """A recording's channels ``(5, N)`` at ``rate`` Hz -> its prepared windows ``(W, 5, 200)`` float32 (module doc)."""
    signals = np.asarray(signals, dtype=np.float64)
    if signals.ndim != 2 or signals.shape[0] != len(CHANNELS):
        raise DataError(f"expected a recording of shape ({len(CHANNELS)}, samples) ({', '.join(CHANNELS)}), got "
                        f"{signals.shape}")
    factor = rate / MODEL_RATE
    if rate < 2 * BAND_HZ[1] * 2 or abs(factor - round(factor)) > 1e-9:
        raise DataError(f"expected a sampling rate that is a multiple of {MODEL_RATE:g} Hz, got {rate:g} Hz")
    length = int(round(WINDOW_S * rate))
    starts = (np.arange(window_count(signals.shape[1], rate)) * STEP_S * rate).round().astype(int)
    if not len(starts):
        raise DataError(f"a recording of {signals.shape[1] / rate:.1f} s is shorter than one {WINDOW_S:g}-s window")
    if not np.isfinite(signals).all():
        raise DataError("the recording has NaN or infinite samples; fill or drop them first")
    windows = np.stack([signals[:, s:s + length] for s in starts])  # (W, 5, length)
    return normalised(_filtered(windows, rate)).astype(np.float32)


def prepare_segments(signals: np.ndarray, rate: float, seconds: float = 10.0) -> np.ndarray:
    """For training with time-stretch: each window's centred ``seconds``-long segment (the recording padded by
    reflection at both ends), band-passed and decimated as :func:`prepare_windows` does, not normalised (see
    :func:`stretch_windows`). Shapes: (5, N) -> (W, 5, seconds * 25)."""
    margin = int(round((seconds - WINDOW_S) / 2 * rate))
    count = window_count(np.asarray(signals).shape[1], rate)
    padded = np.pad(np.asarray(signals, dtype=np.float64), ((0, 0), (margin, margin)), mode="reflect")
    length = int(round(seconds * rate))
    starts = (np.arange(count) * STEP_S * rate).round().astype(int)  # in the padded recording: the window's start
    return _filtered(np.stack([padded[:, s:s + length] for s in starts]), rate)


def _filtered(windows: np.ndarray, rate: float) -> np.ndarray:
    """Mean removed, band-passed (zero phase) and decimated to 25 Hz: (W, C, L) -> (W, C, L * 25 / rate)."""
    from scipy.signal import butter, sosfiltfilt

    windows = windows - windows.mean(-1, keepdims=True)
    sos = butter(4, BAND_HZ, btype="bandpass", fs=rate, output="sos")
    return np.ascontiguousarray(sosfiltfilt(sos, windows, axis=-1)[..., ::int(round(rate / MODEL_RATE))])


def normalised(windows):
    """Each channel divided by its standard deviation over the window (a flat channel stays zero); numpy or torch,
    (..., T) -> (..., T)."""
    std = windows.std(-1, keepdims=True)
    return windows / (std + 1e-8)


def stretch_windows(segments: torch.Tensor, factors: torch.Tensor, samples: int = 200) -> torch.Tensor:
    """Time-stretch augmentation: the centre of each segment read ``factors`` times faster (linear interpolation),
    then normalised, so every frequency, the heart rate's too, is multiplied by its factor (at most
    segment length / samples). Shapes: (B, C, L), (B,) -> (B, C, samples).

    >>> t = torch.arange(250) / 25.0
    >>> seg = torch.sin(2 * torch.pi * 2.0 * t).expand(1, 5, 250)
    >>> out = stretch_windows(seg, torch.tensor([1.1]))
    >>> int(torch.fft.rfft(out[0, 0]).abs().argmax())  # 2.2 Hz in 8 s: bin 17.6
    18
    """
    length = segments.shape[-1]
    offsets = (torch.arange(samples, dtype=torch.float32) - (samples - 1) / 2)[None] * factors[:, None]  # (B, T)
    positions = ((length - 1) / 2 + offsets).clamp(0, length - 1)
    low = positions.floor().long().clamp(max=length - 2)
    frac = (positions - low)[:, None]  # (B, 1, T)
    gather = lambda idx: segments.gather(-1, idx[:, None].expand(-1, segments.shape[1], -1))  # noqa: E731
    return normalised(gather(low) * (1 - frac) + gather(low + 1) * frac)


def spectrum(windows: np.ndarray, bpm: np.ndarray, rate: float = MODEL_RATE) -> np.ndarray:
    """Magnitude of each channel's DFT at the heart rates ``bpm`` (a Hann-tapered window, any frequencies, not only
    the FFT's grid). Shapes: (..., T), (F,) -> (..., F)."""
    t = np.arange(windows.shape[-1]) / rate
    basis = np.exp(-2j * np.pi * np.outer(t, np.asarray(bpm) / 60.0))  # (T, F)
    return np.abs((windows * np.hanning(windows.shape[-1])) @ basis)


def spectral_baseline(windows: np.ndarray, resolution: float = 0.5, exclusion_bpm: float = 4.0) -> np.ndarray:
    """The classic spectral heart rate of each window: the largest peak of the PPG spectrum (channels summed) in
    40-200 BPM that is not an accelerometer peak (not within ``exclusion_bpm`` of the strongest peak of any of the
    three axes' spectra, or of that peak's double, where the step rate's harmonic falls); the largest PPG peak
    when every peak is excluded. Shapes: windows (W, 5, T) -> (W,) BPM.

    >>> t = np.arange(200) / 25.0
    >>> w = np.stack([np.sin(2 * np.pi * 2.0 * t)] * 2 + [np.sin(2 * np.pi * 2.5 * t)] * 3)[None]
    >>> spectral_baseline(w).round().tolist()
    [120.0]
    """
    bpm = np.arange(BPM_RANGE[0], BPM_RANGE[1] + resolution, resolution)
    ppg = spectrum(windows[:, :PPG_CHANNELS], bpm).sum(1)  # (W, F)
    acc = spectrum(windows[:, PPG_CHANNELS:], bpm)  # (W, 3, F)
    out = np.empty(len(windows))
    for i, (p, a) in enumerate(zip(ppg, acc)):
        peaks = np.flatnonzero((p[1:-1] > p[:-2]) & (p[1:-1] >= p[2:])) + 1
        motion = bpm[a.argmax(-1)]  # (3,) each axis's strongest frequency
        near = np.abs(bpm[peaks, None] - np.concatenate([motion, 2 * motion])[None]).min(1) < exclusion_bpm
        kept = peaks[~near] if (~near).any() else (peaks if len(peaks) else np.array([p.argmax()]))
        out[i] = bpm[kept[p[kept].argmax()]]
    return out


def track(log_probs: np.ndarray, bpm: np.ndarray, sigma_bpm: float = 3.0, floor: float = 0.05,
          jump: float = 0.01, local_bpm: float = 10.0) -> np.ndarray:
    """Causal tracking of one recording's per-window heart-rate distributions: an HMM forward filter over the bins.
    Between consecutive windows (2 s apart) the heart rate moves by a Gaussian step of ``sigma_bpm``, or with
    probability ``jump`` to anywhere in the range (so a lost track is found again); each window's distribution is
    mixed with ``floor`` of a uniform one (so one window's confident outlier cannot drag the track away); each
    window's estimate is the mean of its filtered distribution within ``local_bpm`` of its mode. It reads only that
    window and those before it, so it runs online. Shapes: log_probs (W, F) over the bins ``bpm`` (F,) -> (W,) BPM.

    >>> bpm = np.arange(40.0, 201.0)
    >>> logp = -0.5 * ((bpm[None] - np.array([[100.0], [101.0], [180.0], [102.0]])) / 2.0) ** 2
    >>> track(logp, bpm).round().tolist()
    [100.0, 101.0, 101.0, 102.0]
    """
    transition = np.exp(-0.5 * ((bpm[:, None] - bpm[None]) / sigma_bpm) ** 2)
    transition /= transition.sum(1, keepdims=True)  # (F, F): row = from, column = to
    belief, out = np.full(len(bpm), 1.0 / len(bpm)), np.empty(len(log_probs))
    for i, logp in enumerate(log_probs):
        likelihood = np.exp(logp - logp.max())
        likelihood = (1 - floor) * likelihood / likelihood.sum() + floor / len(bpm)
        belief = ((1 - jump) * (belief @ transition) + jump / len(bpm)) * likelihood
        belief /= belief.sum()
        out[i] = mode_mean(belief, bpm, local_bpm)
    return out


def mode_mean(probs: np.ndarray, bpm: np.ndarray, local_bpm: float = 10.0) -> float:
    """The mean of a distribution over the bins ``bpm`` within ``local_bpm`` of its mode (a second mode far away
    does not pull it). Shapes: (F,), (F,) -> a float."""
    near = np.abs(bpm - bpm[probs.argmax()]) <= local_bpm
    return float(probs[near] @ bpm[near] / probs[near].sum())
