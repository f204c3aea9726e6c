"""Survival metrics from scikit-survival, and the risk-group plot.

- Harrell's C (``concordance_index_censored``): the share of comparable pairs ordered correctly by risk.
- Uno's C (``concordance_index_ipcw``): Harrell's pairs weighted by the inverse probability of
  censoring; truncated at ``tau`` = the 90th percentile of training times so the censoring estimate stays
  away from zero. The censoring distribution (Kaplan-Meier) is estimated on the training and evaluated
  parts together, so it covers every evaluated time (scikit-survival refuses times past its last one).
- cumulative/dynamic AUC (``cumulative_dynamic_auc``) and the integrated Brier score
  (``integrated_brier_score``) on a grid of test-time percentiles (10th to 80th); the Brier score needs
  survival functions: by default the Breslow estimator of the baseline hazard fitted on the training
  risk scores (``sksurv.linear_model.coxph.BreslowEstimator``); with a held-out ``calibration`` part,
  :func:`calibrated_survival` (a Cox model of the outcome on the risk score fitted there).
- :func:`harrell_c_interval`: a bootstrap interval of Harrell's C over the evaluated patients.
- :func:`risk_group_plot`: patients split at the median risk, Kaplan-Meier curve per group, log-rank p.

Shapes: every array is (N,) over patients; risks are log hazard ratios (higher = earlier event).

>>> t = np.array([1., 2., 3., 4.]); e = np.array([1, 1, 0, 1])
>>> round(harrell_c(t, e, np.array([4., 3., 2., 1.])), 3)
1.0
"""
from __future__ import annotations

from pathlib import Path

import numpy as np


def survival_array(time: np.ndarray, event: np.ndarray) -> np.ndarray:
    """scikit-survival's structured ``(event, time)`` array."""
    from sksurv.util import Surv

    return Surv.from_arrays(event=np.asarray(event).astype(bool), time=np.asarray(time, dtype=np.float64))


def harrell_c(time: np.ndarray, event: np.ndarray, risk: np.ndarray) -> float:
    from sksurv.metrics import concordance_index_censored

    return float(concordance_index_censored(np.asarray(event).astype(bool), np.asarray(time, np.float64),
                                            np.asarray(risk, np.float64))[0])


def harrell_c_interval(time: np.ndarray, event: np.ndarray, risk: np.ndarray, level: float = 0.95,
                       num_resamples: int = 1000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of Harrell's C over the evaluated patients (``scipy.stats.bootstrap``,
    patients resampled with their time, event and risk together): how far the figure could move on another sample
    of patients of the same size, with the model held fixed."""
    from scipy.stats import bootstrap

    time, event, risk = np.asarray(time, np.float64), np.asarray(event).astype(bool), np.asarray(risk, np.float64)
    if event.sum() < 2:
        raise ValueError(f"a bootstrap of Harrell's C needs at least 2 events, got {int(event.sum())}")
    result = bootstrap((time, event, risk), lambda t, e, r: harrell_c(t, e, r) if e.any() else np.nan,
                       paired=True, vectorized=False, n_resamples=num_resamples, confidence_level=level,
                       method="percentile", rng=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def uno_c(train_time: np.ndarray, train_event: np.ndarray, time: np.ndarray, event: np.ndarray,
          risk: np.ndarray) -> float:
    from sksurv.metrics import concordance_index_ipcw

    tau = float(np.percentile(train_time, 90))
    return float(concordance_index_ipcw(censoring_reference(train_time, train_event, time, event),
                                        survival_array(time, event), np.asarray(risk, np.float64), tau=tau)[0])


def censoring_reference(train_time, train_event, time, event) -> np.ndarray:
    """The survival data the censoring distribution is estimated on: training and evaluated parts together."""
    return survival_array(np.concatenate([train_time, time]), np.concatenate([train_event, event]))


def evaluation_times(train_time: np.ndarray, time: np.ndarray) -> np.ndarray:
    """Times for AUC and Brier: 10th..80th percentiles of the test times, inside the training follow-up."""
    grid = np.percentile(time, np.linspace(10, 80, 15))
    return np.unique(grid[(grid > time.min()) & (grid < min(time.max(), train_time.max()))])


def calibrated_survival(time, event, risk, new_risk, times) -> np.ndarray:
    """Survival functions (N, len(times)) of ``new_risk`` (N,) from a Cox model with the risk score as its one
    covariate, fitted on ``(time, event, risk)`` of a part the network did not train on: the fitted coefficient
    is the calibration slope of clinical prediction models (below 1 when the network's risks spread wider than
    the outcomes support, as they do once it separates its own training patients), the Breslow estimator gives
    the baseline. Ranking metrics are unchanged by it."""
    from sksurv.linear_model import CoxPHSurvivalAnalysis

    cox = CoxPHSurvivalAnalysis(ties="efron").fit(np.asarray(risk, np.float64)[:, None], survival_array(time, event))
    return np.stack([fn(times) for fn in cox.predict_survival_function(np.asarray(new_risk, np.float64)[:, None])])


def survival_metrics(train_time, train_event, train_risk, time, event, risk, survival: np.ndarray | None = None,
                     calibration: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> dict[str, float]:
    """Harrell's C, Uno's C, mean cumulative/dynamic AUC and integrated Brier score of one model on one split.

    ``survival`` (N, len(evaluation_times)): the model's own survival functions (e.g. a random survival
    forest's). Otherwise ``calibration`` = (time, event, risk) of a held-out part gives them through
    :func:`calibrated_survival`; without it, the Breslow estimator fitted on the training risks."""
    from sksurv.linear_model.coxph import BreslowEstimator
    from sksurv.metrics import cumulative_dynamic_auc, integrated_brier_score

    train_time, train_event, train_risk = (np.asarray(a, np.float64) for a in (train_time, train_event, train_risk))
    time, event, risk = (np.asarray(a, np.float64) for a in (time, event, risk))
    reference, test_y = censoring_reference(train_time, train_event, time, event), survival_array(time, event)
    times = evaluation_times(train_time, time)
    _, mean_auc = cumulative_dynamic_auc(reference, test_y, risk, times)
    if survival is None and calibration is not None:
        survival = calibrated_survival(*calibration, risk, times)
    elif survival is None:
        breslow = BreslowEstimator().fit(train_risk, train_event.astype(bool), train_time)
        survival = np.stack([fn(times) for fn in breslow.get_survival_function(risk)])  # (N, len(times))
    return {"harrell_c": harrell_c(time, event, risk), "uno_c": uno_c(train_time, train_event, time, event, risk),
            "mean_auc": float(mean_auc), "ibs": float(integrated_brier_score(reference, test_y, survival, times))}


def risk_group_plot(time: np.ndarray, event: np.ndarray, risk: np.ndarray, path: str | Path,
                    title: str = "") -> float:
    """Split at the median risk, draw each group's Kaplan-Meier curve into ``path`` (PNG); returns the
    log-rank p-value of high vs low risk."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from sksurv.compare import compare_survival
    from sksurv.nonparametric import kaplan_meier_estimator

    from hub.plotting import save_figure

    time, event, risk = np.asarray(time, np.float64), np.asarray(event).astype(bool), np.asarray(risk, np.float64)
    high = risk > np.median(risk)
    _, p_value = compare_survival(survival_array(time, event), high.astype(int))
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for label, group in (("low risk", ~high), ("high risk", high)):
        t, s = kaplan_meier_estimator(event[group], time[group])
        ax.step(t, s, where="post", label=f"{label} (n={int(group.sum())})")
    ax.set_xlabel("time")
    ax.set_ylabel("survival probability")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{title} log-rank p = {p_value:.2g}".strip())
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)
    return float(p_value)
