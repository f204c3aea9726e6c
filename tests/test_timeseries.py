"""timeseries/: RUL models (shapes, gradients, overfit, bad input), the C-MAPSS FD001 pipeline, the NASA
score, the shipped weights against their card, the forecast plot, sensor-CSV adapters and recipe smoke runs."""
import csv
import math
from pathlib import Path

import numpy as np
import pytest
import torch

import hub
from hub.cli import main
from hub.errors import DataError
from hub.registry import get_dataset_entry
from hub.run.evaluate import card_data, evaluate
from hub.run.train import train
from timeseries.data import read_cmapss_units, rul_targets
from timeseries.io import read_unit_csv
from timeseries.tasks import NASAScore

RUL_FAMILIES = ["rul_attention", "rul_attention_gru"]
TINY = {"num_sensors": 5, "window": 8, "horizon": 3, "dim": 16, "num_heads": 2}
FD001_SENSORS = ["s2", "s3", "s4", "s7", "s8", "s9", "s11", "s12", "s13", "s14", "s15", "s17", "s20", "s21"]


@pytest.fixture(scope="module")
def fd001():
    data = get_dataset_entry("cmapss_fd001").builder()
    data.setup()
    return data


@pytest.mark.parametrize("family", RUL_FAMILIES)
def test_forward_shapes_attention_maps_and_head(family):
    model = hub.create_model(family, **TINY)
    x = torch.rand(4, 8, 5)
    out = model(x)
    assert out.shape == (4, 3) and torch.isfinite(out).all()
    maps = model.attention_maps(x)
    assert maps and all(torch.isfinite(w).all() for w in maps.values())
    if family == "rul_attention":
        assert maps["time_0"].shape == (4, 2, 8, 8) and maps["sensor_pool"].shape == (4, 2, 1, 5)
    assert model.forward_head(model.forward_features(x), pre_logits=True).shape == (4, model.num_features)
    model.reset_classifier(7)
    assert model(x).shape == (4, 7)


@pytest.mark.parametrize("family", RUL_FAMILIES)
def test_backward_reaches_every_parameter(family):
    model = hub.create_model(family, **TINY, dropout=0.0)
    model(torch.rand(4, 8, 5)).square().sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


@pytest.mark.parametrize("family", RUL_FAMILIES)
def test_overfits_eight_windows(family):
    torch.manual_seed(0)
    model = hub.create_model(family, **TINY, dropout=0.0)
    x, y = torch.rand(8, 8, 5), torch.rand(8, 3) * 100
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(300):
        loss = torch.nn.functional.mse_loss(model(x), y)
        first = first if first is not None else loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.1 * first


@pytest.mark.parametrize("family", RUL_FAMILIES)
def test_bad_windows_raise_clear_errors(family):
    model = hub.create_model(family, **TINY)
    with pytest.raises(DataError, match=r"expected sensor windows of shape \(batch, 8, 5\), got \(2, 8, 6\)"):
        model(torch.rand(2, 8, 6))
    x = torch.rand(2, 8, 5)
    x[1, 3, 2] = float("nan")
    with pytest.raises(DataError, match="batch 1, cycle 3, sensor 2"):
        model(x)


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


def test_nasa_score_matches_hand_computed_value():
    metric = NASAScore()
    metric.update(torch.tensor([10.0, 20.0]), torch.tensor([15.0, 20.0]))  # d = -5 (early), 0
    metric.update(torch.tensor([30.0]), torch.tensor([20.0]))  # d = +10 (late)
    expected = (math.exp(5 / 13) - 1) + 0.0 + (math.exp(10 / 10) - 1)  # 0.469049 + 1.718282
    assert metric.compute().item() == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(2.187331, abs=1e-6)


@pytest.mark.parametrize("name, keys", [("rul_attention.fd001", ("test/rmse", "test/score")),
                                        ("testam.los_loop", ("test/mae_15", "test/rmse_15", "test/rmse_60"))])
def test_shipped_weights_reproduce_their_card(name, keys):
    card = hub.model_card(name)
    result = evaluate(name, progress=False)
    for key in keys:
        assert result[key] == pytest.approx(card.metrics[key]["values"][0], rel=1e-3)
    assert card.metrics[keys[0]]["n"] == len(card.recipe["seeds"]) >= 4


def test_forecast_plot_of_trained_model_through_explain(tmp_path, capsys):
    from timeseries.data import cmapss_file

    cmapss_file("test_FD001.txt")  # first, so a missing C-MAPSS skips (tests/conftest.py) before the CLI
    assert main(["explain", "rul_attention.fd001", "1", "2", "3", "--out", str(tmp_path)]) == 0
    path = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert path == tmp_path / "rul_forecast.png" and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
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
    assert header.split() == ["file", *columns]
    assert next(csv.reader(open(tmp_path / "p.csv"))) == ["file", *columns]
    assert len(lines) == 2 and len(lines[0].split()) == 31  # file + 10 forecast values with their intervals
    model = hub.load("rul_attention.fd001")
    data = card_data(model.pretrained_cfg)
    expected = model(data.test_set.tensors[0][:1])[0, 0].item()
    rul, lower, upper = map(float, lines[0].split()[1:4])
    assert rul == pytest.approx(expected, abs=1e-2)
    half_width = model.pretrained_cfg.calibration["conformal"]["half_width"]["0.9"][0]
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
                 "--output-dir", str(tmp_path / "runs"), "--no-progress"]) == 0
    (run,) = (tmp_path / "runs").glob("finetune-rul_attention/*")
    card = hub.model_card(str(run))
    assert card.input_spec["sensors"] == FD001_SENSORS and card.metrics["test/rmse"]["mean"] < 125


@pytest.mark.parametrize("recipe", ["rul_attention_fd001", "rul_attention_gru_fd001"])
def test_recipe_smoke_run(repo, tmp_path, recipe):
    run = train(str(repo / "recipes" / "timeseries" / f"{recipe}.yaml"),
                ["trainer.max_epochs=1", "trainer.limit_train_batches=3", "trainer.limit_val_batches=2",
                 f"output_dir={tmp_path}"], progress=False)
    card = hub.model_card(str(run))
    assert card.input_spec["kind"] == "sensor_series" and card.model_args["num_sensors"] == 14
    assert math.isfinite(card.metrics["test/rmse"]["mean"])


# ---- traffic: TESTAM, the GRU baseline, Los-loop and the road graphs ---------------------------------

TRAFFIC_TINY = {"num_nodes": 5, "input_steps": 12, "output_steps": 12}


def _traffic_batch(batch=4, nodes=5):
    x = torch.rand(batch, 12, nodes, 2)
    return x, torch.rand(batch, 12, nodes) * 60 + 5


@pytest.mark.parametrize("family", ["testam", "traffic_gru"])
def test_traffic_models_shapes_gradients_and_overfit(family):
    torch.manual_seed(0)
    if family == "testam":  # a ring road, so every node has neighbours besides itself
        from timeseries.models.testam import TESTAM

        ring = torch.roll(torch.eye(5), 1, dims=1) + torch.roll(torch.eye(5), -1, dims=1)
        model = TESTAM(5, ring, 12, 12, dim=16, num_heads=2, speed_mean=40.0, speed_std=10.0)
    else:
        model = hub.create_model(family, **TRAFFIC_TINY, speed_mean=40.0, speed_std=10.0)
    x, y = _traffic_batch(8)
    out = model(x)
    assert out.shape == (8, 12, 5) and torch.isfinite(out).all()
    loss = model.loss(x, y)[0] if family == "testam" else (out - y).abs().mean()
    loss.backward()
    assert not [n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    first = None
    for _ in range(300):
        loss = (model(x) - y).square().mean() if family == "traffic_gru" else \
            sum((out - y).square().mean() for out in model.forward_experts(x)[0])
        first = first if first is not None else loss.item()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.1 * first
    with pytest.raises(DataError, match=r"expected traffic input of shape \(batch, 12, 5, 2\)"):
        model(torch.rand(2, 12, 6, 2))
    bad = x.clone()
    bad[0, 0, 0, 0] = float("inf")
    with pytest.raises(DataError, match="NaN or inf"):
        model(bad)


def test_testam_router_learns_pseudo_labels_and_routes():
    from timeseries.models.testam import TESTAM

    torch.manual_seed(0)
    model = hub.create_model("testam", **TRAFFIC_TINY, graph="")
    x, y = _traffic_batch()
    outs, logits = model.forward_experts(x)
    assert outs.shape == (3, 4, 12, 5) and logits.shape == (4, 5, 3)
    assert torch.allclose(model.routing(x).sum(-1), torch.ones(4, 5))
    chosen = TESTAM.route(outs, logits)
    best = logits.argmax(-1)  # (B, N)
    assert torch.equal(chosen[1, :, 2], outs[best[1, 2], 1, :, 2])

    with torch.no_grad():  # a gate held open returns the last reading (in mph) at every step
        model.last_gate.bias.fill_(50.0)
        last = x[:, -1:, :, 0] * model.speed_std + model.speed_mean
        assert torch.allclose(model(x), last.expand(-1, 12, -1), atol=1e-4)
        model.last_gate.bias.fill_(-50.0)  # shut, the forecast is the chosen expert's own
        assert not torch.allclose(model(x), last.expand(-1, 12, -1), atol=1e-1)


def test_testam_loss_matches_a_naive_loop():
    """Per expert: masked MAE + mean over steps of the step's masked RMSE; + cross-entropy on pseudo labels."""
    torch.manual_seed(0)
    model = hub.create_model("testam", **TRAFFIC_TINY, graph="")
    x, y = _traffic_batch()
    y[0, :3, 1] = 0.0  # missing readings are masked
    outs, logits = model.forward_experts(x)
    expected, errors = 0.0, torch.zeros(3, 4, 5)
    for e in range(3):
        observed = y != 0
        expected += (outs[e] - y).abs()[observed].mean()
        expected += sum((outs[e, :, t] - y[:, t])[observed[:, t]].square().mean().sqrt() for t in range(12)) / 12
        for b in range(4):
            for n in range(5):
                errors[e, b, n] = (outs[e, b, :, n] - y[b, :, n])[observed[b, :, n]].abs().mean()
    expected += torch.nn.functional.cross_entropy(logits.reshape(-1, 3), errors.argmin(0).reshape(-1))
    assert model.loss(x, y)[0].item() == pytest.approx(expected.item(), rel=1e-5)


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


# ---- traffic: the user's folder (speeds.csv + adjacency.csv) ----------------------------------------

def _traffic_folder(root, sensors=4, steps=3 * 288, with_time=True, minutes=5):
    """Speeds with a daily cycle, some blank readings, and a ring road; a step every ``minutes``."""
    root.mkdir(parents=True, exist_ok=True)
    start = np.datetime64("2026-01-05T00:00")
    t = np.arange(steps)
    speed = 50 + 10 * np.sin(2 * np.pi * t[:, None] / 288 + np.arange(sensors)[None]) + np.arange(sensors)[None]
    ids = [f"s{i}" for i in range(sensors)]
    with open(root / "speeds.csv", "w") as f:
        f.write(",".join((["time"] if with_time else []) + ids) + "\n")
        for step in t:
            cells = ["" if (step * 7 + i) % 97 == 0 else f"{speed[step, i]:.2f}" for i in range(sensors)]
            stamp = [str(start + np.timedelta64(minutes * int(step), "m"))] if with_time else []
            f.write(",".join(stamp + cells) + "\n")
    ring = np.roll(np.eye(sensors), 1, 1) + np.roll(np.eye(sensors), -1, 1)
    np.savetxt(root / "adjacency.csv", ring, delimiter=",", header=",".join(ids), comments="")
    return root


def test_speed_csv_conversions_and_time_of_day(tmp_path):
    from timeseries.io import read_speed_csv

    root = _traffic_folder(tmp_path / "t")
    ids, speed, time_of_day = read_speed_csv(root / "speeds.csv")
    assert ids == ["s0", "s1", "s2", "s3"] and speed.shape == (864, 4)
    assert (speed == 0).sum() > 0 and np.isfinite(speed).all()  # blank readings -> 0 (masked in targets)
    assert time_of_day[0] == 0 and time_of_day[12] == pytest.approx(1 / 24) and time_of_day[288] == 0
    _, _, without = read_speed_csv(_traffic_folder(tmp_path / "u", with_time=False) / "speeds.csv")
    np.testing.assert_allclose(without, time_of_day, atol=1e-6)


@pytest.mark.parametrize("edit,message", [
    (lambda lines: lines[:40] + lines[42:], "equally spaced"),
    (lambda lines: lines[:5] + [lines[5].replace(lines[5].split(",")[2], "fast", 1)] + lines[6:],
     "'fast' is not a number"),
    (lambda lines: lines[:5] + [lines[5].replace(lines[5].split(",")[2], "-3", 1)] + lines[6:], "finite speed >= 0"),
    (lambda lines: lines[:5] + [lines[5].replace(lines[5].split(",")[2], "inf", 1)] + lines[6:], "finite speed >= 0"),
    (lambda lines: lines[:20], "too few for a train/val/test split"),
])
def test_bad_speed_files_are_refused_naming_the_problem(tmp_path, edit, message):
    from hub.registry import get_dataset_entry

    root = _traffic_folder(tmp_path / "t")
    lines = (root / "speeds.csv").read_text().splitlines()
    (root / "speeds.csv").write_text("\n".join(edit(lines)) + "\n")
    with pytest.raises(DataError, match=message):
        get_dataset_entry("traffic_csv").builder(root=str(root)).setup("fit")


def test_adjacency_that_does_not_fit_is_refused(tmp_path):
    from hub.registry import get_dataset_entry

    root = _traffic_folder(tmp_path / "t")
    np.savetxt(root / "adjacency.csv", np.eye(3), delimiter=",")
    with pytest.raises(DataError, match=r"expected a \(4, 4\) adjacency"):
        get_dataset_entry("traffic_csv").builder(root=str(root)).setup("fit")
    np.savetxt(root / "adjacency.csv", np.eye(4), delimiter=",", header="s0,s1,s3,s2", comments="")
    with pytest.raises(DataError, match="same sensors in the same order"):
        get_dataset_entry("traffic_csv").builder(root=str(root)).setup("fit")


@pytest.mark.parametrize("minutes, with_time, names", [(15, True, ["speed_15min", "speed_30min", "speed_45min"]),
                                                        (15, False, ["speed_5min", "speed_10min", "speed_15min"])])
def test_traffic_outputs_are_named_by_lead_time(tmp_path, minutes, with_time, names):
    """Named from the timestamps' spacing; without a time column, from steps_per_day (288: five minutes)."""
    root = _traffic_folder(tmp_path, steps=3 * 96, with_time=with_time, minutes=minutes)
    data = get_dataset_entry("traffic_csv").builder(root=str(root), output_steps=3)
    data.setup("fit")
    assert data.output_names == names


def test_train_finetune_and_predict_a_user_traffic_folder(tmp_path, capsys):
    """TESTAM on the user's road graph; finetuned from the run on another folder; predict one line per sensor."""
    from hub.cli import main

    root = _traffic_folder(tmp_path / "t")
    recipe = tmp_path / "testam.yaml"
    recipe.write_text(f"model: {{name: testam, args: {{dim: 8, num_heads: 2}}}}\n"
                      f"data: {{name: traffic_csv, args: {{root: {root}, batch_size: 32}}}}\n"
                      f"trainer: {{max_epochs: 1, accelerator: cpu, limit_train_batches: 3}}\n"
                      f"output_dir: {tmp_path / 'runs'}\n")
    run = train(str(recipe), progress=False)
    card = hub.model_card(str(run))
    assert card.model_args["graph"] == str((root / "adjacency.csv").resolve()) and card.input_spec["sensors"][0] == "s0"
    other = _traffic_folder(tmp_path / "other", steps=4 * 288)
    assert main(["finetune", str(run), "--data", str(other), "trainer.max_epochs=1", "trainer.limit_train_batches=2",
                 "--output-dir", str(tmp_path / "ft"), "--no-progress"]) == 0
    finetuned = capsys.readouterr().out.strip().splitlines()[-1].removeprefix("run folder: ")
    assert main(["predict", finetuned, str(other / "speeds.csv"), "--no-progress"]) == 0
    header, *lines = capsys.readouterr().out.strip().splitlines()
    names = [f"speed_{5 * h}min" for h in range(1, 13)]  # the folder's 288 steps a day
    assert header.split() == ["file", *(c for n in names for c in (n, f"{n}_lower_90", f"{n}_upper_90"))]
    assert [line.split()[0].rsplit(":", 1)[1] for line in lines] == ["s0", "s1", "s2", "s3"]
    assert all(len(line.split()) == 1 + 3 * 12 for line in lines), lines
    assert main(["explain", finetuned, "val", "--out", str(tmp_path / "fig")]) == 0  # TESTAM's routing
    assert (tmp_path / "fig" / "routing_val.png").stat().st_size > 1000
