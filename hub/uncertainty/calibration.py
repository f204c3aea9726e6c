"""Classifiers you can trust: temperature scaling, calibration error and the trust score.

- Temperature scaling (Guo et al., "On Calibration of Modern Neural Networks", ICML 2017): one scalar
  ``T`` divides the logits, fitted by minimising the validation NLL; the predicted class never changes.
- Expected calibration error: torchmetrics' ``multiclass_calibration_error`` (15 equal-width bins, L1).
- Trust score (Jiang et al., "To Trust or Not to Trust a Classifier", NeurIPS 2018), used by the trustworthy
  medical ViT of the seeds (002 #2): the distance from an input's features to the nearest reference point of
  the closest class other than the predicted one, over the distance to the nearest point of the predicted
  class. High: the prediction agrees with the neighbourhood. Written here because no maintained library
  ships it (the authors' code is a research repository); distances come from scikit-learn's
  ``NearestNeighbors``.

:func:`calibrate` runs all three on a trained classifier (a run folder or a pretrained tag) with the
data named by its card: ``T`` and the trust score's reference set come from the validation split, the
figures from the test split. ``T`` is kept by the rule training uses too (:func:`choose_temperature`): a fitted
temperature that would raise the validation ECE is not applied. On a run folder the temperature is written into
its ``card.json``, so ``attnhub predict`` returns calibrated probabilities and ``attnhub publish`` carries it to the
shipped card.

>>> logits, labels = torch.tensor([[4.0, 0.0], [0.0, 4.0], [4.0, 0.0]]), torch.tensor([0, 1, 1])
>>> fit_temperature(logits, labels) > 1.0  # one confident mistake: soften
True
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from hub.errors import HubError
from hub.tasks import call_model

ECE_BINS = 15


def fit_temperature(logits: torch.Tensor, labels: torch.Tensor, steps: int = 100) -> float:
    """The temperature ``T > 0`` minimising ``cross_entropy(logits / T, labels)``. logits: (N, C), labels: (N,)."""
    logits, labels = logits.detach().double(), labels.detach().long()
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)  # T = exp(log_t) stays positive
    optimizer = torch.optim.LBFGS([log_t], lr=0.1, max_iter=steps, line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = F.cross_entropy(logits / log_t.exp(), labels)
        loss.backward()
        return loss

    optimizer.step(closure)
    return float(log_t.detach().exp())


def calibration_error(probs: torch.Tensor, labels: torch.Tensor, bins: int = ECE_BINS) -> float:
    """Expected calibration error of class probabilities ``probs`` (N, C) against ``labels`` (N,)."""
    from torchmetrics.functional.classification import multiclass_calibration_error

    return float(multiclass_calibration_error(probs.float(), labels.long(), num_classes=probs.shape[1],
                                              n_bins=bins, norm="l1"))


def choose_temperature(val_logits: torch.Tensor, val_labels: torch.Tensor) -> tuple[float, dict[str, float]]:
    """The temperature to apply to logits like ``val_logits`` (N, C), and what was rejected: the one fitted on the
    validation logits and labels (N,) by NLL (:func:`fit_temperature`), unless it would raise their expected
    calibration error; then 1.0, with the fitted one as ``{"rejected_temperature": T}``. The one rule of training's
    calibration step (:func:`hub.uncertainty.conformal.fit_temperature_figures`) and of :func:`calibrate`: neither
    makes the validation split's calibration worse."""
    temperature = fit_temperature(val_logits, val_labels)
    if calibration_error((val_logits / temperature).softmax(1), val_labels) > calibration_error(
            val_logits.softmax(1), val_labels):
        return 1.0, {"rejected_temperature": temperature}
    return temperature, {}


class TrustScore:
    """Jiang et al. (2018): ``d(x, nearest other class) / d(x, predicted class)`` in a feature space.

    ``fit(features (N, D), labels (N,))`` keeps, per class, the reference points whose distance to their
    ``k``-th nearest same-class neighbour is within the class's ``1 - alpha`` quantile (the paper's density
    filter: outliers are dropped); ``score(features (M, D), predicted (M,))`` returns (M,) scores.
    """

    def __init__(self, k: int = 10, alpha: float = 0.0):
        self.k, self.alpha = k, alpha
        self.index: dict[int, Any] = {}

    def fit(self, features: np.ndarray, labels: np.ndarray) -> "TrustScore":
        from sklearn.neighbors import NearestNeighbors

        features, labels = np.asarray(features, np.float64), np.asarray(labels)
        for label in np.unique(labels):
            points = features[labels == label]
            if self.alpha > 0 and len(points) > self.k:
                radius = NearestNeighbors(n_neighbors=self.k + 1).fit(points).kneighbors(points)[0][:, -1]
                points = points[radius <= np.quantile(radius, 1 - self.alpha)]
            self.index[int(label)] = NearestNeighbors(n_neighbors=1).fit(points)
        if len(self.index) < 2:
            raise HubError(f"the trust score needs reference points of at least 2 classes, got {list(self.index)}")
        return self

    def score(self, features: np.ndarray, predicted: np.ndarray) -> np.ndarray:
        features, predicted = np.asarray(features, np.float64), np.asarray(predicted)
        classes = sorted(self.index)
        distances = np.stack([self.index[c].kneighbors(features)[0][:, 0] for c in classes], 1)  # (M, classes)
        column = np.searchsorted(classes, predicted)
        to_predicted = distances[np.arange(len(features)), column]
        distances[np.arange(len(features)), column] = np.inf
        return distances.min(1) / np.maximum(to_predicted, 1e-12)


@torch.no_grad()
def model_outputs(model: torch.nn.Module, loader, split: str, progress: bool = True, task=None,
             device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits (N, C), pre-logit features (N, D), labels (N,)) over a loader of ``(x, y)`` batches of the split
    ``split`` (``val`` or ``test``), run on ``device``; a regression model's outputs (N, ...) and targets likewise.
    Other batches (a PyG graph whose masks pick the split's nodes, a batch of graphs) need the classification
    ``task``: the logarithms of its class probabilities for the split, equal to the logits less a constant per row
    (so the same probabilities at any temperature), serve as logits and features."""
    import sys

    from pytorch_lightning.utilities import move_data_to_device
    from tqdm import tqdm

    logits, features, labels = [], [], []
    for batch in tqdm(loader, desc=split, unit="batch", disable=not progress, file=sys.stderr, leave=False):
        batch = move_data_to_device(batch, device)
        if not (isinstance(batch, (list, tuple)) and len(batch) == 2):
            if task is None:
                raise HubError("calibration takes models whose data gives (inputs, labels) batches (images, audio, "
                               f"tables, ICU stays); this data gives {type(batch).__name__} batches")
            _, probs, y = task.step(model, batch, split)  # probs (N, C)
            logits.append(probs.clamp_min(torch.finfo(probs.dtype).tiny).log())
            features.append(logits[-1])
            labels.append(y)
            continue
        x, y = batch
        if hasattr(model, "forward_head"):
            hidden = model.forward_features(**x) if isinstance(x, dict) else model.forward_features(x)
            features.append(model.forward_head(hidden, pre_logits=True).flatten(1))
            logits.append(model.forward_head(hidden))
        else:  # no pre-logit features: the trust score works on the logits
            logits.append(call_model(model, x))
            features.append(logits[-1])
        labels.append(y)
    return torch.cat(logits).float().cpu(), torch.cat(features).float().cpu(), torch.cat(labels).cpu()


def auroc(score: np.ndarray, positive: np.ndarray) -> float | None:
    """How well ``score`` ranks the positives (correct predictions) first; None when one kind is absent."""
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(positive, score)) if 0 < positive.sum() < len(positive) else None


def calibrate(name: str, data_overrides: list[str] | None = None, alpha: float = 0.0,
              progress: bool = True) -> dict[str, Any]:
    """Fit the temperature and the trust score of classifier ``name`` (a run folder or a pretrained tag) on its
    validation split, measure them on its test split, and return the figures (see the module docstring)."""
    from hub.core.cards import write_card
    from hub.models import load_from_card, model_card
    from hub.names import RefKind, resolve
    from hub.recipe import card_data

    ref = resolve(name)
    card = model_card(ref)
    if not card.label_names:
        raise HubError(f"{name} is not a classifier (its card has no classes); calibration needs class probabilities")
    datamodule = card_data(card, data_overrides)
    datamodule.setup("fit")
    model = load_from_card(card).eval()
    val_logits, val_features, val_labels = model_outputs(model, datamodule.val_dataloader(), "val", progress)
    test_logits, test_features, test_labels = model_outputs(model, datamodule.test_dataloader(), "test", progress)
    temperature, rejected = choose_temperature(val_logits, val_labels)
    predicted = test_logits.argmax(1)
    correct = (predicted == test_labels).numpy()
    trust = TrustScore(alpha=alpha).fit(val_features.numpy(), val_labels.numpy()).score(test_features.numpy(),
                                                                                    predicted.numpy())
    confidence = (test_logits / temperature).softmax(1).max(1).values.numpy()
    result = {
        "temperature": temperature,
        **rejected,
        "fitted_on": f"validation split ({len(val_labels)} items)",
        "val_nll": float(F.cross_entropy(val_logits, val_labels)),
        "val_nll_calibrated": float(F.cross_entropy(val_logits / temperature, val_labels)),
        "test_items": len(test_labels),
        "test_acc": float(correct.mean()),
        "test_nll": float(F.cross_entropy(test_logits, test_labels)),
        "test_nll_calibrated": float(F.cross_entropy(test_logits / temperature, test_labels)),
        "test_ece": calibration_error(test_logits.softmax(1), test_labels),
        "test_ece_calibrated": calibration_error((test_logits / temperature).softmax(1), test_labels),
        "trust_score_auroc_for_correct": auroc(trust, correct),
        "confidence_auroc_for_correct": auroc(confidence, correct),
        "trust_score_median": {"correct": float(np.median(trust[correct])) if correct.any() else None,
                               "wrong": float(np.median(trust[~correct])) if (~correct).any() else None},
    }
    if ref.kind is RefKind.RUN:
        card_path = ref.card_path(card)
        write_card(dataclasses.replace(card, calibration={"temperature": temperature, **{
            k: v for k, v in result.items() if k != "temperature"}}, card_dir=""), card_path)
        result["card"] = str(card_path)
    return result


def format_report(result: dict[str, Any]) -> str:
    """The figures of :func:`calibrate`, one per line."""
    return "\n".join(f"{key}: {json.dumps(value) if isinstance(value, dict) else value}"
                     if not isinstance(value, float) else f"{key}: {value:.4f}" for key, value in result.items())
