"""The fast image data path: images decoded once into uint8 tensors, kept in memory (on the GPU when training
there), and normalised and augmented a whole batch at a time on the tensors' device.

Decoding a folder of image files once per epoch, one image at a time in loader workers, starved an H200 at about
20% SM utilisation (6,000 images/s). Here the files are decoded once into ``(N, C, H, W)`` uint8 tensors, cached
under the hub's cache (``HUB_CACHE/images``) keyed by the sha256 of every file's bytes and the target size, so a
second run reads one file. Training batches are indexed out of the resident tensor and augmented as a batch, on
whatever device the tensor is on: random flips, pad-and-crop translations (airbench, Jordan 2024), random resized
crops (an affine grid per image: timm's ``RandomResizedCrop`` as a batch), cutout (DeVries & Taylor 2017) and,
the one per-image loop, torchvision's RandAugment. The same code runs on CPU and GPU.

Why written here: torchvision's v2 transforms apply one random draw to a whole batch, and DALI / FFCV are heavy
dependencies with their own file formats; airbench, the reference for this design, is a script, not a library.

>>> images = torch.randint(0, 256, (10, 3, 8, 8), dtype=torch.uint8)
>>> batches = ImageBatches(images, torch.arange(10), [0.5] * 3, [0.5] * 3, batch_size=4,
...                        augment=BatchAugment(translate=1), shuffle=True)
>>> [tuple(x.shape) for x, _ in batches]
[(4, 3, 8, 8), (4, 3, 8, 8), (2, 3, 8, 8)]
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from hub.data import EpochSampler
from hub.errors import DataError

# bump when decoding changes, so cached tensors of the old decoder are not reused
DECODER_VERSION = 1


@dataclass(frozen=True)
class BatchAugment:
    """Random augmentation of a batch of normalised images ``(B, C, H, W)``, one independent draw per image.

    Applied in this order: RandAugment (on the uint8 pixels), random resized crop, translation, flip, cutout.
    """

    flip: bool = True  # mirror half of the images left-right
    translate: int = 0  # shift by up to this many pixels each way (reflect padding, then a crop), as airbench
    crop_scale: tuple[float, float] | None = None  # random resized crops of this share of the area (timm's scale)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)  # ... and aspect ratios in this range (timm's default)
    cutout: int = 0  # a square of this side, at a random centre, set to 0 (the mean after normalisation)
    randaugment: bool = False  # torchvision's RandAugment (2 ops, magnitude 9) per image: a loop over the batch

    def pixels(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The uint8 stage: RandAugment per image, seeded from ``generator``."""
        if not self.randaugment:
            return images
        from torchvision.transforms import v2

        transform = v2.RandAugment(num_ops=2, magnitude=9)
        seed = int(torch.randint(0, 2**31, (1,), generator=generator, device=generator.device))
        with torch.random.fork_rng(devices=[images.device] if images.is_cuda else []):
            torch.manual_seed(seed)
            return torch.stack([transform(image) for image in images])

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Augment normalised float images ``x`` (B, C, H, W); ``generator`` lives on ``x``'s device."""
        if self.crop_scale is not None:
            x = random_resized_crop(x, self.crop_scale, self.crop_ratio, generator)
        if self.translate:
            x = translate(x, self.translate, generator)
        if self.flip:
            flipped = torch.rand(len(x), generator=generator, device=x.device) < 0.5
            x = torch.where(flipped[:, None, None, None], x.flip(-1), x)
        if self.cutout:
            x = cutout(x, self.cutout, generator)
        return x


def translate(x: torch.Tensor, pixels: int, generator: torch.Generator) -> torch.Tensor:
    """Shift each image by its own ``(dy, dx)`` in ``[-pixels, pixels]``: reflect padding, then a gathered crop.

    Shapes: x (B, C, H, W) -> (B, C, H, W)."""
    b, c, h, w = x.shape
    padded = F.pad(x, (pixels,) * 4, mode="reflect")  # (B, C, H + 2p, W + 2p)
    dy, dx = torch.randint(0, 2 * pixels + 1, (2, b), generator=generator, device=x.device)
    rows = (dy[:, None] + torch.arange(h, device=x.device))[:, None, :, None]  # (B, 1, H, 1)
    cols = (dx[:, None] + torch.arange(w, device=x.device))[:, None, None, :]  # (B, 1, 1, W)
    batch = torch.arange(b, device=x.device)[:, None, None, None]
    channel = torch.arange(c, device=x.device)[None, :, None, None]
    return padded[batch, channel, rows, cols]


def random_resized_crop(x: torch.Tensor, scale: tuple[float, float], ratio: tuple[float, float],
                        generator: torch.Generator) -> torch.Tensor:
    """timm's ``RandomResizedCrop`` as one affine grid per image: a crop of ``scale`` of the area (uniform) with
    aspect ratio in ``ratio`` (log-uniform), at a random place inside the image, resized back bilinearly.

    Shapes: x (B, C, H, W) -> (B, C, H, W)."""
    b, device = len(x), x.device
    area = torch.empty(b, device=device).uniform_(*scale, generator=generator)
    log_ratio = torch.empty(b, device=device).uniform_(math.log(ratio[0]), math.log(ratio[1]), generator=generator)
    aspect = log_ratio.exp()
    width = (area * aspect).sqrt().clamp(max=1.0)  # share of the image's width
    height = (area / aspect).sqrt().clamp(max=1.0)
    cx = (torch.rand(b, generator=generator, device=device) * 2 - 1) * (1 - width)  # centre, in [-1, 1] units
    cy = (torch.rand(b, generator=generator, device=device) * 2 - 1) * (1 - height)
    theta = torch.zeros(b, 2, 3, device=device, dtype=x.dtype)
    theta[:, 0, 0], theta[:, 0, 2], theta[:, 1, 1], theta[:, 1, 2] = width, cx, height, cy
    grid = F.affine_grid(theta, list(x.shape), align_corners=False)  # (B, H, W, 2)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=False)


def cutout(x: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    """Set a ``size`` x ``size`` square at a random centre of each image to 0 (clipped at the borders).

    Shapes: x (B, C, H, W) -> (B, C, H, W)."""
    b, _, h, w = x.shape
    cy = torch.randint(0, h, (b, 1, 1), generator=generator, device=x.device)
    cx = torch.randint(0, w, (b, 1, 1), generator=generator, device=x.device)
    rows = torch.arange(h, device=x.device)[None, :, None]
    cols = torch.arange(w, device=x.device)[None, None, :]
    inside = ((rows - cy).abs() <= size // 2) & ((cols - cx).abs() <= size // 2)  # (B, H, W)
    return x.masked_fill(inside[:, None], 0.0)


class ResidentImages(Dataset):
    """Images held as one uint8 tensor ``(N, C, H, W)`` with their labels; items are ``(normalised image, label)``
    as a per-file dataset gives them, and :meth:`batches` iterates them a batch at a time, fast.

    Args:
        images: uint8 pixels (N, C, H, W).
        labels: (N,) class indices.
        mean, std: per-channel normalisation, ``(x / 255 - mean) / std``.
        files: the files the images were decoded from, if any (baselines and reports name them).
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor | Sequence[int], mean: Sequence[float],
                 std: Sequence[float], files: list[Path] | None = None):
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise DataError(f"resident images must be uint8 (N, C, H, W), got {images.dtype} {tuple(images.shape)}")
        self.images, self.labels = images, torch.as_tensor(labels, dtype=torch.long)
        self.mean, self.std, self.files = list(mean), list(std), files

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int):
        return normalise(self.images[i:i + 1], self.mean, self.std)[0], int(self.labels[i])

    def subset(self, index: torch.Tensor) -> "ResidentImages":
        """The images at ``index`` (a 1-D tensor of positions), with their files."""
        files = [self.files[i] for i in index.tolist()] if self.files is not None else None
        return ResidentImages(self.images[index], self.labels[index], self.mean, self.std, files)

    def of_classes(self, classes: Sequence[int]) -> "ResidentImages":
        """The images of ``classes`` (class indices), relabelled 0..len(classes)-1 in that order."""
        relabel = torch.full((int(self.labels.max()) + 1,), -1, dtype=torch.long)
        relabel[torch.as_tensor(list(classes), dtype=torch.long)] = torch.arange(len(classes))
        kept = self.subset(torch.nonzero(relabel[self.labels] >= 0).flatten())
        kept.labels = relabel[kept.labels]
        return kept

    def batches(self, batch_size: int, augment: BatchAugment | None = None, shuffle: bool = False,
                drop_last: bool = False, seed: int = 0, device: torch.device | str | None = None) -> "ImageBatches":
        return ImageBatches(self.images, self.labels, self.mean, self.std, batch_size, augment, shuffle, drop_last,
                            seed, device)


def normalise(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 ``(B, C, H, W)`` -> float32 ``(x / 255 - mean) / std`` on the same device."""
    m = torch.tensor(mean, device=images.device).view(1, -1, 1, 1)
    s = torch.tensor(std, device=images.device).view(1, -1, 1, 1)
    return (images.float() / 255.0 - m) / s


class ImageBatches:
    """An iterable of ``(images, labels)`` batches over resident uint8 images, for a Lightning trainer or a loop.

    Each batch is indexed out of the resident tensor, normalised and, with ``augment``, augmented on the tensor's
    device (``device``: where to keep them; the GPU when training there). The order of a shuffled epoch and every
    augmentation draw come from ``(seed, epoch, batch)``, so a resumed run sees the same batches; Lightning sets the
    epoch through ``sampler.set_epoch``. Under data parallelism each process takes every world-size-th image of
    the epoch's order (a custom iterable is not given a ``DistributedSampler``).

    Args:
        images: the split's images (N, C, H, W), uint8.
        labels: their labels (N,), int64.
        mean: per-channel normalisation mean, in [0, 1] units.
        std: per-channel normalisation std.
        batch_size: images per batch (at least 1).
        augment: the batch augmentation to apply (None, the default: none).
        shuffle: a new seeded order every epoch (default False: the stored order).
        drop_last: drop the last, incomplete batch (default False).
        seed: seed of the order and of the augmentation draws (default 0).
        device: where to keep the images and build the batches (None, the default: where ``images`` are).

    Shapes: yields x (B, C, H, W) float32, y (B,) int64.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, mean: Sequence[float], std: Sequence[float],
                 batch_size: int, augment: BatchAugment | None = None, shuffle: bool = False, drop_last: bool = False,
                 seed: int = 0, device: torch.device | str | None = None):
        if batch_size < 1:
            raise DataError(f"batch_size must be at least 1, got {batch_size}")
        device = torch.device(device) if device is not None else images.device
        self.images, self.labels = images.to(device), labels.to(device)
        self.mean, self.std, self.batch_size = list(mean), list(std), batch_size
        self.augment, self.shuffle, self.drop_last, self.seed = augment, shuffle, drop_last, seed
        self.sampler = EpochSampler(len(labels), seed)  # Lightning calls sampler.set_epoch(epoch)
        self.batch_sampler = None  # Lightning reads it of any loader with a sampler

    @property
    def device(self) -> torch.device:
        return self.images.device

    def _shard(self) -> tuple[int, int]:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    def _order(self) -> torch.Tensor:
        rank, world = self._shard()
        order = torch.tensor(list(self.sampler)) if self.shuffle else torch.arange(len(self.labels))
        return order[rank::world].to(self.device)

    def __len__(self) -> int:
        rank, world = self._shard()
        n = len(range(rank, len(self.labels), world))
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        order = self._order()
        for b in range(len(self)):
            index = order[b * self.batch_size:(b + 1) * self.batch_size]
            images = self.images[index]
            if self.augment is not None:
                generator = torch.Generator(device=self.device)
                generator.manual_seed(hash((self.seed, self.sampler.epoch, b)) % 2**62)
                x = self.augment(normalise(self.augment.pixels(images, generator), self.mean, self.std), generator)
            else:
                x = normalise(images, self.mean, self.std)
            yield x, self.labels[index]


def _files_key(files: Sequence[Path], spec: dict[str, Any]) -> str:
    """sha256 over the decoder version, the target size and channels, and the sha256 of every file's bytes."""
    digest = hashlib.sha256(f"v{DECODER_VERSION}:{spec['height']}x{spec['width']}x{spec['channels']}".encode())
    for path in files:
        digest.update(hashlib.sha256(Path(path).read_bytes()).digest())
    return digest.hexdigest()


def decode_images(files: Sequence[Path], spec: dict[str, Any], progress: bool = True) -> torch.Tensor:
    """The images of ``files`` as uint8 ``(N, C, H, W)`` pixels of ``spec``'s size and channels, converted as at
    predict time (:func:`vision.io.image_pixels`: grey/RGB, bilinear resize), so a model sees the same pixels in
    training and in ``predict``. Decoded once: the tensor is cached under ``HUB_CACHE/images/<key>.safetensors``,
    keyed by the files' contents (:func:`_files_key`), and read from there by later runs."""
    from safetensors.torch import load_file, save

    from hub.core.weights import cache_dir
    from hub.io import atomic_write_bytes
    from vision.io import image_pixels

    key = _files_key(files, spec)
    path = cache_dir() / "images" / f"{key}.safetensors"
    if path.is_file():
        return load_file(path)["images"]
    if not files:
        raise DataError("no image files to decode")
    from tqdm.auto import tqdm

    shape = (spec["channels"], spec["height"], spec["width"])
    images = torch.empty((len(files), *shape), dtype=torch.uint8)
    for i, file in enumerate(tqdm(files, desc="decoding images", unit="img", disable=not progress or len(files) < 2000,
                                  mininterval=1.0)):
        images[i] = torch.from_numpy(image_pixels(file, spec)).permute(2, 0, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, save({"images": images}, metadata={"key": key, "count": str(len(files))}))
    return images
