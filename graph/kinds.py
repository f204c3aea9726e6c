"""The graph input kinds: ``"graph"`` (user graph folders for node classifiers) and ``"graph-batch"`` (sets of
small graphs for graph classifiers, generated only: no user format for them yet).

- finetune: ``attnhub finetune gat.cora --data DIR`` trains on the graph folder DIR
  (:func:`graph.io.read_graph_folder`), its features normalised as the card's were. When DIR's feature columns
  differ from the pretrained model's input (another feature space), the input layer's projection cannot carry over
  and is trained fresh, as is the classifier for a new set of classes; the other weights (the attention vectors
  and biases, and the output layer when the number of classes is the same) start from the pretrained model. As many
  feature columns as the card's but renamed or reordered are refused, naming the family to train from scratch.
- from scratch: ``attnhub finetune gat --data DIR`` (also ``gatv2``, ``cat``) trains the family with its Planetoid
  recipe's dimensions and optimiser (:meth:`GraphKind.default_recipe`), on DIR's ``split`` column or a stratified
  split of its labelled nodes. Features are row-normalised when every one is non-negative (counts, bag-of-words:
  PyG's ``NormalizeFeatures`` practice on Planetoid), else left as given (``data.args.normalize=auto``, the default;
  ``data.args.normalize=true`` or ``false`` forces it); the card's ``input_spec["normalize"]`` records the resolved
  true/false, which predict, explain and the transform apply. ``attnhub finetune gat_pma --data DIR`` refuses,
  naming the data it would need.
- baseline: logistic regression on node features, on features and neighbour means, and an MLP on features
  (:mod:`graph.baselines`), the best on the run's validation split; kept as arrays, it can be the run's predictor
  alone or blended with the model (:mod:`hub.predictor`). Below :data:`hub.crossval.CV_BELOW` labelled nodes the
  model and the three baselines are chosen among by cross-validation instead, and the choice refitted on every
  labelled node (:meth:`GraphKind.cross_validation`).
- predict: ``attnhub predict NAME DIR`` runs the model over the whole graph and returns the
  unlabelled nodes (blank ``label``), one line each, named by their id; with the card's OOD statistics
  (:mod:`hub.uncertainty.ood`: the energy of each node's logits), each node's ``ood_score`` and ``ood``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from graph import baselines as node_baselines
from graph.explain import (
    graph_explanation,
    graph_samples,
    graph_set_samples,
    node_explanation,
    plot_node_attention,
)
from graph.io import graph_inputs, header_feature_columns, node_features, read_graph_folder
from hub.errors import DataError
from hub.explain import Explanation
from hub.kinds import BaselineResult, CrossValidation, InputForm, InputKind, KindSpec, OODProfile, register_kind
from hub.recipe import DataSection, Recipe, recipe_file, scratch_recipe

GAT_STOPPING = ["val/loss", "val/acc"]  # the GAT paper's rule: progress on either; gatv2's recipe file watches val/acc


@dataclass(frozen=True)
class GraphSpec(KindSpec):
    """A node classifier's input: ``num_features`` per node (``feature_columns``: their names in a user's
    nodes.csv), row-normalised when ``normalize``."""

    num_features: int
    normalize: bool = False
    feature_columns: list[str] | None = None


@register_kind
class GraphKind(InputKind):
    """A graph folder (nodes.csv, edges.csv) for node classifiers."""

    name, domain, Spec = "graph", "graph", GraphSpec
    tasks = ("node-classification",)
    ood = OODProfile(graph_nodes=True)
    input_form = InputForm.FOLDER

    def finetune_data(self, card, path: str) -> DataSection:
        """The graph folder ``path``, normalised as the card's data. Feature columns other than the card's but as
        many (renamed or reordered) are refused: the input projection would be applied to the wrong columns."""
        spec = self.spec(card)
        columns = header_feature_columns(path)
        if spec.feature_columns is not None and columns is not None and columns != spec.feature_columns \
                and len(columns) == len(spec.feature_columns):
            raise DataError(f"{path}/nodes.csv has the feature columns {columns[:5]}..., not those {card.name} was "
                            f"trained on ({spec.feature_columns[:5]}...) in that order; give the same columns, or "
                            f"train the family from scratch: attnhub finetune {card.family} --data {path}")
        return DataSection(name="graph_folder", args={"root": str(path), "normalize": spec.normalize})

    def predict(self, card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
        spec = self.spec(card)
        for path in paths:
            graph, ids, _, columns = read_graph_folder(path)
            expected = spec.feature_columns
            if expected is not None and columns != expected:
                raise DataError(f"{path}/nodes.csv has feature columns {columns}, but {card.name} was trained on "
                                f"{expected}")
            if graph.x.shape[1] != spec.num_features:
                raise DataError(f"{path}/nodes.csv has {graph.x.shape[1]} feature columns, but {card.name} expects "
                                f"{spec.num_features}")
            unlabelled = torch.nonzero(graph.y < 0).view(-1)
            if len(unlabelled) == 0:
                raise DataError(f"{path}/nodes.csv has no unlabelled node (blank 'label') to predict")
            logits = model(node_features(graph.x, spec.normalize), graph.edge_index)  # (N, classes)
            for start in range(0, len(unlabelled), batch_size):
                chosen = unlabelled[start:start + batch_size]
                yield [ids[i] for i in chosen.tolist()], logits[chosen]

    def transform(self, card) -> Callable[[Any], dict[str, torch.Tensor]]:
        """PyG's ``Data`` of the graph (e.g. ``Planetoid(root, name)[0]`` as it loads) -> the model's keyword inputs
        ``{"x": (N, num_features) features, row-normalised as in training when the card says ``normalize``,
        "edge_index": (2, E)}``."""
        spec = self.spec(card)
        return partial(graph_inputs, num_features=spec.num_features, normalize=spec.normalize, where=card.name)

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """A node's attention on its neighbours, or Integrated Gradients (:func:`graph.explain.node_explanation`);
        ``inputs`` may name the ``node`` (default: the one with the most in-edges) and the nodes' ``names``."""
        return node_explanation(model, inputs["x"], inputs["edge_index"], inputs.get("node"), target,
                                inputs.get("names"))

    def explain_samples(self, card, inputs: list[str], data: str | None = None) -> Iterator[tuple[str, dict]]:
        return graph_samples(card, inputs, data)

    def explanation_example(self, card, generator: torch.Generator) -> dict[str, Any]:
        """A random graph of 32 nodes with sparse binary features (as Planetoid's bags of words), 4 in-edges each."""
        x = (torch.rand(32, card.input_spec["num_features"], generator=generator) < 0.02).float()
        x[:, 0] = 1.0  # no empty row
        if card.input_spec.get("normalize"):
            x = x / x.sum(1, keepdim=True)
        return {"x": x, "edge_index": torch.randint(0, 32, (2, 128), generator=generator)}

    def draw_explanation(self, card, inputs: dict[str, Any], explanation: Explanation, path: Path, title: str) -> None:
        """The node's attention per layer and its ego graph (:func:`graph.explain.plot_node_attention`); bars of the
        attribution per neighbour for ``--target``."""
        if explanation.values.shape[0] == 1 and "Integrated Gradients" in explanation.method:
            return super().draw_explanation(card, inputs, explanation, path, title)
        plot_node_attention(explanation.extra["model"], inputs["x"], inputs["edge_index"], explanation.extra["node"],
                            path, names=explanation.extra["names"], classes=card.label_names or None, title=title)

    def baseline(self, run_dir) -> BaselineResult:
        return node_baselines.baselines_on_run_split(run_dir)

    def cross_validation(self, run_dir) -> CrossValidation:
        """Folds of the labelled nodes outside the test split (``data.args.cv_fold``), the three baselines of
        :data:`graph.baselines.BASELINES` out of fold, and the refit on every labelled node (``data.args.refit``)."""
        from graph.data import cv_pool
        from hub.predictor import save_arrays

        graph, label_names, _, seed, proba = node_baselines.run_graph(run_dir)
        pool = cv_pool(graph).numpy()
        values: dict[str, float] = {}

        def baselines(folds, seed):
            outputs, picked = node_baselines.cv_baselines(graph, pool, folds, seed)
            values.update(picked)
            return outputs

        def fold_outputs(fold_dir):
            fold_graph, _, _, _, fold_proba = node_baselines.run_graph(fold_dir)
            return fold_proba[fold_graph.val_mask.numpy()]

        def test(name):
            arrays = node_baselines.refit_baseline(name, graph, pool, values[name], seed)
            mask = graph.test_mask.numpy()
            return (graph.y.numpy()[mask], proba[mask],
                    node_baselines.baseline_probabilities(arrays, node_baselines.scaled_features(graph)[0][mask]))

        def refit(name, out_dir):
            labelled = torch.nonzero(graph.train_mask | graph.val_mask | graph.test_mask).view(-1).numpy()
            arrays = node_baselines.refit_baseline(name, graph, labelled, values[name], seed)
            return save_arrays(arrays, Path(out_dir) / node_baselines.BASELINE_FILE)

        return CrossValidation(
            task="classification", labels=graph.y.numpy()[pool], label_names=label_names, groups=None,
            fold_overrides=lambda k, index, fold_seed: [f"data.args.cv_fold=[{k},{index},{fold_seed}]"],
            refit_overrides=["data.args.refit=true"], fold_outputs=fold_outputs, baselines=baselines,
            test=test if bool(graph.test_mask.any()) else None, refit=refit)

    def baseline_outputs(self, card, path: str):
        """The kept logistic regression's class probabilities (n, C) for the unlabelled nodes of the graph folder at
        ``path``, in the order :meth:`predict` yields them."""
        graph, _, _, _ = read_graph_folder(path)
        spec = self.spec(card)
        graph.x = node_features(graph.x, spec.normalize)
        return node_baselines.neighbour_probabilities(card, graph, torch.nonzero(graph.y < 0).view(-1))

    def example_input(self, card, size: int, generator: torch.Generator):
        """``x`` (nodes, features), ``edge_index`` (2, edges) int64; ``size`` is the number of nodes (a graph is
        one sample: the dynamic dimensions are its numbers of nodes and edges, not a batch)."""
        x = torch.rand(size, card.input_spec["num_features"], generator=generator)
        if card.input_spec.get("normalize"):
            x = x / x.sum(1, keepdim=True)
        edge_index = torch.randint(0, size, (2, 4 * size), generator=generator)
        return {"x": x, "edge_index": edge_index}, {"x": {0: "nodes"}, "edge_index": {1: "edges"}}

    def default_recipe(self, family: str, path: str) -> Recipe:
        """The family's Planetoid recipe (``recipes/graph/FAMILY_citeseer.yaml``: its model arguments, Adam with lr
        0.005 and L2 5e-4, at most 1000 full-batch epochs, patience 100) on the graph folder ``path``, stopped by
        the GAT paper's rule (:data:`GAT_STOPPING`): in_channels and num_classes from the data, features
        row-normalised when all are non-negative (``normalize: auto``)."""
        planetoid = recipe_file(f"graph/{family}_citeseer.yaml")
        data = DataSection(name="graph_folder", args={"root": str(path), "normalize": "auto"})
        return scratch_recipe(family, data, start=planetoid, trainer=planetoid.trainer.replace(monitor=GAT_STOPPING))


@register_kind
class GraphBatchKind(InputKind):
    """Sets of small graphs with one label each, for graph classifiers (``gat_pma``); only the generated
    ``graph_families`` data exists in this form, so a default recipe on user data is refused."""

    name, domain = "graph-batch", "graph"
    tasks = ("graph-classification",)

    def explanation(self, card, model, inputs: dict[str, Any], target: int | None = None) -> Explanation:
        """The pooling's attention on the nodes, or Integrated Gradients (:func:`graph.explain.graph_explanation`)."""
        return graph_explanation(model, inputs["x"], inputs["edge_index"], target)

    def explain_samples(self, card, inputs: list[str]) -> Iterator[tuple[str, dict]]:
        return graph_set_samples(card, inputs)

    def default_recipe(self, family: str, path: str) -> Recipe:
        raise DataError(
            f"{family!r} classifies whole graphs, and no user data format for graph classification is read yet: "
            f"training it on {path} would need a set of labelled graphs (e.g. graphs.csv: graph id, label, split; "
            "nodes.csv: graph id, node id, features; edges.csv: graph id, src, dst). It trains on the generated "
            f"graph families only (attnhub train recipes/graph/gat_pma_families.yaml); to classify the nodes of "
            f"one graph (nodes.csv with a label column, edges.csv) train a node classifier: "
            f"attnhub finetune gat --data {path}")
