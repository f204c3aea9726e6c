"""Road graphs of the traffic datasets: :func:`road_graph` gives the (N, N) weighted adjacency of ``los_loop``,
``metr_la`` or ``pems_bay``, or of a user's adjacency CSV (used by the data modules and by TESTAM).

DCRNN ships METR-LA / PEMS-BAY graphs as Python pickles, which can run code when loaded. They are read
only after their full sha256 matches the one in PROVENANCE.md, and then with a restricted unpickler
that resolves nothing but numpy's array reconstruction (both checks: a file that passes the hash is
the known one; the restricted unpickler keeps a user's own ``adj_mx.pkl`` from running code).
"""
from __future__ import annotations

import pickle  # only for DCRNN's legacy adj_mx.pkl: sha256-checked, then a restricted unpickler (see above)
from pathlib import Path

import numpy as np

from hub.data import data_dir, read_csv_rows
from hub.errors import DataError, DatasetUnavailable
from hub.weights import read_verified

GRAPH_FILES = {  # name -> (folder, file, sha256)
    "los_loop": ("los_loop", "los_adj.csv", "7a6eb41e10677992b5af50f5ab187c6c05c5c3a92cb973950cfddbf857361e76"),
    "metr_la": ("metr_la_graph", "adj_mx.pkl", "a35687c6e15aa228dc45027b0ed2a0ea0f4ec78f573deb992c595092d12f61b3"),
    "pems_bay": ("pems_bay_graph", "adj_mx_bay.pkl",
                 "116275f5704d0d492018e14c047f7ae5004385b450aa907f88424055a4a97370"),
}


class _ArrayUnpickler(pickle.Unpickler):
    """Resolves only numpy's ndarray reconstruction; any other global (os.system, ...) is refused."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise DataError(f"refusing to unpickle {module}.{name}: graph pickles may hold only lists, dicts, "
                            "strings and numpy arrays")
        return super().find_class(module, name)


def read_adj_pickle(path: str | Path, sha256: str | None = None) -> tuple[list[str], np.ndarray]:
    """A DCRNN ``[sensor_ids, id_to_index, adj_mx]`` pickle -> (sensor ids, (N, N) float32 adjacency)."""
    import io

    data = read_verified(path, sha256)
    try:
        content = _ArrayUnpickler(io.BytesIO(data), encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError) as err:
        raise DataError(f"{path} is not a DCRNN graph pickle: {err}") from None
    if not (isinstance(content, list) and len(content) == 3 and isinstance(content[2], np.ndarray)):
        raise DataError(f"{path}: expected [sensor_ids, sensor_id_to_ind, adj_mx], got {type(content).__name__}")
    ids, _, adj = content
    return [str(i) for i in ids], check_adjacency(adj.astype(np.float32), len(ids), str(path))


def check_adjacency(adj: np.ndarray, num_nodes: int, source: str) -> np.ndarray:
    if adj.shape != (num_nodes, num_nodes):
        raise DataError(f"{source}: expected a ({num_nodes}, {num_nodes}) adjacency for {num_nodes} sensors, "
                        f"got {adj.shape}")
    if not np.isfinite(adj).all() or (adj < 0).any():
        raise DataError(f"{source}: adjacency weights must be finite and non-negative")
    return adj


def read_adjacency_csv(path: str | Path, ids: list[str] | None = None) -> np.ndarray:
    """An (N, N) adjacency CSV, with or without a header row of sensor ids -> float32 array, checked."""
    path = Path(path)
    rows = read_csv_rows(path, "an N x N matrix of non-negative road weights, one row per sensor")
    header = None
    try:
        float(rows[0][0])
    except ValueError:
        header, rows = [h.strip() for h in rows[0]], rows[1:]
    try:
        adjacency = np.array([[float(c) for c in row] for row in rows], dtype=np.float32)
    except ValueError as err:
        raise DataError(f"{path}: every cell must be a number ({err})") from None
    if adjacency.ndim != 2:
        raise DataError(f"{path}: rows have different lengths; expected an N x N matrix")
    if ids is not None and header is not None and header != ids:
        raise DataError(f"{path}: the header's sensor ids {header[:5]}... differ from the speeds' {ids[:5]}...; "
                        "expected the same sensors in the same order")
    return check_adjacency(adjacency, len(ids) if ids is not None else len(adjacency), str(path))


def road_graph(name: str) -> np.ndarray:
    """The (N, N) weighted road adjacency of ``los_loop`` (207), ``metr_la`` (207) or ``pems_bay`` (325),
    or of a user's adjacency CSV given by its path (:func:`read_adjacency_csv`)."""
    if name.endswith(".csv"):
        return read_adjacency_csv(name)
    if name not in GRAPH_FILES:
        raise DataError(f"unknown road graph {name!r}; available: {sorted(GRAPH_FILES)} or an adjacency CSV path")
    folder, file, sha256 = GRAPH_FILES[name]
    path = data_dir() / folder / file
    if not path.is_file():
        raise DatasetUnavailable(name, f"{path} not found; put the {name} graph files there (see their "
                                       "PROVENANCE.md) or set HUB_DATA_DIR")
    if file.endswith(".pkl"):
        return read_adj_pickle(path, sha256)[1]
    adj = np.loadtxt(read_verified(path, sha256).decode().splitlines(), delimiter=",", dtype=np.float32)
    return check_adjacency(adj, len(adj), str(path))
