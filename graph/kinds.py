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

from typing import Any, Iterable, Iterator

import torch

from graph.io import node_features, read_graph_folder
from hub.adapters import register_finetune_adapter, register_predict_adapter
from hub.errors import DataError


@register_finetune_adapter("graph")
def graph_folder_section(card, path: str) -> dict[str, Any]:
    return {"name": "graph_folder", "args": {"root": str(path)}}


@register_predict_adapter("graph")
def graph_logits(card, model, paths: Iterable[str], batch_size: int) -> Iterator[tuple[list[str], torch.Tensor]]:
    spec = card.input_spec
    for path in paths:
        graph, ids, _, columns = read_graph_folder(path)
        expected = spec.get("feature_columns")
        if expected is not None and columns != expected:
            raise DataError(f"{path}/nodes.csv has feature columns {columns}, but {card.name} was trained on "
                            f"{expected}")
        if graph.x.shape[1] != spec["num_features"]:
            raise DataError(f"{path}/nodes.csv has {graph.x.shape[1]} feature columns, but {card.name} expects "
                            f"{spec['num_features']}")
        unlabelled = torch.nonzero(graph.y < 0).view(-1)
        if len(unlabelled) == 0:
            raise DataError(f"{path}/nodes.csv has no unlabelled node (blank 'label') to predict")
        logits = model(node_features(graph.x, spec.get("normalize", False)), graph.edge_index)  # (N, classes)
        for start in range(0, len(unlabelled), batch_size):
            chosen = unlabelled[start:start + batch_size]
            yield [ids[i] for i in chosen.tolist()], logits[chosen]
