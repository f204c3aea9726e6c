"""The classical baseline of node classification: logistic regression on each node's features concatenated with
the mean of its neighbours' features and the mean over its 2-hop walks (SIGN-style propagated features, no
training through the graph), each feature scaled by its largest magnitude, fitted on the run's training nodes, its
inverse regularisation ``C`` picked on the validation nodes, scored on the test nodes with the task's metric names
(``test/acc``, ``test/f1``). On CiteSeer's public split (0/1 word features) its test accuracy is 0.712. With the
run's model's probabilities beside it, ``finetune`` chooses the run's predictor among model, baseline and blend
(:mod:`hub.predictor`); the kept regression predicts a graph folder's unlabelled nodes
(:func:`neighbour_probabilities`).

>>> import torch
>>> x = torch.eye(4)
>>> neighbour_features(x, torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])).toarray()[1, 4:8]  # node 1: mean of 0, 2
array([0.5, 0. , 0.5, 0. ], dtype=float32)
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score

from hub.classical import LINEAR_FILE, kept_linear, linear_probabilities
from hub.kinds import BaselineResult, PredictorData
from hub.predictor import save_arrays

NAME = "logistic regression on node features + neighbour means"
C_GRID = (0.001, 0.01, 0.1, 1.0, 10.0, 100.0)  # inverse L2 strengths tried, the best on validation accuracy kept


def neighbour_features(x: torch.Tensor, edge_index: torch.Tensor, hops: int = 2) -> sp.csr_matrix:
    """``[x, A x, ..., A^hops x]`` with ``A`` the row-normalised adjacency (the mean over a node's neighbours; an
    isolated node's means are 0). Shapes: x (N, F) dense or sparse CSR, edge_index (2, E) -> (N, (hops + 1) F)."""
    num_nodes = x.shape[0]
    if x.layout == torch.sparse_csr:
        features = sp.csr_matrix((x.values().numpy(), x.col_indices().numpy(), x.crow_indices().numpy()),
                                 shape=tuple(x.shape), dtype=np.float32)
    else:
        features = sp.csr_matrix(x.numpy(), dtype=np.float32)
    src, dst = edge_index.numpy()
    adjacency = sp.csr_matrix((np.ones(len(src), dtype=np.float32), (dst, src)), shape=(num_nodes, num_nodes))
    adjacency.data[:] = 1.0  # repeated edges count once
    mean = sp.diags(1.0 / np.maximum(np.asarray(adjacency.sum(1)).ravel(), 1.0)) @ adjacency
    blocks = [features]
    for _ in range(hops):
        blocks.append(mean @ blocks[-1])
    return sp.hstack(blocks, format="csr")


def logistic_on_neighbour_means(graph, label_names: list[str], ids: list[str], seed: int = 0,
                                hops: int = 2, model_probabilities: dict[str, np.ndarray] | None = None
                                ) -> BaselineResult:
    """Fit on ``graph.train_mask``, pick ``C`` on ``graph.val_mask``, score ``graph.test_mask``; predictions per
    test node: its id, target, predicted class and each class's probability. Each feature is divided by its
    largest magnitude over all nodes (their features are all known, as to the model; no centring, so
    bag-of-words stays sparse: standardising on the few training nodes blows up the rare words' columns).

    Args:
        graph: PyG ``Data`` with ``x``, ``edge_index``, ``y`` and the three split masks.
        label_names: the class names, indexed by ``y``.
        ids: the nodes' ids, in node order.
        seed: the logistic regression's random state.
        hops: the neighbour means' walk lengths (1 to ``hops``).
        model_probabilities: the run's model's class probabilities on the validation and test nodes (``val``,
            ``test``: (N, C) each, in node order), to choose the run's predictor (:mod:`hub.predictor`); the fitted
            regression is then kept as arrays (:data:`hub.classical.LINEAR_ARRAYS`: the scaler's mean is 0 and its
            scale the largest magnitudes).
    """
    unscaled = neighbour_features(graph.x, graph.edge_index, hops)
    largest = abs(unscaled).max(axis=0).toarray().ravel()
    scale = np.where(largest > 0, largest, 1.0)
    features = unscaled @ sp.diags(1.0 / scale)
    y = graph.y.numpy()
    train, val, test = (graph[f"{s}_mask"].numpy() for s in ("train", "val", "test"))
    x_train, x_val = features[train].toarray(), features[val].toarray()
    models = [LogisticRegression(C=c, max_iter=2000, random_state=seed).fit(x_train, y[train]) for c in C_GRID]
    best = max(models, key=lambda m: accuracy_score(y[val], m.predict(x_val)))  # the first of equals: the smallest C
    proba = np.zeros((int(test.sum()), len(label_names)))
    proba[:, best.classes_] = best.predict_proba(features[test].toarray())  # classes absent from training keep 0
    predicted, target = proba.argmax(1), y[test]
    labels = np.asarray(label_names)
    metrics = {"test/acc": float(accuracy_score(target, predicted)),
               "test/f1": float(f1_score(target, predicted, labels=range(len(label_names)), average="macro",
                                         zero_division=0))}
    predictions = {"id": [ids[i] for i in np.flatnonzero(test)], "target": labels[target].tolist(),
                   "prediction": labels[predicted].tolist(),
                   **{f"proba_{c}": proba[:, i].tolist() for i, c in enumerate(label_names)}}
    result = BaselineResult(NAME, metrics, predictions)
    if model_probabilities is None:
        return result
    arrays = {"mean": np.zeros_like(scale), "scale": scale, "coef": best.coef_, "intercept": best.intercept_,
              "classes": best.classes_.astype(np.int64), "num_classes": np.array([len(label_names)])}
    masks = {"val": val, "test": test}
    return dataclasses.replace(result, predictor=PredictorData(
        task="classification", labels={s: y[m] for s, m in masks.items()}, model=model_probabilities,
        baseline={s: linear_probabilities(arrays, unscaled[m].toarray()) for s, m in masks.items()},
        save=lambda run_dir: save_arrays(arrays, Path(run_dir) / LINEAR_FILE)))


def neighbour_probabilities(card, graph, nodes: torch.Tensor) -> np.ndarray:
    """The class probabilities of the logistic regression kept with ``card`` for ``nodes`` (n,) of ``graph`` (its
    features as the model takes them), from their neighbour-mean features. Shapes: -> (n, C)."""
    arrays = kept_linear(card)
    hops = arrays["scale"].shape[0] // graph.x.shape[1] - 1
    return linear_probabilities(arrays, neighbour_features(graph.x, graph.edge_index, hops)[nodes.numpy()].toarray())


def logistic_on_run_split(run_dir) -> BaselineResult:
    """:func:`logistic_on_neighbour_means` on the graph and split of a finished run (its resolved recipe rebuilds
    them, features normalised as the model saw them)."""
    from hub.models import load
    from hub.predictor import probabilities
    from hub.recipe import load_recipe
    from hub.run.train import build_data

    recipe = load_recipe(Path(run_dir) / "recipe.yaml")
    data = build_data(recipe)
    graph = data.graph
    ids = getattr(data, "ids", None) or [str(i) for i in range(graph.num_nodes)]
    model = load(str(run_dir))
    with torch.inference_mode():
        proba = probabilities(model, model(graph.x, graph.edge_index).float().numpy())
    ours = {s: proba[graph[f"{s}_mask"].numpy()] for s in ("val", "test")}
    return logistic_on_neighbour_means(graph, data.label_names, ids, recipe.seed, model_probabilities=ours)
