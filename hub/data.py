"""Data modules shared by the domains: the base class, splits and a resumable shuffling sampler.

A :class:`HubDataModule` knows its task, classes and input spec before training starts, so bad
data fails before any long work and the run's model card can say what the model expects.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from hub.datafiles import (  # noqa: F401  (re-exported: hub.data was their home)
    data_dir,
    dataset_file,
    download_dir,
    local_copy,
    read_csv_frame,
    read_csv_rows,
    row_numbers,
    scan_class_folders,
)
from hub.errors import DataError


class EpochSampler(Sampler):
    """A random permutation drawn from ``(seed, epoch)`` only, so a resumed run sees the same order.

    Lightning calls ``set_epoch`` on samplers that have it. With ``with_epoch=True`` it yields
    ``(index, epoch)`` pairs, for datasets whose random augmentation is seeded by them
    (:class:`EpochSeededDataset`): then augmentation does not depend on the global RNG, which Lightning
    and the data loader consume at points that differ between a fresh and a resumed epoch.
    """

    def __init__(self, num_samples: int, seed: int = 0, with_epoch: bool = False):
        self.num_samples = num_samples
        self.seed = seed
        self.with_epoch = with_epoch
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(self.num_samples, generator=generator).tolist()
        return iter([(i, self.epoch) for i in order] if self.with_epoch else order)

    def __len__(self) -> int:
        return self.num_samples


class EpochSeededDataset(Dataset):
    """Base for training sets with random augmentation: item ``(index, epoch)`` gets its own generator,
    seeded by ``(seed, epoch, index)``, so a resumed run augments exactly as an uninterrupted one."""

    seed: int = 0

    def __getitem__(self, key):
        index, epoch = key if isinstance(key, tuple) else (key, 0)
        generator = torch.Generator().manual_seed(hash((self.seed, epoch, index)) % 2**62)
        return self.augmented_item(index, generator)

    def augmented_item(self, index: int, generator: torch.Generator):
        raise NotImplementedError


def stratified_split(labels: np.ndarray, fractions: tuple[float, ...], seed: int,
                     source: str | None = None) -> list[np.ndarray]:
    """Split indices into parts with the given fractions, stratified by label (the last part takes the rest).
    ``source`` (the user's file or folder) starts every error message, so the user knows which data is short."""
    from sklearn.model_selection import train_test_split

    labels = np.asarray(labels)
    where = f"{source}: " if source else ""
    counts = np.bincount(labels) if labels.dtype.kind in "iu" else None
    if counts is not None and (counts[counts > 0] < len(fractions)).any():
        rare = [int(c) for c in np.flatnonzero((counts > 0) & (counts < len(fractions)))]
        raise DataError(f"{where}classes {rare} have fewer than {len(fractions)} samples: cannot make a stratified "
                        f"{'/'.join(str(f) for f in fractions)} split")
    index = np.arange(len(labels))
    parts = []
    remaining = 1.0
    for fraction in fractions[:-1]:
        try:
            take, index = train_test_split(index, train_size=fraction / remaining, stratify=labels[index],
                                           random_state=seed)
        except ValueError as err:  # a part smaller than the number of classes
            raise DataError(f"{where}{len(labels)} samples of {len(np.unique(labels))} classes are too few for a "
                            f"stratified {'/'.join(str(f) for f in fractions)} split ({err}); add samples") from None
        parts.append(np.sort(take))
        remaining -= fraction
    parts.append(np.sort(index))
    return parts


def grouped_split(groups: np.ndarray, fractions: tuple[float, ...], seed: int) -> list[np.ndarray]:
    """Split indices into parts of about the given fractions of the items, whole groups to a part (no group in two
    parts: a patient's, unit's or speaker's items all train, or all validate, or all test). The groups are shuffled
    by ``seed`` and dealt in turn to the part furthest below its share; every part gets at least one group.
    Shapes: groups (N,) -> parts of indices, sorted."""
    groups = np.asarray(groups)
    names, of_item, sizes = np.unique(groups, return_inverse=True, return_counts=True)
    if len(names) < len(fractions):
        raise DataError(f"{len(names)} groups cannot make a {'/'.join(str(f) for f in fractions)} split by group: "
                        f"expected at least {len(fractions)}")
    order = np.random.default_rng(seed).permutation(len(names))
    share = np.asarray(fractions, dtype=np.float64) * len(groups)
    filled = np.zeros(len(fractions))
    part_of = np.empty(len(names), dtype=np.int64)
    for step, g in enumerate(order):
        part = step if step < len(fractions) else int(np.argmax(share - filled))
        part_of[g] = part
        filled[part] += sizes[g]
    return [np.flatnonzero(part_of[of_item] == part) for part in range(len(fractions))]


def file_groups(files: list[Path], pattern: str) -> np.ndarray:
    """Each file's group, read from its name by the regular expression ``pattern`` (its first group where it has
    one, else the whole match), e.g. ``^\\d+_([a-z]+)_`` for the speaker of FSDD's ``3_jackson_12.wav``. A name
    it does not match raises, naming the file. Shapes: -> (len(files),) of str."""
    import re

    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise DataError(f"groups {pattern!r} is not a regular expression ({err}); expected one whose first group "
                        "in a file's name is its group, e.g. '^\\d+_([a-z]+)_'") from None
    found = []
    for file in files:
        match = compiled.search(Path(file).name)
        if match is None:
            raise DataError(f"{file}: its name does not match the groups pattern {pattern!r}; every file needs a "
                            "group")
        found.append(match.group(1) if compiled.groups else match.group(0))
    return np.array(found, dtype=str)


SPLITS = ("train", "val", "test")


def split_keeping_rare(labels: np.ndarray, fractions: tuple[float, ...], seed: int, source: str,
                       label_names: list[str]) -> list[np.ndarray]:
    """:func:`stratified_split` of the items whose class has at least one item per part; a class with fewer stays
    whole in the first part (training), with a WARNING naming it: never dropped, never an error (issue 68)."""
    import logging

    labels = np.asarray(labels)
    counts = np.bincount(labels, minlength=len(label_names))
    rare = np.flatnonzero((counts > 0) & (counts < len(fractions)))
    kept = ~np.isin(labels, rare)
    if len(rare):
        named = ", ".join(f"{label_names[i]!r} ({int(counts[i])})" for i in rare.tolist())
        logging.getLogger(__name__).warning(
            f"{source}: class(es) {named} have fewer than the {len(fractions)} items a stratified split in "
            f"{len(fractions)} parts needs; they stay in training (not validated or tested)")
    parts = [np.flatnonzero(kept)[p] for p in stratified_split(labels[kept], fractions, seed, source=source)]
    parts[0] = np.sort(np.concatenate([parts[0], np.flatnonzero(~kept)]))
    return parts


def class_folder_splits(root: Path, scan: Callable[[Path], dict[str, list[Path]]], val_fraction: float,
                        test_fraction: float, split_seed: int,
                        groups: str | None = None) -> tuple[dict[str, list[tuple[Path, int]]], list[str]]:
    """The ``(file, class index)`` items of the train, val and test splits of a user's folder of class folders, and
    the class names (sorted), for any file type: ``scan(folder)`` lists the files of each class folder of ``folder``.

    Either ``root/train/<class>/*`` with ``root/val/<class>/*`` and ``root/test/<class>/*`` where the user gives them
    (e.g. a test set of other speakers or an official test split), a missing one taken as a stratified part of
    ``train/`` (``val_fraction``, ``test_fraction`` of it); or ``root/<class>/*``, split stratified into
    train/val/test. Every split must hold the classes of ``train/``. With ``groups`` (a pattern of
    :func:`file_groups`) the parts carved are whole groups (:func:`grouped_split`), not stratified.
    """
    fractions = {"val": val_fraction, "test": test_fraction}
    if not (root / "train").is_dir():
        found = scan(root)
        classes = sorted(found)
        items = [(f, i) for i, c in enumerate(classes) for f in found[c]]
        parts = _carve(items, (1 - val_fraction - test_fraction, val_fraction, test_fraction), split_seed,
                       str(root), classes, groups)
        return {s: [items[i] for i in part] for s, part in zip(SPLITS, parts)}, classes
    found = {s: scan(root / s) for s in SPLITS if (root / s).is_dir()}
    classes = sorted(found["train"])
    for split, folders in found.items():
        if sorted(folders) != classes:
            raise DataError(f"{root / split} has classes {sorted(folders)} but {root / 'train'} has {classes}")
    splits = {s: [(f, i) for i, c in enumerate(classes) for f in folders[c]] for s, folders in found.items()}
    carved = [s for s in SPLITS[1:] if s not in splits]
    if carved:
        train = splits["train"]
        parts = _carve(train, (1 - sum(fractions[s] for s in carved), *(fractions[s] for s in carved)), split_seed,
                       str(root / "train"), classes, groups)
        splits.update({s: [train[i] for i in part] for s, part in zip(("train", *carved), parts)})
    return splits, classes


def _carve(items: list[tuple[Path, int]], fractions: tuple[float, ...], seed: int, source: str, classes: list[str],
           groups: str | None) -> list[np.ndarray]:
    """The parts of ``items`` of :func:`class_folder_splits`: stratified keeping rare classes, or by group."""
    if groups is not None:
        return grouped_split(file_groups([f for f, _ in items], groups), fractions, seed)
    return split_keeping_rare(np.array([label for _, label in items]), fractions, seed, source, classes)


def folded_splits(splits: dict[str, list[tuple[Path, int]]], cv_fold: list[int] | None = None,
                  refit: bool = False, groups: str | None = None) -> tuple[dict[str, list[tuple[Path, int]]], str]:
    """A folder's ``(file, class index)`` splits as ``finetune``'s cross-validated choice trains on them
    (:mod:`hub.crossval`), and what the split is, in words: with ``cv_fold`` ``[k, index, seed]``, the items of
    train and val (in that order: the folded items) split by :func:`hub.crossval.fold_indices`, training on the
    other k-1 folds and validating on fold ``index``; with ``refit``, every item trains, test included (the
    validation and test figures are then in-sample). Neither: the splits as they are. With ``groups`` (a pattern
    of :func:`file_groups`) no group is split between folds."""
    by = f", grouped by the file names' '{groups}'" if groups else ""
    said = f"the folder's train/val/test split{by}"
    if cv_fold is not None:
        from hub.crossval import fold_indices

        k, index, seed = (int(v) for v in cv_fold)
        pool = splits["train"] + splits["val"]
        fit, held = fold_indices("classification", np.array([label for _, label in pool]),
                                 None if groups is None else file_groups([f for f, _ in pool], groups), k=k,
                                 seed=seed, warn=lambda line: None)[index]
        splits = {"train": [pool[i] for i in fit], "val": [pool[i] for i in held], "test": splits["test"]}
        said = f"fold {index} of {k} (seed {seed}) of the items outside the test split{by}"
    if refit:
        splits = {**splits, "train": splits["train"] + splits["val"] + splits["test"]}
        said += "; refit: every item trains (validation and test figures in-sample)"
    return splits, said


class HubDataModule(pl.LightningDataModule):
    """Base data module. Subclasses fill the datasets in ``setup`` and set the attributes below.

    Attributes (known after ``setup()``): ``task`` (a :mod:`hub.tasks` name), ``num_classes``,
    ``label_names``, ``output_names`` (of a regression or forecast model's outputs, in order: what ``predict``
    writes as its header), ``input_spec`` (what predict-time inputs must look like), ``info``
    (source and licence of the data; no path of the machine, as it goes into model cards).
    """

    task: str = "classification"

    def __init__(self, batch_size: int = 64, num_workers: int = 0, seed: int = 0):
        super().__init__()
        self.batch_size = batch_size
        self.num_workers = num_workers
        self.seed = seed
        self.num_classes: int | None = None
        self.label_names: list[str] = []
        self.output_names: list[str] = []
        self.input_spec: dict[str, Any] = {}
        self.info: dict[str, Any] = {}
        self.train_set: Dataset | None = None
        self.val_set: Dataset | None = None
        self.test_set: Dataset | None = None

    def _loader(self, dataset: Dataset | None, train: bool) -> DataLoader:
        if dataset is None:
            raise DataError(f"{type(self).__name__} has no {'training' if train else 'evaluation'} split")
        return DataLoader(
            dataset, batch_size=self.batch_size, num_workers=self.num_workers,
            sampler=EpochSampler(len(dataset), self.seed, isinstance(dataset, EpochSeededDataset)) if train else None,
            persistent_workers=self.num_workers > 0, pin_memory=torch.cuda.is_available(),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, train=True)

    def statistics_dataloader(self) -> DataLoader:
        """The training split as the OOD statistics (:mod:`hub.uncertainty.ood`) read it: its items as evaluated,
        without the training augmentation where the data can give them (a subclass says so); by default the training
        loader."""
        return self.train_dataloader()

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, train=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_set, train=False)

    def task_args(self) -> dict[str, Any]:
        return {"num_classes": self.num_classes}

    def callbacks(self, model: torch.nn.Module) -> list[pl.Callback]:
        """Lightning callbacks the data brings to the training of ``model`` (known after ``setup()``), e.g. a
        pre-training on its unlabelled rows before the first epoch; raises DataError if ``model`` cannot take them."""
        return []

    def model_args(self) -> dict[str, Any]:
        """Model builder arguments the data decides (e.g. ``{"in_channels": 1433}``), injected by training
        into builders that accept them; ``num_classes`` is injected the same way."""
        return {"num_classes": self.num_classes} if self.num_classes is not None else {}
