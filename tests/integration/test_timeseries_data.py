"""timeseries/: RUL models (shapes, gradients, overfit, bad input), the C-MAPSS FD001 pipeline, the NASA
score, the shipped weights against their card, the forecast plot, sensor-CSV adapters and recipe smoke runs."""
import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

import hub
from hub.cli import main
from hub.core.registry import get_dataset_entry
from hub.errors import DataError
from hub.run.evaluate import card_data, evaluate
from hub.run.train import train
from timeseries.data import read_cmapss_units, rul_targets
from timeseries.io import read_unit_csv

FD001_SENSORS = ["s2", "s3", "s4", "s7", "s8", "s9", "s11", "s12", "s13", "s14", "s15", "s17", "s20", "s21"]


@pytest.fixture(scope="module")
def fd001():
    data = get_dataset_entry("cmapss_fd001").builder()
    data.setup()
    return data


def test_fd001_pipeline_windows_cap_and_constant_sensors(fd001):
    assert fd001.sensors == FD001_SENSORS  # the 7 constant sensors (s1 s5 s6 s10 s16 s18 s19) are dropped
    train = read_cmapss_units("train_FD001.txt")
    assert len(train) == 100 and sum(len(s) for s in train.values()) == 20631
    ids = fd001.info["units"]["train"]
    assert not set(ids) & set(fd001.info["units"]["val"])  # engines, not windows, are held out
    assert len(fd001.train_set) == sum(len(train[u]) - 29 for u in ids)
    x, y = fd001.train_set.tensors
    assert x.shape[1:] == (30, 14) and y.shape[1] == 10
    assert y.max() == 125 and y.min() == 0 and 0 <= x.min() and x.max() <= 1
    first = len(train[ids[0]]) - 29  # windows of the first training engine, then the second engine's
    np.testing.assert_allclose(y[first - 1].numpy(), [0] * 10)  # its last window: failure now
    assert y[first, 0] == min(125, len(train[ids[1]]) - 30)
    low, high = np.array(fd001.input_spec["min"]), np.array(fd001.input_spec["max"])
    raw = train[ids[0]][:30][:, [int(s[1:]) - 1 for s in FD001_SENSORS]]
    np.testing.assert_allclose(x[0].numpy(), (raw - low) / (high - low), rtol=1e-5, atol=1e-6)
    tx, ty = fd001.test_set.tensors
    assert tx.shape == (100, 30, 14)
    official = np.loadtxt(hub.data.data_dir() / "cmapss" / "RUL_FD001.txt")
    np.testing.assert_allclose(ty[:, 0].numpy(), np.minimum(official, 125))
    assert rul_targets(5, 3, 2, rul_cap=1.5).tolist() == [[1.5, 1.0], [1.0, 0.0], [0.0, 0.0]]


@pytest.mark.parametrize("name, keys", [("rul_attention.fd001", ("test/rmse", "test/score")),
                                        ("testam.los_loop", ("test/mae_15", "test/rmse_15", "test/rmse_60"))])
def test_shipped_weights_reproduce_their_card(name, keys):
    card = hub.model_card(name)
    result = evaluate(name, progress=False)
    for key in keys:
        assert result[key] == pytest.approx(card.metrics[key]["values"][0], rel=1e-3)
    assert card.metrics[keys[0]]["n"] == len(card.recipe["seeds"]) >= 4


def test_attention_over_cycles_of_trained_model_through_explain(tmp_path, capsys):
    from timeseries.data import cmapss_file

    cmapss_file("test_FD001.txt")  # first, so a missing C-MAPSS skips (tests/conftest.py) before the CLI
    assert main(["explain", "rul_attention.fd001", "1", "2", "3", "--out", str(tmp_path)]) == 0
    path = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert path == tmp_path / "unit3_explain.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    attention = np.load(path.with_suffix(".npy"))
    assert attention.shape == (30,) and attention.sum() == pytest.approx(1.0, abs=1e-4)  # pooling over 30 cycles
    assert main(["explain", "rul_attention.fd001", "seven", "--out", str(tmp_path)]) == 2
    assert "expected test unit numbers" in capsys.readouterr().err


def _write_units(folder, units, sensors, drop=None):
    folder.mkdir()
    paths = []
    for unit, series in units.items():
        path = folder / f"unit{unit}.csv"
        columns = ["cycle"] + [s for s in sensors if s != drop]
        rows = [",".join(columns)]
        for cycle, values in enumerate(series, start=1):
            rows.append(",".join([str(cycle)] + [repr(float(values[int(s[1:]) - 1])) for s in sensors if s != drop]))
        path.write_text("\n".join(rows) + "\n")
        paths.append(path)
    return paths


def test_predict_sensor_csvs_prints_rul_forecasts(tmp_path, capsys):
    test = read_cmapss_units("test_FD001.txt")
    paths = _write_units(tmp_path / "units", {u: test[u] for u in (1, 2)}, FD001_SENSORS)
    assert main(["predict", "rul_attention.fd001", *map(str, paths), "--no-progress",
                 "--out", str(tmp_path / "p.csv")]) == 0
    header, *lines = capsys.readouterr().out.strip().splitlines()
    names = ["rul", *(f"rul_plus_{h}" for h in range(1, 10))]  # the RUL now, then 1..9 cycles later
    columns = [c for name in names for c in (name, f"{name}_lower_90", f"{name}_upper_90")]  # the card's intervals
    assert header.split() == ["file", *columns, "ood_score", "ood"]  # the card's OOD statistics (hub.uncertainty.ood)
    assert next(csv.reader(open(tmp_path / "p.csv"))) == ["file", *columns, "ood_score", "ood"]
    assert len(lines) == 2 and len(lines[0].split()) == 33  # file + 10 forecasts with their intervals + OOD
    model = hub.load("rul_attention.fd001")
    data = card_data(model.pretrained_cfg)
    expected = model(data.test_set.tensors[0][:1])[0, 0].item()
    rul, lower, upper = map(float, lines[0].split()[1:4])
    assert rul == pytest.approx(expected, abs=1e-2)
    conformal = model.pretrained_cfg.calibration["conformal"]  # the half width of the prediction's bin
    half_width = conformal["half_width"]["0.9"][0][np.searchsorted(conformal["bin_edges"][0], rul, side="right")]
    assert rul - lower == pytest.approx(half_width, abs=2e-3) and upper - rul == pytest.approx(half_width, abs=2e-3)


def test_sensor_csv_errors(tmp_path, capsys):
    test = read_cmapss_units("test_FD001.txt")
    missing = _write_units(tmp_path / "missing", {1: test[1]}, FD001_SENSORS, drop="s7")[0]
    assert main(["predict", "rul_attention.fd001", str(missing), "--no-progress"]) == 2
    assert "missing ['s7']" in capsys.readouterr().err
    short = _write_units(tmp_path / "short", {1: test[1][:12]}, FD001_SENSORS)[0]
    assert main(["predict", "rul_attention.fd001", str(short), "--no-progress"]) == 2
    assert "12 cycles, fewer than the model's window of 30" in capsys.readouterr().err
    full = _write_units(tmp_path / "full", {1: test[1]}, FD001_SENSORS)[0]
    text = full.read_text().splitlines()
    text[3] = text[3].rsplit(",", 1)[0] + ",nan"  # file row 4 (row 1 is the header)
    nan = tmp_path / "nan.csv"
    nan.write_text("\n".join(text))
    assert main(["predict", "rul_attention.fd001", str(nan), "--no-progress"]) == 2
    assert "row 4 column 's21'" in capsys.readouterr().err
    gap = tmp_path / "gap.csv"
    text = short.read_text().splitlines()
    gap.write_text("\n".join(text[:5] + text[6:]))
    with pytest.raises(DataError, match="no gaps"):
        read_unit_csv(gap, FD001_SENSORS, window=5)


@pytest.mark.slow
def test_finetune_on_sensor_csv_folder(tmp_path):
    train_units = read_cmapss_units("train_FD001.txt")
    folder = tmp_path / "units"
    _write_units(folder, {u: train_units[u] for u in range(1, 8)}, FD001_SENSORS)
    assert main(["finetune", "rul_attention.fd001", "trainer.max_epochs=1", "--data", str(folder),
                 "--output-dir", str(tmp_path / "runs"), "--no-progress", "--policy", "full", "--cv-folds", "0"]) == 0
    (run,) = (tmp_path / "runs").glob("finetune-rul_attention/*")  # one policy: one run folder
    card = hub.model_card(str(run))
    assert card.input_spec["sensors"] == FD001_SENSORS
    # better than any constant prediction of its test windows' RUL (whose best RMSE is their standard deviation),
    # not merely below the cap of 125 that every prediction of the capped targets is under
    baseline = json.loads((run / "metrics.json").read_text())["baseline"]
    targets = np.array([float(row["target"]) for row in csv.DictReader(open(run / baseline["predictions"]))])
    assert card.metrics["test/rmse"]["mean"] < targets.std()


@pytest.mark.parametrize("recipe", ["rul_attention_fd001", "rul_attention_gru_fd001"])
def test_recipe_smoke_run(repo, tmp_path, recipe):
    run = train(str(repo / "recipes" / "timeseries" / f"{recipe}.yaml"),
                ["trainer.max_epochs=1", "trainer.limit_train_batches=3", "trainer.limit_val_batches=2",
                 f"output_dir={tmp_path}"], progress=False)
    card = hub.model_card(str(run))
    assert card.input_spec["kind"] == "sensor_series" and card.model_args["num_sensors"] == 14
    assert math.isfinite(card.metrics["test/rmse"]["mean"])


def test_road_graphs_load_with_hash_and_restricted_unpickler(tmp_path):
    import pickle

    from timeseries.io import read_adj_pickle, road_graph

    assert road_graph("los_loop").shape == (207, 207) and (road_graph("los_loop") > 0).sum() == 2833
    assert road_graph("metr_la").shape == (207, 207) and (road_graph("metr_la") > 0).sum() == 1722
    assert road_graph("pems_bay").shape == (325, 325) and (road_graph("pems_bay") > 0).sum() == 2694

    class Exploit:
        def __reduce__(self):
            return (print, ("pwned",))

    evil = tmp_path / "adj_mx.pkl"
    evil.write_bytes(pickle.dumps([["a"], {"a": 0}, Exploit()]))
    with pytest.raises(DataError, match="refusing to unpickle builtins.print"):
        read_adj_pickle(evil)
    with pytest.raises(hub.WeightsError, match="sha256 mismatch"):
        read_adj_pickle(evil, sha256="0" * 64)


def test_los_loop_split_and_baselines():
    from timeseries.baselines import baseline_forecasts

    data = get_dataset_entry("los_loop").builder()
    data.setup()
    assert data.info["samples"] == [1395, 199, 399]  # 1993 samples, chronological 70/10/20
    x, y = data.test_set.tensors
    assert x.shape == (399, 12, 207, 2) and y.shape == (399, 12, 207)
    assert data.splits["train"][0][-1, -1] < data.splits["test"][0][0, 12]  # test targets come after training
    forecasts = baseline_forecasts(data)
    np.testing.assert_allclose(forecasts["last_value"][:, 5], data.speed[data.splits["test"][0][:, 11]])
    assert forecasts["historical_average"].shape == (399, 12, 207)


@pytest.mark.parametrize("recipe", ["testam_los_loop", "traffic_gru_los_loop"])
def test_traffic_recipe_smoke_run(repo, tmp_path, recipe):
    run = train(str(repo / "recipes" / "timeseries" / f"{recipe}.yaml"),
                ["trainer.max_epochs=1", "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
                 "data.args.batch_size=8", f"output_dir={tmp_path}"], progress=False)
    card = hub.model_card(str(run))
    assert card.model_args["num_nodes"] == 207 and math.isfinite(card.metrics["test/mae_15"]["mean"])


@pytest.mark.slow
def test_routing_plot_of_testam(tmp_path):
    from timeseries.explain import plot_routing, routing_over_time

    data = get_dataset_entry("los_loop").builder()
    data.setup()
    model = hub.create_model("testam", **data.model_args())
    choice = routing_over_time(model, data, "val")
    assert choice.shape == (199, 207) and set(np.unique(choice)) <= {0, 1, 2}
    path = plot_routing(model, data, tmp_path / "routing.png", "val")
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_laser_degradation_windows_split_by_laser_and_card_spec():
    data = get_dataset_entry("laser_degradation").builder(window=4, horizon=4, test_units=[10], val_units=[])
    data.setup()
    # 17 levels per laser (the origin prepended): 17 - 4 - 4 + 1 = 10 windows each; 14 training lasers, 1 tested
    assert len(data.train_set) == 140 and len(data.test_set) == 10 and data.val_set is None
    x, y = data.test_set[:]
    assert x.shape == (10, 4, 1) and y.shape == (10, 4)
    assert x[0, 0, 0] == 0.0 and y[-1, -1] == pytest.approx(12.21)  # laser 10 starts at 0 % and ends at 12.21 %
    assert data.input_spec["kind"] == "degradation_series" and data.input_spec["step"] == 250.0
    assert data.output_names[-1] == "level_plus_1000h"
    with pytest.raises(DataError, match="name \\[16\\]"):
        get_dataset_entry("laser_degradation").builder(test_units=[16]).setup()
    drawn = get_dataset_entry("laser_degradation").builder(val_fraction=0.25, split_seed=1)  # cross-fitting's split
    drawn.setup()
    val = drawn.info["units"]["val"]
    assert len(val) == 3 and not set(val) & {5, 10, 15} and len(drawn.val_set) == 30


def test_shipped_laser_tag_reproduces_its_card_and_rolls_a_path_to_the_threshold():
    import torch

    from timeseries.data import read_laser_units

    card = hub.model_card("degradation_gru.laser")
    measured = evaluate("degradation_gru.laser", progress=False)
    assert measured["test/rmse"] == pytest.approx(card.metrics["test/rmse"]["values"][0], abs=1e-4)
    assert "SMALL DATA" in card.notes and card.input_spec["threshold"] == 10.0
    hours, units = read_laser_units()
    model = hub.load("degradation_gru.laser")
    path = model.forecast_path(torch.tensor(units[10][:9], dtype=torch.float32)[None, :, None], 16)[0]
    assert (path.diff() >= 0).all() and path[-1] > 10.0  # laser 10 (fails at 3374 h) crosses 10% within 4000 h more


def test_finetune_the_laser_tag_on_unit_csvs_sets_linear_extrapolation_beside_it(tmp_path, capsys):
    """``attnhub finetune degradation_gru.laser --data FOLDER`` on the 15 lasers written as a user's unit CSVs: the
    run's test units get the classic forecast beside the model's (issue 67)."""
    step, units = get_dataset_entry("laser_degradation").builder().load()
    folder = tmp_path / "lasers"
    folder.mkdir()
    for unit, levels in units.items():
        rows = "".join(f"{(i + 1) * step:g},{level:.4f}\n" for i, level in enumerate(levels[1:]))  # the origin dropped
        (folder / f"laser_{unit}.csv").write_text("hours,current_increase_pct\n" + rows)
    assert main(["finetune", "degradation_gru.laser", "--data", str(folder), "--output-dir", str(tmp_path / "runs"),
                 "--no-progress", "--policy", "full", "trainer.max_epochs=2"]) == 0
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[-1].split()[0])
    kept = json.loads((run / "metrics.json").read_text())["baseline"]
    assert kept["name"] == "linear extrapolation of the window" and kept["metric"] == "test/rmse"
    assert "linear extrapolation of the window" in out and kept["test"]["test/rmse"] > 0


def write_troika_csvs(folder, recordings=("03_TYPE02", "05_TYPE02", "07_TYPE02"), seconds: int = 40) -> Path:
    """The first ``seconds`` of TROIKA recordings as a user's folder: NAME.csv (the five channels at 125 Hz) and
    NAME.bpm.csv (their BPM0 windows)."""
    from timeseries.data import read_troika_recording
    from timeseries.signals import CHANNELS, window_count

    folder = Path(folder)
    folder.mkdir(parents=True)
    for name in recordings:
        signals, bpm = read_troika_recording(name)
        samples = signals[:, :125 * seconds]
        rows = "\n".join(",".join(f"{v:.4f}" for v in row) for row in samples.T)
        (folder / f"{name}.csv").write_text(",".join(CHANNELS) + "\n" + rows + "\n")
        count = window_count(samples.shape[1], 125.0)
        (folder / f"{name}.bpm.csv").write_text("bpm\n" + "\n".join(f"{b:.3f}" for b in bpm[:count]) + "\n")
    return folder


def test_troika_windows_match_bpm0_and_split_by_recording():
    from timeseries.data import TROIKA_FILES, read_troika_recording
    from timeseries.signals import spectral_baseline

    data = get_dataset_entry("troika").builder(test_recordings=["05_TYPE02"], val_recordings=["04_TYPE01"])
    data.setup()
    # 1,726 BPM0 windows over the 12 recordings: 146 in 05_TYPE02, 107 in 04_TYPE01 (PROVENANCE.md)
    assert len(data.test_set) == 146 and len(data.val_set) == 107 and len(data.train_set) == 1726 - 146 - 107
    assert sum(len(read_troika_recording(r)[1]) for r in TROIKA_FILES) == 1726
    x, y = data.test_set.tensors
    assert x.shape == (146, 5, 200) and y.min() > 100 and y.max() < 167  # 05_TYPE02: 101.2..166.8 BPM
    assert data.groups["test"] == ["05_TYPE02"] * 146 and "05_TYPE02" not in data.info["recordings"]["train"]
    assert np.abs(spectral_baseline(x.numpy()) - y.numpy()).mean() == pytest.approx(8.93, abs=0.01)
    item, bpm = data.train_set[0]  # time-stretched in 1 ± 0.2, the heart rate alike
    assert item.shape == (5, 200) and 0.8 * 60 < bpm < 1.2 * 180
    with pytest.raises(DataError, match="name \\['13_TYPE02'\\]"):
        get_dataset_entry("troika").builder(test_recordings=["13_TYPE02"]).setup()


def test_troika_benchmark_runs_one_short_fold(tmp_path):
    from benchmarks.troika_pulse import main as benchmark

    benchmark(["--recordings", "05_TYPE02", "--seeds", "1", "--epochs", "1", "--out", str(tmp_path / "pulse")])
    summary = json.loads((tmp_path / "pulse.json").read_text())
    row = summary["recordings"]["05_TYPE02"]
    assert row["windows"] == 146 and row["spectral"] == pytest.approx(8.93, abs=0.01)
    assert 0 < row["pulse_tracked"][0] < 60 and 0 < row["pulse_window"][0] < 60
    assert "| 05_TYPE02 | 146 | 8.93 |" in (tmp_path / "pulse.md").read_text()


def test_pulse_troika_tag_carries_its_leave_one_out_figures_and_predicts_a_recording(tmp_path, capsys):
    card = hub.model_card("pulse.troika")
    results = json.loads((Path(__file__).parents[2] / "benchmarks/results/troika_pulse.json").read_text())
    assert card.metrics["test/mae"]["mean"] == pytest.approx(results["mean"]["pulse_tracked"]["mean"], abs=1e-6)
    assert card.data["recordings"]["train"] == sorted(card.data["recordings"]["train"]) and \
        len(card.data["recordings"]["train"]) == 12
    folder = write_troika_csvs(tmp_path / "runs", recordings=("05_TYPE02",), seconds=60)
    assert main(["predict", "pulse.troika", str(folder / "05_TYPE02.csv"), "--no-progress"]) == 0
    lines = [line.split() for line in capsys.readouterr().out.strip().splitlines() if "05_TYPE02.csv:" in line]
    assert len(lines) == 27  # floor((60 - 8) / 2) + 1 windows
    bpm = np.loadtxt(folder / "05_TYPE02.bpm.csv", skiprows=1)
    predicted = np.array([float(line[1]) for line in lines])
    assert np.abs(predicted - bpm).mean() < 10  # a resting-then-running start, tracked
    assert main(["explain", "pulse.troika", f"{folder / '05_TYPE02.csv'}:40", "--out", str(tmp_path / "fig")]) == 0
    record = json.loads((tmp_path / "fig" / "05_TYPE02_40s_explain.json").read_text())
    assert "cross-attention" in record["method"] and record["shape"] == [81, 81]
