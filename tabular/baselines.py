"""The GBDT baseline of every tabular comparison: scikit-learn's HistGradientBoosting (default settings) on
the same preprocessed split as the hub models (categorical codes declared categorical), scored with the
same metric names and units as the hub's tasks (regression: the standardised target); on a finished run's own
split, for the report that ``attnhub finetune`` prints, with the validation and test outputs of the baseline and of
the run's model from which ``finetune`` chooses the run's predictor (:mod:`hub.predictor`). The fitted baseline is
kept as ``baseline.skops`` in the run folder and read back only through :data:`TRUSTED_TYPES`.

>>> from tabular.data import breast_cancer
>>> data = breast_cancer(); data.setup(); sorted(gbdt_metrics(data))
['test/acc', 'test/auroc']
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from sklearn.metrics import accuracy_score, f1_score, mean_absolute_error, mean_squared_error, roc_auc_score

from hub.errors import HubError
from hub.kinds import BaselineResult, PredictorData
from hub.predictor import HIST_GRADIENT_BOOSTING_TYPES, save_skops

BASELINE_FILE = "baseline.skops"
# loading a baseline file that holds a type outside this allow-list is refused
TRUSTED_TYPES = HIST_GRADIENT_BOOSTING_TYPES


def _xy(dataset) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate([dataset.x_num.numpy(), dataset.x_cat.numpy()], 1), dataset.y.numpy()


def gbdt_metrics(datamodule, seed: int = 0) -> dict[str, float]:
    """Fit on the training split of a set-up :class:`tabular.data.TabularData`, score its test split."""
    return gbdt_baseline(datamodule, seed).metrics


def gbdt_baseline(datamodule, seed: int = 0, model=None) -> BaselineResult:
    """:func:`gbdt_metrics` with the test split's predictions: the target and the prediction (class names, or values
    in the target's units), and each class's probability. With ``model`` (the run's, loaded), also the
    :class:`~hub.kinds.PredictorData` of both on the validation and test splits (:func:`predictor_data`)."""
    result, _ = _fit_gbdt(datamodule, seed)
    if model is None:
        return result
    return dataclasses.replace(result, predictor=predictor_data(datamodule, model, _))


def _fit_gbdt(datamodule, seed: int):
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
        return BaselineResult(name, metrics, {"target": target, "prediction": prediction}), model
    proba = _proba(model, x_test, datamodule.num_classes)
    labels = np.asarray(pre.classes)
    predictions = {"target": labels[y_test].tolist(), "prediction": labels[proba.argmax(1)].tolist(),
                   **{f"proba_{c}": proba[:, i].tolist() for i, c in enumerate(labels)}}
    accuracy = float(accuracy_score(y_test, proba.argmax(1)))
    if proba.shape[1] == 2:
        return BaselineResult(name, {"test/acc": accuracy, "test/auroc": float(roc_auc_score(y_test, proba[:, 1]))},
                              predictions), model
    return BaselineResult(name, {"test/acc": accuracy, "test/f1": float(f1_score(y_test, proba.argmax(1),
                                                                                 average="macro"))}, predictions), model


def _proba(estimator, x: np.ndarray, num_classes: int) -> np.ndarray:
    """(N, num_classes) class probabilities, a class the estimator never saw in training at 0."""
    proba = np.zeros((len(x), num_classes))
    proba[:, estimator.classes_.astype(int)] = estimator.predict_proba(x)
    return proba


def baseline_values(estimator, x: np.ndarray, task: str, num_classes: int) -> np.ndarray:
    """The fitted baseline's outputs for preprocessed rows ``x``: (N, C) probabilities, or (N,) standardised values
    for regression."""
    return estimator.predict(x) if task == "regression" else _proba(estimator, x, num_classes)


def model_values(model, dataset, task: str, temperature: float = 1.0, batch_size: int = 1024) -> np.ndarray:
    """The run's model's outputs on a split, as :func:`baseline_values` gives the baseline's: probabilities of
    ``logits / temperature`` (the card's calibration, as ``predict`` uses it), or standardised values."""
    import torch

    model.eval()
    outputs = []
    with torch.inference_mode():
        for start in range(0, len(dataset), batch_size):
            out = model(dataset.x_num[start:start + batch_size], dataset.x_cat[start:start + batch_size]).float()
            outputs.append(out.reshape(len(out), -1)[:, 0] if task == "regression" else (out / temperature).softmax(-1))
    return torch.cat(outputs).numpy().astype(np.float64)


def predictor_data(datamodule, model, estimator) -> PredictorData:
    """The validation and test labels and outputs of the run's ``model`` and the fitted ``estimator``, and how to
    save the estimator into a run folder (``baseline.skops``)."""
    task = "regression" if datamodule.task == "regression" else "classification"
    temperature = float(model.pretrained_cfg.calibration.get("temperature", 1.0)) \
        if getattr(model, "pretrained_cfg", None) is not None else 1.0
    splits = {"val": datamodule.val_set, "test": datamodule.test_set}
    num_classes = datamodule.num_classes or 0
    return PredictorData(
        task=task, labels={k: d.y.numpy() for k, d in splits.items()},
        model={k: model_values(model, d, datamodule.task, temperature) for k, d in splits.items()},
        baseline={k: baseline_values(estimator, _xy(d)[0], datamodule.task, num_classes) for k, d in splits.items()},
        save=lambda run_dir: save_skops(estimator, Path(run_dir) / BASELINE_FILE))


def gbdt_on_run_split(run_dir) -> BaselineResult:
    """HistGradientBoosting fitted on the training split of the run (its resolved recipe rebuilds the split), with
    the predictor data of it and the run's model (its best weights)."""
    from hub.models import load
    from hub.recipe import load_recipe
    from hub.run.train import build_data

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    datamodule = build_data(recipe)
    datamodule.setup()
    return gbdt_baseline(datamodule, recipe.seed, model=load(str(run_dir)))


def baseline_outputs(card, path: str) -> np.ndarray:
    """The outputs of the baseline saved with ``card`` (its ``predictor["baseline"]`` file, sha256 and types
    checked) for the rows of the CSV at ``path``: (N, C) class probabilities, or (N,) values in the target's
    units."""
    from hub.predictor import blend_of, load_skops
    from tabular.io import TabularPreprocessor, read_table

    found = blend_of(card)
    if found is None:
        raise HubError(f"the card of {card.name} predicts with its model; it uses no baseline")
    _, file, sha256 = found
    estimator = load_skops(file, sha256, TRUSTED_TYPES)
    pre = TabularPreprocessor.from_dict(card.input_spec["preprocessor"])
    x = np.concatenate(pre.transform(read_table(path)), 1)
    values = baseline_values(estimator, x, pre.task, len(pre.classes or []))
    return values * pre.target_std + pre.target_mean if pre.task == "regression" else values
