"""Image data: scikit-learn's digits (the embedded quickstart set) and user image folders.

Every image model's card carries an ``input_spec`` of kind ``"image"`` (height, width, channels,
mean, std); predict-time files are converted to it (grey/RGB and size are documented conversions).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset, TensorDataset

from hub.adapters import register_finetune_adapter, register_predict_adapter
from hub.data import EpochSeededDataset, HubDataModule, stratified_split
from hub.errors import DataError
from hub.registry import register_dataset

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


class ShiftAugment(EpochSeededDataset):
    """Random translation by up to ``max_shift`` pixels (padded with the image minimum, the background),
    seeded per (epoch, index)."""

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
    """scikit-learn's 1,797 handwritten digits (8x8, 17 grey levels) with a stratified split."""

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


def image_spec(height: int, width: int, channels: int, mean: list[float], std: list[float]) -> dict[str, Any]:
    return {"kind": "image", "height": height, "width": width, "channels": channels, "mean": mean, "std": std}


@register_dataset(task="classification")
def sklearn_digits(batch_size: int = 64, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                   val_fraction: float = 0.1, test_fraction: float = 0.2, max_shift: int = 0) -> DigitsData:
    """scikit-learn's digits: 8x8 grey images of 10 digits, stratified 70/10/20 split."""
    return DigitsData(batch_size, num_workers, seed, split_seed, val_fraction, test_fraction, max_shift)


def open_image(path: str | Path, spec: dict[str, Any]):
    """Open an image file as a PIL image in the spec's mode (``L`` or ``RGB``), fully loaded."""
    from PIL import Image, UnidentifiedImageError

    path = Path(path)
    try:
        with Image.open(path) as image:
            return image.convert("L" if spec["channels"] == 1 else "RGB")
    except FileNotFoundError:
        raise DataError(f"image file {path} does not exist") from None
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise DataError(f"cannot read image {path}: not a valid image file ({err})") from None


def read_image(path: str | Path, spec: dict[str, Any]) -> torch.Tensor:
    """Read an image file as the ``(C, H, W)`` tensor a model with ``spec`` takes.

    Conversions (documented, not errors): RGB to grey (ITU-R 601 luma) or grey to RGB as the spec
    asks; a different size is resized bilinearly; then ``(x / 255 - mean) / std``.
    """
    from PIL import Image

    image = open_image(path, spec)
    if image.size != (spec["width"], spec["height"]):
        image = image.resize((spec["width"], spec["height"]), Image.BILINEAR)
    array = np.asarray(image, dtype=np.float32) / 255.0
    tensor = torch.from_numpy(array).reshape(array.shape[0], array.shape[1], -1).permute(2, 0, 1)  # (C, H, W)
    mean = torch.tensor(spec["mean"]).view(-1, 1, 1)
    std = torch.tensor(spec["std"]).view(-1, 1, 1)
    return (tensor - mean) / std


AUGMENTATIONS = ("none", "light", "randaugment")


def train_transform(spec: dict[str, Any], augment: str):
    """timm's training pipeline for a PIL image -> normalised ``(C, H, W)``: random resized crops (scale
    0.6-1, mild for small images) and horizontal flips (``light``), plus RandAugment (``randaugment``)."""
    from timm.data import create_transform

    if augment not in AUGMENTATIONS:
        raise DataError(f"data.args.augment must be one of {AUGMENTATIONS}, got {augment!r}")
    return create_transform(input_size=(spec["channels"], spec["height"], spec["width"]), is_training=True,
                            scale=(0.6, 1.0), hflip=0.5, color_jitter=0.0, interpolation="bilinear",
                            auto_augment="rand-m9-mstd0.5-inc1" if augment == "randaugment" else None,
                            mean=tuple(spec["mean"]), std=tuple(spec["std"]))


@register_predict_adapter("image")
def image_logits(card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
    names, tensors = [], []
    for path in paths:
        names.append(str(path))
        tensors.append(read_image(path, card.input_spec))
        if len(names) == batch_size:
            yield names, model(torch.stack(tensors))
            names, tensors = [], []
    if names:
        yield names, model(torch.stack(tensors))


class ImageFiles(Dataset):
    def __init__(self, files: list[Path], labels: list[int], spec: dict[str, Any]):
        self.files, self.labels, self.spec = files, labels, spec

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i):
        return read_image(self.files[i], self.spec), self.labels[i]


class AugmentedImageFiles(EpochSeededDataset):
    """Training images through :func:`train_transform`, seeded per (seed, epoch, index): timm's transforms
    draw from the global torch, Python and numpy RNGs, which are saved, seeded from the item's generator
    and restored."""

    def __init__(self, files: list[Path], labels: list[int], spec: dict[str, Any], augment: str, seed: int):
        self.files, self.labels, self.spec, self.seed = files, labels, spec, seed
        self.transform = None if augment == "none" else train_transform(spec, augment)

    def __len__(self) -> int:
        return len(self.files)

    def augmented_item(self, index: int, generator: torch.Generator):
        if self.transform is None:
            return read_image(self.files[index], self.spec), self.labels[index]
        import random

        item_seed = int(torch.randint(0, 2**32, (1,), generator=generator))
        states = random.getstate(), np.random.get_state()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(item_seed)
            random.seed(item_seed)
            np.random.seed(item_seed)  # RandAugment picks its operations with numpy
            try:
                return self.transform(open_image(self.files[index], self.spec)), self.labels[index]
            finally:
                random.setstate(states[0])
                np.random.set_state(states[1])


def _scan_class_folders(root: Path) -> dict[str, list[Path]]:
    if not root.is_dir():
        raise DataError(f"image folder {root} does not exist or is not a folder")
    classes = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not classes:
        raise DataError(f"{root} has no class folders; expected one sub-folder per class (e.g. {root}/cat/*.png)")
    found = {c.name: sorted(f for f in c.rglob("*") if f.suffix.lower() in IMAGE_SUFFIXES) for c in classes}
    empty = [name for name, files in found.items() if not files]
    if empty:
        raise DataError(f"class folders {empty} in {root} hold no images (looked for {', '.join(IMAGE_SUFFIXES)})")
    return found


class ImageFolderData(HubDataModule):
    """A user's image folder: ``root/train/<class>/*``, ``root/val/<class>/*`` (and optional
    ``root/test``), or ``root/<class>/*`` split stratified into train/val/test."""

    def __init__(self, root: str, height: int, width: int, channels: int, mean: list[float], std: list[float],
                 batch_size: int = 32, num_workers: int = 0, seed: int = 0, split_seed: int = 0,
                 val_fraction: float = 0.15, test_fraction: float = 0.15, augment: str = "light"):
        super().__init__(batch_size, num_workers, seed)
        self.root = Path(root)
        self.augment = augment
        train_transform(image_spec(height, width, channels, mean, std), augment)  # a bad name fails now
        self.input_spec = image_spec(height, width, channels, mean, std)
        self.split_seed, self.val_fraction, self.test_fraction = split_seed, val_fraction, test_fraction

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        if (self.root / "train").is_dir():
            splits = {s: _scan_class_folders(self.root / s) for s in ("train", "val", "test")
                      if (self.root / s).is_dir()}
            if "val" not in splits:
                raise DataError(f"{self.root} has train/ but no val/ folder; "
                                f"add val/ or put class folders directly in {self.root}")
            classes = sorted(splits["train"])
            for split, found in splits.items():
                if sorted(found) != classes:
                    raise DataError(f"{self.root}/{split} has classes {sorted(found)} but train/ has {classes}")
            sets = {s: [(f, classes.index(c)) for c in classes for f in found[c]] for s, found in splits.items()}
            sets.setdefault("test", sets["val"])
        else:
            found = _scan_class_folders(self.root)
            classes = sorted(found)
            items = [(f, i) for i, c in enumerate(classes) for f in found[c]]
            labels = np.array([label for _, label in items])
            fractions = (1 - self.val_fraction - self.test_fraction, self.val_fraction, self.test_fraction)
            parts = stratified_split(labels, fractions, self.split_seed, source=str(self.root))
            sets = {s: [items[i] for i in part] for s, part in zip(("train", "val", "test"), parts)}
        if len(classes) < 2:
            raise DataError(f"{self.root} has a single class {classes}; classification needs at least 2 class folders")
        read_image(sets["train"][0][0], self.input_spec)  # fail now, not mid-epoch, on an unreadable first file
        files = {s: ([f for f, _ in sets[s]], [label for _, label in sets[s]]) for s in sets}
        self.train_set = AugmentedImageFiles(*files["train"], self.input_spec, self.augment, self.seed)
        self.val_set = ImageFiles(*files["val"], self.input_spec)
        self.test_set = ImageFiles(*files["test"], self.input_spec)
        self.num_classes = len(classes)
        self.label_names = classes
        self.info = {"source": str(self.root), "license": "the user's data"}


@register_dataset(task="classification")
def image_folder(root: str, height: int, width: int, channels: int = 3, mean: list[float] = (0.5,) * 3,
                 std: list[float] = (0.5,) * 3, batch_size: int = 32, num_workers: int = 0, seed: int = 0,
                 split_seed: int = 0, val_fraction: float = 0.15, test_fraction: float = 0.15,
                 augment: str = "light") -> ImageFolderData:
    """A folder of images, one sub-folder per class (optionally under train/ val/ test/); training images
    go through timm's augmentation (``augment``: none, light = crops + flips, randaugment)."""
    return ImageFolderData(root, height, width, channels, list(mean), list(std), batch_size, num_workers, seed,
                           split_seed, val_fraction, test_fraction, augment)


@register_finetune_adapter("image")
def image_folder_section(card, path: str) -> dict[str, Any]:
    spec = card.input_spec
    return {"name": "image_folder", "args": {"root": str(path), "height": spec["height"], "width": spec["width"],
                                             "channels": spec["channels"], "mean": spec["mean"], "std": spec["std"]}}
