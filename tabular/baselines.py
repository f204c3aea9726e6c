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
from hub.kinds import BaselineResult, CrossValidation, PredictorData
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


def _in_units(values: np.ndarray, data, classes: list[str]) -> np.ndarray:
    """A split's outputs (:func:`model_values` or :func:`baseline_values` of ``data``'s preprocessing) in common
    terms: a regression's values in the target's units, a classifier's probabilities over ``classes`` (a class the
    fold's preprocessing never saw at 0)."""
    pre = data.preprocessor
    if pre.task == "regression":
        return values * pre.target_std + pre.target_mean
    out = np.zeros((len(values), len(classes)))
    out[:, [classes.index(c) for c in pre.classes]] = values
    return out


def gbdt_cross_validation(run_dir) -> CrossValidation:
    """The choice by folds of a table's run (:class:`hub.kinds.CrossValidation`): folds of the rows outside the test
    split (``data.args.cv_fold``: stratified by class), HistGradientBoosting out of fold, and the refit on every row
    (``data.args.refit``). Values are compared in the target's units (each fold standardises its own)."""
    from hub.models import load
    from hub.recipe import apply_overrides, load_recipe, validate_recipe
    from hub.run.train import build_data

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    data, seed = build_data(recipe), recipe.seed
    data.setup()
    classes, kind = list(data.preprocessor.classes), data.task
    task = "regression" if kind == "regression" else "classification"

    def outputs(model, part, split_data):
        temperature = float(model.pretrained_cfg.calibration.get("temperature", 1.0))
        return _in_units(model_values(model, part, kind, temperature), split_data, classes)

    def labels_of(parts, split_data):
        y = np.concatenate([p.y.numpy() for p in parts])
        return y * split_data.preprocessor.target_std + split_data.preprocessor.target_mean if task == "regression" \
            else y

    def fold_data(k, index, fold_seed):
        fold = validate_recipe(apply_overrides(recipe.to_dict(), [f"data.args.cv_fold=[{k},{index},{fold_seed}]"]),
                               f"fold {index}")
        fold_data = build_data(fold)
        fold_data.setup()
        return fold_data

    def fold_outputs(fold_dir):
        fold_data = build_data(load_recipe(Path(fold_dir) / "recipe.yaml"))
        fold_data.setup()
        return outputs(load(str(fold_dir)), fold_data.val_set, fold_data)

    def baselines(folds, fold_seed):
        out = None
        for index, (_, val) in enumerate(folds):
            fold = fold_data(len(folds), index, fold_seed)
            _, estimator = _fit_gbdt(fold, seed)
            values = _in_units(baseline_values(estimator, _xy(fold.val_set)[0], kind, fold.num_classes or 0), fold,
                               classes)
            out = np.full((len(data.pool_labels), *values.shape[1:]), np.nan) if out is None else out
            out[val] = values
        return {"HistGradientBoosting": out}

    def test(name):
        model = load(str(run_dir))
        x = np.concatenate([_xy(data.train_set)[0], _xy(data.val_set)[0]])
        y = np.concatenate([data.train_set.y.numpy(), data.val_set.y.numpy()])
        estimator = _fit_on(data, x, y, seed)
        theirs = baseline_values(estimator, _xy(data.test_set)[0], kind, data.num_classes or 0)
        return (labels_of([data.test_set], data), outputs(model, data.test_set, data),
                _in_units(theirs, data, classes))

    def refit(name, out_dir):
        final = build_data(load_recipe(Path(out_dir) / "recipe.yaml"))
        final.setup()
        _, estimator = _fit_gbdt(final, seed)
        return save_skops(estimator, Path(out_dir) / BASELINE_FILE)

    return CrossValidation(
        task=task, labels=labels_of([data.train_set, data.val_set], data), label_names=classes or None,
        groups=data.pool_groups,
        fold_overrides=lambda k, index, fold_seed: [f"data.args.cv_fold=[{k},{index},{fold_seed}]"],
        refit_overrides=["data.args.refit=true"], fold_outputs=fold_outputs, baselines=baselines, test=test,
        refit=refit)


def _fit_on(data, x: np.ndarray, y: np.ndarray, seed: int):
    """HistGradientBoosting as :func:`_fit_gbdt` fits it, on the rows ``x`` (preprocessed as ``data``'s) and
    targets ``y``."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    categorical = np.arange(x.shape[1]) >= data.train_set.x_num.shape[1]
    estimator = (HistGradientBoostingRegressor if data.task == "regression" else HistGradientBoostingClassifier)(
        categorical_features=categorical if categorical.any() else None, random_state=seed)
    return estimator.fit(x, y)


def skrub_pipeline(task: str, seed: int = 0):
    """skrub's ``TableVectorizer`` (strings, dates and numbers of a raw table to numbers; from CARTE's authors)
    then HistGradientBoosting at its defaults: the classic baseline for tables with strings. ``task``: the
    preprocessor's (``regression``, ``binary``, ``multiclass``)."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from sklearn.pipeline import make_pipeline
    from skrub import TableVectorizer

    head = HistGradientBoostingRegressor if task == "regression" else HistGradientBoostingClassifier
    return make_pipeline(TableVectorizer(), head(random_state=seed))


def skrub_on_run_split(run_dir) -> BaselineResult:
    """skrub's TableVectorizer + HistGradientBoosting (:func:`skrub_pipeline`) fitted on the raw training rows of
    the run's split (its resolved recipe rebuilds it) and scored on its test rows with the run's metric names
    (regression: the standardised target, as the run's model is scored)."""
    from hub.recipe import load_recipe
    from hub.run.train import build_data

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    data = build_data(recipe)
    data.setup()
    pre, frames = data.preprocessor, data.frames
    model = skrub_pipeline(pre.task, recipe.seed).fit(frames["train"].drop(columns=pre.target), data.train_set.y)
    x_test, y_test = frames["test"].drop(columns=pre.target), data.test_set.y.numpy()
    name = "skrub TableVectorizer + HistGradientBoosting"
    if pre.task == "regression":
        pred = model.predict(x_test)
        metrics = {"test/rmse": float(np.sqrt(mean_squared_error(y_test, pred))),
                   "test/mae": float(mean_absolute_error(y_test, pred))}
        target, prediction = ((v * pre.target_std + pre.target_mean).tolist() for v in (y_test, pred))
        return BaselineResult(name, metrics, {"target": target, "prediction": prediction})
    proba = _proba(model, x_test, len(pre.classes))
    labels = np.asarray(pre.classes)
    metrics = {"test/acc": float(accuracy_score(y_test, proba.argmax(1)))}
    metrics.update({"test/auroc": float(roc_auc_score(y_test, proba[:, 1]))} if proba.shape[1] == 2 else
                   {"test/f1": float(f1_score(y_test, proba.argmax(1), average="macro"))})
    return BaselineResult(name, metrics, {"target": labels[y_test].tolist(), "prediction": labels[proba.argmax(1)]
                                          .tolist(), **{f"proba_{c}": proba[:, i].tolist() for i, c in
                                                        enumerate(labels)}})
