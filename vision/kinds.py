"""The vision input kinds: ``image`` (a classifier's image files and class folders) and ``scene`` (a slot
autoencoder's unlabelled images)."""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import torch

from hub.adapters import register_finetune_adapter, register_predict_adapter
from vision.io import read_image


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


@register_finetune_adapter("image")
def image_folder_section(card, path: str) -> dict[str, Any]:
    spec = card.input_spec
    return {"name": "image_folder", "args": {"root": str(path), "height": spec["height"], "width": spec["width"],
                                             "channels": spec["channels"], "mean": spec["mean"], "std": spec["std"]}}


@register_finetune_adapter("scene")
def scene_folder_section(card, path: str) -> dict:
    """``attnhub finetune slot_autoencoder_micro_64.shapes --data DIR``: DIR's images, at the card's size."""
    return {"name": "scene_folder", "args": {"root": str(path), "size": card.input_spec["height"]}}
