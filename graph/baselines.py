"""The classical baselines of node classification, each fitted on the run's training nodes with its one
hyperparameter picked on the validation nodes (the first of equal validation accuracies), and scored with the
task's metric names (``test/acc``, ``test/f1``) (:data:`BASELINES`):

- logistic regression on each node's own features;
- logistic regression on each node's features concatenated with the mean of its neighbours' features and the mean
  over its 2-hop walks (SIGN-style propagated features, no training through the graph);
- an MLP on the node's own features (scikit-learn's ``MLPClassifier``, one hidden layer of :data:`MLP_HIDDEN`): on
  graphs whose edges mostly join different classes (low homophily) an MLP on the features often beats message
  passing (Zhu et al., NeurIPS 2020, "Beyond Homophily in Graph Neural Networks").

Each feature is scaled by its largest magnitude over all nodes. The baseline with the best validation log loss
(:func:`hub.predictor.selection_metric`) is the run's baseline (:func:`node_baselines`); on a small graph
``finetune`` chooses among all three and the model by cross-validation instead (:func:`cv_baselines`,
:mod:`hub.crossval`) and refits the chosen one on every labelled node (:func:`refit_baseline`). On CiteSeer's public
split (0/1 word features) the neighbour-mean regression tests 0.712. The kept baseline is saved as its arrays
(safetensors) and predicts a graph folder's unlabelled nodes (:func:`neighbour_probabilities`).

>>> import torch
>>> x = torch.eye(4)
>>> neighbour_features(x, torch.tensor([[0, 1, 1, 2], [1, 0, 2, 1]])).toarray()[1, 4:8]  # node 1: mean of 0, 2
array([0.5, 0. , 0.5, 0. ], dtype=float32)
"""
from __future__ import annotations

import dataclasses
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import accuracy_score, f1_score

from hub.classical import LINEAR_ARRAYS, linear_probabilities
from hub.errors import HubError
from hub.kinds import BaselineResult, PredictorData
from hub.predictor import blend_of, load_arrays, save_arrays, scores

NAME = "logistic regression on node features + neighbour means"
C_GRID = (0.001, 0.01, 0.1, 1.0, 10.0, 100.0)  # inverse L2 strengths tried, the best on validation accuracy kept
ALPHA_GRID = (1e-3, 1e-1, 1.0)  # the MLP's L2 strengths tried, the best on validation accuracy kept
MLP_HIDDEN = 64  # the MLP's hidden units
BASELINE_FILE = "baseline.safetensors"
HOPS = 2  # the longest neighbour-mean walk any baseline reads


@dataclass(frozen=True)
class NodeBaseline:
    """One classical baseline of node classification."""

    name: str
    hops: int  # neighbour-mean walks in its features (0: the node's own features alone)
    mlp: bool = False  # an MLP (one hidden layer, ReLU) rather than a logistic regression


BASELINES = (NodeBaseline("logistic regression on node features", 0),
             NodeBaseline(NAME, 2),
             NodeBaseline("MLP on node features", 0, mlp=True))


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


def scaled_features(graph, hops: int = HOPS) -> tuple[sp.csr_matrix, np.ndarray]:
    """``(neighbour_features(graph.x, graph.edge_index, hops), scale)``: the unscaled features (N, (hops + 1) F) and
    each column's largest magnitude over all nodes (1 for an all-zero column), by which every baseline divides them
    (their features are all known, as to the model; no centring, so bag-of-words stays sparse: standardising on the
    few training nodes blows up the rare words' columns)."""
    unscaled = neighbour_features(graph.x, graph.edge_index, hops)
    largest = abs(unscaled).max(axis=0).toarray().ravel()
    return unscaled, np.where(largest > 0, largest, 1.0)


def fit_baseline(baseline: NodeBaseline, unscaled: sp.csr_matrix, scale: np.ndarray, y: np.ndarray,
                 train: np.ndarray, val: np.ndarray | None, num_classes: int, seed: int = 0,
                 value: float | None = None) -> tuple[dict[str, np.ndarray], float]:
    """Fit ``baseline`` on the nodes ``train`` and return its kept arrays and its hyperparameter (``C`` of a
    logistic regression, ``alpha`` of an MLP): ``value`` when given, else the best of its grid by accuracy on the
    nodes ``val`` (the first of equals: the strongest regularisation).

    Args:
        baseline: one of :data:`BASELINES`.
        unscaled: :func:`scaled_features`'s features (N, (HOPS + 1) F); the baseline reads its first columns.
        scale: their columns' scales.
        y: the nodes' classes (N,).
        train: indices (or a mask) of the training nodes.
        val: those of the validation nodes (None when ``value`` is given).
        num_classes: the number of label names (a class absent from ``train`` gets probability 0).
        seed: the random state.
        value: the hyperparameter, or None to pick it on ``val``.

    Returns:
        The arrays :func:`baseline_probabilities` reads (:data:`KEPT_ARRAYS`; a logistic regression's are those of
        :data:`hub.classical.LINEAR_ARRAYS` with the scaler's mean 0, an MLP's add its hidden layer ``coef0``,
        ``intercept0``) and the hyperparameter.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    width = scale.shape[0] // (HOPS + 1) * (baseline.hops + 1)
    x = unscaled[:, :width] @ sp.diags(1.0 / scale[:width])
    x_train = x[train].toarray()

    def fitted(v: float):
        if baseline.mlp:
            with warnings.catch_warnings():  # stopped at max_iter on a small graph: its fit is what is kept
                warnings.simplefilter("ignore", ConvergenceWarning)
                return MLPClassifier((MLP_HIDDEN,), alpha=v, max_iter=300, random_state=seed).fit(x_train, y[train])
        return LogisticRegression(C=v, max_iter=2000, random_state=seed).fit(x_train, y[train])

    if value is None:
        x_val = x[val].toarray()
        models = {v: fitted(v) for v in (ALPHA_GRID[::-1] if baseline.mlp else C_GRID)}
        value = max(models, key=lambda v: accuracy_score(y[val], models[v].predict(x_val)))  # first of equals
        model = models[value]
    else:
        model = fitted(value)
    arrays = {"mean": np.zeros(width), "scale": scale[:width], "classes": model.classes_.astype(np.int64),
              "num_classes": np.array([num_classes])}
    if baseline.mlp:
        arrays.update({"coef0": model.coefs_[0], "intercept0": model.intercepts_[0],
                       "coef": model.coefs_[1].T, "intercept": model.intercepts_[1]})
    else:
        arrays.update({"coef": model.coef_, "intercept": model.intercept_})
    return arrays, float(value)


def baseline_probabilities(arrays: dict[str, np.ndarray], unscaled) -> np.ndarray:
    """Class probabilities of a kept baseline (:func:`fit_baseline`'s arrays) for rows of unscaled features
    (n, (hops + 1) F or more: it reads the first columns), as scikit-learn predicts them: an MLP's hidden layer
    (ReLU) first, then the probabilities of the logistic regression (or of the MLP's output layer). Shapes: ->
    (n, num_classes)."""
    width = arrays["scale"].shape[0]
    x = unscaled[:, :width]
    x = np.asarray(x.toarray() if sp.issparse(x) else x, dtype=np.float64)
    if "coef0" not in arrays:
        return linear_probabilities(arrays, x)
    hidden = np.maximum((x / arrays["scale"]) @ arrays["coef0"] + arrays["intercept0"], 0.0)
    return linear_probabilities({**arrays, "mean": np.zeros(hidden.shape[1]), "scale": np.ones(hidden.shape[1])},
                                hidden)


def _test_result(name: str, proba: np.ndarray, target: np.ndarray, label_names: list[str],
                 ids: list[str]) -> BaselineResult:
    """A baseline's test metrics and predictions per test node (id, target, predicted class, each probability)."""
    predicted, labels = proba.argmax(1), np.asarray(label_names)
    metrics = {"test/acc": float(accuracy_score(target, predicted)),
               "test/f1": float(f1_score(target, predicted, labels=range(len(label_names)), average="macro",
                                         zero_division=0))}
    predictions = {"id": list(ids), "target": labels[target].tolist(), "prediction": labels[predicted].tolist(),
                   **{f"proba_{c}": proba[:, i].tolist() for i, c in enumerate(label_names)}}
    return BaselineResult(name, metrics, predictions)


def logistic_on_neighbour_means(graph, label_names: list[str], ids: list[str], seed: int = 0,
                                hops: int = 2) -> BaselineResult:
    """The logistic regression on features and neighbour means of walks up to ``hops`` (0: features alone), fitted
    on ``graph.train_mask``, ``C`` picked on ``graph.val_mask``, scored on ``graph.test_mask``.

    Args:
        graph: PyG ``Data`` with ``x``, ``edge_index``, ``y`` and the three split masks.
        label_names: the class names, indexed by ``y``.
        ids: the nodes' ids, in node order.
        seed: the logistic regression's random state.
        hops: the neighbour means' walk lengths (1 to ``hops``), at most :data:`HOPS`.
    """
    unscaled, scale = scaled_features(graph)
    y, (train, val, test) = graph.y.numpy(), (graph[f"{s}_mask"].numpy() for s in ("train", "val", "test"))
    arrays, _ = fit_baseline(NodeBaseline(NAME, hops), unscaled, scale, y, train, val, len(label_names), seed)
    return _test_result(NAME, baseline_probabilities(arrays, unscaled[test]), y[test], label_names,
                        [ids[i] for i in np.flatnonzero(test)])


def node_baselines(graph, label_names: list[str], ids: list[str], seed: int = 0,
                   model_probabilities: dict[str, np.ndarray] | None = None) -> BaselineResult:
    """Every baseline of :data:`BASELINES` fitted on ``graph.train_mask`` (its hyperparameter picked on
    ``graph.val_mask``); the one with the best validation log loss is returned, scored on ``graph.test_mask``,
    its metrics followed by each baseline's validation log loss and test accuracy (``NAME: val/nll``,
    ``NAME: test/acc``).

    Args:
        graph: PyG ``Data`` with ``x``, ``edge_index``, ``y`` and the three split masks.
        label_names: the class names, indexed by ``y``.
        ids: the nodes' ids, in node order.
        seed: the random state.
        model_probabilities: the run's model's class probabilities on the validation and test nodes (``val``,
            ``test``: (N, C) each, in node order), to choose the run's predictor (:mod:`hub.predictor`); the kept
            baseline is then saved as its arrays.
    """
    unscaled, scale = scaled_features(graph)
    y = graph.y.numpy()
    masks = {s: graph[f"{s}_mask"].numpy() for s in ("train", "val", "test")}
    fits = {b.name: fit_baseline(b, unscaled, scale, y, masks["train"], masks["val"], len(label_names), seed)[0]
            for b in BASELINES}
    val_loss = {n: scores("classification", y[masks["val"]], baseline_probabilities(a, unscaled[masks["val"]]))["nll"]
                for n, a in fits.items()}
    best = min(val_loss, key=val_loss.get)
    arrays = fits[best]
    result = _test_result(best, baseline_probabilities(arrays, unscaled[masks["test"]]), y[masks["test"]],
                          label_names, [ids[i] for i in np.flatnonzero(masks["test"])])
    for name, kept in fits.items():  # every baseline's figures beside the kept one's, for the record
        test = baseline_probabilities(kept, unscaled[masks["test"]]).argmax(1)
        result.metrics.update({f"{name}: val/nll": val_loss[name],
                               f"{name}: test/acc": float(accuracy_score(y[masks["test"]], test))})
    if model_probabilities is None:
        return result
    return dataclasses.replace(result, predictor=PredictorData(
        task="classification", labels={s: y[masks[s]] for s in ("val", "test")}, model=model_probabilities,
        baseline={s: baseline_probabilities(arrays, unscaled[masks[s]]) for s in ("val", "test")},
        save=lambda run_dir: save_arrays(arrays, Path(run_dir) / BASELINE_FILE)))


def cv_baselines(graph, pool: np.ndarray, folds, seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Every baseline's out-of-fold class probabilities on the nodes ``pool`` (:func:`hub.crossval.out_of_fold`),
    each fold's fit picking its hyperparameter on the fold left out (as the model's fold run stops early on it), and
    the hyperparameter each refits with: the one picked most often over the folds (the first in its grid of equals).

    Args:
        graph: PyG ``Data`` with ``x``, ``edge_index``, ``y``.
        pool: the folded nodes' indices (n,).
        folds: :func:`hub.crossval.fold_indices` of them (indices into ``pool``).
        seed: the random state.

    Returns:
        ``({name: (n, C) probabilities}, {name: hyperparameter})``.
    """
    from hub.crossval import out_of_fold

    unscaled, scale = scaled_features(graph)
    y, num_classes = graph.y.numpy(), int(graph.y.max()) + 1
    outputs, values = {}, {}
    for baseline in BASELINES:
        picked: list[float] = []

        def fit_predict(train, val, baseline=baseline, picked=picked):
            arrays, value = fit_baseline(baseline, unscaled, scale, y, pool[train], pool[val], num_classes, seed)
            picked.append(value)
            return baseline_probabilities(arrays, unscaled[pool[val]])

        outputs[baseline.name] = out_of_fold(fit_predict, folds)
        values[baseline.name] = Counter(picked).most_common(1)[0][0]
    return outputs, values


def refit_baseline(name: str, graph, nodes: np.ndarray, value: float, seed: int = 0) -> dict[str, np.ndarray]:
    """The arrays of the baseline ``name`` (of :data:`BASELINES`) fitted on the nodes ``nodes`` with its
    hyperparameter ``value`` (the refit on every labelled node, or the fit on the folded nodes that the test split
    scores)."""
    unscaled, scale = scaled_features(graph)
    baseline = next(b for b in BASELINES if b.name == name)
    return fit_baseline(baseline, unscaled, scale, graph.y.numpy(), nodes, None, int(graph.y.max()) + 1, seed,
                        value)[0]


def kept_baseline(card) -> dict[str, np.ndarray]:
    """The arrays of the baseline kept with ``card`` (its predictor's baseline file, sha256 checked)."""
    found = blend_of(card)
    if found is None:
        raise HubError(f"the card of {card.name} predicts with its model; it keeps no baseline")
    _, path, sha256 = found
    return load_arrays(path, sha256, LINEAR_ARRAYS)


def neighbour_probabilities(card, graph, nodes: torch.Tensor) -> np.ndarray:
    """The class probabilities of the baseline kept with ``card`` for ``nodes`` (n,) of ``graph`` (its features as
    the model takes them). Shapes: -> (n, C)."""
    arrays = kept_baseline(card)
    hops = arrays["scale"].shape[0] // graph.x.shape[1] - 1
    return baseline_probabilities(arrays, neighbour_features(graph.x, graph.edge_index, hops)[nodes.numpy()])


def run_graph(run_dir):
    """``(graph, label names, node ids, seed, probabilities)`` of a finished run: its resolved recipe rebuilds the
    graph and split (features normalised as the model saw them), and its model's class probabilities on every node
    (N, C), with the card's temperature."""
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
    return graph, data.label_names, ids, recipe.seed, proba


def baselines_on_run_split(run_dir) -> BaselineResult:
    """:func:`node_baselines` on the graph and split of a finished run, with its model's probabilities."""
    graph, label_names, ids, seed, proba = run_graph(run_dir)
    ours = {s: proba[graph[f"{s}_mask"].numpy()] for s in ("val", "test")}
    return node_baselines(graph, label_names, ids, seed, model_probabilities=ours)
