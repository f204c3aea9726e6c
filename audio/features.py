"""Audio input for the hub: files read with soundfile, Kaldi-compatible log-mel filterbanks as in AST.

AST (Gong, Chung & Glass, Interspeech 2021) feeds a 128-bin Kaldi fbank (25 ms Hanning window,
10 ms shift) of 16 kHz audio, cut or zero-padded to a fixed frame count and normalised with a mean
and std measured on the training set. Unlike AST, each clip is first scaled to unit RMS, so the
features do not depend on the recording level (FSDD's speakers were recorded at peak levels 10x
apart; without it a held-out quiet speaker loses ~20 points of accuracy). Optionally (``lifter=K``, our
addition, off by default) the log-mel is smoothed along frequency by keeping its first K DCT coefficients
over the mel bins (cepstral liftering, as MFCCs do): the spectral envelope (formants) stays, the pitch
harmonics, which tell speakers apart more than digits, go. Clips are fitted to the frame count by cutting or
padding (``time_fit="cut"``, as AST) or (our option, ``"stretch"``) by resampling the whole clip along time,
which takes out each speaker's pace: a slow and a fast "seven" then line up frame by frame. Stretching
assumes clips trimmed to the sound; ``trim_db`` (our option, off by default) trims them first: leading and
trailing frames whose mean log-mel energy lies more than ``trim_db`` dB below the clip's loudest frame are
dropped (an energy end-point detector), so each speaker's margins of breath and room noise go.
Documented conversions (not errors): several channels are averaged to mono; every file is resampled to
16 kHz from its own rate, so a folder may mix rates.
Errors (:class:`DataError`, naming the file): a missing or unreadable file, an empty file, a clip
shorter than one 25 ms window, non-finite samples, and a silent clip (peak below ``SILENCE_PEAK``,
-80 dBFS), which has no spectrum to classify.

Shapes:
    read_audio(path or (waveform, rate)) -> (samples,) at 16 kHz; log_mel(wave) -> (F, T), F = 128 bins, T = frames;
    trim_silence(spec, db) -> (F, T'' <= T); fit_frames(spec, T') -> (F, T').

>>> spec = log_mel(torch.randn(16000))
>>> spec.shape
torch.Size([128, 98])
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
import torch.nn.functional as F
import torchaudio

from hub.errors import DataError

SAMPLE_RATE = 16_000
NUM_MEL_BINS = 128
WINDOW_MS, SHIFT_MS = 25.0, 10.0
SILENCE_PEAK = 1e-4  # -80 dBFS: quieter clips are refused as silent
AUDIO_SUFFIXES = (".wav", ".flac")


def read_audio(source, sample_rate: int = SAMPLE_RATE) -> torch.Tensor:
    """A WAV or FLAC file, or a ``(waveform, rate)`` pair as ``soundfile.read`` returns it, as a mono float waveform
    at ``sample_rate`` (channels averaged, resampled). The pair's waveform is a numpy array or tensor of floats (or of
    integer PCM samples, scaled by their type's range), ``(samples,)`` or ``(samples, channels)``.

    Shapes: -> (samples,)
    """
    if isinstance(source, (str, os.PathLike)):
        data, rate = _read_file(Path(source))
        what = f"audio file {source}"
    elif isinstance(source, tuple) and len(source) == 2:
        data, rate = _waveform_array(*source)
        what = "the waveform"
    else:
        raise DataError(f"expected an audio file path or a (waveform, sample_rate) pair, got {type(source).__name__}")
    if data.shape[0] == 0:
        raise DataError(f"{what} is empty (0 samples)")
    if not np.isfinite(data).all():
        raise DataError(f"{what} holds NaN or infinite samples")
    wave = torch.from_numpy(data.mean(axis=1))  # (samples, channels) -> (samples,)
    if rate != sample_rate:
        wave = torchaudio.functional.resample(wave, rate, sample_rate)
    min_samples = int(sample_rate * WINDOW_MS / 1000)
    if wave.numel() < min_samples:
        raise DataError(f"{what} is {wave.numel() / sample_rate * 1000:.1f} ms long; "
                        f"expected at least one {WINDOW_MS:.0f} ms window")
    peak = float(wave.abs().max())
    if peak < SILENCE_PEAK:
        raise DataError(f"{what} is silent (peak amplitude {peak:.2g} < {SILENCE_PEAK:g}, "
                        "-80 dBFS); there is nothing to classify")
    return wave


def _read_file(path: Path) -> tuple[np.ndarray, int]:
    """A WAV/FLAC file's float32 samples ``(samples, channels)`` and rate."""
    import soundfile

    if not path.is_file():
        raise DataError(f"audio file {path} does not exist")
    try:
        data, rate = soundfile.read(str(path), dtype="float32", always_2d=True)  # (samples, channels)
    except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as err:
        raise DataError(f"cannot read audio {path}: not a readable WAV/FLAC file ({err})") from None
    return data, rate


def _waveform_array(waveform, rate) -> tuple[np.ndarray, int]:
    """A ``(waveform, rate)`` pair's float32 samples ``(samples, channels)`` and rate, checked."""
    if isinstance(rate, bool) or not isinstance(rate, (int, np.integer)) or rate <= 0:
        raise DataError(f"the sample rate of a (waveform, sample_rate) pair must be a positive integer in Hz, "
                        f"got {rate!r}")
    if isinstance(waveform, torch.Tensor):
        waveform = waveform.detach().cpu().numpy()
    if not isinstance(waveform, np.ndarray) or waveform.ndim not in (1, 2):
        shape = getattr(waveform, "shape", None)
        raise DataError(f"the waveform of a (waveform, sample_rate) pair must be a (samples,) or (samples, channels) "
                        f"array, as soundfile.read returns, got {type(waveform).__name__} of shape {shape}")
    if np.issubdtype(waveform.dtype, np.integer):  # PCM samples: scaled to [-1, 1) as soundfile reads them
        waveform = waveform / -np.iinfo(waveform.dtype).min
    elif not np.issubdtype(waveform.dtype, np.floating):
        raise DataError(f"the waveform must hold float or integer PCM samples, got {waveform.dtype}")
    return waveform.astype(np.float32).reshape(len(waveform), -1), int(rate)


def log_mel(wave: torch.Tensor, sample_rate: int = SAMPLE_RATE, num_mel_bins: int = NUM_MEL_BINS,
            lifter: int | None = None) -> torch.Tensor:
    """Kaldi-compatible log-mel filterbank, as AST computes it (mean removed, no dither, Hanning window);
    with ``lifter`` K, projected onto the first K DCT-II bases over the mel bins (see the module docstring).

    Shapes: wave: (samples,) -> (num_mel_bins, frames)
    """
    wave = wave - wave.mean()
    wave = (wave / wave.pow(2).mean().sqrt().clamp_min(1e-8)).unsqueeze(0)  # unit RMS: level-invariant; (1, samples)
    fbank = torchaudio.compliance.kaldi.fbank(
        wave, htk_compat=True, sample_frequency=sample_rate, use_energy=False, window_type="hanning",
        num_mel_bins=num_mel_bins, dither=0.0, frame_length=WINDOW_MS, frame_shift=SHIFT_MS)  # (T, F)
    if lifter is not None:
        if not 0 < lifter <= num_mel_bins:
            raise DataError(f"lifter must be in 1..{num_mel_bins} (DCT coefficients kept over the mel bins), "
                            f"got {lifter}")
        dct = torchaudio.functional.create_dct(lifter, num_mel_bins, "ortho")  # (F, K), orthonormal columns
        fbank = fbank @ dct @ dct.T  # (T, F): the projection onto the first K cepstral coefficients
    return fbank.T.contiguous()  # (T, F) -> (F, T)


TIME_FITS = ("cut", "stretch")
NATS_TO_DB = 10 / np.log(10)  # Kaldi's fbank is the natural log of the mel power


def check_trim_db(trim_db: float | None) -> None:
    if trim_db is not None and not trim_db > 0:
        raise DataError(f"trim_db must be a positive level in dB below the loudest frame (or None), got {trim_db}")


def trim_silence(spec: torch.Tensor, trim_db: float | None) -> torch.Tensor:
    """Drop leading and trailing frames whose mean log-mel energy is more than ``trim_db`` dB below the loudest
    frame's (``None``: the clip unchanged). Frames inside the sound are kept whatever their level.

    Shapes: spec: (F, T) -> (F, T') with 1 <= T' <= T
    """
    # On the cached log-mel, so no second pass over the audio; torchaudio's ``functional.vad`` (SoX's detector)
    # works on waveforms and trims the front only.
    check_trim_db(trim_db)
    if trim_db is None:
        return spec
    energy_db = spec.mean(0) * NATS_TO_DB  # (T,)
    loud = torch.nonzero(energy_db >= energy_db.max() - trim_db).flatten()
    return spec[:, int(loud[0]):int(loud[-1]) + 1]


def check_time_fit(time_fit: str) -> None:
    if time_fit not in TIME_FITS:
        raise DataError(f"time_fit must be one of {TIME_FITS}, got {time_fit!r}")


def fit_frames(spec: torch.Tensor, frames: int, pad_value: float = 0.0, time_fit: str = "cut") -> torch.Tensor:
    """Exactly ``frames`` frames: ``"cut"`` cuts (keeping the start) or pads on the right with ``pad_value``;
    ``"stretch"`` resamples the whole clip along time (linear interpolation), so every clip spans the same
    frames whatever its duration (see the module docstring).

    Shapes: spec: (F, T) -> (F, frames)
    """
    check_time_fit(time_fit)
    if time_fit == "stretch":
        return F.interpolate(spec[None], size=frames, mode="linear", align_corners=False)[0]
    if spec.shape[-1] >= frames:
        return spec[..., :frames]
    return F.pad(spec, (0, frames - spec.shape[-1]), value=pad_value)


def warp_mel_bins(spec: torch.Tensor, factor: float) -> torch.Tensor:
    """Scale a spectrogram's frequency axis by ``factor``: output bin f takes the value of input bin
    ``f * factor`` (linearly interpolated, the top bin repeated past the end), so ``factor > 1`` moves the
    formants down and ``< 1`` moves them up, as a longer or shorter vocal tract would: vocal tract length
    perturbation (VTLP; Jaitly & Hinton, 2013), here a plain scaling of the mel axis. Written here because
    torchaudio has no frequency warp for spectrograms (its speed perturbation resamples waveforms, which changes
    the tempo as well and would need the fbank again for every item of every epoch).

    spec: (F, T) -> (F, T).
    """
    bins = spec.shape[0]
    source = (torch.arange(bins, dtype=torch.float32) * factor).clamp(max=bins - 1)  # (F,)
    low = source.floor().long()
    high = (low + 1).clamp(max=bins - 1)
    frac = (source - low).unsqueeze(-1)  # (F, 1)
    return spec[low] * (1 - frac) + spec[high] * frac


def audio_spec(target_frames: int, mean: float, std: float, num_mel_bins: int = NUM_MEL_BINS,
               lifter: int | None = None, time_fit: str = "cut", trim_db: float | None = None) -> dict[str, Any]:
    """The card's ``input_spec`` for spectrogram models: what :func:`model_input` needs to rebuild inputs."""
    return {"kind": "audio", "sample_rate": SAMPLE_RATE, "num_mel_bins": num_mel_bins, "lifter": lifter,
            "trim_db": trim_db, "target_frames": target_frames, "time_fit": time_fit, "mean": mean, "std": std}


def normalise(spec: torch.Tensor, input_spec: dict[str, Any]) -> torch.Tensor:
    """Normalise with the training-set statistics, then fit to the spec's frame count (``time_fit``; padding =
    the training mean, i.e. 0 after normalising). Shapes: (F, T) -> (F, target_frames)"""
    return fit_frames((spec - input_spec["mean"]) / input_spec["std"], input_spec["target_frames"],
                      time_fit=input_spec.get("time_fit", "cut"))  # cards from before time_fit cut


def model_input(source, input_spec: dict[str, Any]) -> torch.Tensor:
    """An audio file or a ``(waveform, rate)`` pair (:func:`read_audio`) as the normalised ``(F, T)`` spectrogram a
    model with ``input_spec`` takes: the log-mel (:func:`log_mel`), trimmed (:func:`trim_silence`), normalised and
    fitted to the frame count (:func:`normalise`), as the data modules compute it."""
    wave = read_audio(source, input_spec["sample_rate"])
    spec = log_mel(wave, input_spec["sample_rate"], input_spec["num_mel_bins"], input_spec.get("lifter"))
    return normalise(trim_silence(spec, input_spec.get("trim_db")), input_spec)


_CACHE: dict[tuple, torch.Tensor] = {}


def cached_log_mels(paths: Iterable[str | Path], sample_rate: int = SAMPLE_RATE, num_mel_bins: int = NUM_MEL_BINS,
                    lifter: int | None = None) -> list[torch.Tensor]:
    """Log-mel spectrograms of files, computed once per process (keyed by path, size and mtime), so
    datasets built again (validation, test, a second run in the same process) do no feature work.

    Shapes: -> list of (F, T_i)
    """
    out = []
    for path in paths:
        stat = Path(path).stat() if Path(path).is_file() else None
        key = (str(Path(path).resolve()), stat and stat.st_size, stat and stat.st_mtime_ns, sample_rate, num_mel_bins,
               lifter)
        if key not in _CACHE:
            _CACHE[key] = log_mel(read_audio(path, sample_rate), sample_rate, num_mel_bins, lifter)
        out.append(_CACHE[key])
    return out


def training_stats(specs: list[torch.Tensor]) -> tuple[float, float]:
    """Mean and std over every frame and bin of the training spectrograms (before padding)."""
    values = torch.cat([s.flatten() for s in specs])
    return float(values.mean()), float(values.std())
