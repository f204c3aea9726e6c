"""Reading and checking time-series files: a user's sensor units (one CSV per unit) and traffic speeds
(:func:`read_unit_csv`, :func:`read_speed_csv`; the same rows as pandas DataFrames or arrays for
``hub.transforms``: :func:`unit_series`, :func:`speed_series`), and the road graphs of the traffic datasets:
:func:`road_graph` gives the (N, N) weighted adjacency of ``los_loop``, ``metr_la`` or ``pems_bay``, or of a
user's adjacency CSV (used by the data modules and by TESTAM).

DCRNN ships METR-LA / PEMS-BAY graphs as Python pickles, which can run code when loaded. They are read
only after their full sha256 matches the one in PROVENANCE.md, and then with a restricted unpickler
that resolves nothing but numpy's array reconstruction (both checks: a file that passes the hash is
the known one; the restricted unpickler keeps a user's own ``adj_mx.pkl`` from running code).
"""
from __future__ import annotations

import pickle  # only for DCRNN's legacy adj_mx.pkl: sha256-checked, then a restricted unpickler (see above)
import warnings
from pathlib import Path

import numpy as np

from hub.core.weights import read_verified
from hub.datafiles import data_dir, read_csv_rows
from hub.errors import DataError, DatasetUnavailable

STEPS_PER_DAY = 288  # five-minute steps of a traffic speed file (METR-LA, PEMS-BAY, Los-loop)

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


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_adjacency_csv(path: str | Path, ids: list[str] | None = None) -> np.ndarray:
    """An (N, N) adjacency CSV, with or without a header row of sensor ids -> float32 array, checked."""
    path = Path(path)
    rows = read_csv_rows(path, "an N x N matrix of non-negative road weights, one row per sensor")
    header = None
    if len(rows) == len(rows[0]) + 1 or not all(_is_number(cell) for cell in rows[0]):  # ids may be numbers
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


def road_neighbours(adjacency: np.ndarray) -> dict[str, list[list[int]]]:
    """``{"neighbours": [[j, ...] per sensor i]}``: who neighbours whom in an (N, N) ``adjacency`` (nonzero weights).
    How a user's road graph travels in a model card (TESTAM reads only who neighbours whom): the card then needs no
    path of the machine that read the CSV, and the run loads anywhere."""
    return {"neighbours": [np.flatnonzero(row).tolist() for row in adjacency]}


def road_graph(name: str | dict[str, list[list[int]]]) -> np.ndarray:
    """The (N, N) weighted road adjacency of ``los_loop`` (207), ``metr_la`` (207) or ``pems_bay`` (325), of a
    user's adjacency CSV given by its path (:func:`read_adjacency_csv`), or the 0/1 adjacency of a user's graph as
    a card holds it (:func:`road_neighbours`)."""
    if isinstance(name, dict):
        neighbours = name.get("neighbours")
        if not isinstance(neighbours, list) or not all(isinstance(row, list) for row in neighbours):
            raise DataError(f"a road graph given as a dict needs 'neighbours': one list of sensor indices per "
                            f"sensor; got keys {sorted(name)}")
        adjacency = np.zeros((len(neighbours), len(neighbours)), dtype=np.float32)
        for i, row in enumerate(neighbours):
            adjacency[i, row] = 1.0
        return adjacency
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


def read_unit_csv(path: str | Path, sensors: list[str], window: int, time_column: str = "cycle") -> np.ndarray:
    """One unit's CSV -> (cycles, len(sensors)) float array in the order of ``sensors``, checked."""
    path = Path(path)
    rows = read_csv_rows(path, f"a header '{time_column},{','.join(sensors)}' and one row per cycle")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in [time_column, *sensors] if c not in header]
    if missing:
        raise DataError(f"{path}: expected columns {[time_column, *sensors]}, got {header}: missing {missing}")
    columns = [header.index(c) for c in [time_column, *sensors]]
    try:
        table = np.array([[float(row[i]) for i in columns] for row in rows[1:]],
                         dtype=np.float64).reshape(-1, len(columns))
    except (ValueError, IndexError) as err:
        raise DataError(f"{path}: every row needs a number in each of {[time_column, *sensors]} ({err})") from None
    return _checked_unit(table, str(path), [time_column, *sensors], window)


def unit_series(unit, sensors: list[str], window: int, time_column: str = "cycle") -> np.ndarray:
    """One unit's raw sensor rows -> (cycles, len(sensors)) float array in the order of ``sensors``, checked: a
    unit CSV's path (:func:`read_unit_csv`) or a pandas DataFrame with the ``time_column`` and ``sensors`` columns
    (e.g. one engine's rows of a C-MAPSS file, columns named as its readme: cycle, s1 ... s21); other columns are
    ignored."""
    import pandas as pd

    if isinstance(unit, (str, Path)):
        return read_unit_csv(unit, sensors, window, time_column)
    if not isinstance(unit, pd.DataFrame):
        raise DataError(f"expected a unit's rows as a pandas DataFrame or a CSV path, got {type(unit).__name__}")
    columns = [time_column, *sensors]
    missing = [c for c in columns if c not in unit.columns]
    if missing:
        raise DataError(f"the unit's rows lack the column(s) {missing}; expected {columns}, got {list(unit.columns)}")
    table = unit[columns].apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)
    return _checked_unit(table, "the unit's rows", columns, window)


def _checked_unit(table: np.ndarray, source: str, columns: list[str], window: int) -> np.ndarray:
    """A unit's (cycles, 1 + S) table of time and sensors -> its (cycles, S) sensors, after checking it has
    ``window`` rows, finite values and consecutive cycles; ``source`` names it in errors (row numbers are a
    CSV file's lines)."""
    if len(table) < window:
        raise DataError(f"{source} has {len(table)} cycles, fewer than the model's window of {window}")
    bad = np.argwhere(~np.isfinite(table))
    if len(bad):
        row, col = bad[0]
        raise DataError(f"{source}: {len(bad)} NaN/inf/non-numeric values, first in row {row + 2} column "
                        f"'{columns[col]}'; fill or drop them first")
    steps = np.diff(table[:, 0])
    if len(steps) and not np.all(steps == 1):
        at = int(np.flatnonzero(steps != 1)[0])
        raise DataError(f"{source}: '{columns[0]}' must go up by 1 each row (no gaps, in time order); "
                        f"row {at + 2} has {table[at, 0]:g}, row {at + 3} has {table[at + 1, 0]:g}")
    return table[:, 1:]


def read_unit_columns(path: str | Path, time_column: str = "cycle") -> list[str]:
    """The header of a unit CSV, which must name ``time_column``."""
    header = [h.strip() for h in read_csv_rows(path, f"a header '{time_column},SENSOR,...' and one row per cycle")[0]]
    if time_column not in header:
        raise DataError(f"{path}: no time column {time_column!r} in the header {header}; expected the cycle number "
                        "of each row in it (another name: data.args.time_column=NAME)")
    return header


def read_degradation_csv(path: str | Path, measure: str, time_column: str, window: int,
                         step: float | None = None) -> tuple[np.ndarray, float]:
    """One unit's degradation CSV (a ``time_column`` and a ``measure`` column, one row per inspection, equally spaced in
    time) -> its levels (L,) and the spacing; ``step`` (a model card's) is required when given. Refused, naming the file
    and row: a missing column, a non-numeric or infinite value, fewer than ``window`` rows, uneven or backward times."""
    path = Path(path)
    expected = f"a header '{time_column},{measure}' and one row per inspection, equally spaced"
    rows = read_csv_rows(path, expected)
    header = [h.strip() for h in rows[0]]
    missing = [c for c in (time_column, measure) if c not in header]
    if missing:
        raise DataError(f"{path}: expected columns {[time_column, measure]}, got {header}: missing {missing}")
    columns = [header.index(time_column), header.index(measure)]
    try:
        table = np.array([[float(row[i]) for i in columns] for row in rows[1:]], dtype=np.float64).reshape(-1, 2)
    except (ValueError, IndexError) as err:
        raise DataError(f"{path}: every row needs a number in {time_column!r} and {measure!r} ({err})") from None
    if len(table) < max(window, 2):
        raise DataError(f"{path} has {len(table)} inspections, fewer than the model's window of {window}")
    bad = np.argwhere(~np.isfinite(table))
    if len(bad):
        raise DataError(f"{path}: a NaN/inf value in row {bad[0][0] + 2}; fill or drop it first")
    gaps = np.diff(table[:, 0])
    spacing = float(gaps[0]) if step is None else float(step)
    uneven = np.flatnonzero(~np.isclose(gaps, spacing))
    if spacing <= 0 or len(uneven):
        at = int(uneven[0]) if len(uneven) else 0
        raise DataError(f"{path}: {time_column!r} must go up by {spacing:g} each row (equally spaced inspections, in "
                        f"time order); row {at + 2} has {table[at, 0]:g}, row {at + 3} has {table[at + 1, 0]:g}")
    return table[:, 1], spacing


def _unit_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise DataError(f"sensor folder {root} does not exist or is not a folder")
    files = sorted(root.glob("*.csv"))
    if len(files) < 3:
        raise DataError(f"{root} has {len(files)} CSV files; expected one per unit and at least 3 units "
                        "(train, validation and test units are split by unit)")
    return files


MISSING = {"", "nan", "NaN", "NA"}


def _time_of_day(path: str | Path, stamps: list[str]) -> tuple[np.ndarray, int]:
    """Timestamps -> time of day (T,) in [0, 1) and steps per day; refuses gaps and disorder."""
    import pandas as pd

    if len(stamps) < 2:
        raise DataError(f"{path}: {len(stamps)} data row(s); expected at least 2 timestamped rows of readings")
    try:
        with warnings.catch_warnings():  # mixed formats fall back to parsing each stamp, which is what we want
            warnings.filterwarnings("ignore", "Could not infer format", UserWarning)
            times = pd.to_datetime(pd.Series(stamps), errors="raise")
    except (ValueError, TypeError) as err:
        raise DataError(f"{path} column 'time': cannot read the timestamps ({err})") from None
    steps = np.diff(times.to_numpy().astype("datetime64[s]").astype(np.int64))
    if len(steps) == 0 or steps[0] <= 0 or (steps != steps[0]).any():
        bad = int(np.flatnonzero(steps != steps[0])[0]) if len(steps) and steps[0] > 0 else 0
        raise DataError(f"{path} column 'time': steps must be equally spaced and increasing; row {bad + 2} is "
                        f"{stamps[bad]}, row {bad + 3} is {stamps[bad + 1] if bad + 1 < len(stamps) else 'missing'} "
                        "(fill gaps with blank rows: blank readings count as missing)")
    seconds = (times.dt.hour * 3600 + times.dt.minute * 60 + times.dt.second).to_numpy()
    return (seconds / 86400).astype(np.float32), int(round(86400 / steps[0]))


def read_speed_csv(path: str | Path, steps_per_day: int = 288) -> tuple[list[str], np.ndarray, np.ndarray]:
    """-> sensor ids, speeds (T, N) float32 with 0 for missing readings, time of day (T,) in [0, 1)."""
    path = Path(path)
    rows = read_csv_rows(path, "a header of sensor ids (optionally after a 'time' column) and one row per step")
    header = [h.strip() for h in rows[0]]
    has_time = header[0].lower() == "time"
    ids = header[1:] if has_time else header
    if len(set(ids)) != len(ids):
        raise DataError(f"{path}: duplicate sensor ids in the header")
    speed = np.zeros((len(rows) - 1, len(ids)), dtype=np.float32)
    for number, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise DataError(f"{path} line {number}: {len(row)} values but the header has {len(header)} columns")
        for col, cell in enumerate(row[1:] if has_time else row):
            cell = cell.strip()
            if cell in MISSING:
                continue
            try:
                value = float(cell)
            except ValueError:
                raise DataError(f"{path} line {number} column {ids[col]!r}: {cell!r} is not a number; expected a "
                                "speed, or blank for a missing reading") from None
            if not np.isfinite(value) or value < 0:
                raise DataError(f"{path} line {number} column {ids[col]!r}: {cell!r}; expected a finite speed >= 0")
            speed[number - 2, col] = value
    if has_time:
        time_of_day, steps_per_day = _time_of_day(path, [row[0] for row in rows[1:]])
    else:
        time_of_day = (np.arange(len(speed)) % steps_per_day / steps_per_day).astype(np.float32)
    return ids, speed, time_of_day


def speed_series(speeds, times=None) -> tuple[list[str] | None, np.ndarray, np.ndarray]:
    """Raw speeds -> sensor ids (None for an array), speeds (T, N) float32 with 0 for missing readings, time of day
    (T,) in [0, 1). ``speeds``: a speeds CSV's path (:func:`read_speed_csv`, its ``time`` column or row numbers
    give the time of day), or a (T, N) array or pandas DataFrame (columns: sensor ids) of speeds, NaN for a missing
    reading, with the T timestamps in ``times``, a ``time`` column or a DatetimeIndex."""
    import pandas as pd

    if isinstance(speeds, (str, Path)):
        return read_speed_csv(speeds)
    ids = None
    if isinstance(speeds, pd.DataFrame):
        if "time" in speeds.columns:
            times, speeds = speeds["time"] if times is None else times, speeds.drop(columns="time")
        elif times is None and isinstance(speeds.index, pd.DatetimeIndex):
            times = speeds.index
        ids = [str(c) for c in speeds.columns]
        numeric = all(pd.api.types.is_numeric_dtype(dtype) for dtype in speeds.dtypes)
        speeds = (speeds if numeric else speeds.apply(pd.to_numeric, errors="coerce")).to_numpy(np.float64)
    if not isinstance(speeds, np.ndarray) or speeds.ndim != 2:
        raise DataError(f"expected raw speeds as a (T, N) array or DataFrame or a speeds CSV path, got "
                        f"{getattr(speeds, 'shape', type(speeds).__name__)}")
    if times is None:
        raise DataError("the speeds need their timestamps (the model reads the time of day): pass times=, a 'time' "
                        "column or a DatetimeIndex")
    if len(times) != len(speeds):
        raise DataError(f"{len(times)} timestamps for {len(speeds)} rows of speeds; expected one per row")
    try:
        speed = speeds.astype(np.float64)
    except ValueError as err:
        raise DataError(f"the speeds must be numbers ({err}); expected mph, NaN for a missing reading") from None
    bad = np.isinf(speed) | (speed < 0)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise DataError(f"the speeds: row {row} (from 0), column {ids[col] if ids else col} holds {speed[row, col]}; "
                        "expected finite speeds >= 0 (NaN for a missing reading)")
    time_of_day, _ = _time_of_day("the speeds", list(times))
    return ids, np.nan_to_num(speed, nan=0.0).astype(np.float32), time_of_day


def read_ppg_csv(path: str | Path, channels: list[str]) -> np.ndarray:
    """One recording's CSV (a header naming ``channels`` among its columns, one row per sample) -> ``(C, N)`` in the
    order of ``channels``. Refused, naming the file and row: a missing column, a non-numeric or infinite value."""
    path = Path(path)
    rows = read_csv_rows(path, f"a header with the columns {','.join(channels)} and one row per sample")
    header = [h.strip() for h in rows[0]]
    missing = [c for c in channels if c not in header]
    if missing:
        raise DataError(f"{path}: expected the columns {channels}, got {header}: missing {missing}")
    columns = [header.index(c) for c in channels]
    try:
        table = np.array([[float(row[i]) for i in columns] for row in rows[1:]], dtype=np.float64)
        table = table.reshape(-1, len(columns))
    except (ValueError, IndexError) as err:
        raise DataError(f"{path}: every row needs a number in each of {channels} ({err})") from None
    bad = np.argwhere(~np.isfinite(table))
    if len(bad):
        raise DataError(f"{path}: a NaN/inf value in row {bad[0][0] + 2}, column {channels[bad[0][1]]!r}")
    return table.T


def read_ppg_folder(root: str | Path, rate: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """A folder of recordings ``NAME.csv`` (the PPG and accelerometer channels) with reference heart rates
    ``NAME.bpm.csv`` (a ``bpm`` column, one row per 8-s window every 2 s) -> ``{NAME: (signals (5, N), bpm (W,))}``.
    A recording's reference must have one row per window of the recording (TROIKA's count)."""
    from timeseries.signals import CHANNELS, window_count

    root = Path(root)
    if not root.is_dir():
        raise DataError(f"recordings folder {root} does not exist or is not a folder")
    files = sorted(p for p in root.glob("*.csv") if not p.name.endswith(".bpm.csv"))
    if len(files) < 3:
        raise DataError(f"{root} has {len(files)} recordings (NAME.csv); expected at least 3 to split by recording")
    recordings = {}
    for path in files:
        reference = path.with_name(f"{path.stem}.bpm.csv")
        if not reference.is_file():
            raise DataError(f"{path} has no reference heart rates: expected {reference.name} beside it, a 'bpm' "
                            "column with one row per 8-s window every 2 s")
        signals = read_ppg_csv(path, CHANNELS)
        bpm = read_ppg_csv(reference, ["bpm"])[0]
        expected = window_count(signals.shape[1], rate)
        if len(bpm) != expected:
            raise DataError(f"{reference} has {len(bpm)} heart rates; {path.name} ({signals.shape[1]} samples at "
                            f"{rate:g} Hz) has {expected} windows of 8 s every 2 s")
        recordings[path.stem] = signals, bpm
    return recordings
