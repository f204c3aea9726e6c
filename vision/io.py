"""Reading and checking the user's image files: an image file as the tensor a model's ``input_spec`` asks
for (grey/RGB and size are documented conversions), and folders of class sub-folders."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from hub.datafiles import scan_class_folders
from hub.errors import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


def image_spec(height: int, width: int, channels: int, mean: list[float], std: list[float]) -> dict[str, Any]:
    return {"kind": "image", "height": height, "width": width, "channels": channels, "mean": mean, "std": std}


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


def read_image_bytes(data: bytes, name: str, spec: dict[str, Any]) -> torch.Tensor:
    """An image file's bytes (an upload named ``name``) as the ``(C, H, W)`` tensor :func:`read_image` gives."""
    from io import BytesIO

    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(BytesIO(data)) as image:
            image = image.convert("L" if spec["channels"] == 1 else "RGB")
    except (UnidentifiedImageError, OSError, ValueError) as err:
        raise DataError(f"cannot read image {name}: not a valid image file ({err})") from None
    return image_tensor(image, spec)


def read_image(path: str | Path, spec: dict[str, Any]) -> torch.Tensor:
    """Read an image file as the ``(C, H, W)`` tensor a model with ``spec`` takes (:func:`image_tensor`)."""
    return image_tensor(open_image(path, spec), spec)


def image_pixels(image, spec: dict[str, Any]) -> np.ndarray:
    """An image as the uint8 ``(H, W, C)`` pixels a model with ``spec`` takes, before normalisation: ``image`` is a
    file path, a PIL image or an ``(H, W)`` / ``(H, W, C)`` uint8 array (0-255, as image files hold pixels).

    Conversions (documented, not errors): RGB to grey (ITU-R 601 luma) or grey to RGB as the spec asks; a different
    size is resized bilinearly (Pillow)."""
    from PIL import Image

    if isinstance(image, (str, Path)):
        image = open_image(image, spec)
    elif isinstance(image, np.ndarray):
        if image.dtype != np.uint8 or image.ndim not in (2, 3):
            raise DataError(f"an image array must be (H, W) or (H, W, C) uint8 (0-255), got {image.dtype} of shape "
                            f"{image.shape}")
        image = Image.fromarray(image)
    elif not isinstance(image, Image.Image):
        raise DataError(f"expected an image file path, a PIL image or a uint8 array, got {type(image).__name__}")
    image = image.convert("L" if spec["channels"] == 1 else "RGB")
    if image.size != (spec["width"], spec["height"]):
        image = image.resize((spec["width"], spec["height"]), Image.BILINEAR)
    array = np.array(image, dtype=np.uint8)  # a writable copy
    return array.reshape(array.shape[0], array.shape[1], -1)  # (H, W, C)


def image_tensor(image, spec: dict[str, Any]) -> torch.Tensor:
    """An image as the ``(C, H, W)`` tensor a model with ``spec`` takes: :func:`image_pixels`, then
    ``(x / 255 - mean) / std``."""
    array = image_pixels(image, spec).astype(np.float32) / 255.0
    tensor = torch.from_numpy(array).permute(2, 0, 1)  # (H, W, C) -> (C, H, W)
    mean = torch.tensor(spec["mean"]).view(-1, 1, 1)
    std = torch.tensor(spec["std"]).view(-1, 1, 1)
    return (tensor - mean) / std


def _scan_class_folders(root: Path) -> dict[str, list[Path]]:
    """``root/<class>/*.png|jpg|...`` -> image files per class (:func:`hub.data.scan_class_folders`: errors for a
    missing root, no class folders and a class folder without images)."""
    return scan_class_folders(root, IMAGE_SUFFIXES, "image", "images", "cat/*.png")
