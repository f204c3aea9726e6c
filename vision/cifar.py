"""CIFAR-10 (Krizhevsky, 2009) and BreastMNIST (MedMNIST v2, Yang et al., 2023) for the vision recipes.

CIFAR-10 is read from ``HUB_DATA_DIR/cifar10`` (ImageFolder layout: ``train/<class>/*.jpg``, a
balanced 20k subset, and the full 10k ``test``). Without a local copy, torchvision downloads the
canonical archive (https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz) into the cache and
checks its MD5, the checksum the dataset's authors publish. BreastMNIST is the official
``breastmnist.npz`` (28x28 grey ultrasound, benign/normal vs malignant) with its own split.
"""
from __future__ import annotations

import numpy as np
from torch.utils.data import Dataset, Subset
from torchvision import datasets as tv_datasets
from torchvision import transforms as T

from hub.data import HubDataModule, data_dir, stratified_split
from hub.errors import DataError, DatasetUnavailable
from hub.registry import register_dataset
from hub.weights import is_offline
from vision.datasets import image_spec

CIFAR_MEAN, CIFAR_STD = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR_LOCAL_SOURCE = "CIFAR-10, HUB_DATA_DIR/cifar10 (JPEG ImageFolder copy: 20k balanced train, full test)"


class Transformed(Dataset):
    """Applies ``transform`` to the image of each (image, label) item of ``base``."""

    def __init__(self, base: Dataset, transform):
        self.base, self.transform = base, transform

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i):
        image, label = self.base[i]
        return self.transform(image), label


class ConvertMode:
    """PIL mode conversion (``"L"`` grey, ``"RGB"``) as a picklable transform."""

    def __init__(self, channels: int):
        self.mode = {1: "L", 3: "RGB"}[channels]

    def __call__(self, image):
        return image.convert(self.mode)


def _transforms(size: int, channels: int, mean: list[float], std: list[float], augment: bool, native: int):
    common = [ConvertMode(channels)]
    resize = [T.Resize(size, antialias=True)] if size != native else []
    tail = [T.ToTensor(), T.Normalize(mean, std)]
    if not augment:
        return T.Compose(common + resize + tail), T.Compose(common + resize + tail)
    train = [T.RandomCrop(native, padding=native // 8), T.RandomHorizontalFlip()]
    return T.Compose(common + train + resize + tail), T.Compose(common + resize + tail)


class Cifar10Data(HubDataModule):
    def __init__(self, batch_size: int, num_workers: int, seed: int, split_seed: int, val_fraction: float,
                 img_size: int, augment: bool, train_subset: int | None):
        super().__init__(batch_size, num_workers, seed)
        self.split_seed, self.val_fraction, self.img_size = split_seed, val_fraction, img_size
        self.augment, self.train_subset = augment, train_subset

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        root = data_dir() / "cifar10"
        if (root / "train").is_dir() and (root / "test").is_dir():
            train_base, test_base = tv_datasets.ImageFolder(root / "train"), tv_datasets.ImageFolder(root / "test")
            classes, source = train_base.classes, CIFAR_LOCAL_SOURCE
        else:
            cache = data_dir() / "cifar10-python"
            if is_offline() and not (cache / "cifar-10-batches-py").is_dir():
                raise DatasetUnavailable("cifar10", f"CIFAR-10 is neither in {root} nor in {cache} and "
                                                    "HUB_OFFLINE=1 forbids downloading")
            try:
                train_base = tv_datasets.CIFAR10(cache, train=True, download=True)
                test_base = tv_datasets.CIFAR10(cache, train=False, download=True)
            except (OSError, RuntimeError) as err:
                raise DatasetUnavailable("cifar10", f"CIFAR-10 is not in {root} (expected train/<class>/ and "
                                                    f"test/<class>/ there; set HUB_DATA_DIR) and downloading "
                                                    f"{CIFAR_URL} failed: {err}") from err
            classes, source = train_base.classes, f"{CIFAR_URL} (MD5-checked by torchvision)"
        labels = np.array([label for _, label in train_base.samples] if hasattr(train_base, "samples")
                          else train_base.targets)
        train_idx, val_idx = stratified_split(labels, (1 - self.val_fraction, self.val_fraction), self.split_seed)
        if self.train_subset:
            train_idx = np.sort(np.random.default_rng(self.split_seed).permutation(train_idx)[: self.train_subset])
        train_tf, eval_tf = _transforms(self.img_size, 3, CIFAR_MEAN, CIFAR_STD, self.augment, 32)
        self.train_set = Transformed(Subset(train_base, train_idx), train_tf)
        self.val_set = Transformed(Subset(train_base, val_idx), eval_tf)
        self.test_set = Transformed(test_base, eval_tf)
        self.num_classes, self.label_names = 10, list(classes)
        self.input_spec = image_spec(self.img_size, self.img_size, 3, CIFAR_MEAN, CIFAR_STD)
        self.info = {"source": source, "license": "none stated by the CIFAR-10 authors",
                     "sizes": [len(train_idx), len(val_idx), len(test_base)]}


@register_dataset(task="classification")
def cifar10(batch_size: int = 128, num_workers: int = 2, seed: int = 0, split_seed: int = 0,
            val_fraction: float = 0.1, img_size: int = 32, augment: bool = True,
            train_subset: int | None = None) -> Cifar10Data:
    """CIFAR-10: 32x32 colour images of 10 classes; a stratified validation part carved from train."""
    return Cifar10Data(batch_size, num_workers, seed, split_seed, val_fraction, img_size, augment, train_subset)


class NpzImages(Dataset):
    def __init__(self, images: np.ndarray, labels: np.ndarray, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i):
        from PIL import Image

        return self.transform(Image.fromarray(self.images[i])), int(self.labels[i])


class BreastMnistData(HubDataModule):
    def __init__(self, batch_size: int, num_workers: int, seed: int, img_size: int, channels: int, augment: bool,
                 mean: list[float], std: list[float]):
        super().__init__(batch_size, num_workers, seed)
        self.img_size, self.channels, self.augment, self.mean, self.std = img_size, channels, augment, mean, std

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        path = data_dir() / "medmnist" / "breastmnist.npz"
        if not path.is_file():
            raise DatasetUnavailable("breastmnist", f"{path} not found: download breastmnist.npz (MedMNIST v2, "
                                                    "Zenodo record 10519652, MD5 750601b1f35ba3300ea97c75c52ff8f6) "
                                                    "into that folder or set HUB_DATA_DIR")
        arrays = np.load(path)  # plain arrays; np.load refuses pickled objects by default
        train_tf, eval_tf = _transforms(self.img_size, self.channels, self.mean, self.std, self.augment, 28)
        split = {s: (arrays[f"{s}_images"], arrays[f"{s}_labels"].reshape(-1)) for s in ("train", "val", "test")}
        self.train_set = NpzImages(*split["train"], train_tf)
        self.val_set = NpzImages(*split["val"], eval_tf)
        self.test_set = NpzImages(*split["test"], eval_tf)
        self.num_classes, self.label_names = 2, ["malignant", "normal_or_benign"]
        self.input_spec = image_spec(self.img_size, self.img_size, self.channels, self.mean, self.std)
        self.info = {"source": "MedMNIST v2 breastmnist.npz (official 7:1:2 split)", "license": "CC BY 4.0",
                     "sizes": [len(split[s][1]) for s in ("train", "val", "test")]}


@register_dataset(task="classification")
def breastmnist(batch_size: int = 64, num_workers: int = 0, seed: int = 0, img_size: int = 28, channels: int = 1,
                augment: bool = True, mean: list[float] = (0.5,), std: list[float] = (0.5,)) -> BreastMnistData:
    """BreastMNIST: 780 breast ultrasound images, 28x28 grey, malignant vs normal/benign (resizable, grey->RGB)."""
    if len(mean) != channels or len(std) != channels:
        raise DataError(f"expected {channels} values in data.args.mean and data.args.std, "
                        f"got {len(mean)} and {len(std)}")
    return BreastMnistData(batch_size, num_workers, seed, img_size, channels, augment, list(mean), list(std))
