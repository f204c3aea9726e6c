"""The classical baselines of the medical runs, fitted on the training split of a finished run (its ``recipe.yaml``
rebuilds the split) and scored on its test split under the run's own metric names, for the comparison that
``attnhub finetune`` prints and keeps:

- survival tables: a Cox proportional-hazards model (scikit-survival's ``CoxPHSurvivalAnalysis``, Efron's ties, a
  small ridge penalty so that collinear covariates, such as a categorical column's indicators, keep it stable) on
  the run's encoded and standardised covariates (genes, masked ones at the training mean, then clinical); Harrell's
  and Uno's C of its linear predictor, as ``test/cindex`` and ``test/uno_c``;
- ICU stays: a logistic regression on per-variable summaries of each stay (last, mean, min and max of the hourly
  values, the number of hours with an observation: 48 times one minus the missing share, the same feature up to
  sign after the quantile scaling) and the run's admission descriptors; missing summaries at the training mean,
  then every feature mapped to a normal distribution by its training quantiles (robust to the outliers of raw lab
  values), a ridge penalty ``C=0.1``; ``test/auroc``, ``test/auprc`` and ``test/acc``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from hub.kinds import BaselineResult
from medical.data import summary_features
from medical.survival_metrics import harrell_c, survival_array, uno_c

COXPH_RIDGE = 0.1  # scikit-survival's alpha: 0.05 * |w|^2 against a partial log-likelihood summed over patients


def _run_data(run_dir):
    """The set-up data module of the run's recipe (the same split as its training) and the recipe's seed."""
    from hub.recipe import load_recipe
    from hub.run.train import build_data

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    return build_data(recipe), recipe.seed


def _covariates(rows) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The (N, G + C) covariates of :class:`medical.data.SurvivalRows`, their times (N,) and events (N,)."""
    target = rows.target.numpy()
    return np.concatenate([rows.genes.numpy(), rows.clinical.numpy()], 1), target[:, 0], target[:, 1]


def coxph_baseline(datamodule) -> BaselineResult:
    """CoxPH fitted on the training split of a set-up survival data module, scored on its test split; its
    predictions are each test patient's time, event and risk (the linear predictor, a log hazard ratio)."""
    from sksurv.linear_model import CoxPHSurvivalAnalysis

    x, time, event = _covariates(datamodule.train_set)
    x_test, time_test, event_test = _covariates(datamodule.test_set)
    model = CoxPHSurvivalAnalysis(alpha=COXPH_RIDGE, ties="efron").fit(x, survival_array(time, event))
    risk = model.predict(x_test)
    metrics = {"test/cindex": harrell_c(time_test, event_test, risk),
               "test/uno_c": uno_c(time, event, time_test, event_test, risk)}
    return BaselineResult("CoxPH", metrics, {"time": time_test.tolist(), "event": event_test.astype(int).tolist(),
                                             "risk": risk.tolist()})


def coxph_on_run_split(run_dir) -> BaselineResult:
    """:func:`coxph_baseline` on the split of ``run_dir``."""
    return coxph_baseline(_run_data(run_dir)[0])


def logistic_regression_baseline(datamodule, seed: int = 0) -> BaselineResult:
    """The logistic regression of the module docstring, fitted on the training split of a set-up
    :class:`medical.data.IcuStaysData` (PhysioNet 2012 set A or a user's stays); its predictions: record id, true and
    predicted outcome, probabilities."""
    from sklearn.impute import SimpleImputer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, average_precision_score, roc_auc_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import QuantileTransformer

    grids = datamodule.grids
    summaries = summary_features(grids["means"], grids["static_raw"])[:, :5 * grids["means"].shape[2]]  # (N, 5F)

    def features(part: str) -> np.ndarray:  # summaries and the run's admission descriptors (one-hot ICU type)
        return np.concatenate([summaries[datamodule.split_index[part]],
                               getattr(datamodule, f"{part}_set").static.numpy()], 1)

    y, y_test = (getattr(datamodule, f"{part}_set").y.numpy() for part in ("train", "test"))
    model = make_pipeline(SimpleImputer(keep_empty_features=True),
                          QuantileTransformer(n_quantiles=min(200, len(y)), output_distribution="normal",
                                              random_state=seed),
                          LogisticRegression(C=0.1, max_iter=2000, random_state=seed))
    proba = model.fit(features("train"), y).predict_proba(features("test"))  # (N, 2)
    metrics = {"test/auroc": float(roc_auc_score(y_test, proba[:, 1])),
               "test/auprc": float(average_precision_score(y_test, proba[:, 1])),
               "test/acc": float(accuracy_score(y_test, proba.argmax(1)))}
    labels = np.asarray(datamodule.label_names)
    predictions = {"id": grids["ids"][datamodule.split_index["test"]].tolist(), "target": labels[y_test].tolist(),
                   "prediction": labels[proba.argmax(1)].tolist(),
                   **{f"proba_{name}": proba[:, i].tolist() for i, name in enumerate(labels)}}
    return BaselineResult("LogisticRegression", metrics, predictions)


def logistic_regression_on_run_split(run_dir) -> BaselineResult:
    """:func:`logistic_regression_baseline` on the split of ``run_dir``."""
    return logistic_regression_baseline(*_run_data(run_dir))
