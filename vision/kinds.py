"""The vision input kinds: ``image`` (a classifier's image files and class folders) and ``scene`` (a slot
autoencoder's unlabelled images), each with a default recipe, so that ``attnhub finetune FAMILY --data DIR`` trains
an image classifier or a slot autoencoder from scratch on the user's folder; image classifiers get a baseline
(logistic regression on pixels, :mod:`vision.baselines`).

>>> recipe = ImageKind().default_recipe("vit_digits", "my_images")
>>> recipe.data.args["height"], recipe.data.args["channels"], recipe.model.args
(8, 1, {})
>>> ImageKind().default_recipe("coat_lite_micro_32", "my_images").model.args
{'in_chans': 3}
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from hub.classical import LinearProbabilities, kept_linear
from hub.core.registry import get_model_entry
from hub.explain import Explanation
from hub.kinds import (
    FOLDER_GROUPS,
    BaselineResult,
    CrossValidation,
    InputForm,
    InputKind,
    KindSpec,
    OODProfile,
    batch_axes,
    grouped_args,
    predict_per_file,
    register_kind,
)
from hub.recipe import (
    DataSection,
    EarlyStoppingSection,
    OptimizerSection,
    Recipe,
    SchedulerSection,
    TrainerSection,
    scratch_recipe,
)
from hub.uncertainty.ood import image_summary
from vision.baselines import pixel_baseline_on_run_split, pixel_cross_validation, pixel_probabilities
from vision.io import image_tensor, read_image, read_image_bytes

# (side, channels) of each family's input where it is not 32 x 32 RGB: vit_digits takes 8 x 8 grey digits,
# resnet_cbam18 has the ImageNet stem (7 x 7 stride 2 and max pooling) made for 224 x 224.
INPUT_SIZES = {"vit_digits": (8, 1), "resnet_cbam18": (224, 3)}
# How a family trains from scratch on a user's folder (no recipe file trains on one); a scene's overrides these.
OPTIMIZER = OptimizerSection(name="adamw", lr=1e-3, weight_decay=0.05)  # AdamW at 1e-3, decoupled decay 0.05
SCHEDULER = SchedulerSection(name="cosine", warmup_epochs=1)  # one warmup epoch, then cosine decay
# at most 40 epochs, stopped after 8 without a better validation metric; the best epoch tested
TRAINER = TrainerSection(max_epochs=40, early_stopping=EarlyStoppingSection(patience=8), test_checkpoint="best")


@dataclass(frozen=True)
class ImageSpec(KindSpec):
    """An image model's input: ``channels`` x ``height`` x ``width``, normalised as ``(x / 255 - mean) / std``."""

    height: int
    width: int
    channels: int
    mean: list[float]
    std: list[float]


def _example_images(card, size: int, generator: torch.Generator):
    """``x`` (B, C, H, W): normalised pixels."""
    spec = card.input_spec
    return batch_axes({"x": torch.randn(size, spec["channels"], spec["height"], spec["width"], generator=generator)})


@register_kind
class ImageKind(InputKind):
    """Image files (any size, grey or colour: converted) and folders of class sub-folders."""

    name, domain, Spec = "image", "vision", ImageSpec
    tasks = ("image-classification",)
    ood = OODProfile(input_scores=("inputs", "grey_energy"), summary=image_summary)
    input_form = InputForm.FILE_EACH
    example_input = staticmethod(_example_images)
    options = (FOLDER_GROUPS,)

    def ood_input_scores(self, input_spec: dict[str, Any], classifier: bool) -> tuple[str, ...]:
        """``grey_energy`` scores classifiers of colour images only (a grey input is unseen by them)."""
        colour_classifier = classifier and input_spec.get("channels", 1) > 1
        return tuple(s for s in self.ood.input_scores if s != "grey_energy" or colour_classifier)

    def finetune_data(self, card, path: str, groups: str | None = None) -> DataSection:
        spec = self.spec(card)
        return DataSection(name="image_folder", args={"root": str(path), "height": spec.height, "width": spec.width,
                                                      "channels": spec.channels, "mean": spec.mean, "std": spec.std,
                                                      **grouped_args(groups)})

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        return predict_per_file(model, paths, lambda path: read_image(path, card.input_spec), batch_size)

    def read_bytes(self, card, data: bytes, name: str) -> torch.Tensor:
        """An uploaded image file's bytes -> the ``(C, H, W)`` tensor that :meth:`predict` reads from the file."""
        return read_image_bytes(data, name, card.input_spec)

    def transform(self, card) -> Callable[[Any], torch.Tensor]:
        """An image file, PIL image or uint8 array -> the normalised ``(C, H, W)`` tensor (:func:`image_tensor`)."""
        self.spec(card)
        return partial(image_tensor, spec=card.input_spec)

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """The family's attention over the image, or Integrated Gradients (:func:`vision.explain.image_explanation`)."""
        from vision.explain import image_explanation  # imports timm: only when asked (cold start, issue 69)

        return image_explanation(model, inputs["x"], target)

    def explain_samples(self, card, inputs: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """Image files, or without them the first four images of the card's test split."""
        from vision.explain import image_samples

        return image_samples(card, inputs)

    def draw_explanation(self, card, inputs: dict[str, Any], explanation: Explanation, path: Path, title: str) -> None:
        from vision.explain import save_overlay

        save_overlay(inputs["x"][0], explanation.values, path, title)

    def baseline(self, run_dir) -> BaselineResult | None:
        return pixel_baseline_on_run_split(run_dir)

    def cross_validation(self, run_dir) -> CrossValidation | None:
        """Folds of an image folder's images outside the test split, logistic regression on the pixels out of
        fold, the refit on every image (:func:`vision.baselines.pixel_cross_validation`)."""
        return pixel_cross_validation(run_dir)

    def baseline_outputs(self, card, path: str):
        """The kept logistic regression's class probabilities for the image file at ``path`` (1, C)."""
        return pixel_probabilities(card, path)

    def baseline_module(self, card) -> torch.nn.Module:
        """The kept logistic regression on the model's input pixels, as a module (:class:`hub.classical
        .LinearProbabilities`): the model's input is what the regression reads."""
        return LinearProbabilities(kept_linear(card))

    def default_recipe(self, family: str, path: str, groups: str | None = None) -> Recipe:
        """The user's class folders resized to the family's input size (:data:`INPUT_SIZES`, else 32 x 32 RGB; grey
        images are converted), with light augmentation (random resized crops and flips); 40 epochs at most."""
        side, channels = INPUT_SIZES.get(family, (32, 3))
        takes_channels = "in_chans" in get_model_entry(family).arg_names()
        data = DataSection(name="image_folder", args={"root": str(path), "height": side, "width": side,
                                                      "channels": channels, "mean": [0.5] * channels,
                                                      "std": [0.5] * channels, "augment": "light",
                                                      **grouped_args(groups)})
        return scratch_recipe(family, data, {"in_chans": channels} if takes_channels else {},
                              optimizer=OPTIMIZER, scheduler=SCHEDULER, trainer=TRAINER)


@register_kind
class SceneKind(InputKind):
    """Unlabelled images of scenes, for slot autoencoders."""

    name, domain, Spec = "scene", "vision", ImageSpec
    tasks = ("object-discovery",)
    ood = OODProfile(input_scores=("inputs",), reconstruction=True, summary=image_summary)
    example_input = staticmethod(_example_images)

    def finetune_data(self, card, path: str) -> DataSection:
        """``attnhub finetune slot_autoencoder_micro_64.shapes --data DIR``: DIR's images, at the card's size."""
        return DataSection(name="scene_folder", args={"root": str(path), "size": self.spec(card).height})

    def transform(self, card) -> Callable[[Any], torch.Tensor]:
        """An image file, PIL image or uint8 array -> the normalised ``(C, H, W)`` tensor (:func:`image_tensor`)."""
        self.spec(card)
        return partial(image_tensor, spec=card.input_spec)

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """The slots' masks (:func:`vision.explain.scene_explanation`); a slot autoencoder has no classes."""
        from vision.explain import scene_explanation

        return scene_explanation(model, inputs["x"])

    def explain_samples(self, card, inputs: list[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """Image files, or without them the first four test scenes of the card."""
        from vision.explain import scene_samples

        return scene_samples(card, inputs)

    def draw_explanation(self, card, inputs: dict[str, Any], explanation: Explanation, path: Path, title: str) -> None:
        from vision.explain import save_slot_figure

        save_slot_figure(inputs["x"][0], explanation.extra, path, title)

    def default_recipe(self, family: str, path: str) -> Recipe:
        """The folder's images (searched recursively) at 64 x 64, trained by reconstruction at 4e-4 without weight
        decay, gradients clipped at norm 1; 30 epochs at most."""
        return scratch_recipe(family, DataSection(name="scene_folder", args={"root": str(path), "size": 64}),
                              optimizer=OPTIMIZER.replace(lr=4e-4, weight_decay=0.0), scheduler=SCHEDULER,
                              trainer=TRAINER.replace(max_epochs=30, gradient_clip_val=1.0))
