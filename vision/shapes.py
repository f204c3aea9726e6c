"""Multi-object scenes that the package generates, for unsupervised object discovery (Slot Attention).

In the spirit of Multi-dSprites (Burgess et al., 2019; the Slot Attention paper's benchmark): 2 to 6
sprites (squares, ellipses, hearts) of random colour, scale, rotation and position, painted one over
another (later sprites occlude earlier ones) on a uniform grey background of random brightness. Every
scene comes with its instance mask (0 = background, 1..n = sprites in painting order; a fully occluded
sprite leaves no pixels).

Scenes are drawn from ``(split seed, split, index)`` alone, so a split is the same on every machine and
nothing is downloaded or stored: the data is the generator.

>>> image, mask = render_scene(np.random.default_rng(0))
>>> image.shape, mask.shape, int(mask.max()) >= 1
((3, 64, 64), (64, 64), True)
"""
from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import Dataset

SHAPES = ("square", "ellipse", "heart")
SPLIT_OFFSETS = {"train": 0, "val": 1, "test": 2}


def _sprite(shape: str, u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Inside-test of a unit sprite in its own frame (u right, v up, both in [-1, 1])."""
    if shape == "square":
        return (np.abs(u) <= 0.8) & (np.abs(v) <= 0.8)
    if shape == "ellipse":
        return (u / 1.0) ** 2 + (v / 0.6) ** 2 <= 1.0
    x, y = u * 1.25, v * 1.25 + 0.15  # heart: (x^2 + y^2 - 1)^3 <= x^2 y^3, scaled to fill the unit box
    return (x ** 2 + y ** 2 - 1) ** 3 - x ** 2 * y ** 3 <= 0


def render_scene(rng: np.random.Generator, size: int = 64, min_objects: int = 2,
                 max_objects: int = 6) -> tuple[np.ndarray, np.ndarray]:
    """One scene: ``image`` (3, size, size) float32 in [0, 1] and ``mask`` (size, size) int64."""
    coords = (np.arange(size, dtype=np.float32) + 0.5) / size  # pixel centres in (0, 1)
    py, px = np.meshgrid(coords, coords, indexing="ij")
    image = np.empty((3, size, size), dtype=np.float32)
    image[:] = rng.uniform(0.0, 0.6)  # grey background
    mask = np.zeros((size, size), dtype=np.int64)
    for obj in range(1, int(rng.integers(min_objects, max_objects + 1)) + 1):
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        scale = rng.uniform(0.09, 0.17)  # half-width as a fraction of the image
        cy, cx = rng.uniform(scale, 1 - scale, size=2)
        angle = rng.uniform(0, 2 * np.pi)
        dx, dy = (px - cx) / scale, (cy - py) / scale  # v points up
        u = np.cos(angle) * dx + np.sin(angle) * dy
        v = -np.sin(angle) * dx + np.cos(angle) * dy
        inside = _sprite(shape, u, v)
        colour = rng.uniform(0, 1, size=3)
        colour[rng.integers(3)] = 1.0  # saturated colours stand out from the grey background
        image[:, inside] = colour[:, None].astype(np.float32)
        mask[inside] = obj
    return image, mask


class MultiShapes(Dataset):
    """``length`` generated scenes of one split: items are ``(image (3, H, W) normalised to [-1, 1], mask (H, W))``.

    Args:
        length: scenes in the split.
        split: ``"train"``, ``"val"`` or ``"test"``; scene i is drawn from ``(split_seed, split, i)``.
        split_seed: seed of the scenes (default 0).
        size: side of the square scenes in pixels (default 64).
        min_objects: fewest sprites per scene (default 2).
        max_objects: most sprites per scene (default 6)."""

    def __init__(self, length: int, split: str, split_seed: int = 0, size: int = 64, min_objects: int = 2,
                 max_objects: int = 6):
        self.length, self.split, self.split_seed = length, split, split_seed
        self.size, self.min_objects, self.max_objects = size, min_objects, max_objects

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        if not 0 <= index < self.length:
            raise IndexError(f"scene {index} of a {self.length}-scene split")
        rng = np.random.default_rng([self.split_seed, SPLIT_OFFSETS[self.split], index])
        image, mask = render_scene(rng, self.size, self.min_objects, self.max_objects)
        return torch.from_numpy(image) * 2 - 1, torch.from_numpy(mask)
