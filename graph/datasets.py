"""Graphs for node classification: Planetoid citation graphs, Zachary's karate club, user graph folders.

Every data module holds one graph (a PyG ``Data`` with ``x``, ``edge_index``, ``y`` and boolean
``train_mask``/``val_mask``/``test_mask``) and serves it as the single batch of every epoch.
Mostly-zero features (bag-of-words) are stored as a sparse CSR matrix so that the models' input
dropout and projection only touch the nonzero entries.

Planetoid files are read from ``$HUB_DATA_DIR/planetoid`` (``ind.<name>.{x,tx,allx,y,ty,ally,graph,
test.index}``, as in Yang et al.'s repository) with PyG's Planetoid reader; when none are there, PyG's
``Planetoid`` downloads them into the hub's cache. The public split: 20 labelled nodes per class for
training, 500 for validation, 1000 for testing. Features are row-normalised, as in the GAT paper.

A user graph folder holds ``nodes.csv`` (a column ``id``, numeric feature columns, a column ``label``
left blank for unlabelled nodes) and ``edges.csv`` (columns ``src``, ``dst`` naming node ids); edges
are made undirected. The labelled nodes are split stratified into train/val/test; the unlabelled
nodes are the ones ``attnhub predict`` labels.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from hub.data import HubDataModule, data_dir, read_csv_rows, stratified_split
from hub.errors import DataError, DatasetUnavailable
from hub.registry import register_dataset
from hub.weights import is_offline

PLANETOID_FILES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
PLANETOID_SOURCE = ("Planetoid split (Yang, Cohen, Salakhutdinov, ICML 2016), github.com/kimiyoung/planetoid; "
                    "graphs from Sen et al. 2008 (Cora, CiteSeer) and Namata et al. 2012 (PubMed)")
SPARSE_BELOW = 0.1  # features with fewer nonzeros than this fraction are stored as sparse CSR


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


def node_features(x: torch.Tensor, normalize: bool) -> torch.Tensor:
    x = x.float()
    if normalize:
        x = x / x.sum(1, keepdim=True).clamp(min=1e-12)
    return x.to_sparse_csr() if (x != 0).float().mean() < SPARSE_BELOW else x


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

def _read_csv(path: Path, required: tuple[str, ...]) -> tuple[list[str], list[list[str]]]:
    rows = read_csv_rows(path, f"a header row with the columns {list(required)} (a graph folder holds nodes.csv: "
                               "id, feature columns, label; and edges.csv: src, dst)")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in required if c not in header]
    if missing:
        raise DataError(f"{path}: missing column(s) {missing}; expected columns {list(required)}, got {header}")
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise DataError(f"{path} line {number}: {len(row)} values but the header has {len(header)} columns")
    return header, rows[1:]


def read_graph_folder(root: str | Path) -> tuple[Data, list[str], list[str], list[str]]:
    """A user graph folder -> (graph with ``y = -1`` on unlabelled nodes, node ids, label names,
    feature column names). Raises :class:`DataError` naming the file, column and line of bad input."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"graph folder {root} does not exist or is not a folder")
    nodes_path, edges_path = root / "nodes.csv", root / "edges.csv"
    header, rows = _read_csv(nodes_path, ("id", "label"))
    id_col, label_col = header.index("id"), header.index("label")
    feature_cols = [i for i in range(len(header)) if i not in (id_col, label_col)]
    if not feature_cols:
        raise DataError(f"{nodes_path}: no feature columns; expected numeric columns besides 'id' and 'label'")
    ids = [row[id_col].strip() for row in rows]
    seen: dict[str, int] = {}
    for number, node in enumerate(ids, start=2):
        if node in seen:
            raise DataError(f"{nodes_path} column 'id': duplicate id {node!r} on lines {seen[node]} and {number}; "
                            "expected each node once")
        seen[node] = number
    features = np.empty((len(rows), len(feature_cols)), dtype=np.float32)
    for number, row in enumerate(rows, start=2):
        for j, col in enumerate(feature_cols):
            try:
                features[number - 2, j] = float(row[col])
            except ValueError:
                raise DataError(f"{nodes_path} line {number} column {header[col]!r}: {row[col]!r} is not a number; "
                                "expected numeric feature values") from None
    if not np.isfinite(features).all():
        raise DataError(f"{nodes_path}: feature values must be finite numbers (found nan or inf)")
    raw_labels = [row[label_col].strip() for row in rows]
    label_names = sorted({label for label in raw_labels if label})
    if not label_names:
        raise DataError(f"{nodes_path} column 'label' is blank on every line; expected labels on the nodes to "
                        "train on (blank only for the nodes to predict)")
    y = torch.tensor([label_names.index(label) if label else -1 for label in raw_labels])
    edge_header, edge_rows = _read_csv(edges_path, ("src", "dst"))
    src_col, dst_col = edge_header.index("src"), edge_header.index("dst")
    index = {node: i for i, node in enumerate(ids)}
    pairs = []
    for number, row in enumerate(edge_rows, start=2):
        for name, col in (("src", src_col), ("dst", dst_col)):
            if row[col].strip() not in index:
                raise DataError(f"{edges_path} line {number} column {name!r}: {row[col].strip()!r} is not an id in "
                                f"{nodes_path}; expected edges between listed nodes")
        pairs.append((index[row[src_col].strip()], index[row[dst_col].strip()]))
    if not pairs:
        raise DataError(f"{edges_path} has a header but no edges; expected one 'src,dst' row per edge")
    edge_index = torch.tensor(pairs, dtype=torch.long).t().reshape(2, -1)
    graph = Data(x=torch.from_numpy(features), edge_index=to_undirected(edge_index, num_nodes=len(ids)), y=y)
    return graph, ids, label_names, [header[c] for c in feature_cols]


class GraphFolderData(NodeGraphData):
    """A user graph folder (see the module docstring), labelled nodes split stratified."""

    def __init__(self, root: str, seed: int = 0, split_seed: int = 0, val_fraction: float = 0.2,
                 test_fraction: float = 0.2, normalize: bool = False):
        super().__init__(seed)
        self.root, self.split_seed, self.normalize = Path(root), split_seed, normalize
        self.val_fraction, self.test_fraction = val_fraction, test_fraction

    def load(self):
        graph, _, label_names, feature_columns = read_graph_folder(self.root)
        labelled = torch.nonzero(graph.y >= 0).view(-1)
        counts = torch.bincount(graph.y[labelled], minlength=len(label_names))
        if (counts < 3).any():
            rare = {label_names[i]: int(counts[i]) for i in torch.nonzero(counts < 3).view(-1).tolist()}
            raise DataError(f"{self.root / 'nodes.csv'} column 'label': class(es) {rare} have fewer than 3 labelled "
                            "nodes; the stratified train/val/test split needs at least 3 per class")
        fractions = (1 - self.val_fraction - self.test_fraction, self.val_fraction, self.test_fraction)
        parts = stratified_split(graph.y[labelled].numpy(), fractions, self.split_seed,
                                 source=str(self.root / "nodes.csv"))
        for split, part in zip(("train", "val", "test"), parts):
            mask = torch.zeros(graph.num_nodes, dtype=torch.bool)
            mask[labelled[torch.from_numpy(part)]] = True
            graph[f"{split}_mask"] = mask
        graph.x = node_features(graph.x, self.normalize)
        self.input_spec = {"normalize": self.normalize, "feature_columns": feature_columns}
        return graph, label_names, {"source": str(self.root), "license": "the user's data",
                                    "unlabelled": int((graph.y < 0).sum())}


@register_dataset(task="node-classification")
def graph_folder(root: str, seed: int = 0, split_seed: int = 0, val_fraction: float = 0.2,
                 test_fraction: float = 0.2, normalize: bool = False) -> GraphFolderData:
    """A user graph: nodes.csv (id, features, label; blank = unlabelled) and edges.csv (src, dst)."""
    return GraphFolderData(root, seed, split_seed, val_fraction, test_fraction, normalize)
