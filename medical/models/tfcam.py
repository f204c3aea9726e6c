"""TFCAM, temporal-feature cross attention for longitudinal clinical data (after the hub seed 002 #45,
which predicts CKD progression from visits; here ICU stays).

Our reading of the paper's idea, built from the core's attention layers:

1. every (hour, variable) cell is a token: its value through a per-variable linear map, plus an
   embedding of whether it was observed or carried forward, of the variable and of the hour;
2. attention across variables within each hour (how variables inform each other at that time), then
   attention across hours within each variable (the variable's trajectory);
3. temporal-feature cross attention: variable tokens (pooled over hours) and hour tokens (pooled over
   variables) attend to each other (the core's :class:`~hub.attention.cross_attention.DualCrossAttention`);
4. the fused vector, with the admission descriptors, goes through an MLP head.

Our additions, off by default: ``summaries=True``, a wide path of each variable's last, mean, minimum and
maximum observed value and its number of observations (what the gradient-boosting baseline sees),
computed from the same inputs and joined to the fused vector before the head (``summary_dim`` wide);
``k > 1``, k ensemble members over that path and the head in the BatchEnsemble style of TabM (Gorishniy
et al., ICLR 2025; :mod:`tabular.models.tabm`): the attention layers are shared, each member has its own adapters on
the summary layer and its own head; in training the members' logits (B, k, C) are returned, each trained on
its own loss (the classification task averages them), in evaluation the log of their mean probability.
The explanations below read the attention only, so they do not show what the model takes from the wide path.

Explanations (:meth:`TFCAM.explain`), the paper's three levels: critical time periods (the attention
variables pay to each hour), a feature ranking (the attention hours pay to each variable), and
feature-to-feature influence across time (the within-hour attention between variables, weighted by
how critical each hour is).

Shapes:
    values, mask: (B, T, F), static: (B, S) -> logits (B, num_classes) (k > 1 in training: (B, k, num_classes));
    ``forward_features`` -> (B, k, num_features).

>>> model = tfcam(num_variables=37, num_static=9)
>>> model(torch.zeros(2, 48, 37), torch.ones(2, 48, 37, dtype=torch.bool), torch.zeros(2, 9)).shape
torch.Size([2, 2])
"""
from __future__ import annotations

import math

import torch
from torch import nn

from hub.attention.cross_attention import DualCrossAttention
from hub.attention.functional import MultiHeadAttention
from hub.core.registry import register_model
from hub.errors import DataError
from hub.layers.batch_ensemble import LinearBatchEnsemble, MemberHeads


def check_stays(values: torch.Tensor, mask: torch.Tensor, static: torch.Tensor, num_variables: int,
                num_static: int) -> None:
    if values.ndim != 3 or values.shape[-1] != num_variables or mask.shape != values.shape:
        raise DataError(f"expected values and mask of shape (batch, hours, {num_variables}), got "
                        f"{tuple(values.shape)} and {tuple(mask.shape)}")
    if static.shape != (values.shape[0], num_static):
        raise DataError(f"expected static of shape ({values.shape[0]}, {num_static}), got {tuple(static.shape)}")
    if not torch.compiler.is_exporting() and not torch.isfinite(values).all():  # a graph cannot hold it
        raise DataError("values hold NaN or inf; carry the last observation forward and set mask False there")


def stay_summaries(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per variable: last, mean, min and max of the observed values and log(1 + observations), (B, 5 * F);
    0 for the value statistics of a variable never observed. ``values`` carry the last observation forward,
    so their last hour is the last observed value."""
    observed = mask.to(values.dtype)
    count = observed.sum(1)  # (B, F)
    mean = (values * observed).sum(1) / count.clamp_min(1)
    seen = count > 0
    low = values.masked_fill(~mask, float("inf")).amin(1).where(seen, torch.zeros_like(count))
    high = values.masked_fill(~mask, float("-inf")).amax(1).where(seen, torch.zeros_like(count))
    return torch.cat([values[:, -1], mean, low, high, count.log1p()], -1)


class AxisAttention(nn.Module):
    """Pre-norm residual self-attention along one axis of a (B, T, F, D) grid of tokens."""

    def __init__(self, dim: int, num_heads: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, num_heads)

    def forward(self, z: torch.Tensor, axis: int, need_weights: bool = False):
        moved = z.movedim(axis, 2)  # (B, other, L, D): attend along L
        b, other, length, dim = moved.shape
        flat = moved.reshape(b * other, length, dim)
        out, weights = self.attn(self.norm(flat), need_weights=need_weights)  # (B * other, L, D)
        z = z + out.reshape(b, other, length, dim).movedim(2, axis)
        return z, (weights.reshape(b, other, *weights.shape[1:]) if need_weights else None)  # (B, other, H, L, L)


class TFCAM(nn.Module):
    """TFCAM: every (hour, variable) cell a token, attention across variables then across hours, temporal-feature
    cross attention, the admission descriptors, an MLP head (see the module).

    Args:
        num_variables: time-series variables F.
        num_static: admission descriptors S.
        num_classes: classes.
        hours: the most hours T a stay may have (the learned hour embeddings).
        dim: token width.
        num_heads: attention heads of every attention layer.
        dropout: dropout on the pooled variable and hour tokens, in the cross attention and before the head
            (not on the cell tokens).
        summaries: add the wide path of each variable's last, mean, minimum, maximum value and observation count
            (default False).
        summary_dim: width of that path (None, the default: ``dim``).
        k: ensemble members over the summary path and the head, BatchEnsemble style (default 1: a single model).

    Shapes: values, mask (B, T, F), static (B, S) -> logits (B, num_classes) (k > 1 in training: (B, k, num_classes))"""

    def __init__(self, num_variables: int, num_static: int, num_classes: int, hours: int, dim: int, num_heads: int,
                 dropout: float, summaries: bool = False, summary_dim: int | None = None, k: int = 1):
        super().__init__()
        self.num_variables, self.num_static, self.num_classes, self.k = num_variables, num_static, num_classes, k
        # the value term starts at unit scale and the identity embeddings small, so that the (standardised)
        # measurements, not the token's position, dominate the first layers' inputs
        self.value_weight = nn.Parameter(torch.randn(num_variables, dim))
        self.value_bias = nn.Parameter(torch.zeros(num_variables, dim))
        self.observed = nn.Parameter(torch.randn(2, dim) * 0.02)
        self.variable = nn.Parameter(torch.randn(num_variables, dim) * 0.02)
        self.hour = nn.Parameter(torch.randn(hours, dim) * 0.02)
        # no dropout on the 1776 tokens of a stay (it would cost more than the attention, measured); dropout
        # acts on the pooled variable and hour tokens and before the head
        self.across_variables = AxisAttention(dim, num_heads)
        self.across_hours = AxisAttention(dim, num_heads)
        self.cross = DualCrossAttention(dim, dim, dim, num_heads, fusion="concat", dropout=dropout)
        self.static = nn.Sequential(nn.Linear(num_static, dim), nn.GELU())
        summary_dim = summary_dim or dim
        self.summary = nn.Sequential(LinearBatchEnsemble(5 * num_variables, summary_dim, k, random_signs=k > 1),
                                     nn.GELU()) if summaries else None
        self.num_features = self.cross.num_features + dim + (summary_dim if summaries else 0)
        self.dropout = nn.Dropout(dropout)
        self.reset_classifier(num_classes)

    def reset_classifier(self, num_classes: int) -> None:
        self.num_classes = num_classes
        self.head = nn.Sequential(nn.LayerNorm(self.num_features), MemberHeads(self.num_features, num_classes, self.k))

    def _tokens(self, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        if values.shape[1] > self.hour.shape[0]:
            raise DataError(f"stays of {values.shape[1]} hours exceed the model's {self.hour.shape[0]}")
        z = values.unsqueeze(-1) * self.value_weight + self.value_bias  # (B, T, F, D)
        return z + self.observed[mask.long()] + self.variable + self.hour[:values.shape[1], None]

    def _encode(self, values, mask, static, need_weights: bool = False):
        check_stays(values, mask, static, self.num_variables, self.num_static)
        z = self._tokens(values, mask)
        z, between_variables = self.across_variables(z, axis=2, need_weights=need_weights)  # (B, T, H, F, F)
        z, _ = self.across_hours(z, axis=1)
        variables, hours = self.dropout(z.mean(1)), self.dropout(z.mean(2))  # (B, F, D), (B, T, D)
        fused = self.cross(variables, hours, need_weights=need_weights)
        fused, cross = fused if need_weights else (fused, None)
        members = lambda x: x[:, None].expand(-1, self.k, -1)  # noqa: E731  (B, D) -> (B, k, D)
        wide = [self.summary(members(stay_summaries(values, mask)))] if self.summary is not None else []
        features = torch.cat([members(torch.cat([fused, self.static(static)], -1)), *wide], -1)  # (B, k, features)
        return features, {"between_variables": between_variables, **(cross or {})}

    def forward_features(self, values: torch.Tensor, mask: torch.Tensor, static: torch.Tensor) -> torch.Tensor:
        return self._encode(values, mask, static)[0]

    def forward_head(self, features: torch.Tensor, pre_logits: bool = False) -> torch.Tensor:
        if pre_logits:
            return features
        logits = self.head(self.dropout(features))  # (B, k, C)
        if self.k == 1:
            return logits[:, 0]
        return logits if self.training else logits.log_softmax(-1).logsumexp(1) - math.log(self.k)

    def forward(self, values: torch.Tensor, mask: torch.Tensor, static: torch.Tensor) -> torch.Tensor:
        return self.forward_head(self.forward_features(values, mask, static))

    @torch.no_grad()
    def explain(self, values: torch.Tensor, mask: torch.Tensor, static: torch.Tensor) -> dict[str, torch.Tensor]:
        """The three explanation levels, averaged over heads (and the batch for the last):
        ``critical_hours`` (B, T), ``feature_ranking`` (B, F), ``feature_influence`` (F, F): row i = how much
        variable i attends to each variable within an hour, weighted by each hour's criticality."""
        _, weights = self._encode(values, mask, static, need_weights=True)
        critical = weights["a_to_b"].mean(1).mean(1)  # variables -> hours: (B, H, F, T) -> (B, T)
        ranking = weights["b_to_a"].mean(1).mean(1)  # hours -> variables: (B, H, T, F) -> (B, F)
        between = weights["between_variables"].mean(2)  # (B, T, F, F)
        influence = (between * critical[:, :, None, None]).sum(1).mean(0)  # (F, F)
        return {"critical_hours": critical, "feature_ranking": ranking, "feature_influence": influence}


@register_model(task="classification")
def tfcam(num_variables: int = 37, num_static: int = 9, num_classes: int = 2, hours: int = 48, dim: int = 16,
          num_heads: int = 2, dropout: float = 0.2, summaries: bool = False, summary_dim: int | None = None,
          k: int = 1) -> TFCAM:
    """TFCAM: attention across hours and across variables, then temporal-feature cross attention; optionally
    the summary path (``summaries``, ``summary_dim`` wide) and k BatchEnsemble members over it and the head."""
    return TFCAM(num_variables, num_static, num_classes, hours, dim, num_heads, dropout, summaries, summary_dim, k)
