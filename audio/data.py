"""Audio datasets for recipes: the Free Spoken Digit Dataset with a speaker-held-out split, and user audio folders.

Spectrograms are computed once per process (:func:`audio.features.cached_log_mels`), normalised with
the training split's mean and std (kept in the card's ``input_spec``) and cut/padded or stretched
(``time_fit``) to ``target_frames``; epochs after the first do no feature work. Training items are
augmented on the cached spectrograms, seeded by (seed, epoch, index) so a resumed run augments exactly as an
uninterrupted one: SpecAugment (torchaudio's frequency and time masking; Park et al., 2019), a random
time roll, a random spectral tilt (``tilt``: a smooth curve over the mel bins, the same in every frame, drawn
as random cepstral coefficients 1-3, as a different microphone or vocal tract would colour the sound), a random
scaling of the mel axis (``warp``: vocal tract length perturbation, :func:`audio.features.warp_mel_bins`), additive
Gaussian noise, and mixup (Zhang et al., 2018; lambda ~ Beta(10, 10) as AST) with soft targets.

Shapes: items (F, T) with an int label (evaluation) or a (num_classes,) soft target (training).
"""
from __future__ import annotations

import hashlib
import io
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
import torchaudio
from torch.utils.data import DataLoader, TensorDataset

from audio.features import (
    audio_spec,
    cached_log_mels,
    check_time_fit,
    check_trim_db,
    normalise,
    training_stats,
    trim_silence,
    warp_mel_bins,
)
from audio.io import scan_audio_folder
from hub.core.registry import register_dataset
from hub.core.weights import is_offline
from hub.data import (
    EpochSeededDataset,
    HubDataModule,
    class_folder_splits,
    data_dir,
    download_dir,
    folded_splits,
    stratified_split,
)
from hub.errors import DataError, DatasetUnavailable

FSDD_COMMIT = "26eb9aaf76e81b692f806f9140c2d2777410d7a1"
FSDD_URL = f"https://github.com/Jakobovski/free-spoken-digit-dataset/archive/{FSDD_COMMIT}.tar.gz"
# sha256 of MANIFEST.tsv ("path\tbytes\tsha256" rows of recordings/*.wav, sorted): it pins all 3000 files.
FSDD_MANIFEST_SHA256 = "97ba519b95203499711033452e88eff9190e0b750080670f676fb26d292f17f4"
FSDD_SPEAKERS = ("george", "jackson", "lucas", "nicolas", "theo", "yweweler")
TILT_COEFFICIENTS = 3  # cepstral coefficients 1-3: slope and the two next smoothest curves over the mel bins


class SpectrogramAugment(EpochSeededDataset):
    """Training spectrograms with SpecAugment, time roll, spectral tilt, mel-axis warp, noise and mixup; soft
    one-hot targets.

    ``tilt`` is the std of the random cepstral coefficients 1-3 added to every frame (orthonormal DCT-II bases
    over the mel bins, in units of the normalised spectrogram); ``warp`` scales the mel axis of each clip by a
    factor drawn uniformly from ``[1 - warp, 1 + warp]``.

    Args:
        specs: the normalised training spectrograms (N, F, T).
        labels: their class indices (N,), int64.
        num_classes: width of the one-hot targets.
        seed: seed of the augmentation; item i of epoch e draws from ``(seed, e, i)``.
        freq_mask: largest frequency mask of SpecAugment, in mel bins (0, the default: none).
        time_mask: largest time mask of SpecAugment, in frames (0: none).
        time_shift: largest circular roll along time, in frames either way (0: none).
        noise: largest std of the additive Gaussian noise (drawn uniformly in ``[0, noise]`` per clip; 0: none).
        mixup: probability of mixing a clip with a random other one (lambda ~ Beta(10, 10), targets mixed alike).
        tilt: std of the spectral tilt's coefficients (0: none).
        warp: largest relative scaling of the mel axis, in [0, 1) (0: none).

    Shapes: item (F, T) spectrogram and (num_classes,) soft target"""

    def __init__(self, specs: torch.Tensor, labels: torch.Tensor, num_classes: int, seed: int, freq_mask: int = 0,
                 time_mask: int = 0, time_shift: int = 0, noise: float = 0.0, mixup: float = 0.0, tilt: float = 0.0,
                 warp: float = 0.0):
        self.specs, self.labels, self.num_classes, self.seed = specs, labels, num_classes, seed
        self.time_shift, self.noise, self.mixup, self.tilt, self.warp = time_shift, noise, mixup, tilt, warp
        bases = torchaudio.functional.create_dct(TILT_COEFFICIENTS + 1, specs.shape[1], "ortho")  # (F, 4)
        self.tilt_bases = bases[:, 1:]  # (F, 3): coefficient 0, the level, is left alone
        self.masks = torch.nn.Sequential(*([torchaudio.transforms.FrequencyMasking(freq_mask)] if freq_mask else []),
                                         *([torchaudio.transforms.TimeMasking(time_mask)] if time_mask else []))

    def __len__(self) -> int:
        return len(self.labels)

    def augmented_item(self, index: int, generator: torch.Generator):
        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=generator)))
        x = self.specs[index]  # (F, T)
        target = F.one_hot(self.labels[index], self.num_classes).float()  # (C,)
        if self.mixup and rng.random() < self.mixup:
            other, lam = int(rng.integers(len(self.labels))), float(rng.beta(10.0, 10.0))
            x = lam * x + (1 - lam) * self.specs[other]
            target = lam * target + (1 - lam) * F.one_hot(self.labels[other], self.num_classes).float()
        if self.tilt:
            coefficients = self.tilt * torch.from_numpy(rng.standard_normal(TILT_COEFFICIENTS, dtype=np.float32))
            x = x + (self.tilt_bases @ coefficients).unsqueeze(-1)  # (F, 3) @ (3,) -> (F, 1), every frame
        if self.warp:
            x = warp_mel_bins(x, float(rng.uniform(1 - self.warp, 1 + self.warp)))
        if self.time_shift:
            x = torch.roll(x, int(rng.integers(-self.time_shift, self.time_shift + 1)), dims=-1)
        if self.noise:
            noise = torch.from_numpy(rng.standard_normal(x.shape, dtype=np.float32))
            x = x + float(rng.uniform(0, self.noise)) * noise
        if len(self.masks):
            with torch.random.fork_rng(devices=[]):  # torchaudio's masking draws from the global RNG
                torch.manual_seed(int(rng.integers(2**62)))
                x = self.masks(x.unsqueeze(0)).squeeze(0)  # (F, T) -> (1, F, T) -> (F, T)
        return x, target


class SpectrogramData(HubDataModule):
    """Base of the audio data modules: subclasses list (file, label) items per split in ``split_items``.

    Args:
        batch_size: clips per batch.
        num_workers: DataLoader worker processes (0: the main process).
        seed: seed of the training order and augmentation.
        target_frames: frames T every spectrogram is fitted to.
        mean: normalisation mean of the log-mels; None (with ``std``) computes both on the training split.
        std: normalisation std of the log-mels (None: from the training split).
        augment: keyword arguments of :class:`SpectrogramAugment` (``freq_mask``, ``time_mask``, ``time_shift``,
            ``noise``, ``mixup``, ``tilt``, ``warp``).
        pretext: drop the labels (every target -1) and serve unaugmented spectrograms, for masked patch modelling
            (default False).
        lifter: smooth the log-mels along frequency by keeping their first ``lifter`` DCT coefficients
            (:func:`audio.features.log_mel`; None, the default: not smoothed).
        time_fit: ``"cut"`` (cut or pad on the right, default) or ``"stretch"`` (resample the clip along time) to
            ``target_frames``.
        trim_db: trim leading and trailing frames more than this many dB below the loudest frame (None, the
            default: no trimming)."""

    task = "soft-label-classification"

    def __init__(self, batch_size: int, num_workers: int, seed: int, target_frames: int, mean: float | None,
                 std: float | None, augment: dict[str, Any], pretext: bool = False, lifter: int | None = None,
                 time_fit: str = "cut", trim_db: float | None = None):
        super().__init__(batch_size, num_workers, seed)
        self.target_frames, self.mean, self.std, self.augment, self.pretext = target_frames, mean, std, augment, pretext
        check_time_fit(time_fit)  # here, before any audio is read
        check_trim_db(trim_db)
        self.lifter, self.time_fit, self.trim_db = lifter, time_fit, trim_db
        if pretext:
            self.task = "masked-patch-modelling"

    def split_items(self) -> tuple[dict[str, list[tuple[Path, int]]], list[str]]:
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        splits, classes = self.split_items()
        specs = {}
        for name, items in splits.items():
            spectrograms = cached_log_mels([f for f, _ in items], lifter=self.lifter)
            specs[name] = [trim_silence(s, self.trim_db) for s in spectrograms]
        mean, std = (self.mean, self.std) if self.mean is not None else training_stats(specs["train"])
        self.input_spec = audio_spec(self.target_frames, mean, std, lifter=self.lifter, time_fit=self.time_fit,
                                     trim_db=self.trim_db)
        tensors = {}
        for name, items in splits.items():
            x = torch.stack([normalise(s, self.input_spec) for s in specs[name]])  # (N, F, T)
            y = torch.tensor([label if not self.pretext else -1 for _, label in items])  # pretext: labels unread
            tensors[name] = (x, y)
        train_x, train_y = tensors["train"]
        if self.pretext:
            self.train_set = TensorDataset(train_x, train_y)
        else:
            self.train_set = SpectrogramAugment(train_x, train_y, len(classes), self.seed, **self.augment)
        self.val_set, self.test_set = TensorDataset(*tensors["val"]), TensorDataset(*tensors["test"])
        self.num_classes, self.label_names = len(classes), list(classes)
        self.info["sizes"] = [len(splits[s]) for s in ("train", "val", "test")]

    def statistics_dataloader(self) -> DataLoader:
        """The training spectrograms as evaluated: without masks, noise, tilts or mixup, which spread the training
        inputs over where noise and tones lie (measured: fitted on augmented spectrograms, the input statistics
        flagged 4% of white noise for ast_tiny.fsdd)."""
        train = self.train_set
        if isinstance(train, SpectrogramAugment):
            train = TensorDataset(train.specs, train.labels)
        return self._loader(train, train=False)

    def model_args(self) -> dict[str, Any]:
        return {**super().model_args(), "target_frames": self.target_frames}


def _manifest_digest(root: Path) -> str:
    rows = ["path\tbytes\tsha256"]
    for path in sorted((root / "recordings").glob("*.wav")):
        data = path.read_bytes()
        rows.append(f"recordings/{path.name}\t{len(data)}\t{hashlib.sha256(data).hexdigest()}")
    return hashlib.sha256(("\n".join(rows) + "\n").encode()).hexdigest()


def find_fsdd() -> Path:
    """``HUB_DATA_DIR/fsdd`` if it is there, else the commit's archive from GitHub, checked file by file
    against the pinned manifest digest (``FSDD_MANIFEST_SHA256``) before it is used."""
    local = data_dir() / "fsdd"
    if (local / "recordings").is_dir():
        return local
    cache = download_dir() / f"fsdd-{FSDD_COMMIT[:7]}"
    if (cache / "recordings").is_dir():
        return cache
    if is_offline():
        raise DatasetUnavailable("fsdd", f"FSDD is not in {local} and HUB_OFFLINE=1 forbids downloading {FSDD_URL}")
    staging = cache.with_name(cache.name + ".partial")
    try:
        with urllib.request.urlopen(FSDD_URL, timeout=60) as response:
            archive = tarfile.open(fileobj=io.BytesIO(response.read()), mode="r:gz")
        (staging / "recordings").mkdir(parents=True, exist_ok=True)
        for member in archive.getmembers():
            if member.isfile() and "/recordings/" in member.name and member.name.endswith(".wav"):
                (staging / "recordings" / Path(member.name).name).write_bytes(archive.extractfile(member).read())
    except OSError as err:
        raise DatasetUnavailable("fsdd", f"FSDD is not in {local} (set HUB_DATA_DIR) and downloading {FSDD_URL} "
                                         f"failed: {err}") from err
    digest = _manifest_digest(staging)
    if digest != FSDD_MANIFEST_SHA256:
        raise DataError(f"the FSDD download from {FSDD_URL} does not match the pinned manifest: "
                        f"expected sha256 {FSDD_MANIFEST_SHA256}, got {digest}; left in {staging}")
    staging.rename(cache)
    return cache


class FSDDData(SpectrogramData):
    """FSDD (Jackson et al.): 3000 clips of spoken digits, 6 speakers; ``test_speaker``'s 500 clips are the
    test set, validation is a stratified part of the other five speakers' clips. ``digits`` keeps the clips of
    those digits alone (every split), labelled by their place in the list, with the digits as label names.

    Args:
        test_speaker: the speaker held out for testing (one of ``FSDD_SPEAKERS``).
        val_fraction: fraction of the other speakers' clips held out for validation, stratified by digit and speaker.
        split_seed: seed of that split and of the labelled subset.
        label_fraction: in (0, 1]: the fraction of the training clips kept (stratified the same way); 1 keeps all.
        digits: the digits to keep, at least two distinct integers 0-9 (None, the default: all ten).
        **kwargs: those of :class:`SpectrogramData`."""

    def __init__(self, test_speaker: str, val_fraction: float, split_seed: int, label_fraction: float,
                 digits: list[int] | None = None, **kwargs):
        super().__init__(**kwargs)
        if test_speaker not in FSDD_SPEAKERS:
            raise DataError(f"unknown FSDD speaker {test_speaker!r}; expected one of {FSDD_SPEAKERS}")
        if not 0 < label_fraction <= 1:
            raise DataError(f"label_fraction must be in (0, 1], got {label_fraction}")
        digits = list(range(10)) if digits is None else digits
        if (not isinstance(digits, (list, tuple)) or len(digits) < 2 or len(set(digits)) != len(digits)
                or not all(type(d) is int and 0 <= d <= 9 for d in digits)):
            raise DataError(f"digits must be a list of at least two distinct FSDD digits (integers 0-9), got "
                            f"{digits!r}")
        self.test_speaker, self.val_fraction, self.split_seed = test_speaker, val_fraction, split_seed
        self.label_fraction, self.digits = label_fraction, list(digits)

    def split_items(self):
        root = find_fsdd()
        files = sorted((root / "recordings").glob("*.wav"))
        if len(files) != 3000:
            raise DataError(f"expected the 3000 FSDD recordings in {root / 'recordings'}, found {len(files)}")
        parsed = [(f, int(f.name.split("_")[0]), f.name.split("_")[1]) for f in files]  # digit_speaker_index.wav
        label = {digit: i for i, digit in enumerate(self.digits)}
        parsed = [(f, label[d], s) for f, d, s in parsed if d in label]
        test = [(f, d) for f, d, s in parsed if s == self.test_speaker]
        rest = [(f, d, s) for f, d, s in parsed if s != self.test_speaker]
        strata = np.array([d * 10 + FSDD_SPEAKERS.index(s) for _, d, s in rest])  # label x speaker
        train_idx, val_idx = stratified_split(strata, (1 - self.val_fraction, self.val_fraction), self.split_seed)
        if self.label_fraction < 1:  # a labelled subset, stratified the same way
            train_idx = train_idx[stratified_split(strata[train_idx], (self.label_fraction, 1 - self.label_fraction),
                                                   self.split_seed)[0]]
        pick = lambda idx: [(rest[i][0], rest[i][1]) for i in idx]  # noqa: E731
        self.info.update({"source": f"Free Spoken Digit Dataset, commit {FSDD_COMMIT}",
                          "license": "CC BY-SA 4.0", "test_speaker": self.test_speaker, "digits": self.digits})
        return {"train": pick(train_idx), "val": pick(val_idx), "test": test}, [str(d) for d in self.digits]


def _augment(freq_mask: int, time_mask: int, time_shift: int, noise: float, mixup: float, tilt: float,
             warp: float) -> dict[str, Any]:
    if not 0 <= warp < 1:
        raise DataError(f"warp must lie in [0, 1) (the largest relative scaling of the mel axis), got {warp}")
    return {"freq_mask": freq_mask, "time_mask": time_mask, "time_shift": time_shift, "noise": noise, "mixup": mixup,
            "tilt": tilt, "warp": warp}


@register_dataset(task="classification")
def fsdd(batch_size: int = 32, num_workers: int = 0, seed: int = 0, test_speaker: str = "theo",
         val_fraction: float = 0.1, split_seed: int = 0, label_fraction: float = 1.0, target_frames: int = 100,
         freq_mask: int = 0, time_mask: int = 0, time_shift: int = 0, noise: float = 0.0, mixup: float = 0.0,
         pretext: bool = False, lifter: int | None = None, time_fit: str = "cut", tilt: float = 0.0,
         trim_db: float | None = None, warp: float = 0.0, digits: list[int] | None = None) -> FSDDData:
    """Free Spoken Digit Dataset at 16 kHz, one speaker held out for test; ``pretext`` drops the labels;
    ``tilt`` and ``warp`` as in :class:`SpectrogramAugment`; ``lifter`` smooths the log-mels along frequency
    (:func:`audio.features.log_mel`); ``trim_db`` trims quiet leading/trailing frames
    (:func:`audio.features.trim_silence`); ``time_fit`` cuts/pads or stretches clips to ``target_frames``
    (:func:`audio.features.fit_frames`); ``digits`` keeps those digits' clips alone (default all ten; labelled in
    the list's order, :class:`FSDDData`)."""
    return FSDDData(test_speaker, val_fraction, split_seed, label_fraction, digits, batch_size=batch_size,
                    num_workers=num_workers, seed=seed, target_frames=target_frames, mean=None, std=None,
                    augment=_augment(freq_mask, time_mask, time_shift, noise, mixup, tilt, warp), pretext=pretext,
                    lifter=lifter, time_fit=time_fit, trim_db=trim_db)


class AudioFolderData(SpectrogramData):
    """A user's folder of WAV/FLAC files, one sub-folder per class: ``root/<class>/*`` split stratified into
    train/val/test, or ``root/train/<class>/*`` with optional ``val/`` and ``test/`` folders (e.g. other speakers;
    a missing one is a stratified part of train/), as :func:`hub.data.class_folder_splits` reads them.

    Args:
        root: the folder.
        split_seed: seed of the stratified splits.
        val_fraction: fraction of the clips held out for validation (when there is no ``val/`` folder).
        test_fraction: fraction of the clips held out for testing (when there is no ``test/`` folder).
        cv_fold: ``[k, index, seed]``: train on the other k-1 folds of the clips outside the test split and validate
            on fold ``index`` (:func:`hub.data.folded_splits`; finetune's cross-validated choice).
        refit: train on every clip, test included (that choice's refit).
        groups: a regular expression that reads each clip's group (speaker, recording session) from its file name
            (:func:`hub.data.file_groups`): splits carved and folds keep a group whole. None: clips independent.
        **kwargs: those of :class:`SpectrogramData`."""

    def __init__(self, root: str, split_seed: int, val_fraction: float, test_fraction: float,
                 cv_fold: list[int] | None = None, refit: bool = False, groups: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.root, self.split_seed = Path(root), split_seed
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.cv_fold, self.refit, self.groups = cv_fold, refit, groups

    def split_items(self):
        splits, classes = class_folder_splits(self.root, scan_audio_folder, self.val_fraction, self.test_fraction,
                                              self.split_seed, self.groups)
        splits, said = folded_splits(splits, self.cv_fold, self.refit, self.groups)
        self.info.update({"source": str(self.root), "license": "the user's data", "split": said})
        return splits, classes


@register_dataset(task="classification")
def audio_folder(root: str, target_frames: int = 100, mean: float | None = None, std: float | None = None,
                 batch_size: int = 32, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                 val_fraction: float = 0.15, test_fraction: float = 0.15, freq_mask: int = 24, time_mask: int = 20,
                 time_shift: int | None = None, noise: float = 0.1, mixup: float = 0.0,
                 lifter: int | None = None, time_fit: str = "cut", tilt: float = 0.0,
                 trim_db: float | None = None, warp: float = 0.0, cv_fold: list[int] | None = None,
                 refit: bool = False, groups: str | None = None) -> AudioFolderData:
    """A folder of WAV/FLAC files (any rate, mono or stereo), one sub-folder per class, maybe in train/ [val/ test/]
    (:class:`AudioFolderData`); mean/std default to the training split's; ``tilt`` and ``warp`` as in
    :class:`SpectrogramAugment`, ``lifter`` as in
    :func:`audio.features.log_mel`, ``trim_db`` as in :func:`audio.features.trim_silence`, ``time_fit`` as in
    :func:`audio.features.fit_frames`. ``time_shift`` (a random roll of up to that many frames) defaults to 10 for
    cut clips and 0 for stretched ones, where the word fills every frame and a roll would wrap its end round to its
    start (``docs/experiments/2026-12-audio-fsdd.md``). ``cv_fold`` and ``refit``: the fold runs and the refit of
    finetune's cross-validated choice; ``groups``: the file-name pattern of each clip's group (speaker)
    (:class:`AudioFolderData`)."""
    if time_shift is None:
        time_shift = 10 if time_fit == "cut" else 0
    return AudioFolderData(root, split_seed, val_fraction, test_fraction, cv_fold, refit, groups, batch_size=batch_size,
                           num_workers=num_workers, seed=seed, target_frames=target_frames, mean=mean, std=std,
                           augment=_augment(freq_mask, time_mask, time_shift, noise, mixup, tilt, warp), lifter=lifter,
                           time_fit=time_fit, trim_db=trim_db)
