"""A classical classifier on fixed features, for the baselines that ``attnhub finetune`` sets beside a model:
standardised features, scikit-learn's logistic regression with its inverse regularisation ``C`` picked on the
validation split, scored on the test split with the metric names of :class:`hub.tasks.ClassificationTask`
(``test/acc`` first; then ``test/auroc`` and ``test/auprc`` for two classes, ``test/f1`` (macro) for more). Given
the run's model's probabilities on the validation and test splits, it also gives the
:class:`~hub.kinds.PredictorData` from which ``finetune`` chooses the run's predictor (:mod:`hub.predictor`); the
fitted scaler and classifier are kept as their arrays in ``baseline.safetensors`` (:data:`LINEAR_ARRAYS`, no
pickle), from which :func:`linear_probabilities` predicts as scikit-learn does.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> y = {s: np.arange(40) % 2 for s in ("train", "val", "test")}
>>> x = {s: y[s][:, None] * 4.0 + rng.standard_normal((40, 3)) for s in y}
>>> result = logistic_regression_baseline("demo", x, y, ["a", "b"], [str(i) for i in range(40)])
>>> list(result.metrics), result.metrics["test/acc"] > 0.9, list(result.predictions)[:3]
(['test/acc', 'test/auroc', 'test/auprc'], True, ['id', 'target', 'prediction'])
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from hub.errors import HubError
from hub.kinds import BaselineResult, CrossValidation, PredictorData
from hub.predictor import blend_of, load_arrays, save_arrays

C_GRID = (0.001, 0.01, 0.1, 1.0, 10.0)
LINEAR_FILE = "baseline.safetensors"
# a kept logistic regression: the scaler's mean and scale (D,), the coefficients (K, D) and intercepts (K,) (K = 1
# for two classes), the classes it saw in training (K' indices into the label names) and the number of label names
LINEAR_ARRAYS = ("mean", "scale", "coef", "intercept", "classes", "num_classes")


def linear_probabilities(arrays: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Class probabilities of the kept logistic regression for raw features ``x`` (N, D), as scikit-learn's
    ``predict_proba`` after the scaler: the logistic of the one score for two classes, else the softmax; a class it
    never saw in training at 0.

    Shapes: (N, D) -> (N, num_classes)."""
    z = ((np.asarray(x, np.float64) - arrays["mean"]) / arrays["scale"]) @ arrays["coef"].T + arrays["intercept"]
    if z.shape[1] == 1:  # (N, 1): the score of the second class
        positive = 1 / (1 + np.exp(-z[:, 0]))
        seen = np.stack([1 - positive, positive], 1)
    else:
        seen = np.exp(z - z.max(1, keepdims=True))
        seen /= seen.sum(1, keepdims=True)
    proba = np.zeros((len(z), int(arrays["num_classes"][0])))
    proba[:, arrays["classes"]] = seen
    return proba


class LinearProbabilities(torch.nn.Module):
    """The kept logistic regression (:data:`LINEAR_ARRAYS`) as a module, for exporting a predictor that uses it: the
    class probabilities of :func:`linear_probabilities` for the flattened input. Shapes: (N, ...) -> (N, C)."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        super().__init__()
        for name in ("mean", "scale", "coef", "intercept"):
            self.register_buffer(name, torch.as_tensor(np.asarray(arrays[name]), dtype=torch.float32))
        self.num_classes = int(arrays["num_classes"][0])
        self.register_buffer("classes", torch.as_tensor(np.asarray(arrays["classes"]), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = ((x.flatten(1) - self.mean) / self.scale) @ self.coef.T + self.intercept
        seen = torch.cat([1 - torch.sigmoid(z), torch.sigmoid(z)], 1) if z.shape[1] == 1 else z.softmax(1)
        placed = seen.new_zeros(seen.shape[0], self.num_classes)  # shape[0]: the batch stays dynamic when exported
        return placed.index_copy(1, self.classes, seen)  # a class never seen in training at 0


def kept_linear(card) -> dict[str, np.ndarray]:
    """The arrays of the logistic regression kept with ``card`` (its predictor's baseline file, sha256 checked)."""
    found = blend_of(card)
    if found is None:
        raise HubError(f"the card of {card.name} predicts with its model; it keeps no baseline")
    _, path, sha256 = found
    return load_arrays(path, sha256, LINEAR_ARRAYS)


def logistic_regression_baseline(name: str, features: dict[str, np.ndarray], labels: dict[str, np.ndarray],
                                 label_names: list[str], ids: list[str], id_column: str = "id",
                                 seed: int = 0, model_probabilities: dict[str, np.ndarray] | None = None
                                 ) -> BaselineResult:
    """Fit on ``features["train"]`` (N, D) and ``labels["train"]`` (N,) class indices into ``label_names``, pick
    ``C`` from :data:`C_GRID` by validation accuracy, score ``"test"``. ``ids`` name the test items in the
    predictions' first column, ``id_column`` (``file``, ``row`` ...), with the true and predicted class and each
    class's probability. ``model_probabilities`` (the run's model's, ``val`` and ``test``, (N, C) each, in the
    splits' order) adds the predictor data of both."""
    from sklearn.metrics import accuracy_score, average_precision_score, f1_score, roc_auc_score
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(features["train"])
    x = {s: scaler.transform(v) for s, v in features.items()}
    model = _best_on_val(x["train"], labels["train"], x["val"], labels["val"], seed)
    proba = np.zeros((len(x["test"]), len(label_names)))
    proba[:, model.classes_] = model.predict_proba(x["test"])  # a class absent from train/ keeps probability 0
    y, pred = labels["test"], proba.argmax(1)
    metrics = {"test/acc": float(accuracy_score(y, pred))}
    if len(label_names) == 2:
        metrics.update({"test/auroc": float(roc_auc_score(y, proba[:, 1])),
                        "test/auprc": float(average_precision_score(y, proba[:, 1]))})
    else:
        metrics["test/f1"] = float(f1_score(y, pred, average="macro"))  # over the classes seen, as torchmetrics
    names = np.asarray(label_names)
    predictions = {id_column: list(ids), "target": names[y].tolist(), "prediction": names[pred].tolist(),
                   **{f"proba_{c}": proba[:, i].tolist() for i, c in enumerate(label_names)}}
    result = BaselineResult(f"{name} (C={model.C:g})", metrics, predictions)
    if model_probabilities is None:
        return result
    arrays = {"mean": scaler.mean_, "scale": scaler.scale_, "coef": model.coef_, "intercept": model.intercept_,
              "classes": model.classes_.astype(np.int64), "num_classes": np.array([len(label_names)])}
    return dataclasses.replace(result, predictor=PredictorData(
        task="classification", labels={s: labels[s] for s in ("val", "test")},
        model={s: model_probabilities[s] for s in ("val", "test")},
        baseline={s: linear_probabilities(arrays, features[s]) for s in ("val", "test")},
        save=lambda run_dir: save_arrays(arrays, Path(run_dir) / LINEAR_FILE)))


def _best_on_val(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, seed: int):
    """The logistic regression of :data:`C_GRID` (on standardised features) most accurate on the validation items,
    the first of ties."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score

    fitted = [LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(x_train, y_train) for c in C_GRID]
    return max(fitted, key=lambda m: accuracy_score(y_val, m.predict(x_val)))


def fit_linear(x: np.ndarray, y: np.ndarray, num_classes: int, seed: int = 0, c: float | None = None,
               x_val: np.ndarray | None = None, y_val: np.ndarray | None = None
               ) -> tuple[dict[str, np.ndarray], float]:
    """The :data:`LINEAR_ARRAYS` of a logistic regression on standardised ``x`` (N, D) with class indices ``y``
    (N,), and its ``C``: ``c``, or picked from :data:`C_GRID` on ``x_val``, ``y_val``."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(x)
    if c is None:
        model = _best_on_val(scaler.transform(x), y, scaler.transform(x_val), y_val, seed)
    else:
        model = LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(scaler.transform(x), y)
    return {"mean": scaler.mean_, "scale": scaler.scale_, "coef": model.coef_, "intercept": model.intercept_,
            "classes": model.classes_.astype(np.int64), "num_classes": np.array([num_classes])}, float(model.C)


def folder_cross_validation(run_dir, name: str, features) -> CrossValidation | None:
    """The choice by folds of a run on a folder of class folders (images, clips; :class:`hub.kinds.CrossValidation`),
    with this module's logistic regression on ``features(files) -> (N, D)`` as the baseline ``name``: folds of the items
    outside the test split (``data.args.cv_fold``, :func:`hub.data.folded_splits`), the baseline out of fold (each
    fold's ``C`` picked on the fold left out, as the model's fold run stops early on it; the refit takes the ``C``
    picked most often), the refit on every item (``data.args.refit``). None for a run whose data module lists no
    folder splits (``split_items``)."""
    from collections import Counter

    from hub.data import file_groups
    from hub.models import load
    from hub.predictor import model_outputs, probabilities
    from hub.recipe import load_recipe
    from hub.run.train import build_data

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    data = build_data(recipe)
    if not hasattr(data, "cv_fold"):  # not a folder of class folders: chosen on the validation split
        return None
    splits, classes = data.split_items()
    pool = splits["train"] + splits["val"]
    labels = np.array([label for _, label in pool])
    groups = None if data.groups is None else file_groups([f for f, _ in pool], data.groups)  # as folded_splits'
    x = features([f for f, _ in pool])
    picked: list[float] = []

    def fold_outputs(fold_dir):
        fold_data = build_data(load_recipe(Path(fold_dir) / "recipe.yaml"))
        fold_data.setup()
        model = load(str(fold_dir))
        return probabilities(model, model_outputs(model, fold_data.val_set))

    def baselines(folds, seed):
        out = np.zeros((len(pool), len(classes)))
        for fit, held in folds:
            arrays, c = fit_linear(x[fit], labels[fit], len(classes), seed, x_val=x[held], y_val=labels[held])
            picked.append(c)
            out[held] = linear_probabilities(arrays, x[held])
        return {name: out}

    def chosen_c() -> float:
        return Counter(picked).most_common(1)[0][0] if picked else 1.0

    def test(_):
        data.setup()
        model = load(str(run_dir))
        arrays, _ = fit_linear(x, labels, len(classes), recipe.seed, c=chosen_c())
        x_test = features([f for f, _ in splits["test"]])
        return (np.array([label for _, label in splits["test"]]),
                probabilities(model, model_outputs(model, data.test_set)), linear_probabilities(arrays, x_test))

    def refit(_, out_dir):
        every = pool + splits["test"]
        x_all = np.concatenate([x, features([f for f, _ in splits["test"]])]) if splits["test"] else x
        arrays, _ = fit_linear(x_all, np.array([label for _, label in every]), len(classes), recipe.seed, c=chosen_c())
        return save_arrays(arrays, Path(out_dir) / LINEAR_FILE)

    return CrossValidation(
        task="classification", labels=labels, label_names=list(classes), groups=groups,
        fold_overrides=lambda k, index, seed: [f"data.args.cv_fold=[{k},{index},{seed}]"],
        refit_overrides=["data.args.refit=true"], fold_outputs=fold_outputs, baselines=baselines,
        test=test if splits["test"] else None, refit=refit)
