"""timeseries/: RUL models (shapes, gradients, overfit, bad input), the C-MAPSS FD001 pipeline, the NASA
score, the shipped weights against their card, the forecast plot and sensor-CSV adapters (the training runs:
tests/integration/test_timeseries_runs.py)."""
import math

import numpy as np
import pytest
import torch

import hub
from hub.cli import main
from hub.core.registry import get_dataset_entry
from hub.errors import DataError, HubError
from hub.testing import assert_overfits, params_without_grad
from timeseries.tasks import NASAScore

RUL_FAMILIES = ["rul_attention", "rul_attention_gru"]


TINY = {"num_sensors": 5, "window": 8, "horizon": 3, "dim": 16, "num_heads": 2}


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


def test_nasa_score_matches_hand_computed_value():
    metric = NASAScore()
    metric.update(torch.tensor([10.0, 20.0]), torch.tensor([15.0, 20.0]))  # d = -5 (early), 0
    metric.update(torch.tensor([30.0]), torch.tensor([20.0]))  # d = +10 (late)
    expected = (math.exp(5 / 13) - 1) + 0.0 + (math.exp(10 / 10) - 1)  # 0.469049 + 1.718282
    assert metric.compute().item() == pytest.approx(expected, rel=1e-9)
    assert expected == pytest.approx(2.187331, abs=1e-6)


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
    from hub.core.registry import get_dataset_entry

    root = _traffic_folder(tmp_path / "t")
    lines = (root / "speeds.csv").read_text().splitlines()
    (root / "speeds.csv").write_text("\n".join(edit(lines)) + "\n")
    with pytest.raises(DataError, match=message):
        get_dataset_entry("traffic_csv").builder(root=str(root)).setup("fit")


def test_adjacency_that_does_not_fit_is_refused(tmp_path):
    from hub.core.registry import get_dataset_entry

    root = _traffic_folder(tmp_path / "t")
    np.savetxt(root / "adjacency.csv", np.eye(3), delimiter=",")
    with pytest.raises(DataError, match=r"expected a \(4, 4\) adjacency"):
        get_dataset_entry("traffic_csv").builder(root=str(root)).setup("fit")
    np.savetxt(root / "adjacency.csv", np.eye(4), delimiter=",", header="s0,s1,s3,s2", comments="")
    with pytest.raises(DataError, match="same sensors in the same order"):
        get_dataset_entry("traffic_csv").builder(root=str(root)).setup("fit")


def test_adjacency_header_of_numeric_sensor_ids_is_read_as_a_header(tmp_path):
    from timeseries.io import read_adjacency_csv

    ids = ["773869", "767541", "767542"]  # Los-loop's ids are numbers
    np.savetxt(tmp_path / "adjacency.csv", np.eye(3), delimiter=",", header=",".join(ids), comments="")
    np.testing.assert_array_equal(read_adjacency_csv(tmp_path / "adjacency.csv", ids), np.eye(3))
    with pytest.raises(DataError, match="same sensors in the same order"):
        read_adjacency_csv(tmp_path / "adjacency.csv", ids[::-1])


@pytest.mark.parametrize("minutes, with_time, names", [(15, True, ["speed_15min", "speed_30min", "speed_45min"]),
                                                        (15, False, ["speed_5min", "speed_10min", "speed_15min"])])
def test_traffic_outputs_are_named_by_lead_time(tmp_path, minutes, with_time, names):
    """Named from the timestamps' spacing; without a time column, from steps_per_day (288: five minutes)."""
    root = _traffic_folder(tmp_path, steps=3 * 96, with_time=with_time, minutes=minutes)
    data = get_dataset_entry("traffic_csv").builder(root=str(root), output_steps=3)
    data.setup("fit")
    assert data.output_names == names


def _sensor_folder(root, units=8, sensors=("temp_a", "pressure_b", "flat", "vib c"), seed=0):
    """Run-to-failure units as a user holds them: a CSV per unit, a cycle column and sensors of any names; the
    first sensor falls linearly to failure (so its last value tells the RUL), ``flat`` is constant."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for unit in range(units):
        cycles = int(rng.integers(45, 80))
        rul = np.arange(cycles - 1, -1, -1.0)
        columns = {"temp_a": 500 + 0.5 * rul, "pressure_b": rng.normal(10, 1, cycles), "flat": np.full(cycles, 7.0),
                   "vib c": 0.01 * rul + rng.normal(0, 0.1, cycles)}
        lines = [",".join(["cycle", *sensors])]
        lines += [",".join([str(c + 1), *(f"{columns[s][c]:.4f}" for s in sensors)]) for c in range(cycles)]
        (root / f"engine_{unit}.csv").write_text("\n".join(lines) + "\n")
    return root


def test_rul_baseline_reads_the_rul_off_a_linear_sensor(tmp_path):
    from timeseries.baselines import rul_baseline

    data = get_dataset_entry("sensor_units").builder(root=str(_sensor_folder(tmp_path / "u", units=12)))
    data.setup()
    result = rul_baseline(data)
    assert result.metrics["test/rmse"] < 3  # the RUL spans 0-79 cycles: a baseline that learnt nothing is ~20 off
    assert len(result.predictions["prediction"]) == len(data.test_set)


def test_rul_folds_keep_each_unit_whole_and_the_refit_trains_on_every_unit(tmp_path):
    """Issue 68 on sensor units: a fold run validates on whole units (the units of the windows that
    :func:`hub.crossval.fold_indices` holds out when grouped by :func:`timeseries.data.pool_groups`, in that order),
    each pooled unit in exactly one fold; the refit trains on every window, test units included."""
    from hub.crossval import fold_indices

    build = get_dataset_entry("sensor_units").builder
    folder = str(_sensor_folder(tmp_path / "u", units=12))
    data = build(root=folder)
    data.setup()
    pooled = data.info["units"]["train"] + data.info["units"]["val"]
    assert len(data.pool_units) == len(data.train_set) + len(data.val_set)
    folds = fold_indices("regression", np.zeros(len(data.pool_units)), data.pool_units, k=3, seed=0)
    labels = torch.cat([data.train_set.tensors[1], data.val_set.tensors[1]])
    validated = []
    for index, (fit, held) in enumerate(folds):
        fold = build(root=folder, cv_fold=[3, index, 0])
        fold.setup()
        val_units = fold.info["units"]["val"]
        assert not set(val_units) & set(fold.info["units"]["train"])
        assert val_units == list(dict.fromkeys(data.pool_units[held].tolist()))
        torch.testing.assert_close(fold.val_set.tensors[1], labels[held])  # the folds' windows, in their order
        assert len(fold.train_set) == len(fit) and fold.info["split"].startswith(f"fold {index} of 3")
        validated += val_units
    assert sorted(validated) == sorted(pooled)
    refit = build(root=folder, refit=True)
    refit.setup()
    assert sorted(refit.info["units"]["train"]) == list(range(12))
    assert len(refit.train_set) == len(data.train_set) + len(data.val_set) + len(data.test_set)
    with pytest.raises(DataError, match="exclude each other"):
        build(root=folder, cv_fold=[3, 0, 0], refit=True)


def test_bad_sensor_units_are_refused_before_training(tmp_path, capsys):
    folder = _sensor_folder(tmp_path / "units")
    for path in folder.glob("*.csv"):
        path.write_text(path.read_text().replace("cycle,", "time,", 1))
    assert main(["finetune", "rul_attention", "--data", str(folder), "--output-dir", str(tmp_path / "runs"),
                 "trainer.accelerator=cpu", "--no-progress"]) == 2
    assert "no time column 'cycle'" in capsys.readouterr().err and not (tmp_path / "runs").exists()


def test_a_rul_tag_on_other_sensors_names_the_family_to_train_from_scratch(tmp_path, capsys):
    folder = _sensor_folder(tmp_path / "units")
    assert main(["finetune", "rul_attention.fd001", "--data", str(folder), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "lacks the sensor column(s) ['s2'" in err and f"attnhub finetune rul_attention --data {folder}" in err


def test_traffic_baseline_picks_the_historical_average_on_a_daily_cycle(tmp_path):
    from timeseries.baselines import traffic_baseline

    data = get_dataset_entry("traffic_csv").builder(root=str(_traffic_folder(tmp_path / "t", steps=5 * 288)))
    data.setup()
    result = traffic_baseline(data)  # the same day repeats: the historical average is exact but for blank readings
    assert result.name == "historical average" and result.metrics["test/mae"] < 0.05
    assert result.metrics["last value test/mae"] > 0.5  # a sine of amplitude 10 moves ~0.9 mph an hour


def test_kept_traffic_baseline_forecasts_a_speeds_file_as_the_data_window_ending_there(tmp_path):
    """TrafficSeriesKind.baseline_outputs reads a speeds file's last input window as predict does: its forecast from
    the kept profile is the baseline's forecast of the data module's window ending at the same row (a window whose
    last row has a blank reading: the last value is the one before); a tampered file is refused."""
    from types import SimpleNamespace

    from hub.core.weights import sha256_bytes
    from hub.predictor import save_arrays
    from timeseries.baselines import TRAFFIC_METHODS, baseline_forecasts, training_profile
    from timeseries.kinds import TrafficSeriesKind

    root = _traffic_folder(tmp_path / "t", steps=5 * 288)
    data = get_dataset_entry("traffic_csv").builder(root=str(root))
    data.setup()
    window, _ = data.splits["test"]
    last_rows = window[:, data.input_steps - 1]
    sample = int(np.flatnonzero((data.speed[last_rows] == 0).any(1))[0])
    lines = (root / "speeds.csv").read_text().splitlines()
    (tmp_path / "cut.csv").write_text("\n".join(lines[:last_rows[sample] + 2]) + "\n")  # the header, rows to there
    expected = baseline_forecasts(data, "test")
    profile = training_profile(data)
    for index, method in enumerate(TRAFFIC_METHODS):
        path = save_arrays({"profile": profile, "method": np.array([index])}, tmp_path / f"{method}.safetensors")
        kept = {"name": method, "file": path.name, "sha256": sha256_bytes(path.read_bytes())}
        card = SimpleNamespace(name="traffic_gru.run", card_dir=str(tmp_path), input_spec=data.input_spec,
                               predictor={"chosen": "baseline", "weight": 0.0, "baseline": kept})
        got = TrafficSeriesKind().baseline_outputs(card, str(tmp_path / "cut.csv"))  # (N, T_out)
        np.testing.assert_allclose(got, expected[method][sample].T, rtol=1e-6)
    assert not np.allclose(expected["last_value"][sample], expected["historical_average"][sample])
    path.write_bytes(path.read_bytes()[:-1] + b" ")
    with pytest.raises(HubError, match="sha256"):
        TrafficSeriesKind().baseline_outputs(card, str(tmp_path / "cut.csv"))


def test_cross_fitting_names_the_data_arguments_it_needs():
    from hub.uncertainty import cross_conformal

    with pytest.raises(HubError, match="data.args.val_fraction and data.args.split_seed"):
        cross_conformal.held_out_outputs(hub.model_card("testam.los_loop"), 0.25, 2, progress=False)


# The laser degradation model (degradation_gru): an attention GRU forecasting a degradation path.
DEGRADATION_TINY = {"window": 5, "horizon": 3, "dim": 16, "num_heads": 2}


def _paths(batch: int, length: int) -> torch.Tensor:
    """Increasing degradation levels (B, length, 1), as a laser's % current increase."""
    return (torch.rand(batch, length, 1) + 0.1).cumsum(1)


def test_degradation_gru_shapes_monotone_forecast_and_rollout():
    model = hub.create_model("degradation_gru", **DEGRADATION_TINY)
    x = _paths(4, 5)
    out = model(x)
    assert out.shape == (4, 3) and torch.isfinite(out).all()
    assert (out[:, 0] >= x[:, -1, 0]).all() and (out.diff(dim=1) >= 0).all()  # a degradation path never heals
    assert model.attention_maps(x)["time"].shape == (4, 2, 1, 5)
    assert model.forward_head(model.forward_features(x), pre_logits=True).shape == (4, 16)
    path = model.forecast_path(_paths(2, 9), 7)
    assert path.shape == (2, 7)
    history = _paths(2, 9)
    assert torch.allclose(model.forecast_path(history, 7)[:, :3], model(history[:, -5:]))
    with pytest.raises(DataError, match=r"\(batch, 5, 1\)"):
        model(torch.rand(2, 4, 1))


def test_degradation_gru_backward_reaches_every_parameter():
    model = hub.create_model("degradation_gru", **DEGRADATION_TINY, num_layers=2)
    model(_paths(4, 5)).square().sum().backward()
    assert not params_without_grad(model)


def test_degradation_gru_overfits_eight_windows():
    torch.manual_seed(0)
    model = hub.create_model("degradation_gru", **DEGRADATION_TINY)
    x = _paths(8, 5)
    y = x[:, -1:, 0] + (torch.rand(8, 3) * 2).cumsum(1)
    assert_overfits(model, lambda: torch.nn.functional.mse_loss(model(x), y), steps=200, lr=1e-2, ratio=0.1)


def test_degradation_gru_attention_matches_a_naive_reference():
    """The last GRU state's attention over the states, recomputed in float64 as softmax(q kᵀ / √d) per head."""
    model = hub.create_model("degradation_gru", **DEGRADATION_TINY).double().eval()
    x = _paths(3, 5).double()
    weights = model.attention_maps(x)["time"]  # (B, H, 1, T)
    states, _ = model.gru(model.inputs(x))  # (B, T, D)
    attn = model.attn
    heads, width = attn.num_heads, attn.dim_attn // attn.num_heads
    q = attn.q_proj(states[:, -1:]).view(3, 1, heads, width).transpose(1, 2)
    k = attn.k_proj(states).view(3, 5, heads, width).transpose(1, 2)
    v = attn.v_proj(states).view(3, 5, heads, width).transpose(1, 2)
    naive = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(width), dim=-1)
    assert torch.allclose(weights, naive, atol=1e-10)
    context = attn.out_proj((naive @ v).transpose(1, 2).reshape(3, 1, heads * width))
    assert torch.allclose(model.forward_features(x)[:, :16], context[:, 0], atol=1e-10)


def test_threshold_crossing_and_degradation_windows():
    from timeseries.data import degradation_windows
    from timeseries.models.degradation_gru import threshold_crossing

    hours = np.array([0.0, 250.0, 500.0, 750.0])
    assert threshold_crossing(hours, np.array([0.0, 4.0, 8.0, 12.0]), 10.0) == pytest.approx(625.0)
    assert threshold_crossing(hours, np.array([0.0, 1.0, 2.0, 3.0]), 10.0) == math.inf
    x, y = degradation_windows(np.arange(10.0), 4, 3)
    assert x.shape == (4, 4, 1) and y.shape == (4, 3)
    assert x[1, :, 0].tolist() == [1, 2, 3, 4] and y[1].tolist() == [5, 6, 7]
    with pytest.raises(DataError, match="shorter than window"):
        degradation_windows(np.arange(5.0), 4, 3)


def test_degradation_csv_is_read_and_bad_files_refused(tmp_path):
    from timeseries.io import read_degradation_csv

    good = tmp_path / "laser.csv"
    good.write_text("hours,current_increase_pct\n250,0.5\n500,1.1\n750,1.4\n1000,2.0\n")
    levels, step = read_degradation_csv(good, "current_increase_pct", "hours", 4)
    assert step == 250.0 and levels.tolist() == [0.5, 1.1, 1.4, 2.0]
    with pytest.raises(DataError, match="must go up by 500"):
        read_degradation_csv(good, "current_increase_pct", "hours", 4, step=500.0)
    gap = tmp_path / "gap.csv"
    gap.write_text("hours,current_increase_pct\n250,0.5\n500,1.1\n1000,2.0\n1250,2.4\n")
    with pytest.raises(DataError, match="row 3 has 500"):
        read_degradation_csv(gap, "current_increase_pct", "hours", 4)
    with pytest.raises(DataError, match="missing \\['level'\\]"):
        read_degradation_csv(good, "level", "hours", 4)
    with pytest.raises(DataError, match="fewer than the model's window of 6"):
        read_degradation_csv(good, "current_increase_pct", "hours", 6)


def test_degradation_baseline_extrapolates_each_test_window_linearly(tmp_path, monkeypatch):
    """The degradation kind's classic baseline (issue 67): each test window's least-squares line, continued; exact
    on straight paths, scored with the task's RMSE and MAE, one forecast column per output name."""
    import timeseries.baselines as baselines
    from hub.core.registry import get_dataset_entry

    for unit in range(8):
        hours = np.arange(1, 13) * 250
        (tmp_path / f"unit{unit}.csv").write_text("hours,current_increase_pct\n" + "".join(
            f"{h},{0.002 * (unit + 1) * h:.4f}\n" for h in hours))
    data = get_dataset_entry("degradation_units").builder(root=str(tmp_path), measure="current_increase_pct",
                                                          time_column="hours", window=4, horizon=4)
    monkeypatch.setattr(baselines, "_run_data", lambda run_dir: (data, 0))
    result = baselines.degradation_baseline_on_run_split("run")
    assert result.name == baselines.DEGRADATION_BASELINE and list(result.metrics) == ["test/rmse", "test/mae"]
    assert result.metrics["test/rmse"] < 1e-3  # straight paths are continued exactly (to the CSV's rounding)
    assert list(result.predictions)[1:] == data.output_names and len(result.predictions["window"]) == len(
        data.test_set)
    curved = baselines.linear_extrapolation(np.array([[[0.0], [1.0], [4.0], [9.0]]]), 1)
    assert curved[0, 0] == pytest.approx(11.0)  # the line through 0, 1, 4, 9 (slope 3, mean 3.5) at t = 4


# PULSE (pulse): heart rate from wrist PPG and the accelerometer, fused by cross-attention over heart-rate bins.
PULSE_TINY = {"dim": 8, "depth": 2, "num_heads": 2, "num_bins": 41}


def _ppg_windows(batch: int, bpm: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Prepared windows (B, 5, 200) with a pulse at ``bpm`` (drawn in 60-180) in the PPG and a step rhythm in the
    accelerometer, and the heart rates (B,)."""
    from timeseries.signals import normalised

    generator = torch.Generator().manual_seed(batch)
    bpm = 60 + 120 * torch.rand(batch, generator=generator) if bpm is None else bpm
    t = torch.arange(200) / 25.0
    steps = 90 + 60 * torch.rand(batch, 1, generator=generator)
    ppg = torch.sin(2 * math.pi * bpm[:, None] / 60 * t) + 0.5 * torch.sin(2 * math.pi * steps / 60 * t)
    acc = torch.sin((2 * math.pi * steps / 60 * t)[:, None] + torch.rand(batch, 3, 1, generator=generator) * 6)
    x = torch.cat([ppg[:, None].expand(-1, 2, -1), acc], 1) + 0.2 * torch.randn(batch, 5, 200, generator=generator)
    return normalised(x), bpm


def test_pulse_shapes_bins_and_bad_input():
    model = hub.create_model("pulse", **PULSE_TINY).eval()
    x, _ = _ppg_windows(3)
    out = model(x)
    assert out.shape == (3, 1) and torch.isfinite(out).all() and ((out >= 40) & (out <= 200)).all()
    assert model.bin_logits(x).shape == (3, 41) and model.bpm[1] - model.bpm[0] == pytest.approx(4.0)
    maps = model.attention_maps(x)
    assert maps["cross"].shape == (3, 2, 41, 41) and torch.allclose(maps["cross"].sum(-1), torch.ones(3, 2, 41))
    assert model.forward_head(model.forward_features(x), pre_logits=True).shape == (3, 8)
    loss, pred = model.loss(x, torch.tensor([70.0, 120.0, 150.0]))
    assert loss.ndim == 0 and pred.shape == (3,)
    with pytest.raises(DataError, match=r"\(batch, 5, 200\)"):
        model(torch.rand(2, 3, 200))


def test_pulse_backward_reaches_every_parameter():
    model = hub.create_model("pulse", **PULSE_TINY)
    x, bpm = _ppg_windows(4)
    model.loss(x, bpm)[0].backward()
    assert not params_without_grad(model)


def test_pulse_overfits_eight_windows():
    """The regression output (the bins' mean heart rate) memorises 8 windows: its absolute error falls tenfold."""
    torch.manual_seed(0)
    model = hub.create_model("pulse", **{**PULSE_TINY, "depth": 1}, dropout=0.0)
    x, bpm = _ppg_windows(8)
    assert_overfits(model, lambda: (model(x)[:, 0] - bpm).abs().mean(), steps=60, lr=1e-2, ratio=0.1)


def test_pulse_cross_attention_matches_a_naive_reference():
    """The PPG bins' attention over the accelerometer's, recomputed in float64 as softmax(q kᵀ / √d) per head from
    the shared core's layer's own projections (the core's CrossAttention, tests/unit/test_attention_core.py)."""
    model = hub.create_model("pulse", **PULSE_TINY).double().eval()
    x, _ = _ppg_windows(2)
    x = x.double()
    ppg, acc = x[:, :2], x[:, 2:]
    queries = model.ppg_tokens(torch.cat([ppg, model.ppg_encoder(ppg)], 1)) + model.bin_embedding
    keys = model.acc_tokens(torch.cat([acc, model.acc_encoder(acc)], 1)) + model.bin_embedding
    layer = model.cross
    q, k = layer.attn.q_proj(layer.norm_query(queries)), layer.attn.k_proj(layer.norm_context(keys))
    heads = lambda t: t.view(2, 41, 2, 4).transpose(1, 2)  # noqa: E731  (B, F, 8) -> (B, H, F, 4)
    naive = torch.softmax(heads(q) @ heads(k).transpose(-1, -2) / math.sqrt(4), dim=-1)
    assert torch.allclose(model.attention_maps(x)["cross"], naive, atol=1e-10)


def test_ppg_windows_match_the_reference_count_and_are_normalised():
    from timeseries.signals import prepare_segments, prepare_windows, spectral_baseline, stretch_windows, window_count

    rate, seconds = 125.0, 31.0  # TROIKA's count: floor((31 - 8) / 2) + 1 = 12 windows
    t = np.arange(int(rate * seconds)) / rate
    recording = np.stack([np.sin(2 * np.pi * 1.5 * t)] * 2 + [np.sin(2 * np.pi * 2.5 * t + p) for p in (0, 1, 2)])
    windows = prepare_windows(recording, rate)
    assert windows.shape == (12, 5, 200) == (window_count(recording.shape[1], rate), 5, 200)
    assert np.allclose(windows.std(-1), 1.0, atol=1e-3) and np.allclose(windows.mean(-1), 0.0, atol=0.05)
    assert np.allclose(spectral_baseline(windows), 90.0, atol=1.0)  # 1.5 Hz; the 150-BPM motion peak excluded
    segments = torch.from_numpy(prepare_segments(recording, rate)).float()
    assert segments.shape == (12, 5, 250)
    same = stretch_windows(segments, torch.ones(12)).numpy()
    assert np.abs(same[2:-2] - windows[2:-2]).mean() < 0.1  # the 8 s inside each 10-s segment (edges filtered apart)
    with pytest.raises(DataError, match="shorter than one 8-s window"):
        prepare_windows(recording[:, :500], rate)
    with pytest.raises(DataError, match=r"shape \(5, samples\)"):
        prepare_windows(recording[:3], rate)


def test_ppg_recordings_folder_is_read_split_by_recording_and_refused_when_wrong(tmp_path):
    from timeseries.io import read_ppg_folder

    t = np.arange(125 * 20) / 125.0
    for i in range(3):
        columns = [np.sin(2 * np.pi * (1.2 + 0.1 * i) * t)] * 2 + [np.cos(2 * np.pi * 2.4 * t)] * 3
        rows = "\n".join(",".join(f"{v:.5f}" for v in row) for row in np.stack(columns, 1))
        (tmp_path / f"run{i}.csv").write_text("ppg1,ppg2,acc_x,acc_y,acc_z\n" + rows + "\n")
        (tmp_path / f"run{i}.bpm.csv").write_text("bpm\n" + "\n".join(["72"] * 7) + "\n")
    folder = read_ppg_folder(tmp_path, 125.0)
    assert sorted(folder) == ["run0", "run1", "run2"] and folder["run0"][0].shape == (5, 2500)
    data = get_dataset_entry("ppg_recordings").builder(root=str(tmp_path), stretch=0.0)
    data.setup()
    recordings = data.info["recordings"]
    assert sorted(recordings["train"] + recordings["val"] + recordings["test"]) == ["run0", "run1", "run2"]
    assert len(data.test_set) == 7 and data.test_set.tensors[0].shape == (7, 5, 200)
    assert data.input_spec["kind"] == "ppg_series" and data.groups["test"] == recordings["test"] * 7
    (tmp_path / "run2.bpm.csv").write_text("bpm\n72\n72\n")
    with pytest.raises(DataError, match="has 2 heart rates; run2.csv"):
        read_ppg_folder(tmp_path, 125.0)
    (tmp_path / "run2.bpm.csv").unlink()
    with pytest.raises(DataError, match="no reference heart rates"):
        read_ppg_folder(tmp_path, 125.0)


def test_heart_rate_tracking_ignores_one_outlier_window():
    from timeseries.signals import track

    bpm = np.arange(40.0, 201.0)
    truth = np.array([100.0, 101.0, 102.0, 180.0, 103.0, 104.0])  # the fourth window's peak is a motion artefact
    log_probs = -0.5 * ((bpm[None] - truth[:, None]) / 2.0) ** 2
    tracked = track(log_probs, bpm)
    assert np.abs(tracked - [100, 101, 102, 102, 103, 104]).max() < 1.5
