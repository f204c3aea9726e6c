"""Predictions that know when they don't know: an out-of-distribution score and flag per input.

Scores, by what a model and its inputs offer (the card's ``ood["score"]`` names the ones used):

- ``mahalanobis``: the squared Mahalanobis distance of the input's penultimate features (``forward_head(
  forward_features(x), pre_logits=True)``, pooled to (B, D)) to the nearest class mean, with one covariance
  shared by the classes (Lee et al., "A Simple Unified Framework for Detecting Out-of-Distribution Samples and
  Adversarial Attacks", NeurIPS 2018), shrunk by scikit-learn's Ledoit-Wolf estimator; a regressor has one mean.
- ``energy``: ``-logsumexp(logits)`` (Liu et al., "Energy-based Out-of-distribution Detection", NeurIPS 2020), less
  its median on the validation split (so that its quantile below is positive), for classifiers without
  ``forward_head`` and for a graph's node classifiers.
- ``range``: how far an input's values lie from the training data, as a robust z-score ``|x - median| / spread``
  per numeric column of a table (its raw cells), per channel of a sensor window (the last dimension of the model's
  input), per sensor and channel of a traffic window (the last two: each road has its own range) or per covariate
  of a survival table (its standardised genes and clinical values), the largest over the input. A table row with
  a category not seen in training, or an empty cell in a column never empty in training (a survival table's gene),
  scores ``inf``.
- ``reconstruction``: an autoencoder's mean squared error between its input and its output, per input (a
  novelty score as old as autoencoders; e.g. Japkowicz et al., "A Novelty Detection Approach to Classification",
  IJCAI 1995): the slot autoencoders' scenes, which have no classes and no penultimate features.
- ``inputs``: the squared Mahalanobis distance (one mean, Ledoit-Wolf shrunk precision) of a small fixed summary of
  the model's input (its kind's ``OODProfile.summary``): of images and scenes (B, C, H, W), in pixel values, the
  channels' means over a 4x4 grid, their standard deviations, their mean absolute horizontal and vertical
  differences and how sparse these are (the texture: a drawn scene is flat with sharp edges), and the colourfulness
  (the mean over pixels of the standard deviation across channels: 0 for grey images); of spectrograms (B, F, T),
  per band (F pooled to 8) the mean, standard deviation and mean absolute change over time (speech moves, noise and
  tones hold still) and the lag-one autocorrelation over time (speech is smooth from frame to frame, noise is not).
  Lee et al. (2018, above) score the features of every layer, not only the penultimate, because low-level statistics
  catch shifts that the last features, trained to tell the classes apart, map onto the training data; this is the
  lowest level, the input, as the range check is for tables and sensors.
- ``grey_energy``: for classifiers of colour images, an input of the kind rare in training (grey, its channels
  equal within :data:`GREY_COLOURFULNESS`, for a colour dataset; colour for a grey one, such as BreastMNIST's scans
  in three channels) scores ``-log`` of the share of training images of its kind times the share of validation
  inputs whose energy is at least its own (Fisher's product of two tail probabilities: rare in one way and unsure in
  another); an input of the common kind scores 0 (the other scores cover it). Measured on the four CIFAR-10 tags:
  BreastMNIST's scans lie inside CIFAR-10's spread of penultimate features, of intermediate features (their Gram
  matrices, Sastry & Oore 2020, on vit_micro) and of the input summary, each of these flagging 0% of them at a 1%
  false-alarm rate; but they are grey, as about 1.3% of CIFAR-10's images are (too many to flag every grey input at
  1%), and the models are unsure of them (energy AUROC 0.87 for vit_micro, 0.94 for resnet_cbam), which together
  single them out: 70-92% of the 156 test scans flagged, AUROC 0.98-0.99 (``benchmarks/uncertainty.py``). The
  cost: 23-47% of CIFAR-10's own test photos, turned grey, are flagged too. Applied to every input instead of the
  rare kind alone, it flagged 54-74% of the 780 scans instead of 80-93%: the energy of colour inputs raised the
  combined threshold.
- ``sensor_order``: for traffic windows (B, T, N sensors, C), one minus the Spearman correlation between the order
  of the sensors by their mean speed over the window and their order over the training windows: a road network's
  fast and slow roads keep their order through rush hours, while a window of other sensors, or of permuted ones,
  does not, though each value stays in its sensor's range. Measured on testam.los_loop, this score alone at its
  validation 99th percentile: permuted sensors 100% flagged, 3.0% of the (later) test windows; a Mahalanobis distance
  of the per-sensor means and standard deviations flagged them all too, but 22% of the test windows, whose congestion
  episodes the training period did not hold.

Which model gets which (each input kind declares its part as an :class:`~hub.kinds.OODProfile`, in its domain's
``kinds.py``; :func:`scores_for` reads it): a model with ``forward_features`` / ``forward_head`` gets
``mahalanobis``, else a classifier gets ``energy``; tables, sensor and traffic windows and survival tables add
``range`` (a survival model, a regressor of risk: ``mahalanobis`` with one mean, plus ``range`` on its covariates);
scenes get ``reconstruction``; images, scenes and spectrograms add ``inputs``, classifiers of three-channel images
``grey_energy``, traffic windows ``sensor_order``. A graph's node classifier gets ``energy``: measured on Cora and
CiteSeer, Mahalanobis on the node embeddings (class means of the training nodes) flagged almost none of the test
nodes whose features were shuffled (AUROC 0.73 on gat.cora), the energy most of them (AUROC 0.99;
``benchmarks/uncertainty.py``).

A classifier of more than two classes then chooses its class-dependent score (``mahalanobis``, ``energy`` or
``msp``, one minus the maximum softmax probability) on its validation split, with no extra run: each validation
input is scored as if its own class were held out of training (its logit and its class mean left out,
:func:`held_out_class_scores`), and the score that best separates these from the same inputs with every class is kept
(:func:`choose_class_score`; the card's ``ood["class_score"]`` records the AUROCs). On CIFAR-10's open-set protocol
(``benchmarks/open_set.py``) Mahalanobis ranked held-out classes far worse than the logits' scores (AUROC 0.53-0.57
against 0.84-0.87 on split 0), and this proxy ranked the four scores in the same order as real held-out classes did.
Cards fitted before this rule keep their scores until refitted (:func:`fit_card`).

Each score is divided by its own 99th percentile (the ``1 - false_alarm_rate`` quantile) on the validation split,
and an input is flagged (``ood``) when its ``ood_score`` exceeds the same quantile of the validation inputs'
``ood_score``: about ``false_alarm_rate`` of in-distribution inputs are flagged. How the scaled scores make the
``ood_score`` is the card's ``ood["combine"]`` (:meth:`Detector.score`): ``excess`` for detectors fitted now, the
model's own score (the first; from 0 up where an input score is past its quantile) plus each input score's excess over
its own quantile, max'd with an input score past the largest value of the validation split, and with ``grey_energy``
wherever it is positive (it is 0 on every input of the common kind, :data:`SILENT_SCORES`); ``gated`` and ``max`` for
cards fitted before. Why not ``max``: on a near shift (new objects, new classes) the input scores are quiet, and their
in-distribution noise outranked the model's score (issue 47). Why not ``gated`` (the model's score max'd with the input
scores past their quantile): it lifted the 1% of known images past the input summary's quantile above every unknown
one. On CIFAR-10's open-set protocol (``benchmarks/open_set.py``, three class splits) the test unknowns' AUROC went
0.829 / 0.814 / 0.641 under ``gated`` to 0.834 / 0.818 / 0.644 under ``excess``, with the energy alone at 0.839 /
0.829 / 0.650; what is left of the gap is ``grey_energy`` lifting CIFAR-10's own grey photos (about 1% of the test
split), which the far rows of grey scans need. Choosing one score per model by a held-out validation AUROC instead
(a hinge on the proxy) was tried in an earlier session and dropped: it gave up far shifts that the input scores catch
(BreastMNIST's scans given to vit_micro_patch4_32.cifar10; that run is not kept in this repository).
Statistics (class means, precision matrices, medians and spreads) come from the training split (at most
:data:`MAX_FIT_ITEMS` items), the threshold from the validation split; the test split's flagged share is recorded
as ``test_false_alarm_rate``. They are written to a safetensors sidecar (``ood.safetensors`` in a run folder,
``<tag>.ood.safetensors`` beside a shipped tag's weights) whose sha256 the card's ``ood`` section records and
every load checks.

A graph's nodes are scored in one pass over the whole graph: its validation nodes (``val_mask``) give the threshold,
its test nodes the measured rate, and a prediction scores each predicted node. A model that gets no score (a graph
classifier's batches of graphs) gets ``{"score": "none", "note": why}`` in its card, and a card without statistics
gives predictions without the columns.

>>> import torch
>>> stats = mahalanobis_statistics(torch.randn(500, 4), torch.randint(0, 2, (500,)))
>>> near, far = mahalanobis(torch.zeros(1, 4), **stats), mahalanobis(torch.full((1, 4), 9.0), **stats)
>>> bool(far > 10 * near)
True
"""
from __future__ import annotations

import dataclasses
import inspect
import logging
import sys
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F

from hub.errors import HubError
from hub.kinds import InputKind, registered_kind

log = logging.getLogger("hub")

DEFAULT_FALSE_ALARM_RATE = 0.01
MAX_FIT_ITEMS = 10_000  # training items the statistics are fitted on (a random subset of a larger split)
INPUT_SCORES = ("range", "inputs", "grey_energy", "sensor_order")  # a kind's OODProfile.input_scores, in this order
VALUE_SCORES = {"range", "sensor_order"}  # scores that read the model's input values (a table's: its raw cells)
SUMMARY_SCORES = {"inputs", "grey_energy"}  # scores that read the input's summary (input_summary)
CLASS_SCORES = ("mahalanobis", "energy", "msp")  # the class-dependent scores: one is chosen per classifier
# input scores that are 0 on every input of the common kind (grey_energy: colour photos for a colour dataset), so
# silent on a near shift of that kind: they count wherever they are positive, not only past their quantile (counted
# past it, CIFAR-10's own photos in grey fell from AUROC 0.975-0.979 to 0.848-0.949 on four CIFAR-10 tags)
SILENT_SCORES = {"grey_energy"}
GREY_COLOURFULNESS = 2e-3  # an image whose colourfulness (image_summary's last column) is below this is grey


# ---- the scores --------------------------------------------------------------------------------------------------

def pooled_features(model: torch.nn.Module, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """``(features (B, D), outputs)``: the penultimate features ``forward_head(forward_features(*args, **kwargs),
    pre_logits=True)``, averaged over any dimension between the batch and the last (TabM's k members), and the
    model's outputs from the same pass. ``args``, ``kwargs``: the model's inputs, as its ``forward`` takes them (a
    keyword ``forward_features`` does not take, such as the training rows' ``index`` of a table, is left out)."""
    accepted = inspect.signature(model.forward_features).parameters
    hidden = model.forward_features(*args, **{k: v for k, v in kwargs.items() if k in accepted})
    features = model.forward_head(hidden, pre_logits=True)
    if features.ndim > 2:
        features = features.flatten(1, -2).mean(1)
    return features.float(), model.forward_head(hidden)


def mahalanobis_statistics(features: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """Class means ``means`` (C, D) (one mean when ``labels`` is None) and the precision matrix ``precision``
    (D, D) of the class-centred ``features`` (N, D), with Ledoit-Wolf shrinkage. ``labels``: (N,) class indices,
    or (N, C) soft targets (mixup), whose largest class counts."""
    from sklearn.covariance import LedoitWolf

    features = features.double()
    if labels is None:
        labels = torch.zeros(len(features), dtype=torch.long)
    labels = labels.argmax(-1) if labels.ndim == 2 else labels.long()
    classes = labels.unique()
    means = torch.stack([features[labels == c].mean(0) for c in classes])  # (C, D)
    centred = features - means[torch.searchsorted(classes, labels)]
    precision = LedoitWolf(assume_centered=True).fit(centred.numpy()).precision_
    return {"means": means.float(), "precision": torch.from_numpy(precision).float()}


def mahalanobis(features: torch.Tensor, means: torch.Tensor, precision: torch.Tensor) -> torch.Tensor:
    """(N,) squared Mahalanobis distance of ``features`` (N, D) to the nearest of ``means`` (C, D)."""
    delta = features.double()[:, None, :] - means.double()[None]  # (N, C, D)
    return torch.einsum("ncd,de,nce->nc", delta, precision.double(), delta).min(1).values.float()


def energy(logits: torch.Tensor) -> torch.Tensor:
    """(N,) ``-logsumexp(logits)`` of ``logits`` (N, C): higher is less like the training data."""
    return -torch.logsumexp(logits.float(), dim=-1)


def max_softmax_score(logits: torch.Tensor) -> torch.Tensor:
    """(N,) one minus the maximum softmax probability of ``logits`` (N, C) (Hendrycks & Gimpel, "A Baseline for
    Detecting Misclassified and Out-of-Distribution Examples", ICLR 2017): higher is less sure."""
    return 1 - logits.float().softmax(-1).max(-1).values


def max_logit_score(logits: torch.Tensor) -> torch.Tensor:
    """(N,) minus the largest of ``logits`` (N, C) (Hendrycks et al., "Scaling Out-of-Distribution Detection for
    Real-World Settings", ICML 2022): higher is less sure."""
    return -logits.float().max(-1).values


def knn_score(features: torch.Tensor, bank: torch.Tensor, k: int = 50) -> torch.Tensor:
    """(N,) the distance of each of ``features`` (N, D), normalised to unit length, to its ``k``-th nearest neighbour
    among the normalised training features ``bank`` (M, D) (Sun et al., "Out-of-Distribution Detection with Deep
    Nearest Neighbors", ICML 2022, who use k=50 on CIFAR-10's 50,000 training images). Brute force in chunks, as
    scikit-learn's exact search would be: no index library is needed at these sizes."""
    queries, keys = F.normalize(features.float(), dim=-1), F.normalize(bank.float(), dim=-1)
    k = min(k, len(keys))
    distances = [torch.cdist(chunk, keys).kthvalue(k, dim=-1).values for chunk in queries.split(1024)]
    return torch.cat(distances) if distances else torch.zeros(0)


def held_out_class_scores(logits: torch.Tensor, labels: torch.Tensor, features: torch.Tensor | None = None,
                          means: torch.Tensor | None = None, precision: torch.Tensor | None = None
                          ) -> dict[str, torch.Tensor]:
    """The class-dependent scores of known-class inputs computed as if each input's own class were unknown: its
    logit left out of ``logits`` (N, C) (MSP, max logit, energy) and its class mean left out of ``means`` (C, D)
    (Mahalanobis of ``features`` (N, D)). ``labels``: (N,) the inputs' classes. Ranked against the same scores of
    the same inputs with every class, they simulate held-out classes from a validation split alone: a proxy for the
    open-set protocol (a model trained without some classes, shown them), which needs no extra training run; how
    well it tracks real held-out classes is measured in ``benchmarks/open_set.py``."""
    own = F.one_hot(labels.long(), logits.shape[-1]).bool()
    rest = logits.float().masked_fill(own, float("-inf"))
    scores = {"msp": max_softmax_score(rest), "max_logit": max_logit_score(rest), "energy": energy(rest)}
    if features is not None:
        delta = features.double()[:, None, :] - means.double()[None]  # (N, C, D)
        distances = torch.einsum("ncd,de,nce->nc", delta, precision.double(), delta)
        scores["mahalanobis"] = distances.masked_fill(own, float("inf")).min(1).values.float()
    return scores


def grey_energy(logits: torch.Tensor, colourfulness: torch.Tensor, grey_share: torch.Tensor,
                val_energies: torch.Tensor) -> np.ndarray:
    """(N,) of images with ``logits`` (N, C) and ``colourfulness`` (N,): for an input of the kind (grey or colour)
    whose share of the training images (``grey_share`` for grey) is below one half, ``-log(share * tail)``, with
    ``tail`` the share of the sorted ``val_energies`` (V,) at least the input's :func:`energy` (one added to both
    counts: never 0); 0 for an input of the common kind."""
    above = len(val_energies) - torch.searchsorted(val_energies.double(), energy(logits).double())
    tail = (above + 1) / (len(val_energies) + 1)
    share = torch.where(colourfulness < GREY_COLOURFULNESS, grey_share.double(), 1 - grey_share.double())
    return torch.where(share < 0.5, -(share.log() + tail.log()), 0.0).numpy()


def range_statistics(values: np.ndarray) -> dict[str, torch.Tensor]:
    """Per column of ``values`` (N, *F) (NaN ignored): ``median`` (*F) and a robust ``spread`` (*F): the
    interquartile range / 1.349 (a standard deviation for normal data), else the central 98% range / 4.65, else
    the full range / 6, else 1 (a constant column)."""
    quantiles = np.nanquantile(values.astype(np.float64), [0.0, 0.01, 0.25, 0.5, 0.75, 0.99, 1.0], axis=0)
    spread = quantiles[4] - quantiles[2]
    spread = np.where(spread > 0, spread / 1.349, (quantiles[5] - quantiles[1]) / 4.65)
    spread = np.where(spread > 0, spread, (quantiles[6] - quantiles[0]) / 6)
    spread = np.where(spread > 0, spread, 1.0)
    return {"median": torch.from_numpy(quantiles[3]).float(), "spread": torch.from_numpy(spread).float()}


def range_score(values: np.ndarray, median: torch.Tensor, spread: torch.Tensor) -> np.ndarray:
    """(N,) the largest robust z-score ``|x - median| / spread`` of each row of ``values`` (N, ..., *F), ``median``
    and ``spread`` of shape F (NaN cells count 0)."""
    z = np.abs(values.astype(np.float64) - median.double().numpy()) / spread.double().numpy()
    return np.nan_to_num(z, nan=0.0).reshape(len(values), -1).max(1)


def image_summary(x: torch.Tensor, spec: dict[str, Any]) -> torch.Tensor:
    """(B, 20C + 1) of images (B, C, H, W) normalised by ``spec``'s ``mean`` and ``std`` (C,), in pixel values: per
    channel the means over a 4x4 grid (16C), the standard deviation (C), the mean absolute horizontal and vertical
    differences (2C) and the log of their sparsity ``mean(d^2) / mean(|d|)^2`` (C: high for flat regions with sharp
    edges), then the colourfulness (the standard deviation across channels, averaged over pixels; 0 for grey
    images, and for one channel)."""
    mean, std = (torch.tensor(spec[k], dtype=torch.float32, device=x.device)[:, None, None] for k in ("mean", "std"))
    pixels = x.float() * std + mean
    dx, dy = pixels[..., 1:] - pixels[..., :-1], pixels[..., 1:, :] - pixels[..., :-1, :]
    differences = torch.cat([dx.flatten(2), dy.flatten(2)], 2)  # (B, C, D)
    sparsity = differences.pow(2).mean(2) / differences.abs().mean(2).pow(2).clamp_min(1e-12)
    return torch.cat([F.adaptive_avg_pool2d(pixels, 4).flatten(1), pixels.flatten(2).std(2), dx.abs().mean((2, 3)),
                      dy.abs().mean((2, 3)), sparsity.log(), pixels.std(1, unbiased=False).mean((1, 2))[:, None]], 1)


def spectrogram_summary(x: torch.Tensor, spec: dict[str, Any]) -> torch.Tensor:
    """(B, 25) of spectrograms (B, F, T): per band (F averaged into 8) the mean, the standard deviation and the
    mean absolute change from frame to frame, over time; then the lag-one autocorrelation over time, averaged over
    the F bins (speech changes smoothly from frame to frame, noise does not). Measured on the FSDD tags: without
    the autocorrelation, white noise scored 1.1 to 1.3 times the validation 99th percentile for ast_tiny.fsdd (a
    coin toss at the combined threshold), with it at least 4.5 times (median 5.3); with 16 bands and no
    autocorrelation, 35% of it passed even that percentile, against all of it with 8."""
    bands = F.adaptive_avg_pool1d(x.float().transpose(1, 2), 8).transpose(1, 2)  # (B, 8, T)
    centred = x.float() - x.float().mean(2, keepdim=True)  # (B, F, T)
    autocorrelation = (centred[..., 1:] * centred[..., :-1]).mean(2) / centred.pow(2).mean(2).clamp_min(1e-6)
    return torch.cat([bands.mean(2), bands.std(2), bands.diff(dim=2).abs().mean(2),
                      autocorrelation.mean(1, keepdim=True)], 1)


def sensor_ranks(values: np.ndarray) -> np.ndarray:
    """(B, N) the ranks of the sensors by their mean first channel (speed) over each window of ``values``
    (B, T, N, C)."""
    from scipy.stats import rankdata

    return rankdata(values[..., 0].astype(np.float64).mean(1), axis=1)


def sensor_order_score(values: np.ndarray, training_ranks: torch.Tensor) -> np.ndarray:
    """(B,) one minus the Spearman correlation between the sensors' order in each window of ``values``
    (B, T, N, C) and their order over the training windows ``training_ranks`` (N,)."""
    ranks, reference = sensor_ranks(values), training_ranks.double().numpy()
    ranks, reference = ranks - ranks.mean(1, keepdims=True), reference - reference.mean()
    return 1 - ranks @ reference / (np.linalg.norm(ranks, axis=1) * np.linalg.norm(reference)).clip(1e-12)


def input_kind(spec: dict[str, Any]) -> InputKind:
    """The kind of the inputs ``spec`` (a card's ``input_spec``) describes, whose :class:`~hub.kinds.OODProfile` and
    hooks say what the scores read; a kind no domain registers gets the defaults (the model's own score alone)."""
    return registered_kind(spec.get("kind")) or InputKind()


def input_summary(x: torch.Tensor, spec: dict[str, Any]) -> torch.Tensor:
    """(B, S) the summary of the model's input ``x`` that its kind declares (``OODProfile.summary``)."""
    return input_kind(spec).ood.summary(x, spec).detach().cpu()


# ---- the detector ------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Detector:
    """The fitted scores of one model: ``scores`` names them (``mahalanobis``, ``energy``, ``range``, ...) in the order
    of ``scales`` (S,) (each score's validation quantile), ``statistics`` holds their tensors, ``threshold`` the
    validation quantile of the combined score."""

    scores: list[str]
    statistics: dict[str, torch.Tensor]
    threshold: float
    combine: Literal["max", "gated", "excess"] = "excess"  # how the scaled scores make ood_score (:meth:`score`)

    def components(self, features: torch.Tensor | None, logits: torch.Tensor | None,
                   values: np.ndarray | None, unseen: np.ndarray | None = None,
                   errors: np.ndarray | None = None, summaries: torch.Tensor | None = None) -> np.ndarray:
        """(N, S) the raw scores: ``features`` (N, D) for Mahalanobis, ``logits`` (N, C) for the energy,
        ``values`` (N, ..., F) and ``unseen`` (N,) for the range check (without ``unseen``, an empty (NaN) value in
        a column the statistics mark ``never_empty`` counts as unseen), ``errors`` (N,) reconstruction errors,
        ``summaries`` (N, S') the inputs' summaries (:func:`input_summary`)."""
        columns = []
        for name in self.scores:
            if name == "mahalanobis":
                columns.append(mahalanobis(features, self.statistics["means"], self.statistics["precision"]).numpy())
            elif name == "energy":
                columns.append(energy(logits).numpy() - self.statistics["energy_offset"].item())
            elif name == "msp":
                columns.append(max_softmax_score(logits).numpy().astype(np.float64))
            elif name == "reconstruction":
                columns.append(errors)
            elif name == "inputs":
                columns.append(mahalanobis(summaries, self.statistics["input_means"],
                                           self.statistics["input_precision"]).numpy())
            elif name == "grey_energy":
                columns.append(grey_energy(logits, summaries[:, -1], self.statistics["grey_share"],
                                           self.statistics["val_energies"]))
            elif name == "sensor_order":
                columns.append(sensor_order_score(values, self.statistics["sensor_ranks"]))
            else:
                score = range_score(values, self.statistics["median"], self.statistics["spread"])
                if unseen is None and "never_empty" in self.statistics:
                    empty = np.isnan(values) & self.statistics["never_empty"].bool().numpy()
                    unseen = empty.reshape(len(values), -1).any(1)
                columns.append(np.where(unseen, np.inf, score) if unseen is not None else score)
        return np.stack(columns, 1).astype(np.float64)

    def score(self, components: np.ndarray) -> np.ndarray:
        """(N,) ``ood_score`` of the raw ``components`` (N, S), each over its validation quantile (so 1 is its
        threshold). The model's own score is the first, unless every score is an input score (then: the largest).

        - ``excess`` (detectors fitted now): the model's score (from 0 up where an input score is past 1) plus each
          input score's excess over 1, max'd with the :data:`SILENT_SCORES` that are positive and with the input
          scores past the largest value of the validation split (``statistics["maxima"]``). An input score just
          past its quantile (1% of in-distribution inputs by construction) moves the model's ranking by little; one
          far past it (noise, a value out of range, ``inf`` for an unseen category) by as much as it is past.
        - ``gated`` (cards fitted 2026-12-06): the model's score max'd with the input scores past 1 and the silent
          scores that are positive, which lifted every in-distribution input past an input quantile above the
          model's whole ranking.
        - ``max`` (cards fitted before): the largest scaled score.
        """
        scales = self.statistics["scales"].double().numpy()
        scaled = components / scales
        if self.combine == "max" or scaled.shape[1] == 1 or self.scores[0] in INPUT_SCORES:
            return scaled.max(1)
        model, later = scaled[:, 0], scaled[:, 1:]
        silent = np.array([name in SILENT_SCORES for name in self.scores[1:]])
        speaking = np.where(silent & (later > 0.0), later, -np.inf).max(1)
        if self.combine == "gated":
            return np.maximum(np.maximum(model, speaking), np.where(later > 1.0, later, -np.inf).max(1))
        excess = np.where(~silent & (later > 1.0), later - 1.0, 0.0).sum(1)  # NaN (> 1 is False) adds nothing
        # past an input quantile the model's score counts from 0 up (the energy's validation median; the least value
        # of the others): a confident model must not cancel the input's evidence (ssast_tiny.fsdd's white noise,
        # energy AUROC 0.144: AUROC 0.936 and none flagged without this floor)
        combined = np.where(excess > 0, np.maximum(model, 0.0) + excess, model)
        # past the largest value the validation split held, an input score counts in full, as under gated (the same
        # noise: its input summary at 2.0 times its quantile, 1.58 at most on validation; 42% flagged without this)
        maxima = self.statistics.get("maxima", torch.full_like(self.statistics["scales"], float("inf")))
        beyond = np.where(~silent & (later > (maxima.double().numpy() / scales)[1:]), later, -np.inf).max(1)
        return np.maximum.reduce([combined, speaking, beyond])

    def flag(self, score: np.ndarray) -> np.ndarray:
        return score > self.threshold


def _quantile_scale(values: np.ndarray, rate: float) -> float:
    """The ``1 - rate`` quantile of the finite ``values``; where that is not positive (a score that is 0 on almost
    every validation input, such as ``grey_energy`` on colour images), their largest value, so that the score counts
    only beyond what validation held (1 when no value is positive)."""
    finite = values[np.isfinite(values)]
    scale = float(np.quantile(finite, 1 - rate)) if len(finite) else 1.0
    if scale <= 0:
        scale = float(finite.max()) if len(finite) else 1.0
    return scale if scale > 0 else 1.0


def _largest(values: np.ndarray) -> float:
    """The largest finite of ``values`` (``inf`` when none is finite: nothing counts as beyond it)."""
    finite = values[np.isfinite(values)]
    return float(finite.max()) if len(finite) else float("inf")


def choose_class_score(val: SplitOutputs, statistics: dict[str, torch.Tensor], default: str
                       ) -> tuple[str, dict[str, float]]:
    """The class-dependent score (among ``mahalanobis`` when ``statistics`` has class means, ``energy`` and
    ``msp``) that best tells the validation inputs, each as if its own class were unknown
    (:func:`held_out_class_scores`), from the same inputs with every class: ``(name, {name: AUROC})``. ``default``
    (the kind's score) wins ties. Measured on CIFAR-10's open-set protocol (``benchmarks/open_set.py``): this proxy
    ranked the scores as the validation classes held out of training did."""
    from sklearn.metrics import roc_auc_score

    has_means = "means" in statistics and val.features is not None
    held_out = held_out_class_scores(val.logits, val.labels, val.features if has_means else None,
                                     statistics.get("means"), statistics.get("precision"))
    every_class = {"energy": energy(val.logits), "msp": max_softmax_score(val.logits)}
    if has_means:
        every_class["mahalanobis"] = mahalanobis(val.features, statistics["means"], statistics["precision"])
    labels = np.r_[np.zeros(len(val.labels)), np.ones(len(val.labels))]
    aurocs = {name: float(roc_auc_score(labels, np.r_[every_class[name].double().numpy(),
                                                      held_out[name].double().numpy()]))
              for name in sorted(every_class, key=lambda n: n != default)}
    return max(aurocs, key=aurocs.get), aurocs


class NoOODScore(HubError):
    """A model that gets no OOD score (see the module docstring)."""


def scores_for(card, model: torch.nn.Module) -> list[str]:
    """The scores a model gets (see the module docstring): the model's own, then the input scores its kind's
    :class:`~hub.kinds.OODProfile` declares and its ``ood_input_scores`` keeps for this card; raises naming
    why when it gets none."""
    kind = input_kind(card.input_spec)
    profile = kind.ood
    unknown = set(profile.input_scores) - set(INPUT_SCORES)
    if unknown:
        raise HubError(f"the input kind {card.input_spec.get('kind')!r} declares the unknown OOD score(s) "
                       f"{sorted(unknown)}; expected some of {list(INPUT_SCORES)}")
    scores = []
    if profile.reconstruction:
        scores.append("reconstruction")
    elif hasattr(model, "forward_head") and hasattr(model, "forward_features") and not profile.graph_nodes:
        scores.append("mahalanobis")
    elif card.label_names:
        scores.append("energy")
    chosen = kind.ood_input_scores(card.input_spec, classifier=bool(card.label_names))
    scores += [s for s in INPUT_SCORES if s in chosen]
    if not scores:
        raise NoOODScore(f"no OOD score for {card.name}: it has no forward_features / forward_head, is not a "
                       f"classifier and its inputs (kind {card.input_spec.get('kind', '')!r}) have no range check")
    return scores


@dataclasses.dataclass
class SplitOutputs:
    """What the scores need of one split: features (N, D), logits (N, C) (None for an autoencoder, whose outputs
    are images), labels (N,), channel or covariate values (N, ..., F) (the model's input) or a table's numbers
    (N, F) and unseen rows (N,), reconstruction errors (N,), the inputs' summaries (N, S)."""

    features: torch.Tensor | None
    logits: torch.Tensor | None
    labels: torch.Tensor
    values: np.ndarray | None
    unseen: np.ndarray | None
    errors: np.ndarray | None = None
    summaries: torch.Tensor | None = None

    def components(self, detector: Detector) -> np.ndarray:
        return detector.components(self.features, self.logits, self.values, self.unseen, self.errors,
                                   self.summaries)


def reconstruction_errors(x: torch.Tensor, reconstruction: torch.Tensor) -> np.ndarray:
    """(B,) mean squared error between each input of ``x`` (B, ...) and its ``reconstruction`` (B, ...)."""
    return (reconstruction.float() - x.float()).pow(2).flatten(1).mean(1).cpu().numpy().astype(np.float64)


@torch.no_grad()
def split_outputs(model: torch.nn.Module, loader, scores: list[str], spec: dict[str, Any], frame=None,
                  limit: int | None = None, progress: bool = False, desc: str = "",
                  features: bool = False) -> SplitOutputs:
    """Run ``model`` over ``loader`` (``(x, y)`` batches; at most ``limit`` items) and keep what ``scores`` need.
    ``spec``: the card's ``input_spec``. A table's range check reads the split's raw ``frame`` (its rows in the
    loader's order: val and test). ``features``: also keep the penultimate features when no score needs them (for
    baselines that read them, such as :func:`knn_score`)."""
    from pytorch_lightning.utilities import move_data_to_device
    from tqdm import tqdm

    from hub.tasks import call_model

    device, kind = next(model.parameters()).device, input_kind(spec)
    keep_features = features or "mahalanobis" in scores
    features, logits, labels, values, errors, summaries, count = [], [], [], [], [], [], 0
    for batch in tqdm(loader, desc=desc, unit="batch", disable=not progress, file=sys.stderr, leave=False):
        if not (isinstance(batch, (list, tuple)) and len(batch) == 2):
            raise NoOODScore(f"no OOD score: the statistics take data that gives (inputs, targets) batches; this "
                             f"data gives {type(batch).__name__} batches")
        x, y = batch
        x, y = move_data_to_device(x, device), y.cpu()
        if keep_features:
            feats, out = pooled_features(model, **x) if isinstance(x, dict) else pooled_features(model, x)
            features.append(feats.cpu())
        if "mahalanobis" not in scores:  # the scores read the model's own outputs (with its test-time augmentation)
            out = call_model(model, x)
        if "reconstruction" in scores:
            errors.append(reconstruction_errors(x, out))
        else:
            logits.append(out.float().cpu())
        labels.append(y)
        if VALUE_SCORES & set(scores) and not kind.ood.rows:
            values.append(kind.ood_values(x))
        if SUMMARY_SCORES & set(scores):
            summaries.append(input_summary(x, spec))
        count += len(y)
        if limit is not None and count >= limit:
            break
    table_values = (kind.ood_rows(frame, spec) if frame is not None and "range" in scores and kind.ood.rows
                    else (None, None))
    return SplitOutputs(torch.cat(features) if features else None, torch.cat(logits) if logits else None,
                        torch.cat(labels), np.concatenate(values) if values else table_values[0], table_values[1],
                        np.concatenate(errors) if errors else None, torch.cat(summaries) if summaries else None)


@torch.no_grad()
def node_split_outputs(model: torch.nn.Module, graph, features: bool = False) -> dict[str, SplitOutputs]:
    """The logits of a node classifier over its one ``graph`` (``x``, ``edge_index``, ``y`` and a boolean
    ``<split>_mask`` per split), in one pass, per split (``train``, ``val``, ``test``): its nodes'. ``features``:
    also the nodes' penultimate features (``forward_head(forward_features(x, edge_index), edge_index,
    pre_logits=True)``) from the same pass, for the baselines that read them (:func:`knn_score`)."""
    graph = graph.to(next(model.parameters()).device)
    penultimate = None
    if features:
        hidden = model.forward_features(graph.x, graph.edge_index)
        logits = model.forward_head(hidden, graph.edge_index)
        penultimate = model.forward_head(hidden, graph.edge_index, pre_logits=True).float().cpu()  # (N, D)
    else:
        logits = model(graph.x, graph.edge_index)
    logits = logits.float().cpu()  # (N, C)
    return {split: SplitOutputs(None if penultimate is None else penultimate[mask], logits[mask],
                                graph.y[mask].cpu(), None, None)
            for split in ("train", "val", "test") for mask in [graph[f"{split}_mask"].cpu()]}


def scored_outputs(model: torch.nn.Module, card, detector: Detector, loader, frame=None,
                   progress: bool = False, features: bool = False) -> tuple[np.ndarray, SplitOutputs]:
    """(N,) ``ood_score`` of the inputs of ``loader``'s ``(inputs, targets)`` batches, and the outputs of the pass
    that scored them (features, logits, ...: what baselines such as :func:`max_softmax_score` read); ``frame``: a
    table's raw rows, in the loader's order; ``features``: keep the penultimate features too (for :func:`knn_score`)."""
    out = split_outputs(model.eval(), loader, detector.scores, card.input_spec, frame, progress=progress,
                        desc="OOD scores", features=features)
    return detector.score(out.components(detector)), out


def score_inputs(model: torch.nn.Module, card, detector: Detector, loader, frame=None,
                 progress: bool = False) -> np.ndarray:
    """(N,) ``ood_score`` of the inputs of ``loader``'s ``(inputs, targets)`` batches; ``frame``: a table's raw rows,
    in the loader's order."""
    return scored_outputs(model, card, detector, loader, frame, progress)[0]


def _has_statistics(scores: list[str]) -> bool:
    """Whether ``scores`` fit statistics on the training split (the energy and reconstruction scores have none)."""
    return bool({"mahalanobis", "range", "inputs", "grey_energy", "sensor_order"} & set(scores))


def training_outputs(model: torch.nn.Module, card, datamodule, scores: list[str],
                     progress: bool = False) -> SplitOutputs:
    """The outputs that ``scores`` need of at most :data:`MAX_FIT_ITEMS` items of ``datamodule``'s training split,
    unaugmented: the items the statistics are fitted on (the same at every call)."""
    torch.manual_seed(0)  # the training loader's shuffle (and augmentation) pick the fitted subset
    training_loader = getattr(datamodule, "statistics_dataloader", datamodule.train_dataloader)  # unaugmented
    return split_outputs(model, training_loader(), scores, card.input_spec, limit=MAX_FIT_ITEMS, progress=progress,
                         desc="OOD fit: train")


def _split_outputs_of(model: torch.nn.Module, card, datamodule, scores: list[str],
                      progress: bool) -> dict[str, SplitOutputs | None]:
    """The train (at most :data:`MAX_FIT_ITEMS` items; None when no score has statistics), val and test outputs of
    ``datamodule``'s splits; a graph's from its one graph."""
    if input_kind(card.input_spec).ood.graph_nodes:
        return node_split_outputs(model, next(iter(datamodule.train_dataloader())))
    frames = getattr(datamodule, "frames", {})  # a table's raw splits (tabular data modules keep them)
    outputs = {"train": training_outputs(model, card, datamodule, scores, progress) if _has_statistics(scores)
               else None}
    for split, loader in (("val", datamodule.val_dataloader()), ("test", datamodule.test_dataloader())):
        outputs[split] = split_outputs(model, loader, scores, card.input_spec, frames.get(split), progress=progress,
                                       desc=f"OOD fit: {split}")
    return outputs


def fit_detector(model: torch.nn.Module, card, datamodule, rate: float = DEFAULT_FALSE_ALARM_RATE,
                 progress: bool = False) -> tuple[Detector, dict[str, Any]]:
    """Fit the scores of ``model`` on the set-up ``datamodule`` named by ``card`` (statistics on its training split,
    threshold on its validation split) and measure the flagged share of its test split. Returns the detector and
    the card's ``ood`` section (less the sidecar's file and sha256)."""
    scores = scores_for(card, model)
    kind = input_kind(card.input_spec)
    outputs = _split_outputs_of(model.eval(), card, datamodule, scores, progress)
    train, val, test = outputs["train"], outputs["val"], outputs["test"]
    statistics: dict[str, torch.Tensor] = {}
    if "mahalanobis" in scores:
        statistics.update(mahalanobis_statistics(train.features, train.labels if card.label_names else None))
    choice = {}
    class_score = next((s for s in scores if s in CLASS_SCORES), None)
    # labels of classes only: a self-supervised pretext's data (ssast_tiny.fsdd_ssl's card) marks its items -1
    if class_score and val.logits is not None and len(card.label_names or []) > 2 and val.labels.ndim == 1 \
            and bool((val.labels >= 0).all()):
        chosen, aurocs = choose_class_score(val, statistics, class_score)
        choice = {"class_score": {"chosen": chosen, "held_out_class_auroc": aurocs,
                                  "fitted_on": "validation split, each input as if its class were held out"}}
        scores = [chosen if s == class_score else s for s in scores]
        if chosen != "mahalanobis":
            statistics.pop("means", None), statistics.pop("precision", None)
    if "range" in scores:
        values = kind.ood_rows(datamodule.frames["train"], card.input_spec)[0] if kind.ood.rows else train.values
        # per channel; for traffic, per sensor and channel (N, C): each road's own speeds, so that a window of
        # other sensors (or of other units) stands out even when the network's pooled range holds it
        channels = values.shape[-kind.ood.range_dims:]
        statistics.update(range_statistics(values.reshape(-1, *channels)))
        if kind.ood.never_empty:  # an empty gene where training had none is unseen
            statistics["never_empty"] = torch.from_numpy(~np.isnan(values).any(0)).float()
    if "inputs" in scores:
        statistics.update({f"input_{k}": v for k, v in mahalanobis_statistics(train.summaries).items()})
    if "sensor_order" in scores:  # the road network's order of sensors by speed, from the mean training window
        statistics["sensor_ranks"] = torch.from_numpy(sensor_ranks(train.values.mean(0, keepdims=True))[0])
    if "grey_energy" in scores:  # Laplace's rule: a kind of image never seen in training is rare, not impossible
        grey = int((train.summaries[:, -1] < GREY_COLOURFULNESS).sum())
        statistics["grey_share"] = torch.tensor((grey + 1) / (len(train.summaries) + 2), dtype=torch.float64)
        energies = energy(val.logits).double().sort().values  # a large split: MAX_FIT_ITEMS of its quantiles
        levels = torch.linspace(0, 1, MAX_FIT_ITEMS, dtype=torch.float64)
        statistics["val_energies"] = energies if len(energies) <= MAX_FIT_ITEMS else torch.quantile(energies, levels)
    if "energy" in scores:  # negative: centred on its validation median, its quantile is a positive scale
        statistics["energy_offset"] = torch.tensor(float(np.median(energy(val.logits).numpy())), dtype=torch.float64)
    detector = Detector(scores, statistics, threshold=0.0)
    val_components = val.components(detector)
    statistics["scales"] = torch.tensor([_quantile_scale(c, rate) for c in val_components.T], dtype=torch.float64)
    statistics["maxima"] = torch.tensor([_largest(c) for c in val_components.T], dtype=torch.float64)
    detector.threshold = _quantile_scale(detector.score(val_components), rate)
    test_flags = detector.flag(detector.score(test.components(detector)))
    unit = "nodes" if kind.ood.graph_nodes else "items"
    section = {
        "score": "+".join(scores),
        "combine": detector.combine,
        "threshold": detector.threshold,
        "false_alarm_rate": rate,
        "fitted_on": (f"statistics: training split ({len(train.labels)} {unit}); " if _has_statistics(scores)
                      else "") +
                     f"threshold: the {1 - rate:.0%} quantile of the validation split ({len(val.labels)} {unit})",
        "test_false_alarm_rate": float(test_flags.mean()),
        "test_items": len(test_flags),
        **choice,
    }
    return detector, section


# ---- storage -----------------------------------------------------------------------------------------------------

def sidecar_name(card) -> str:
    """``ood.safetensors`` in a run folder (weights ``model.safetensors``), else ``<tag>.ood.safetensors``."""
    return "ood.safetensors" if card.file == "model.safetensors" else f"{card.name}.ood.safetensors"


def save_detector(detector: Detector, section: dict[str, Any], card_dir: Path, card) -> dict[str, Any]:
    """Write the detector's statistics beside the card's weights; returns ``section`` with the file and sha256."""
    from hub.core.weights import save_state_dict

    name = sidecar_name(card)
    sha256 = save_state_dict({k: v.contiguous() for k, v in detector.statistics.items()}, Path(card_dir) / name,
                             metadata={"scores": ",".join(detector.scores)})
    return {**section, "file": name, "sha256": sha256}


def load_detector(card) -> Detector | None:
    """The detector of ``card`` (its sidecar's sha256 checked), or None when the card has no ``ood`` section or its
    sidecar is missing (with a warning)."""
    from hub.core.weights import load_state_dict

    if not card.ood or card.ood["score"] == "none":
        return None
    path = Path(card.card_dir or ".") / card.ood["file"]
    if not path.is_file():  # e.g. a card copied without its sidecar: predictions still come, without the columns
        log.warning("the OOD statistics of %s (%s) are missing: no ood_score; fit them again with "
                    "hub.uncertainty.fit_card(NAME, what='ood')", card.name, path)
        return None
    statistics = load_state_dict(path, card.ood["sha256"])
    return Detector(card.ood["score"].split("+"), statistics, float(card.ood["threshold"]),
                    card.ood.get("combine", "max"))  # cards fitted before 2026-12-06 took the largest score


def fit_and_store(model: torch.nn.Module, card, datamodule, card_path: Path, rate: float = DEFAULT_FALSE_ALARM_RATE,
                  progress: bool = False) -> dict[str, Any]:
    """:func:`fit_detector`, then the sidecar beside the weights and the card's ``ood`` section written to
    ``card_path`` (weights untouched); a model that gets no score gets ``{"score": "none", "note": why}``."""
    from hub.core.cards import write_card

    try:
        detector, section = fit_detector(model, card, datamodule, rate, progress)
        section = save_detector(detector, section, card_path.parent, card)
    except NoOODScore as err:
        section = {"score": "none", "note": str(err)}
    write_card(dataclasses.replace(card, ood=section, card_dir=""), card_path)
    return section


def fit_card(name: str, rate: float = DEFAULT_FALSE_ALARM_RATE, data_overrides: list[str] | None = None,
             progress: bool = True) -> dict[str, Any]:
    """Fit the OOD scores of a pretrained tag or run folder ``name`` from the data its card names (as
    ``attnhub calibrate`` does) and store them (:func:`fit_and_store`); returns the card's ``ood`` section."""
    from hub.models import load_from_card, model_card
    from hub.names import resolve
    from hub.recipe import card_data

    ref = resolve(name)
    card = model_card(ref)
    datamodule = card_data(card, data_overrides)
    datamodule.setup("fit")
    return fit_and_store(load_from_card(card), card, datamodule, ref.card_path(card), rate, progress)


# ---- scoring predictions -----------------------------------------------------------------------------------------

HEADER = ["ood_score", "ood"]


class PredictionScorer:
    """Scores the inputs of ``model`` batch by batch as a predict adapter runs it: a forward pre-hook keeps the
    model's input of its latest call, from which :meth:`cells` computes the features (a second pass through
    ``forward_features``), the range check, the reconstruction error and the input's summary. Counts what it flagged for
    :meth:`summary`."""

    def __init__(self, model: torch.nn.Module, detector: Detector):
        self.model, self.detector = model, detector
        self.kind = input_kind(model.pretrained_cfg.input_spec)
        self.inputs: tuple[tuple, dict] | None = None
        self.flagged = self.total = 0
        self.handle = model.register_forward_pre_hook(self._keep_input, with_kwargs=True)

    @classmethod
    def for_model(cls, model: torch.nn.Module) -> "PredictionScorer | None":
        detector = load_detector(model.pretrained_cfg)
        return cls(model, detector) if detector is not None else None

    def _keep_input(self, module, args, kwargs):
        self.inputs = (args, kwargs)

    def cells(self, logits: torch.Tensor, frame=None) -> list[list[str]]:
        """``[ood_score, ood]`` per input of the model's latest call (a graph's: per node of ``logits``, the
        predicted nodes' logits); ``frame``: a table's raw rows of that call."""
        args, kwargs = self.inputs
        features = pooled_features(self.model, *args, **kwargs)[0] if "mahalanobis" in self.detector.scores else None
        spec = self.model.pretrained_cfg.input_spec
        values, unseen, errors, summaries = None, None, None, None
        if VALUE_SCORES & set(self.detector.scores):
            if self.kind.ood.rows:
                values, unseen = self.kind.ood_rows(frame, spec)
            else:
                values = self.kind.ood_values(args[0] if args else kwargs)
        x = args[0] if args else next(iter(kwargs.values()))  # an image, scene, spectrogram or window batch
        if "reconstruction" in self.detector.scores:
            errors = reconstruction_errors(x, logits)
        if SUMMARY_SCORES & set(self.detector.scores):
            summaries = input_summary(x, spec)
        score = self.detector.score(self.detector.components(features, logits, values, unseen, errors, summaries))
        flags = self.detector.flag(score)
        self.flagged += int(flags.sum())
        self.total += len(flags)
        return [[f"{s:.4f}", str(bool(f))] for s, f in zip(score.tolist(), flags.tolist())]

    def summary(self) -> str:
        return f"{self.flagged} of {self.total} inputs look unlike the training data"

    def close(self) -> None:
        """Remove the hook and write :meth:`summary` to stderr."""
        self.handle.remove()
        print(self.summary(), file=sys.stderr)
