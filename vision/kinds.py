"""The vision input kinds: ``image`` (a classifier's image files and class folders) and ``scene`` (a slot
autoencoder's unlabelled images)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from hub.kinds import InputKind, KindSpec, predict_per_file, register_kind
from vision.explain import explain_image_files, explain_scenes
from vision.io import image_tensor, read_image


@dataclass(frozen=True)
class ImageSpec(KindSpec):
    """An image model's input: ``channels`` x ``height`` x ``width``, normalised as ``(x / 255 - mean) / std``."""

    height: int
    width: int
    channels: int
    mean: list[float]
    std: list[float]


@register_kind
class ImageKind(InputKind):
    """Image files (any size, grey or colour: converted) and folders of class sub-folders."""

    name, domain, Spec = "image", "vision", ImageSpec

    def finetune_data(self, card, path: str) -> dict[str, Any]:
        spec = self.spec(card)
        return {"name": "image_folder", "args": {"root": str(path), "height": spec.height, "width": spec.width,
                                                 "channels": spec.channels, "mean": spec.mean, "std": spec.std}}

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        return predict_per_file(model, paths, lambda path: read_image(path, card.input_spec), batch_size)

    def transform(self, card) -> Callable[[Any], torch.Tensor]:
        """An image file, PIL image or uint8 array -> the normalised ``(C, H, W)`` tensor (:func:`image_tensor`)."""
        self.spec(card)
        return partial(image_tensor, spec=card.input_spec)

    def explain(self, card, model, inputs: list[str], out_dir: Path) -> Iterator[Path]:
        return explain_image_files(card, model, inputs, out_dir)


@register_kind
class SceneKind(InputKind):
    """Unlabelled images of scenes, for slot autoencoders."""

    name, domain, Spec = "scene", "vision", ImageSpec

    def finetune_data(self, card, path: str) -> dict:
        """``attnhub finetune slot_autoencoder_micro_64.shapes --data DIR``: DIR's images, at the card's size."""
        return {"name": "scene_folder", "args": {"root": str(path), "size": self.spec(card).height}}

    def transform(self, card) -> Callable[[Any], torch.Tensor]:
        """An image file, PIL image or uint8 array -> the normalised ``(C, H, W)`` tensor (:func:`image_tensor`)."""
        self.spec(card)
        return partial(image_tensor, spec=card.input_spec)

    def explain(self, card, model, inputs: list[str], out_dir: Path) -> Iterator[Path]:
        return explain_scenes(card, model, inputs, out_dir)
