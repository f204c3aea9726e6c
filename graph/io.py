"""Reading and checking the user's graph folder: ``nodes.csv`` (a column ``id``, numeric feature columns, a
column ``label`` left blank for unlabelled nodes, optionally a column ``split`` of ``train``/``val``/``test``,
blank for labelled nodes in none of them) and ``edges.csv`` (columns ``src``, ``dst`` naming node ids); and the
node features as the models take them (row-normalised, sparse when mostly zero)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from hub.datafiles import read_csv_rows
from hub.errors import DataError

SPARSE_BELOW = 0.1  # features with fewer nonzeros than this fraction are stored as sparse CSR
SPLITS = ("train", "val", "test")  # the values of the optional ``split`` column (blank: in no split)


def node_features(x: torch.Tensor, normalize: bool) -> torch.Tensor:
    """``x`` (N, F) as the models take it: each row divided by its L1 norm when ``normalize`` (for bag-of-words,
    the GAT paper's row normalisation), as sparse CSR when mostly zero."""
    x = x.float()
    if normalize:
        x = x / x.abs().sum(1, keepdim=True).clamp(min=1e-12)
    return x.to_sparse_csr() if (x != 0).float().mean() < SPARSE_BELOW else x


def resolve_normalize(x: torch.Tensor, normalize: bool | str, source: str) -> bool:
    """Whether the features ``x`` (N, F) of ``source`` are row-normalised: ``normalize`` when true or false; for
    ``"auto"``, when every feature is non-negative (counts, bag-of-words: what PyG's ``NormalizeFeatures`` is used
    for on Planetoid), else they are left as given (signed features: embeddings, z-scores)."""
    if normalize == "auto":
        return bool((x >= 0).all())
    if not isinstance(normalize, bool):
        raise DataError(f"{source}: normalize={normalize!r}; expected true, false or 'auto' (row-normalise when "
                        "every feature is non-negative)")
    return normalize


def graph_inputs(graph, num_features: int, normalize: bool, where: str) -> dict[str, torch.Tensor]:
    """A PyG ``Data`` with ``x`` (N, num_features) and ``edge_index`` (2, E) -> a node classifier's keyword inputs
    ``{"x": node_features(x, normalize), "edge_index": edge_index}``; ``where`` (the model) names it in errors."""
    if not isinstance(graph, Data):
        raise DataError(f"{where} takes a torch_geometric Data graph (e.g. Planetoid(root, name)[0]), "
                        f"got {type(graph).__name__}")
    if graph.x is None or graph.x.dim() != 2 or graph.x.shape[1] != num_features:
        shape = None if graph.x is None else tuple(graph.x.shape)
        raise DataError(f"{where} expects node features x of shape (num_nodes, {num_features}), got {shape}")
    if graph.edge_index is None or graph.edge_index.dim() != 2 or graph.edge_index.shape[0] != 2:
        shape = None if graph.edge_index is None else tuple(graph.edge_index.shape)
        raise DataError(f"{where} expects edge_index of shape (2, num_edges), got {shape}")
    return {"x": node_features(graph.x, normalize), "edge_index": graph.edge_index}


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


def _features(nodes_path: Path, header: list[str], rows: list[list[str]], columns: list[int]) -> np.ndarray:
    """The feature columns as float32 ``(N, len(columns))``; a cell that is no number raises naming it."""
    table = np.array(rows, dtype=object)[:, columns] if rows else np.empty((0, len(columns)), dtype=object)
    try:
        features = table.astype(np.float32)
    except ValueError:  # find the first bad cell, to name it
        for (row, col), cell in np.ndenumerate(table):
            try:
                float(cell)
            except ValueError:
                raise DataError(f"{nodes_path} line {row + 2} column {header[columns[col]]!r}: {cell!r} is not a "
                                "number; expected numeric feature values") from None
        raise
    if not np.isfinite(features).all():
        raise DataError(f"{nodes_path}: feature values must be finite numbers (found nan or inf)")
    return features


def _split_masks(nodes_path: Path, values: list[str], y: torch.Tensor) -> dict[str, torch.Tensor]:
    """``{train,val,test}_mask`` from the ``split`` column: each split labelled and non-empty."""
    for number, value in enumerate(values, start=2):
        if value not in (*SPLITS, ""):
            raise DataError(f"{nodes_path} line {number} column 'split': {value!r}; expected one of {list(SPLITS)} "
                            "or blank (a node in no split)")
        if value and y[number - 2] < 0:
            raise DataError(f"{nodes_path} line {number}: split {value!r} but a blank 'label'; nodes in a split "
                            "need a label")
    masks = {f"{s}_mask": torch.tensor([value == s for value in values]) for s in SPLITS}
    empty = [s for s in SPLITS if not masks[f"{s}_mask"].any()]
    if empty:
        raise DataError(f"{nodes_path} column 'split' names no {' and no '.join(repr(s) for s in empty)} node; "
                        f"expected labelled nodes in each of {list(SPLITS)} (or drop the column for a random "
                        "stratified split)")
    return masks


def header_feature_columns(root: str | Path) -> list[str] | None:
    """The feature column names in the header of ``root/nodes.csv`` (all but id, label, split); None when the
    header cannot be read (reading the folder then names the problem)."""
    import csv

    try:
        with open(Path(root) / "nodes.csv", newline="", encoding="utf-8-sig") as f:
            header = [h.strip() for h in next(csv.reader(f))]
    except (OSError, UnicodeDecodeError, csv.Error, StopIteration):
        return None
    return [h for h in header if h not in ("id", "label", "split")]


def read_graph_folder(root: str | Path) -> tuple[Data, list[str], list[str], list[str]]:
    """A user graph folder -> (graph with ``y = -1`` on unlabelled nodes, node ids, label names,
    feature column names). With a ``split`` column the graph also has boolean ``{train,val,test}_mask``.
    Raises :class:`DataError` naming the file, column and line of bad input."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"graph folder {root} does not exist or is not a folder")
    nodes_path, edges_path = root / "nodes.csv", root / "edges.csv"
    header, rows = _read_csv(nodes_path, ("id", "label"))
    id_col, label_col = header.index("id"), header.index("label")
    split_col = header.index("split") if "split" in header else None
    feature_cols = [i for i in range(len(header)) if i not in (id_col, label_col, split_col)]
    if not feature_cols:
        raise DataError(f"{nodes_path}: no feature columns; expected numeric columns besides 'id', 'label' and "
                        "'split'")
    ids = [row[id_col].strip() for row in rows]
    seen: dict[str, int] = {}
    for number, node in enumerate(ids, start=2):
        if node in seen:
            raise DataError(f"{nodes_path} column 'id': duplicate id {node!r} on lines {seen[node]} and {number}; "
                            "expected each node once")
        seen[node] = number
    features = _features(nodes_path, header, rows, feature_cols)
    raw_labels = [row[label_col].strip() for row in rows]
    label_names = sorted({label for label in raw_labels if label})
    if not label_names:
        raise DataError(f"{nodes_path} column 'label' is blank on every line; expected labels on the nodes to "
                        "train on (blank only for the nodes to predict)")
    y = torch.tensor([label_names.index(label) if label else -1 for label in raw_labels])
    masks = {} if split_col is None else _split_masks(nodes_path, [row[split_col].strip() for row in rows], y)
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
    graph = Data(x=torch.from_numpy(features), edge_index=to_undirected(edge_index, num_nodes=len(ids)), y=y, **masks)
    return graph, ids, label_names, [header[c] for c in feature_cols]
