"""Graphs for node classification: Planetoid citation graphs, Zachary's karate club, user graph folders; and
the generated graph families for graph classification.

Every data module holds one graph (a PyG ``Data`` with ``x``, ``edge_index``, ``y`` and boolean
``train_mask``/``val_mask``/``test_mask``) and serves it as the single batch of every epoch.
Mostly-zero features (bag-of-words) are stored as a sparse CSR matrix so that the models' input
dropout and projection only touch the nonzero entries.

Planetoid files are read from ``$HUB_DATA_DIR/planetoid`` (``ind.<name>.{x,tx,allx,y,ty,ally,graph,
test.index}``, as in Yang et al.'s repository) with PyG's Planetoid reader; when none are there, PyG's
``Planetoid`` downloads them into the hub's cache. The public split: 20 labelled nodes per class for
training, 500 for validation, 1000 for testing. Features are row-normalised, as in the GAT paper.

A user graph folder holds ``nodes.csv`` (a column ``id``, numeric feature columns, a column ``label``
left blank for unlabelled nodes, optionally a column ``split``: ``train``, ``val``, ``test`` or blank)
and ``edges.csv`` (columns ``src``, ``dst`` naming node ids); edges are made undirected. Without a
``split`` column the labelled nodes are split stratified into train/val/test; the unlabelled nodes
are the ones ``attnhub predict`` labels. Features are row-normalised (``normalize``, default ``"auto"``) when
every one is non-negative (word counts, bag-of-words, as PyG's Planetoid practice), else left as given; the card
records the resolved true/false.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch_geometric.data import Data
from torch_geometric.utils import barabasi_albert_graph, degree, erdos_renyi_graph

from graph.io import node_features, read_graph_folder, resolve_normalize
from hub.core.registry import register_dataset
from hub.core.weights import is_offline
from hub.data import HubDataModule, data_dir, stratified_split
from hub.errors import DataError, DatasetUnavailable

PLANETOID_FILES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
PLANETOID_SOURCE = ("Planetoid split (Yang, Cohen, Salakhutdinov, ICML 2016), github.com/kimiyoung/planetoid; "
                    "graphs from Sen et al. 2008 (Cora, CiteSeer) and Namata et al. 2012 (PubMed)")


def _cache_dir() -> Path:
    return Path(os.environ.get("HUB_CACHE", Path.home() / ".cache" / "attention-hub")) / "planetoid"


def read_planetoid(name: str) -> Data:
    """Planetoid graph ``name`` (``Cora``, ``CiteSeer``, ``PubMed``) with the public split."""
    from torch_geometric.datasets import Planetoid
    from torch_geometric.io import read_planetoid_data

    folder = data_dir() / "planetoid"
    prefix = name.lower()
    present = [f for f in PLANETOID_FILES if (folder / f"ind.{prefix}.{f}").is_file()]
    if present and len(present) < len(PLANETOID_FILES):
        missing = [f"ind.{prefix}.{f}" for f in PLANETOID_FILES if f not in present]
        raise DataError(f"{name}: {', '.join(missing)} missing from {folder} (found the other "
                        f"{len(present)} ind.{prefix}.* files); place the original file(s) there "
                        "(see PROVENANCE.md there for their sha256) to use this dataset")
    if present:
        return read_planetoid_data(str(folder), prefix)
    cache = _cache_dir() / name / "raw"
    if is_offline() and not cache.is_dir():
        raise DatasetUnavailable(name.lower(), f"{name}: no ind.{prefix}.* files in {folder} nor in {cache}, and "
                                               "HUB_OFFLINE=1 forbids downloading; set HUB_DATA_DIR")
    try:
        return Planetoid(str(_cache_dir()), name)[0]  # downloads into the cache
    except OSError as err:  # urllib's URLError is an OSError
        raise DatasetUnavailable(name.lower(), f"{name}: no ind.{prefix}.* files in {folder} (set HUB_DATA_DIR) "
                                               f"and PyG's download failed: {err}") from err


class GraphLoader(DataLoader):
    """Yields the one graph, as is (no collation)."""

    def __init__(self, graph: Data):
        super().__init__([graph], batch_size=None, collate_fn=lambda g: g)


class NodeGraphData(HubDataModule):
    """One graph for full-batch node classification; ``load()`` returns ``(Data, label_names, info)``."""

    task = "node-classification"

    def __init__(self, seed: int = 0):
        super().__init__(batch_size=1, num_workers=0, seed=seed)
        self.graph: Data | None = None

    def load(self) -> tuple[Data, list[str], dict[str, Any]]:
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.graph is not None:
            return
        graph, self.label_names, self.info = self.load()
        self.graph = graph
        self.num_classes = len(self.label_names)
        self.input_spec = {"kind": "graph", "num_features": int(graph.x.shape[1]), **self.input_spec}
        self.info = {**self.info, "num_nodes": int(graph.num_nodes), "num_edges": int(graph.edge_index.shape[1]),
                     "split": {s: int(graph[f"{s}_mask"].sum()) for s in ("train", "val", "test")}}

    def model_args(self) -> dict[str, Any]:
        return {**super().model_args(), "in_channels": int(self.graph.x.shape[1])}

    def train_dataloader(self) -> DataLoader:
        return GraphLoader(self.graph)

    val_dataloader = test_dataloader = train_dataloader


class PlanetoidData(NodeGraphData):
    def __init__(self, name: str, seed: int = 0):
        super().__init__(seed)
        self.name = name
        self.input_spec = {"normalize": True}

    def load(self):
        raw = read_planetoid(self.name)
        graph = Data(x=node_features(raw.x, normalize=True), edge_index=raw.edge_index, y=raw.y,
                     train_mask=raw.train_mask, val_mask=raw.val_mask, test_mask=raw.test_mask)
        labels = [str(i) for i in range(int(raw.y.max()) + 1)]
        return graph, labels, {"source": PLANETOID_SOURCE, "license": "MIT (kimiyoung/planetoid repository)",
                               "dataset": self.name}


@register_dataset(task="node-classification")
def cora(seed: int = 0) -> PlanetoidData:
    """Cora citation graph (2,708 papers, 7 classes), Planetoid public split."""
    return PlanetoidData("Cora", seed)


@register_dataset(task="node-classification")
def citeseer(seed: int = 0) -> PlanetoidData:
    """CiteSeer citation graph (3,327 papers, 6 classes), Planetoid public split."""
    return PlanetoidData("CiteSeer", seed)


@register_dataset(task="node-classification")
def pubmed(seed: int = 0) -> PlanetoidData:
    """PubMed diabetes citation graph (19,717 papers, 3 classes), Planetoid public split."""
    return PlanetoidData("PubMed", seed)


class KarateData(NodeGraphData):
    """Zachary's karate club (34 members, 4 communities), embedded in PyG: one labelled member per
    community trains (PyG's mask), the rest are split in half for validation and test."""

    def __init__(self, seed: int = 0, split_seed: int = 0):
        super().__init__(seed)
        self.split_seed = split_seed

    def load(self):
        from torch_geometric.datasets import KarateClub

        raw = KarateClub()[0]
        rest = torch.nonzero(~raw.train_mask).view(-1)
        rest = rest[torch.randperm(len(rest), generator=torch.Generator().manual_seed(self.split_seed))]
        val_mask, test_mask = torch.zeros_like(raw.train_mask), torch.zeros_like(raw.train_mask)
        val_mask[rest[: len(rest) // 2]] = True
        test_mask[rest[len(rest) // 2:]] = True
        graph = Data(x=raw.x.float(), edge_index=raw.edge_index, y=raw.y, train_mask=raw.train_mask,
                     val_mask=val_mask, test_mask=test_mask)
        return graph, [str(i) for i in range(int(raw.y.max()) + 1)], {
            "source": "Zachary, An information flow model for conflict and fission in small groups, 1977 "
                      "(PyG KarateClub)",
            "license": "public domain (published data)"}


@register_dataset(task="node-classification")
def karate_club(seed: int = 0, split_seed: int = 0) -> KarateData:
    """Zachary's karate club, the embedded default graph (34 nodes, 4 classes)."""
    return KarateData(seed, split_seed)


# ---- user graph folders ------------------------------------------------------------------------------


class GraphFolderData(NodeGraphData):
    """A user graph folder (see the module docstring): the split of its ``split`` column, or else its labelled
    nodes split stratified (``split_seed``); ``ids`` holds the node ids, in the graph's node order.

    Args:
        root: the folder holding ``nodes.csv`` and ``edges.csv``.
        seed: the training seed (the graph is the one full batch of every epoch).
        split_seed: seed of the stratified split of the labelled nodes (unused when ``nodes.csv`` has a ``split``
            column).
        val_fraction: fraction of the labelled nodes held out for validation (without a ``split`` column).
        test_fraction: fraction of the labelled nodes held out for testing (without a ``split`` column).
        normalize: row-normalise the features: True, False or ``"auto"`` (default: when every feature is
            non-negative); the card records the resolved value.
        cv_fold: ``[k, index, seed]``: train on the other k-1 folds of the labelled nodes outside the test split
            and validate on fold ``index`` (a fold run of finetune's cross-validated choice, :mod:`hub.crossval`).
        refit: train on every node of the three splits, test included (the refit of that choice)."""

    def __init__(self, root: str, seed: int = 0, split_seed: int = 0, val_fraction: float = 0.2,
                 test_fraction: float = 0.2, normalize: bool | str = "auto", cv_fold: list[int] | None = None,
                 refit: bool = False):
        super().__init__(seed)
        self.root, self.split_seed, self.normalize = Path(root), split_seed, normalize
        self.val_fraction, self.test_fraction = val_fraction, test_fraction
        self.cv_fold, self.refit = cv_fold, refit
        self.ids: list[str] = []

    def load(self):
        graph, self.ids, label_names, feature_columns = read_graph_folder(self.root)
        split_column = "train_mask" in graph
        if not split_column:
            self._stratified_split(graph, label_names)
        split_from = "the column 'split'" if split_column else f"stratified at random, split_seed {self.split_seed}"
        if self.cv_fold is not None and self.refit:
            raise DataError("graph_folder: cv_fold and refit exclude each other (a fold run trains on k-1 folds, "
                            "a refit on every labelled node)")
        if self.cv_fold is not None:
            split_from = self._fold_split(graph, label_names)
        if self.refit:  # every node of the three splits trains: validation and test figures are in-sample
            graph.train_mask = graph.train_mask | graph.val_mask | graph.test_mask
            split_from += "; refit: every labelled node trains (validation and test figures in-sample)"
        normalize = resolve_normalize(graph.x, self.normalize, f"{self.root / 'nodes.csv'}")
        graph.x = node_features(graph.x, normalize)
        # resolved ("auto" -> true/false): predict, explain and transforms read the card's input_spec
        self.input_spec = {"normalize": normalize, "feature_columns": feature_columns}
        return graph, label_names, {"source": str(self.root), "license": "the user's data",
                                    "unlabelled": int((graph.y < 0).sum()), "split_from": split_from}

    def _fold_split(self, graph: Data, label_names: list[str]) -> str:
        """Train on k-1 folds of the nodes of the training and validation splits, validate on the fold ``index``
        (:func:`hub.crossval.fold_indices` of :func:`cv_pool`, the folds ``finetune`` scores); the test split
        stays. Returns the split's description."""
        from hub.crossval import fold_indices

        k, index, seed = (int(v) for v in self.cv_fold)
        pool = cv_pool(graph)
        train, val = fold_indices("classification", graph.y[pool].numpy(), k=k, seed=seed,
                                  label_names=label_names, warn=lambda line: None)[index]
        for name, part in (("train", train), ("val", val)):
            mask = torch.zeros(graph.num_nodes, dtype=torch.bool)
            mask[pool[torch.from_numpy(part)]] = True
            graph[f"{name}_mask"] = mask
        return f"fold {index} of {k} (seed {seed}) of the labelled nodes outside the test split"

    def _stratified_split(self, graph: Data, label_names: list[str]) -> None:
        """Train/val/test masks stratified by class over the labelled nodes; a class with fewer labelled nodes than
        the three splits need stays whole in training, with a WARNING naming it (never dropped, never an error)."""
        labelled = torch.nonzero(graph.y >= 0).view(-1)
        counts = torch.bincount(graph.y[labelled], minlength=len(label_names))
        rare = torch.nonzero((counts > 0) & (counts < 3)).view(-1)
        if len(rare):
            named = ", ".join(f"{label_names[i]!r} ({int(counts[i])})" for i in rare.tolist())
            logging.getLogger(__name__).warning(
                f"{self.root / 'nodes.csv'} column 'label': class(es) {named} have fewer than the 3 labelled nodes "
                "a stratified train/val/test split needs; they stay in training (not validated or tested)")
        kept = ~torch.isin(graph.y[labelled], rare)
        fractions = (1 - self.val_fraction - self.test_fraction, self.val_fraction, self.test_fraction)
        parts = stratified_split(graph.y[labelled][kept].numpy(), fractions, self.split_seed,
                                 source=str(self.root / "nodes.csv"))
        parts[0] = np.concatenate([np.flatnonzero(kept.numpy())[parts[0]], np.flatnonzero(~kept.numpy())])
        parts[1:] = [np.flatnonzero(kept.numpy())[p] for p in parts[1:]]
        for split, part in zip(("train", "val", "test"), parts):
            mask = torch.zeros(graph.num_nodes, dtype=torch.bool)
            mask[labelled[torch.from_numpy(part)]] = True
            graph[f"{split}_mask"] = mask


def cv_pool(graph: Data) -> torch.Tensor:
    """The nodes a cross-validated choice folds: those of the training and validation splits, in node order (n,)
    (a labelled node a ``split`` column leaves in no split stays out, as it is out of the run)."""
    return torch.nonzero(graph.train_mask | graph.val_mask).view(-1)


@register_dataset(task="node-classification")
def graph_folder(root: str, seed: int = 0, split_seed: int = 0, val_fraction: float = 0.2,
                 test_fraction: float = 0.2, normalize: bool | str = "auto", cv_fold: list[int] | None = None,
                 refit: bool = False) -> GraphFolderData:
    """A user graph: nodes.csv (id, features, label; blank = unlabelled; optional split) and edges.csv (src, dst).
    ``normalize``: row-normalise the features; ``"auto"`` when every feature is non-negative. ``cv_fold``
    ``[k, index, seed]``: train on the other folds of the labelled non-test nodes, validate on fold ``index``;
    ``refit``: train on every labelled node (finetune's cross-validated choice sets them)."""
    return GraphFolderData(root, seed, split_seed, val_fraction, test_fraction, normalize, cv_fold, refit)


def _family_graph(label: int, num_nodes: int, mean_degree: int) -> Data:
    if label == 0:
        edge_index = erdos_renyi_graph(num_nodes, mean_degree / (num_nodes - 1))
    else:
        edge_index = barabasi_albert_graph(num_nodes, mean_degree // 2)
    deg = degree(edge_index[0], num_nodes)
    x = torch.stack([torch.ones(num_nodes), deg / mean_degree], 1)  # (N, 2): constant, scaled degree
    return Data(x=x, edge_index=edge_index, y=torch.tensor([label]))


class GraphFamiliesData(HubDataModule):
    """Erdős–Rényi (label 0) vs Barabási–Albert (label 1) graphs of 20-40 nodes and mean degree ~4,
    drawn from ``data_seed`` so the splits do not move with the training seed.

    Args:
        num_train: graphs in the training split (the families alternate, so the classes are balanced).
        num_val: graphs in the validation split.
        num_test: graphs in the test split.
        data_seed: seed of the generated graphs (the global torch RNG is restored afterwards).
        batch_size: graphs per batch (PyG batches them into one disconnected graph).
        seed: seed of the training order."""

    task = "graph-classification"

    def __init__(self, num_train: int, num_val: int, num_test: int, data_seed: int, batch_size: int, seed: int):
        super().__init__(batch_size, 0, seed)
        self.sizes, self.data_seed = (num_train, num_val, num_test), data_seed

    def setup(self, stage: str | None = None) -> None:
        if self.train_set is not None:
            return
        generator = torch.Generator().manual_seed(self.data_seed)
        torch_state = torch.get_rng_state()
        torch.manual_seed(self.data_seed)  # PyG's generators draw from the global RNG
        graphs = [_family_graph(i % 2, int(torch.randint(20, 41, (1,), generator=generator)), 4)
                  for i in range(sum(self.sizes))]
        torch.set_rng_state(torch_state)
        a, b = self.sizes[0], self.sizes[0] + self.sizes[1]
        self.train_set, self.val_set, self.test_set = graphs[:a], graphs[a:b], graphs[b:]
        self.num_classes, self.label_names = 2, ["erdos_renyi", "barabasi_albert"]
        self.input_spec = {"kind": "graph-batch", "num_features": 2}
        self.info = {"source": "generated by graph.data (PyG erdos_renyi_graph / barabasi_albert_graph)",
                     "license": "generated data", "sizes": list(self.sizes)}

    def model_args(self):
        return {**super().model_args(), "in_channels": 2}

    def _loader(self, dataset, train: bool) -> DataLoader:
        from torch_geometric.loader import DataLoader as GraphBatchLoader

        generator = torch.Generator().manual_seed(self.seed)
        return GraphBatchLoader(dataset, batch_size=self.batch_size, shuffle=train, generator=generator)


@register_dataset(task="graph-classification")
def graph_families(num_train: int = 512, num_val: int = 128, num_test: int = 256, data_seed: int = 0,
                   batch_size: int = 32, seed: int = 0) -> GraphFamiliesData:
    """Generated graphs: Erdős–Rényi vs Barabási–Albert of equal size and mean degree (graph classification)."""
    return GraphFamiliesData(num_train, num_val, num_test, data_seed, batch_size, seed)
