"""The ``survival`` task: risk models trained with a Cox loss, scored by Harrell's and Uno's C-index.

Batches are ``(inputs, target)``: ``inputs`` a dict of model inputs (``clinical``, ``genes``,
``gene_mask``, ``tiles``, ``tiles_mask``), ``target`` (B, 2) holding time and event. The model returns
one risk score (log hazard ratio) per patient. Checkpoints are picked on the validation Harrell's C.

Its losses, for risk models (higher risk = earlier event):

- :func:`cox_loss`: the negative Cox partial log-likelihood (Cox 1972) with Efron's (default) or
  Breslow's handling of tied event times. torchsurv (``torchsurv.loss.cox.neg_partial_log_likelihood``,
  a maintained library) implements both tie methods, so this is a thin wrapper around it that also
  accepts batches without any event (zero loss, gradient kept) and silences torchsurv's per-call
  warning about ties (survival data in months or days has ties by design). The sum over events is
  divided by the number of events.
- :func:`weighted_cox_loss`: the weighted Cox loss of BioFusionNet (Mondol et al., 2024; seeds 002 #38)
  for imbalanced events: every patient carries a weight (inverse frequency of its event status,
  :func:`balanced_event_weights`), both in its own term and inside the risk sets,
  ``-sum_i w_i d_i (h_i - log sum_{j: t_j >= t_i} w_j exp(h_j)) / sum_i w_i d_i``. Ties are handled
  as Breslow's (every tied event sees the full risk set); torchsurv has no weighted version.
- :func:`pairwise_order_loss`: for every comparable pair (i had an event before j's time), the negative log
  of ``sigmoid(h_i - h_j)``, which is what a Cox model gives for "i fails first" when only i and j are at risk
  (``exp(h_i) / (exp(h_i) + exp(h_j))``), averaged over the pairs: a smooth surrogate of Harrell's C-index, added to
  the Cox loss with a weight (``SurvivalTask(rank_weight=...)``) as DeepHit adds its ranking term (Lee et al., AAAI
  2018; theirs is ``exp(-(h_i - h_j) / sigma)``). torchsurv has no ranking loss. It builds a (B, B) pair matrix:
  meant for mini-batches, not for full-batch training of large tables.

Shapes:
    risk: (B,) log hazard ratios, time: (B,) float, event: (B,) bool or 0/1 -> scalar loss.

>>> cox_loss(torch.tensor([0.5, 0.0, -0.5]), torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1, 1, 0])).shape
torch.Size([])
"""
from __future__ import annotations

import warnings
from typing import Literal

import numpy as np
import torch
import torchmetrics
from torchsurv.loss.cox import neg_partial_log_likelihood

from hub.errors import DataError
from hub.tasks import Task, register_task
from medical.survival_metrics import harrell_c, uno_c

TieMethod = Literal["efron", "breslow"]


def cox_loss(risk: torch.Tensor, time: torch.Tensor, event: torch.Tensor, ties: TieMethod = "efron") -> torch.Tensor:
    """Negative Cox partial log-likelihood, averaged over the events of the batch."""
    event = event.bool()
    if not event.any():  # no event: the partial likelihood is empty
        return risk.sum() * 0.0
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Ties in `time` detected")
        total = neg_partial_log_likelihood(risk.float(), event, time.float(), ties_method=ties, reduction="sum")
    return total / event.sum()  # torchsurv's "mean" divides by the distinct event times; this by the events


def balanced_event_weights(event: torch.Tensor) -> torch.Tensor:
    """Inverse-frequency weights ``n / (2 n_status)`` so events and censorings weigh the same in total.

    >>> balanced_event_weights(torch.tensor([1, 0, 0, 0]))
    tensor([2.0000, 0.6667, 0.6667, 0.6667])
    """
    event = event.bool()
    n_event = event.sum().clamp_min(1)
    n_censored = (~event).sum().clamp_min(1)
    return torch.where(event, len(event) / (2.0 * n_event), len(event) / (2.0 * n_censored)).float()


def weighted_cox_loss(risk: torch.Tensor, time: torch.Tensor, event: torch.Tensor,
                      weights: torch.Tensor | None = None) -> torch.Tensor:
    """BioFusionNet's weighted Cox loss; ``weights`` default to :func:`balanced_event_weights`."""
    event = event.bool()
    if not event.any():
        return risk.sum() * 0.0
    weights = balanced_event_weights(event) if weights is None else weights.float()
    risk, time = risk.float(), time.float()
    order = torch.argsort(time, descending=True)  # latest first: a cumulative sum builds the risk sets
    risk_sorted, time_sorted, weights_sorted = risk[order], time[order], weights[order]
    log_weighted_hazard = torch.log(weights_sorted) + risk_sorted  # (B,)
    log_cumulative = torch.logcumsumexp(log_weighted_hazard, dim=0)  # (B,) over j with t_j >= t_(i), ties aside
    # Tied times share one risk set: the one that includes every tied patient (the last of the tie in this order).
    last_of_tie = torch.searchsorted(-time_sorted, -time_sorted, right=True) - 1  # (B,)
    log_risk_set = log_cumulative[last_of_tie]
    event_sorted = event[order]
    terms = weights_sorted * (risk_sorted - log_risk_set)
    return -(terms[event_sorted].sum() / weights_sorted[event_sorted].sum())


def pairwise_order_loss(risk: torch.Tensor, time: torch.Tensor, event: torch.Tensor) -> torch.Tensor:
    """Mean of ``-log sigmoid(h_i - h_j)`` over the comparable pairs of the batch (event i, ``t_i < t_j``); zero,
    with the gradient kept, when the batch has no such pair.

    >>> pairwise_order_loss(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 2.0]), torch.tensor([1, 0]))
    tensor(0.3133)
    """
    comparable = event.bool()[:, None] & (time[:, None] < time[None, :])  # (B, B): i failed before j's time
    if not comparable.any():
        return risk.sum() * 0.0
    difference = risk.float()[:, None] - risk.float()[None, :]  # (B, B): h_i - h_j
    return torch.nn.functional.softplus(-difference[comparable]).mean()


class ConcordanceIndex(torchmetrics.Metric):
    """Harrell's C (``train_time`` None) or Uno's C over the epoch, computed by scikit-survival."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, train_time: list[float] | None = None, train_event: list[float] | None = None, **kwargs):
        super().__init__(**kwargs)
        self.train_time, self.train_event = train_time, train_event
        self.add_state("risk", default=[], dist_reduce_fx="cat")
        self.add_state("target", default=[], dist_reduce_fx="cat")

    def update(self, preds: torch.Tensor, target: torch.Tensor) -> None:
        self.risk.append(preds.detach().float().reshape(-1))
        self.target.append(target.detach().float().reshape(-1, 2))

    def compute(self) -> torch.Tensor:
        risk = torchmetrics.utilities.dim_zero_cat(self.risk).cpu().numpy()
        target = torchmetrics.utilities.dim_zero_cat(self.target).cpu().numpy()
        time, event = target[:, 0], target[:, 1]
        if event.sum() == 0:
            return torch.tensor(float("nan"))
        if self.train_time is None:
            return torch.tensor(harrell_c(time, event, risk))
        return torch.tensor(uno_c(np.asarray(self.train_time), np.asarray(self.train_event), time, event, risk))


@register_task("survival")
class SurvivalTask(Task):
    """Cox partial likelihood (Efron or Breslow ties) or the weighted Cox loss, plus ``rank_weight`` times the
    pairwise ordering loss (:func:`pairwise_order_loss`) when it is above 0; Harrell's and Uno's C.

    Args:
        loss: ``"efron"`` (default), ``"breslow"`` or ``"weighted"`` (:func:`weighted_cox_loss`).
        train_time: the training patients' times, for Uno's C (its censoring weights); None: Harrell's C alone.
        train_event: the training patients' event indicators, with ``train_time``.
        num_classes: not used (accepted as by every task); the model gives one risk per patient.
        rank_weight: weight of the pairwise ordering loss (>= 0; default 0: the Cox loss alone)."""

    monitor = "val/cindex"
    mode = "max"

    def __init__(self, loss: str = "efron", train_time: list[float] | None = None,
                 train_event: list[float] | None = None, num_classes: int | None = None, rank_weight: float = 0.0):
        if loss not in ("efron", "breslow", "weighted"):
            raise DataError(f"survival loss must be 'efron', 'breslow' or 'weighted', got {loss!r}")
        if not rank_weight >= 0:
            raise DataError(f"survival rank_weight must be >= 0 (0: the Cox loss alone), got {rank_weight!r}")
        self.loss, self.train_time, self.train_event, self.rank_weight = loss, train_time, train_event, rank_weight

    def metrics(self) -> torchmetrics.MetricCollection:
        metrics = {"cindex": ConcordanceIndex()}  # Harrell's C
        if self.train_time is not None:
            metrics["uno_c"] = ConcordanceIndex(self.train_time, self.train_event)
        return torchmetrics.MetricCollection(metrics)

    def step(self, model, batch, stage):
        inputs, target = batch  # dict of (B, ...) tensors, (B, 2)
        risk = model(**inputs).reshape(-1)  # (B,)
        time, event = target[:, 0], target[:, 1]
        if self.loss == "weighted":
            loss = weighted_cox_loss(risk, time, event)
        else:
            loss = cox_loss(risk, time, event, ties=self.loss)
        if self.rank_weight:
            loss = loss + self.rank_weight * pairwise_order_loss(risk, time, event)
        return loss, risk.detach(), target
