"""The GBDT baseline of every tabular comparison: scikit-learn's HistGradientBoosting (default settings) on
the same preprocessed split as the hub models (categorical codes declared categorical), scored with the
same metric names and units as the hub's tasks (regression: the standardised target); on a finished run's own
split, for the report that ``attnhub finetune`` prints.

>>> from tabular.data import breast_cancer
>>> data = breast_cancer(); data.setup(); sorted(gbdt_metrics(data))
['test/acc', 'test/auroc']
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from sklearn.metrics import accuracy_score, f1_score, mean_absolute_error, mean_squared_error, roc_auc_score

from hub.kinds import BaselineResult


def _xy(dataset) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([dataset.x_num.numpy(), dataset.x_cat.numpy()], 1), dataset.y.numpy()


def gbdt_metrics(datamodule, seed: int = 0) -> dict[str, float]:
    """Fit on the training split of a set-up :class:`tabular.data.TabularData`, score its test split."""
    return gbdt_baseline(datamodule, seed).metrics


def gbdt_baseline(datamodule, seed: int = 0) -> BaselineResult:
    """:func:`gbdt_metrics` with the test split's predictions: the target and the prediction (class names, or values
    in the target's units), and each class's probability."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    x, y = _xy(datamodule.train_set)
    x_test, y_test = _xy(datamodule.test_set)
    categorical = np.arange(x.shape[1]) >= datamodule.train_set.x_num.shape[1]
    regression = datamodule.task == "regression"
    model = (HistGradientBoostingRegressor if regression else HistGradientBoostingClassifier)(
        categorical_features=categorical if categorical.any() else None, random_state=seed)
    model.fit(x, y)
    pre, name = datamodule.preprocessor, "HistGradientBoosting"
    if regression:
        pred = model.predict(x_test)
        metrics = {"test/rmse": float(np.sqrt(mean_squared_error(y_test, pred))),
                   "test/mae": float(mean_absolute_error(y_test, pred))}
        target, prediction = ((v * pre.target_std + pre.target_mean).tolist() for v in (y_test, pred))
        return BaselineResult(name, metrics, {"target": target, "prediction": prediction})
    proba = model.predict_proba(x_test)
    labels = np.asarray(pre.classes)
    predictions = {"target": labels[y_test].tolist(), "prediction": labels[proba.argmax(1)].tolist(),
                   **{f"proba_{c}": proba[:, i].tolist() for i, c in enumerate(labels)}}
    accuracy = float(accuracy_score(y_test, proba.argmax(1)))
    if proba.shape[1] == 2:
        return BaselineResult(name, {"test/acc": accuracy, "test/auroc": float(roc_auc_score(y_test, proba[:, 1]))},
                              predictions)
    return BaselineResult(name, {"test/acc": accuracy, "test/f1": float(f1_score(y_test, proba.argmax(1),
                                                                                 average="macro"))}, predictions)


def gbdt_on_run_split(run_dir) -> BaselineResult:
    """HistGradientBoosting fitted on the training split of the run (its resolved recipe rebuilds the split)."""
    from hub.recipe import load_recipe
    from hub.run.train import build_data

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    return gbdt_baseline(build_data(recipe), recipe.seed)
