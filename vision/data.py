"""Image datasets for recipes: scikit-learn's digits (the embedded quickstart set), user image folders,
CIFAR-10 (Krizhevsky, 2009), BreastMNIST (MedMNIST v2, Yang et al., 2023), the generated multi-object scenes
(:mod:`vision.shapes`) and user folders of unlabelled scenes for slot autoencoders.

Every image model's card carries an ``input_spec`` of kind ``"image"`` (height, width, channels,
mean, std); predict-time files are converted to it (grey/RGB and size are documented conversions).

CIFAR-10 is read from ``HUB_DATA_DIR/cifar10`` (ImageFolder layout: ``train/<class>/*.jpg``, a
balanced 20k subset, and the full 10k ``test``). Without a local copy, torchvision downloads the
canonical archive (https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz) into the cache and
checks its MD5, the checksum the dataset's authors publish. BreastMNIST is the official
``breastmnist.npz`` (28x28 grey ultrasound, benign/normal vs malignant) with its own split.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset
from torchvision import datasets as tv_datasets

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
from vision.io import IMAGE_SUFFIXES, _scan_class_folders, image_pixels, image_spec, read_image
from vision.resident import BatchAugment, ResidentImages, decode_images
from vision.shapes import MultiShapes

CIFAR_MEAN, CIFAR_STD = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]


class ShiftAugment(EpochSeededDataset):
    """Random translation by up to ``max_shift`` pixels (padded with the image minimum, the background),
    seeded per (epoch, index).

    Args:
        images: the normalised training images (N, C, H, W).
        labels: their labels (N,).
        max_shift: largest shift in pixels, along each axis and either way (0: no shift).
        seed: seed of the draws; item i of epoch e draws from ``(seed, e, i)``."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, max_shift: int, seed: int):
        self.images, self.labels, self.max_shift, self.seed = images, labels, max_shift, seed

    def __len__(self) -> int:
        return len(self.labels)

    def augmented_item(self, index: int, generator: torch.Generator):
        image = self.images[index]  # (C, H, W)
        s = self.max_shift
        if s:
            padded = F.pad(image, (s, s, s, s), value=float(image.min()))
            dy, dx = torch.randint(0, 2 * s + 1, (2,), generator=generator).tolist()
            image = padded[:, dy:dy + image.shape[1], dx:dx + image.shape[2]]
        return image, self.labels[index]


class DigitsData(HubDataModule):
    """scikit-learn's 1,797 handwritten digits (8x8, 17 grey levels) with a stratified split.

    Args:
        batch_size: images per batch (default 64).
        num_workers: DataLoader worker processes (default 0: the main process).
        seed: seed of the training order and shifts (default 0).
        split_seed: seed of the stratified split (default 0).
        val_fraction: fraction of the images held out for validation (default 0.1).
        test_fraction: fraction held out for testing (default 0.2).
        max_shift: random translation of the training images by up to this many pixels (default 0: none)."""

    def __init__(self, batch_size: int = 64, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                 val_fraction: float = 0.1, test_fraction: float = 0.2, max_shift: int = 0):
        super().__init__(batch_size, num_workers, seed)
        self.split_seed, self.val_fraction, self.test_fraction = split_seed, val_fraction, test_fraction
        self.max_shift = max_shift

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        from sklearn.datasets import load_digits

        digits = load_digits()
        images = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)  # (N, 1, 8, 8) in [0, 1]
        images = (images - 0.5) / 0.5
        labels = torch.tensor(digits.target, dtype=torch.long)
        train_fraction = 1.0 - self.val_fraction - self.test_fraction
        train, val, test = stratified_split(digits.target, (train_fraction, self.val_fraction, self.test_fraction),
                                            self.split_seed)
        self.train_set = ShiftAugment(images[train], labels[train], self.max_shift, self.seed)
        self.val_set = TensorDataset(images[val], labels[val])
        self.test_set = TensorDataset(images[test], labels[test])
        self.num_classes = 10
        self.label_names = [str(d) for d in range(10)]
        self.input_spec = image_spec(8, 8, 1, [0.5], [0.5])
        self.info = {"source": "scikit-learn load_digits (UCI optical recognition of handwritten digits, test part)",
                     "license": "CC BY 4.0 (UCI ML repository)", "sizes": [len(train), len(val), len(test)]}


@register_dataset(task="classification")
def sklearn_digits(batch_size: int = 64, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                   val_fraction: float = 0.1, test_fraction: float = 0.2, max_shift: int = 0) -> DigitsData:
    """scikit-learn's digits: 8x8 grey images of 10 digits, stratified 70/10/20 split."""
    return DigitsData(batch_size, num_workers, seed, split_seed, val_fraction, test_fraction, max_shift)


# The image folders' augmentation presets (``data.args.augment``), applied a batch at a time (:mod:`vision.resident`)
AUGMENTATIONS = {
    "none": None,
    "light": BatchAugment(crop_scale=(0.6, 1.0)),  # random resized crops of 60-100% of the area, flips
    "randaugment": BatchAugment(crop_scale=(0.6, 1.0), randaugment=True),  # ... and RandAugment (2 ops, m9)
}


def augmentation(name: str) -> BatchAugment | None:
    if name not in AUGMENTATIONS:
        raise DataError(f"data.args.augment must be one of {tuple(AUGMENTATIONS)}, got {name!r}")
    return AUGMENTATIONS[name]


class ResidentImageData(HubDataModule):
    """Base of the image data modules whose splits are :class:`~vision.resident.ResidentImages`: every loader
    indexes batches out of uint8 tensors held in memory; the training loader keeps its tensor on the trainer's
    device (the GPU when training there) and augments each batch there with ``self.augment``."""

    augment: BatchAugment | None = None

    def train_dataloader(self):
        trainer = getattr(self, "trainer", None)
        device = trainer.strategy.root_device if trainer is not None else None
        return self.train_set.batches(self.batch_size, self.augment, shuffle=True, seed=self.seed, device=device)

    def statistics_dataloader(self):
        """The training split unaugmented, in a seeded shuffled order: the OOD statistics fit on its first
        ``hub.uncertainty.ood.MAX_FIT_ITEMS`` items, which must hold every class (the split itself is sorted by
        class)."""
        return self.train_set.batches(self.batch_size, shuffle=True, seed=0)

    def val_dataloader(self):
        return self.val_set.batches(self.batch_size)

    def test_dataloader(self):
        return self.test_set.batches(self.batch_size)


def decode_split(items: list[tuple[Path, int]], spec: dict[str, Any], progress: bool = True) -> ResidentImages:
    """The ``(file, label)`` items of a split decoded into memory (cached: :func:`vision.resident.decode_images`)."""
    files = [f for f, _ in items]
    return ResidentImages(decode_images(files, spec, progress), [label for _, label in items], spec["mean"],
                          spec["std"], files)


class ImageFolderData(ResidentImageData):
    """A user's image folder: ``root/train/<class>/*`` with optional ``root/val/<class>/*`` and
    ``root/test/<class>/*`` (a missing one is a stratified part of train/), or ``root/<class>/*`` split stratified
    into train/val/test (:func:`hub.data.class_folder_splits`). The images are decoded once at the model's size
    (cached) and augmented a batch at a time (:data:`AUGMENTATIONS`).

    Args:
        root: the folder.
        height: image height the images are resized to (the model's input).
        width: image width, likewise.
        channels: 1 (grey) or 3 (RGB); images are converted to it.
        mean: per-channel normalisation mean (``channels`` values).
        std: per-channel normalisation std.
        batch_size: images per batch (default 32).
        num_workers: not used: the images are decoded once and held in memory (kept so older recipes load).
        seed: seed of the training order and augmentation (default 0).
        split_seed: seed of the stratified splits (default 0).
        val_fraction: fraction of train/ held out for validation when there is no val/ folder (default 0.15).
        test_fraction: fraction held out for testing when there is no test/ folder (default 0.15).
        augment: the training batches' augmentation: ``"none"``, ``"light"`` (random resized crops and flips,
            default) or ``"randaugment"`` (light + RandAugment).
        cv_fold: ``[k, index, seed]``: train on the other k-1 folds of the images outside the test split and
            validate on fold ``index`` (:func:`hub.data.folded_splits`; finetune's cross-validated choice).
        refit: train on every image, test included (that choice's refit).
        groups: a regular expression that reads each image's group (patient, camera, site) from its file name
            (:func:`hub.data.file_groups`): splits carved and folds keep a group whole. None: images independent."""

    def __init__(self, root: str, height: int, width: int, channels: int, mean: list[float], std: list[float],
                 batch_size: int = 32, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                 val_fraction: float = 0.15, test_fraction: float = 0.15, augment: str = "light",
                 cv_fold: list[int] | None = None, refit: bool = False, groups: str | None = None):
        super().__init__(batch_size, num_workers, seed)
        self.root = Path(root)
        self.augment = augmentation(augment)  # a bad name fails now
        self.input_spec = image_spec(height, width, channels, mean, std)
        self.split_seed, self.val_fraction, self.test_fraction = split_seed, val_fraction, test_fraction
        self.cv_fold, self.refit, self.groups = cv_fold, refit, groups

    def split_items(self) -> tuple[dict[str, list[tuple[Path, int]]], list[str]]:
        """The ``(file, class index)`` items of train, val and test, as ``cv_fold`` and ``refit`` make them, and
        the class names."""
        sets, classes = class_folder_splits(self.root, _scan_class_folders, self.val_fraction, self.test_fraction,
                                            self.split_seed, self.groups)
        sets, self.split = folded_splits(sets, self.cv_fold, self.refit, self.groups)
        return sets, classes

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        sets, classes = self.split_items()
        if len(classes) < 2:
            raise DataError(f"{self.root} has a single class {classes}; classification needs at least 2 class folders")
        read_image(sets["train"][0][0], self.input_spec)  # fail now, with the file's name, on an unreadable file
        self.train_set, self.val_set, self.test_set = (decode_split(sets[s], self.input_spec)
                                                       for s in ("train", "val", "test"))
        self.num_classes = len(classes)
        self.label_names = classes
        self.info = {"source": str(self.root), "license": "the user's data", "split": self.split,
                     "sizes": [len(sets[s]) for s in ("train", "val", "test")]}


@register_dataset(task="classification")
def image_folder(root: str, height: int, width: int, channels: int = 3, mean: list[float] = (0.5,) * 3,
                 std: list[float] = (0.5,) * 3, batch_size: int = 32, num_workers: int = 0, seed: int = 0,
                 split_seed: int = 0, val_fraction: float = 0.15, test_fraction: float = 0.15,
                 augment: str = "light", cv_fold: list[int] | None = None, refit: bool = False,
                 groups: str | None = None) -> ImageFolderData:
    """A folder of images, one sub-folder per class (optionally under train/ [val/ test/]); decoded once into
    memory, training batches augmented on the device (``augment``: none, light = random resized crops + flips,
    randaugment = light + RandAugment). ``num_workers`` is not used (kept so older recipes load). ``cv_fold`` and
    ``refit``: the fold runs and the refit of finetune's cross-validated choice; ``groups``: the file-name pattern
    of each image's group (:class:`ImageFolderData`)."""
    return ImageFolderData(root, height, width, channels, list(mean), list(std), batch_size, num_workers, seed,
                           split_seed, val_fraction, test_fraction, augment, cv_fold, refit, groups)


class SceneFolderData(ResidentImageData):
    """A user's folder of unlabelled images (searched recursively) for fine-tuning a slot autoencoder by
    reconstruction: resized to ``size`` x ``size`` RGB in [-1, 1] (the model's input), split at random by
    ``split_seed`` into train/val/test. Items are ``(image, 0)``: there are no instance masks, so the task
    scores nothing and the epoch is picked on the validation reconstruction loss.

    Args:
        root: the folder.
        size: side of the square images (default 64).
        batch_size: images per batch (default 32).
        num_workers: not used: the images are decoded once and held in memory.
        seed: seed of the training order (default 0).
        split_seed: seed of the random split (default 0).
        val_fraction: fraction of the images held out for validation (at least one image; default 0.1).
        test_fraction: fraction held out for testing (at least one image; default 0.1)."""

    task = "object_discovery"

    def __init__(self, root: str, size: int = 64, batch_size: int = 32, num_workers: int = 0, seed: int = 0,
                 split_seed: int = 0, val_fraction: float = 0.1, test_fraction: float = 0.1):
        super().__init__(batch_size, num_workers, seed)
        self.root, self.size = Path(root), size
        self.split_seed, self.val_fraction, self.test_fraction = split_seed, val_fraction, test_fraction
        self.input_spec = {**image_spec(size, size, 3, [0.5] * 3, [0.5] * 3), "kind": "scene"}

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        if not self.root.is_dir():
            raise DataError(f"image folder {self.root} does not exist or is not a folder")
        files = sorted(f for f in self.root.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES)
        num_val, num_test = (max(1, round(len(files) * f)) for f in (self.val_fraction, self.test_fraction))
        if len(files) < num_val + num_test + 2:
            raise DataError(f"{self.root} holds {len(files)} images ({', '.join(IMAGE_SUFFIXES)}); fine-tuning a slot "
                            f"autoencoder needs at least {num_val + num_test + 2} (train, val and test)")
        read_image(files[0], self.input_spec)  # fail now, not mid-epoch, on an unreadable first file
        order = np.random.default_rng(self.split_seed).permutation(len(files))
        parts = np.split(order, [len(files) - num_val - num_test, len(files) - num_test])
        self.train_set, self.val_set, self.test_set = (
            decode_split([(files[i], 0) for i in part], self.input_spec) for part in parts)
        self.info = {"source": str(self.root), "license": "the user's data",
                     "sizes": [len(part) for part in parts]}

    def task_args(self):
        return {"scored": False}

    def model_args(self):
        return {"img_size": self.size}


@register_dataset(task="object_discovery")
def scene_folder(root: str, size: int = 64, batch_size: int = 32, num_workers: int = 0, seed: int = 0,
                 split_seed: int = 0, val_fraction: float = 0.1, test_fraction: float = 0.1) -> SceneFolderData:
    """A folder of unlabelled images for slot autoencoders, split at random into train/val/test."""
    return SceneFolderData(root, size, batch_size, num_workers, seed, split_seed, val_fraction, test_fraction)


class MultiShapesData(HubDataModule):
    """Generated multi-object scenes for object discovery (task ``object_discovery``: no labels; the
    instance masks are only used to score the slots' masks).

    Args:
        train_size: scenes in the training split (default 20,000).
        val_size: scenes in the validation split (default 500).
        test_size: scenes in the test split (default 1,000).
        size: side of the square scenes in pixels (at least 16; default 64).
        min_objects: fewest sprites per scene (at least 1; default 2).
        max_objects: most sprites per scene (default 6).
        split_seed: seed of the scenes: scene i of a split is drawn from ``(split_seed, split, i)`` (default 0).
        batch_size: scenes per batch (default 64).
        num_workers: DataLoader worker processes (default 0: the main process).
        seed: seed of the training order (default 0)."""

    task = "object_discovery"

    def __init__(self, train_size: int = 20_000, val_size: int = 500, test_size: int = 1_000, size: int = 64,
                 min_objects: int = 2, max_objects: int = 6, split_seed: int = 0, batch_size: int = 64,
                 num_workers: int = 0, seed: int = 0):
        super().__init__(batch_size, num_workers, seed)
        if not 1 <= min_objects <= max_objects:
            raise DataError(f"data.args needs 1 <= min_objects <= max_objects, got {min_objects} and {max_objects}")
        if size < 16:
            raise DataError(f"data.args.size must be at least 16 pixels, got {size}")
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.scene = {"size": size, "min_objects": min_objects, "max_objects": max_objects, "split_seed": split_seed}

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        self.train_set, self.val_set, self.test_set = (MultiShapes(self.sizes[s], s, **self.scene)
                                                        for s in ("train", "val", "test"))
        size = self.scene["size"]
        self.input_spec = {**image_spec(size, size, 3, [0.5] * 3, [0.5] * 3), "kind": "scene"}
        self.info = {"source": "generated by vision.shapes.render_scene (2-6 sprites per scene, Multi-dSprites-like)",
                     "license": "generated data, no licence needed", "sizes": list(self.sizes.values())}

    def task_args(self):
        return {}

    def model_args(self):
        return {"img_size": self.scene["size"]}


@register_dataset(task="object_discovery")
def multi_shapes(train_size: int = 20_000, val_size: int = 500, test_size: int = 1_000, size: int = 64,
                 min_objects: int = 2, max_objects: int = 6, split_seed: int = 0, batch_size: int = 64,
                 num_workers: int = 0, seed: int = 0) -> MultiShapesData:
    """Generated scenes of 2-6 coloured sprites on grey (Multi-dSprites-like), with instance masks for scoring."""
    return MultiShapesData(train_size, val_size, test_size, size, min_objects, max_objects, split_seed, batch_size,
                           num_workers, seed)


CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR_LOCAL_SOURCE = "CIFAR-10, HUB_DATA_DIR/cifar10 (JPEG ImageFolder copy of the official splits)"
CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR_SUBSET_PER_CLASS = 2000  # train/ of the local copy: the first 2000 images of each class (PROVENANCE.md)


def _class_files(folder: Path) -> dict[str, list[Path]]:
    """A split of the local CIFAR-10 copy (``folder/<class>/*.jpg``) -> image files per class, read as a user's
    image folder is (:func:`vision.io._scan_class_folders`)."""
    return _scan_class_folders(folder)


def _array_images(pixels: np.ndarray, spec: dict[str, Any]) -> torch.Tensor:
    """uint8 ``(N, H, W[, C])`` arrays -> uint8 ``(N, C, H, W)`` at ``spec``'s size and channels (converted as at
    predict time, :func:`vision.io.image_pixels`; arrays of the spec's shape are taken as they are)."""
    h, w, c = spec["height"], spec["width"], spec["channels"]
    if pixels.shape[1:3] == (h, w) and (pixels.shape[3:] or (1,))[0] == c:  # already the spec's pixels
        return torch.from_numpy(np.ascontiguousarray(pixels.reshape(len(pixels), h, w, c))).permute(0, 3, 1, 2)
    return torch.stack([torch.from_numpy(image_pixels(p, spec)).permute(2, 0, 1) for p in pixels])


class Cifar10Data(ResidentImageData):
    """CIFAR-10 held in memory: the local copy (``HUB_DATA_DIR/cifar10``) or torchvision's download, a stratified
    validation part carved from train; see :func:`cifar10`.

    Args:
        batch_size: images per batch.
        num_workers: not used: the images are decoded once and held in memory (kept so older recipes load).
        seed: seed of the training order and augmentation.
        split_seed: seed of the validation split and of ``train_subset``.
        val_fraction: fraction of the training images held out for validation, stratified by class.
        img_size: side the images are resized to (32: as stored).
        augment: flips and translations of the training batches, plus a cutout square when ``cutout`` > 0.
        train_subset: keep this many of the remaining training images, drawn at random (None: all).
        full_train: all 50,000 official training images; False: the 20,000 of the local ``train/`` (2,000 per class).
        translate: largest translation in pixels when ``augment`` (reflect padding).
        cutout: side of the cutout square when ``augment`` (0: none).
        classes: keep only these class names, labelled in this order (None: all ten)."""

    def __init__(self, batch_size: int, num_workers: int, seed: int, split_seed: int, val_fraction: float,
                 img_size: int, augment: bool, train_subset: int | None, full_train: bool, translate: int,
                 cutout: int, classes: list[str] | None):
        super().__init__(batch_size, num_workers, seed)
        self.classes = list(classes) if classes else None
        self.split_seed, self.val_fraction, self.img_size = split_seed, val_fraction, img_size
        self.train_subset, self.full_train = train_subset, full_train
        self.augment = BatchAugment(translate=translate, cutout=cutout) if augment else None

    def _local(self, root: Path, spec: dict[str, Any]):
        folders = ["train", "train_rest"] if self.full_train else ["train"]
        if self.full_train and not (root / "train_rest").is_dir():
            raise DatasetUnavailable("cifar10", f"data.args.full_train needs all 50,000 training images: {root} has "
                                                "train/ but no train_rest/ (see its PROVENANCE.md)")
        splits = {"train": [_class_files(root / f) for f in folders], "test": [_class_files(root / "test")]}
        classes = sorted(splits["train"][0])
        items = {s: [(f, i) for found in parts for i, c in enumerate(classes) for f in found[c]]
                 for s, parts in splits.items()}
        images = {s: decode_split(items[s], spec) for s in items}
        return images["train"], images["test"], classes, CIFAR_LOCAL_SOURCE

    def _downloaded(self, root: Path, spec: dict[str, Any]):
        cache = download_dir() / "cifar10-python"
        if is_offline() and not (cache / "cifar-10-batches-py").is_dir():
            raise DatasetUnavailable("cifar10", f"CIFAR-10 is neither in {root} nor in {cache} and "
                                                "HUB_OFFLINE=1 forbids downloading")
        try:
            train = tv_datasets.CIFAR10(cache, train=True, download=True)
            test = tv_datasets.CIFAR10(cache, train=False, download=True)
        except (OSError, RuntimeError) as err:
            raise DatasetUnavailable("cifar10", f"CIFAR-10 is not in {root} (expected train/<class>/ and "
                                                f"test/<class>/ there; set HUB_DATA_DIR) and downloading "
                                                f"{CIFAR_URL} failed: {err}") from err
        labels = np.asarray(train.targets)
        keep = np.arange(len(labels)) if self.full_train else np.sort(np.concatenate(
            [np.flatnonzero(labels == c)[:CIFAR_SUBSET_PER_CLASS] for c in range(10)]))
        sets = [ResidentImages(_array_images(d.data[k], spec), np.asarray(d.targets)[k], spec["mean"], spec["std"])
                for d, k in ((train, keep), (test, np.arange(len(test.targets))))]
        return *sets, list(train.classes), f"{CIFAR_URL} (MD5-checked by torchvision)"

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        root = data_dir() / "cifar10"
        spec = image_spec(self.img_size, self.img_size, 3, CIFAR_MEAN, CIFAR_STD)
        local = (root / "train").is_dir() and (root / "test").is_dir()
        train, test, classes, source = self._local(root, spec) if local else self._downloaded(root, spec)
        if self.classes:
            train, test = (s.of_classes([classes.index(c) for c in self.classes]) for s in (train, test))
            classes = self.classes
        labels = train.labels.numpy()
        train_idx, val_idx = stratified_split(labels, (1 - self.val_fraction, self.val_fraction), self.split_seed)
        if self.train_subset:
            train_idx = np.sort(np.random.default_rng(self.split_seed).permutation(train_idx)[: self.train_subset])
        self.train_set, self.val_set = (train.subset(torch.from_numpy(i)) for i in (train_idx, val_idx))
        self.test_set = test
        self.num_classes, self.label_names = len(classes), list(classes)
        self.input_spec = spec
        self.info = {"source": source, "license": "none stated by the CIFAR-10 authors",
                     "sizes": [len(train_idx), len(val_idx), len(test)]}


@register_dataset(task="classification")
def cifar10(batch_size: int = 128, num_workers: int = 2, seed: int = 0, split_seed: int = 0,
            val_fraction: float = 0.1, img_size: int = 32, augment: bool = True,
            train_subset: int | None = None, full_train: bool = False, translate: int = 4,
            cutout: int = 0, classes: list[str] | None = None) -> Cifar10Data:
    """CIFAR-10: 32x32 colour images of 10 classes; a stratified validation part carved from train.

    Args:
        full_train: all 50,000 official training images (the local copy's ``train/`` and ``train_rest/``); by
            default the 20,000 of ``train/`` (2,000 per class), which the earlier tags were trained on.
        augment: flips and translations of up to ``translate`` pixels (reflect padding), plus a ``cutout``
            square when > 0, drawn per image on the training batch (:class:`vision.resident.BatchAugment`).
        classes: keep only these classes (names, e.g. ``[airplane, automobile, ...]``), labelled in this order:
            the open-set protocol (Neal et al. 2018) trains on some classes and holds the others out as unknowns.
        num_workers: not used (kept so older recipes load): the images are decoded once and held in memory.
    """
    if classes is not None and (len(set(classes)) != len(classes) or len(classes) < 2
                                or not set(classes) <= set(CIFAR_CLASSES)):
        raise DataError(f"data.args.classes must name at least 2 distinct CIFAR-10 classes out of {CIFAR_CLASSES}, "
                        f"got {list(classes)}")
    return Cifar10Data(batch_size, num_workers, seed, split_seed, val_fraction, img_size, augment, train_subset,
                       full_train, translate, cutout, classes)


class BreastMnistData(ResidentImageData):
    """BreastMNIST (MedMNIST v2's ``breastmnist.npz``, its official split) held in memory; see :func:`breastmnist`.

    Args:
        batch_size: images per batch.
        num_workers: not used: the images are held in memory.
        seed: seed of the training order and augmentation.
        img_size: side the 28x28 images are resized to.
        channels: 1 (grey, as stored) or 3 (the grey copied to RGB).
        augment: flip and shift the training batches by up to an eighth of the side (3 pixels at 28).
        mean: per-channel normalisation mean (``channels`` values).
        std: per-channel normalisation std."""

    def __init__(self, batch_size: int, num_workers: int, seed: int, img_size: int, channels: int, augment: bool,
                 mean: list[float], std: list[float]):
        super().__init__(batch_size, num_workers, seed)
        self.img_size, self.channels, self.mean, self.std = img_size, channels, mean, std
        # flips and shifts of up to an eighth of the side (3 pixels at 28)
        self.augment = BatchAugment(translate=max(1, round(img_size * 3 / 28))) if augment else None

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        path = data_dir() / "medmnist" / "breastmnist.npz"
        if not path.is_file():
            raise DatasetUnavailable("breastmnist", f"{path} not found: download breastmnist.npz (MedMNIST v2, "
                                                    "Zenodo record 10519652, MD5 750601b1f35ba3300ea97c75c52ff8f6) "
                                                    "into that folder or set HUB_DATA_DIR")
        arrays = np.load(path)  # plain arrays; np.load refuses pickled objects by default
        self.input_spec = image_spec(self.img_size, self.img_size, self.channels, self.mean, self.std)
        self.train_set, self.val_set, self.test_set = (
            ResidentImages(_array_images(arrays[f"{s}_images"], self.input_spec), arrays[f"{s}_labels"].reshape(-1),
                           self.mean, self.std) for s in ("train", "val", "test"))
        self.num_classes, self.label_names = 2, ["malignant", "normal_or_benign"]
        self.info = {"source": "MedMNIST v2 breastmnist.npz (official 7:1:2 split)", "license": "CC BY 4.0",
                     "sizes": [len(d) for d in (self.train_set, self.val_set, self.test_set)]}


@register_dataset(task="classification")
def breastmnist(batch_size: int = 64, num_workers: int = 0, seed: int = 0, img_size: int = 28, channels: int = 1,
                augment: bool = True, mean: list[float] = (0.5,), std: list[float] = (0.5,)) -> BreastMnistData:
    """BreastMNIST: 780 breast ultrasound images, 28x28 grey, malignant vs normal/benign (resizable, grey->RGB);
    training batches flipped and shifted by up to an eighth of the side (``augment``)."""
    if len(mean) != channels or len(std) != channels:
        raise DataError(f"expected {channels} values in data.args.mean and data.args.std, "
                        f"got {len(mean)} and {len(std)}")
    return BreastMnistData(batch_size, num_workers, seed, img_size, channels, augment, list(mean), list(std))
