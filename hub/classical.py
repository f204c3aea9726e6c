"""A classical classifier on fixed features, for the baselines that ``attnhub finetune`` sets beside a model:
standardised features, scikit-learn's logistic regression with its inverse regularisation ``C`` picked on the
validation split, scored on the test split with the metric names of :class:`hub.tasks.ClassificationTask`
(``test/acc`` first; then ``test/auroc`` and ``test/auprc`` for two classes, ``test/f1`` (macro) for more).

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> y = {s: np.arange(40) % 2 for s in ("train", "val", "test")}
>>> x = {s: y[s][:, None] * 4.0 + rng.standard_normal((40, 3)) for s in y}
>>> result = logistic_regression_baseline("demo", x, y, ["a", "b"], [str(i) for i in range(40)])
>>> list(result.metrics), result.metrics["test/acc"] > 0.9, list(result.predictions)[:3]
(['test/acc', 'test/auroc', 'test/auprc'], True, ['id', 'target', 'prediction'])
"""
from __future__ import annotations

import numpy as np

from hub.kinds import BaselineResult

C_GRID = (0.001, 0.01, 0.1, 1.0, 10.0)


def logistic_regression_baseline(name: str, features: dict[str, np.ndarray], labels: dict[str, np.ndarray],
                                 label_names: list[str], ids: list[str], id_column: str = "id",
                                 seed: int = 0) -> BaselineResult:
    """Fit on ``features["train"]`` (N, D) and ``labels["train"]`` (N,) class indices into ``label_names``, pick
    ``C`` from :data:`C_GRID` by validation accuracy, score ``"test"``. ``ids`` name the test items in the
    predictions' first column, ``id_column`` (``file``, ``row`` ...), with the true and predicted class and each
    class's probability."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import accuracy_score, average_precision_score, f1_score, roc_auc_score
    from sklearn.preprocessing import StandardScaler

    scaler = StandardScaler().fit(features["train"])
    x = {s: scaler.transform(v) for s, v in features.items()}
    fitted = [LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(x["train"], labels["train"])
              for c in C_GRID]
    model = max(fitted, key=lambda m: accuracy_score(labels["val"], m.predict(x["val"])))  # the first of ties
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
    return BaselineResult(f"{name} (C={model.C:g})", metrics, predictions)
