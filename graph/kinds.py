"""The graph input kind ``"graph"`` (user graph folders for node classifiers).

- finetune: ``attnhub finetune gat.cora --data DIR`` trains on the graph folder DIR
  (:func:`graph.io.read_graph_folder`). When DIR's feature columns differ from the
  pretrained model's input (another feature space), the input layer's projection cannot carry over
  and is trained fresh, as is the classifier for a new set of classes; the other weights start
  from the pretrained model.
- predict: ``attnhub predict NAME DIR`` runs the model over the whole graph and returns the
  unlabelled nodes (blank ``label``), one line each, named by their id.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from graph.explain import explain_nodes
from graph.io import graph_inputs, node_features, read_graph_folder
from hub.errors import DataError
from hub.kinds import InputKind, KindSpec, register_kind


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

    def finetune_data(self, card, path: str) -> dict[str, Any]:
        return {"name": "graph_folder", "args": {"root": str(path)}}

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

    def explain(self, card, model, inputs: list[str], out_dir: Path, data: str | None = None) -> Iterator[Path]:
        return explain_nodes(card, model, inputs, out_dir, data)
