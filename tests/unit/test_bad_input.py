"""User files broken at random (hypothesis): every reader of user data either accepts the file with
finite values or raises a DataError that names the file, never an exception from deep inside pandas,
csv, PIL or torch (docs/reliability.md, row 14).

A corruption is one of: a cell replaced by a blank, nan, inf, a word or an overflowing number; a
column dropped; the file cut short; random bytes (often not UTF-8); an empty file.
"""
from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hub.errors import DataError

BAD_CELLS = ["", "nan", "NaN", "inf", "-inf", "abc", "1e999", "  ", "0x1F", "１"]
FUZZ = settings(settings.default, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def corruptions(draw):
    kind = draw(st.sampled_from(["cell", "cell", "cell", "drop_column", "truncate", "bytes", "empty"]))
    if kind == "cell":
        return kind, (draw(st.integers(0, 10_000)), draw(st.integers(0, 100)), draw(st.sampled_from(BAD_CELLS)))
    if kind == "drop_column":
        return kind, draw(st.integers(0, 100))
    if kind == "truncate":
        return kind, draw(st.floats(0.0, 0.99))
    if kind == "bytes":
        return kind, draw(st.binary(min_size=1, max_size=300))
    return kind, None


def corrupt(path: Path, corruption) -> None:
    """Apply one corruption to the CSV file at ``path`` (header row kept unless the file is replaced)."""
    kind, arg = corruption
    rows = list(csv.reader(open(path, newline="")))
    if kind == "cell":
        row, col, value = arg
        row = 1 + row % (len(rows) - 1)
        rows[row][col % len(rows[row])] = value
    elif kind == "drop_column":
        col = arg % len(rows[0])
        rows = [r[:col] + r[col + 1:] for r in rows]
    if kind in ("cell", "drop_column"):
        with open(path, "w", newline="") as f:
            csv.writer(f).writerows(rows)
    elif kind == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[:int(len(data) * arg)])
    else:
        path.write_bytes(arg if kind == "bytes" else b"")


def accepted_or_named(read, path: Path):
    """Run ``read()``; a DataError must name ``path``'s file; returns the result or None when refused."""
    try:
        return read()
    except DataError as err:
        assert path.name in str(err) or str(path.parent) in str(err), f"error does not name the file: {err}"
        return None


def finite(*arrays) -> bool:
    return all(np.isfinite(np.asarray(a, dtype=np.float64)).all() for a in arrays)


# ---- graph folder (nodes.csv + edges.csv) -------------------------------------------------------------

def _graph_folder(root: Path) -> Path:
    root.mkdir()
    nodes = [["id", "f1", "f2", "label"]] + [[f"n{i}", str(i % 3), str((i * 7) % 5), "" if i < 2 else f"c{i % 2}"]
                                              for i in range(12)]
    edges = [["src", "dst"]] + [[f"n{i}", f"n{(i + 1) % 12}"] for i in range(12)]
    csv.writer(open(root / "nodes.csv", "w", newline="")).writerows(nodes)
    csv.writer(open(root / "edges.csv", "w", newline="")).writerows(edges)
    return root


@FUZZ
@given(which=st.sampled_from(["nodes.csv", "edges.csv"]), corruption=corruptions())
def test_graph_folder_survives_corruption(which, corruption):
    from graph.io import read_graph_folder

    with tempfile.TemporaryDirectory() as tmp:
        root = _graph_folder(Path(tmp) / "g")
        corrupt(root / which, corruption)
        result = accepted_or_named(lambda: read_graph_folder(root), root / which)
        if result is not None:
            graph = result[0]
            assert finite(graph.x) and graph.edge_index.max() < graph.num_nodes


# ---- survival table --------------------------------------------------------------------------------------

def _survival_csv(path: Path) -> Path:
    generator = np.random.default_rng(0)
    rows = [["time", "event", "age", "grade"]] + [
        [f"{t:.2f}", str(int(e)), f"{a:.1f}", str(g)] for t, e, a, g in
        zip(generator.exponential(10, 30), np.arange(30) % 2, generator.normal(60, 9, 30), np.arange(30) % 3)]
    csv.writer(open(path, "w", newline="")).writerows(rows)
    return path


@FUZZ
@given(corruption=corruptions())
def test_survival_table_survives_corruption(corruption):
    from hub.core.registry import get_dataset_entry

    with tempfile.TemporaryDirectory() as tmp:
        path = _survival_csv(Path(tmp) / "patients.csv")
        corrupt(path, corruption)
        data = get_dataset_entry("survival_csv").builder(path=str(path))
        accepted_or_named(lambda: data.setup("fit"), path)
        if data.train_set is not None:
            rows = data.train_set
            assert finite(rows.clinical, rows.genes, rows.target)


# ---- sensor unit CSV (RUL) ---------------------------------------------------------------------------------

@FUZZ
@given(corruption=corruptions())
def test_sensor_unit_csv_survives_corruption(corruption):
    from timeseries.io import read_unit_csv

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "unit_1.csv"
        rows = [["cycle", "s1", "s2"]] + [[str(c), f"{np.sin(c):.3f}", f"{c * 0.1:.2f}"] for c in range(1, 41)]
        csv.writer(open(path, "w", newline="")).writerows(rows)
        corrupt(path, corruption)
        table = accepted_or_named(lambda: read_unit_csv(path, ["s1", "s2"], window=10), path)
        if table is not None:
            assert table.shape[1] == 2 and finite(table)


# ---- image files -------------------------------------------------------------------------------------

SPEC = {"channels": 1, "height": 8, "width": 8, "mean": [0.5], "std": [0.5]}


@FUZZ
@given(content=st.one_of(st.binary(max_size=400), st.just(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)))
def test_image_reader_survives_random_bytes(content):
    from vision.io import read_image

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "photo.png"
        path.write_bytes(content)
        image = accepted_or_named(lambda: read_image(path, SPEC), path)
        if image is not None:
            assert image.shape == (1, 8, 8) and torch.isfinite(image).all()


@pytest.mark.parametrize("cell", ["nan", "inf", "abc", ""])
def test_each_reader_refuses_a_bad_number_naming_column(tmp_path, cell):
    """Not left to chance: a bad value in a numeric column is refused by every CSV reader, naming the column."""
    from graph.io import read_graph_folder
    from timeseries.io import read_unit_csv

    root = _graph_folder(tmp_path / "g")
    corrupt(root / "nodes.csv", ("cell", (3, 1, cell)))
    with pytest.raises(DataError, match="nodes.csv"):
        read_graph_folder(root)
    unit = tmp_path / "unit.csv"
    csv.writer(open(unit, "w", newline="")).writerows([["cycle", "s1"]] + [[str(c), "0.5"] for c in range(1, 20)])
    corrupt(unit, ("cell", (4, 1, cell)))
    with pytest.raises(DataError, match="s1|row"):
        read_unit_csv(unit, ["s1"], window=5)


# ---- CSV tables (tabular finetune and predict) --------------------------------------------------------

def _table(path: Path) -> Path:
    generator = np.random.default_rng(0)
    rows = [["age", "city", "income", "y"]] + [[str(20 + i), ["a", "b", "c"][i % 3], f"{generator.normal(50, 9):.1f}",
                                                 str(i % 2)] for i in range(40)]
    csv.writer(open(path, "w", newline="")).writerows(rows)
    return path


@FUZZ
@given(corruption=corruptions(), stage=st.sampled_from(["fit", "predict"]))
def test_csv_table_survives_corruption(corruption, stage):
    """A broken training CSV or a broken CSV to predict: a DataError (naming the file or the column), or
    finite model inputs; in prediction a cell gone bad in a known column never crashes the transform."""
    from hub.core.registry import get_dataset_entry
    from tabular.io import TabularPreprocessor, read_table

    with tempfile.TemporaryDirectory() as tmp:
        path = _table(Path(tmp) / "table.csv")
        data = get_dataset_entry("tabular_csv").builder(path=str(path), target="y")
        if stage == "predict":
            data.setup("fit")
            pre = TabularPreprocessor.from_dict(data.input_spec["preprocessor"])
        corrupt(path, corruption)
        try:
            if stage == "fit":
                data.setup("fit")
                arrays = (data.train_set[0][0]["x_num"],) if isinstance(data.train_set[0][0], dict) else ()
            else:
                arrays = pre.transform(read_table(path))
        except DataError as err:
            assert path.name in str(err) or any(c in str(err) for c in ("age", "city", "income", "'y'")), str(err)
            return
        assert finite(*[np.asarray(a, dtype=np.float64) for a in arrays])


# ---- traffic folder (speeds.csv, adjacency.csv) ------------------------------------------------------------

@FUZZ
@given(which=st.sampled_from(["speeds.csv", "adjacency.csv"]), corruption=corruptions())
def test_traffic_folder_survives_corruption(which, corruption):
    from timeseries.io import read_adjacency_csv, read_speed_csv

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ids = ["s0", "s1", "s2"]
        rows = [["time", *ids]] + [[f"2026-01-05 {h:02d}:{m:02d}", *[f"{50 + i + (h * 12 + m // 5) % 7:.1f}"
                                                                    for i in range(3)]]
                                   for h in range(3) for m in range(0, 60, 5)]
        csv.writer(open(root / "speeds.csv", "w", newline="")).writerows(rows)
        np.savetxt(root / "adjacency.csv", np.ones((3, 3)), delimiter=",", header=",".join(ids), comments="")
        corrupt(root / which, corruption)
        speeds = accepted_or_named(lambda: read_speed_csv(root / "speeds.csv"), root / "speeds.csv")
        if speeds is not None:
            assert finite(speeds[1], speeds[2]) and (speeds[1] >= 0).all()
            adjacency = accepted_or_named(lambda: read_adjacency_csv(root / "adjacency.csv", speeds[0]),
                                          root / "adjacency.csv")
            if adjacency is not None:
                assert adjacency.shape == (len(speeds[0]),) * 2 and finite(adjacency)


# ---- ICU stays folder (<RecordID>.txt records + outcomes) ---------------------------------------------------

@FUZZ
@given(which=st.sampled_from(["140003.txt", "Outcomes-a.txt"]), corruption=corruptions())
def test_icu_stays_folder_survives_corruption(which, corruption):
    from medical.icu_data import icu_stays_folder

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        outcomes = [["RecordID", "In-hospital_death"]]
        for i in range(24):
            rows = [["Time", "Parameter", "Value"], ["00:00", "Age", str(40 + i)], ["00:00", "ICUType", str(1 + i % 4)]]
            rows += [[f"{h:02d}:15", "HR", f"{80 + i % 7 + h}"] for h in range(0, 48, 6)]
            csv.writer(open(root / f"{140000 + i}.txt", "w", newline="")).writerows(rows)
            outcomes.append([str(140000 + i), str(int(i % 3 == 0))])
        csv.writer(open(root / "Outcomes-a.txt", "w", newline="")).writerows(outcomes)
        corrupt(root / which, corruption)
        data = icu_stays_folder(str(root))
        accepted_or_named(lambda: data.setup("fit"), root / which)
        if data.train_set is not None:
            rows = data.train_set
            assert finite(rows.values, rows.static) and set(rows.y.tolist()) == {0, 1}
