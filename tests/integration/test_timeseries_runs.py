"""Time-series training and fine-tuning runs end to end on synthetic sensor units and traffic folders (no dataset):
bare families with their baselines, cross-fitted intervals, a run fine-tuned then predicted; a traffic run whose
predictor is its baseline or a blend predicts with it (the kept profile refused once tampered with)."""
import numpy as np
import pytest

import hub
from hub.cli import main
from hub.run.train import train
from tests.unit.test_timeseries import _sensor_folder, _traffic_folder


def test_train_finetune_and_predict_a_user_traffic_folder(tmp_path, capsys):
    """TESTAM on the user's road graph; finetuned from the run on another folder; predict one line per sensor."""

    root = _traffic_folder(tmp_path / "t")
    recipe = tmp_path / "testam.yaml"
    recipe.write_text(f"model: {{name: testam, args: {{dim: 8, num_heads: 2}}}}\n"
                      f"data: {{name: traffic_csv, args: {{root: {root}, batch_size: 32}}}}\n"
                      f"trainer: {{max_epochs: 1, accelerator: cpu, limit_train_batches: 3}}\n"
                      f"output_dir: {tmp_path / 'runs'}\n")
    run = train(str(recipe), progress=False)
    card = hub.model_card(str(run))
    assert card.input_spec["sensors"][0] == "s0" and card.input_spec["graph"] == "adjacency.csv"
    from hub.core.cards import absolute_paths, read_card
    from timeseries.io import read_adjacency_csv, road_graph  # the card carries who neighbours whom, not a path

    assert (road_graph(card.model_args["graph"]) == (read_adjacency_csv(root / "adjacency.csv") != 0)).all()
    assert absolute_paths(read_card(run / "card.json").to_dict()) == []  # though the folder was given absolute
    other = _traffic_folder(tmp_path / "other", steps=4 * 288)
    assert main(["finetune", str(run), "--data", str(other), "--cv-folds", "0", "trainer.max_epochs=1",
                 "trainer.limit_train_batches=2",
                 "--output-dir", str(tmp_path / "ft"), "--no-progress"]) == 0
    finetuned = capsys.readouterr().out.split("run folder: ")[1].split()[0]
    assert main(["predict", finetuned, str(other / "speeds.csv"), "--no-progress"]) == 0
    header, *lines = capsys.readouterr().out.strip().splitlines()
    names = [f"speed_{5 * h}min" for h in range(1, 13)]  # the folder's 288 steps a day
    columns = [c for n in names for c in (n, f"{n}_lower_90", f"{n}_upper_90")]
    assert header.split() == ["file", *columns, "ood_score", "ood"]  # the run's intervals and OOD statistics
    assert [line.split()[0].rsplit(":", 1)[1] for line in lines] == ["s0", "s1", "s2", "s3"]
    assert all(len(line.split()) == 1 + 3 * 12 + 2 for line in lines), lines
    assert main(["explain", finetuned, "1", "--out", str(tmp_path / "fig")]) == 0  # test sample 1: attribution
    assert (tmp_path / "fig" / "sample1_explain.png").stat().st_size > 1000
    assert np.load(tmp_path / "fig" / "sample1_explain.npy").shape == (12, 4)  # input steps x the folder's sensors


def test_cli_trains_a_rul_family_from_scratch_on_any_sensor_names(tmp_path, capsys, caplog):
    import csv
    import json
    from pathlib import Path

    folder = _sensor_folder(tmp_path / "units")
    assert main(["finetune", "rul_attention", "--data", str(folder), "--output-dir", str(tmp_path / "runs"),
                 "trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress", "--cv-folds", "0"]) == 0
    out = capsys.readouterr().out
    assert "sensor(s) ['flat'] have fewer than 3 distinct values" in caplog.text  # reported, then dropped
    run = Path(out.split("run folder: ")[1].split()[0])
    card = hub.model_card(str(run))
    assert card.input_spec["sensors"] == ["temp_a", "pressure_b", "vib c"] and card.model_args["num_sensors"] == 3
    assert card.data["constant_sensors_dropped"] == ["flat"]
    trainer = card.recipe["resolved"]["trainer"]  # the FD001 recipe's fixed schedule, its last epoch tested
    assert trainer["test_checkpoint"] == "last" and trainer["early_stopping"]["patience"] is None
    assert card.model_args["dropout"] == 0.0
    kept = json.loads((run / "metrics.json").read_text())["baseline"]
    assert kept["name"] == "HistGradientBoosting on window statistics" and kept["metric"] == "test/rmse"
    assert list(kept["test"]) == ["test/rmse", "test/mae", "test/score"]
    verdict = "is at least as good as HistGradientBoosting" if kept["model_is_better"] else "WARNING: HistGradient"
    assert verdict in out
    rows = list(csv.DictReader(open(run / kept["predictions"])))
    (test_unit,) = {r["unit"] for r in rows}  # 8 units: one held out for test
    cycles = len((folder / f"{test_unit}.csv").read_text().splitlines()) - 1
    assert len(rows) == cycles - 29 and [int(r["cycle"]) for r in rows] == list(range(30, cycles + 1))
    rmse = np.sqrt(np.mean([(float(r["target"]) - float(r["prediction"])) ** 2 for r in rows]))
    assert rmse == pytest.approx(kept["test"]["test/rmse"], rel=1e-6)


def test_cli_trains_a_traffic_family_from_scratch_with_its_baseline(tmp_path, capsys, monkeypatch):
    import csv
    import json
    from pathlib import Path

    from hub.core.cards import absolute_paths

    monkeypatch.chdir(tmp_path)  # the folder named by its absolute path under the working folder: the card holds
    _traffic_folder(tmp_path / "t")  # it relative (hub.core.cards.portable_data_path)
    assert main(["finetune", "traffic_gru", "--data", str(tmp_path / "t"), "--output-dir", "runs",
                 "trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress", "--cv-folds", "0"]) == 0
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[1].split()[0])
    kept = json.loads((run / "metrics.json").read_text())["baseline"]
    assert kept["name"] in ("last value", "historical average") and kept["metric"] == "test/mae"
    other = "historical average" if kept["name"] == "last value" else "last value"
    assert f"{other} test/mae_15" in kept["test"] and "test/rmse_60" in kept["test"]
    assert ("is at least as good as" if kept["model_is_better"] else f"WARNING: {kept['name']} beats") in out
    rows = list(csv.DictReader(open(run / kept["predictions"])))
    samples = json.loads((run / "card.json").read_text())["data"]["samples"]
    assert len(rows) == samples[2] * 4 and list(rows[0])[:3] == ["row", "sensor", "speed_5min"]
    card = json.loads((run / "card.json").read_text())
    assert card["input_spec"]["graph"] == "adjacency.csv" and absolute_paths(card) == []


def test_cross_fitted_intervals_pool_the_held_out_units_of_more_runs_and_leave_the_weights(tmp_path):
    """hub.uncertainty.cross_conformal on a run trained from a user's sensor folder: two more runs of its recipe, each
    holding out another quarter of the units, give the residuals its intervals are fitted on; its weights stay as they
    were."""
    import json

    from hub.recipe import card_data
    from hub.uncertainty import cross_conformal

    folder = _sensor_folder(tmp_path / "units", units=12)
    assert main(["finetune", "rul_attention", "--data", str(folder), "--output-dir", str(tmp_path / "runs"),
                 "trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress", "--cv-folds", "0"]) == 0
    (run,) = (tmp_path / "runs").glob("*/*")
    weights = (run / "model.safetensors").read_bytes()
    conformal = cross_conformal.fit_card(str(run), runs=2, progress=False)["conformal"]
    held_out = 0
    for seed in (1, 2):
        data = card_data(hub.model_card(str(run)), ["data.args.val_fraction=0.25", f"data.args.split_seed={seed}"])
        data.setup("fit")
        held_out += len(data.val_set)
    assert [sum(points) for points in conformal["val_points_per_bin"]] == [held_out] * 10  # one per output
    assert "2 more runs" in conformal["fitted_on"] and "split_seed=1..2" in conformal["fitted_on"]
    assert hub.model_card(str(run)).calibration["conformal"] == json.loads(json.dumps(conformal))  # kept in the card
    assert (run / "model.safetensors").read_bytes() == weights
    hub.load(str(run))  # the card still matches its weights' sha256


def test_traffic_folder_chooses_by_folds_of_blocks_of_time_and_refits_on_every_sample(tmp_path, capsys):
    """Issue 68 on a traffic folder (one road over time): 3 fold runs, each validating on blocks of time before the
    test split and trained on the samples sharing no time step with them; the last value and the historical
    average out of fold; the refit trains on every sample and predicts with the choice."""
    import csv
    import json
    from pathlib import Path

    root = _traffic_folder(tmp_path / "t")
    assert main(["finetune", "traffic_gru", "--data", str(root), "--output-dir", str(tmp_path / "runs"),
                 "--cv-folds", "3", "trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress"]) == 0
    out = capsys.readouterr().out
    run = Path(out.split("run folder: ")[1].split()[0])
    entry = json.loads((run / "metrics.json").read_text())["predictor"]
    assert entry["selection"] == "cross-validation"
    assert set(entry["baselines"]) == {"last value", "historical average"}
    card = hub.model_card(str(run))
    first = hub.model_card(str(run.parent / entry["refit"]["from"])).data["samples"]
    assert card.data["samples"][0] == sum(first) and "refit" in card.data["split"]
    held = 0
    for name in entry["refit"]["folds"]:
        train, val, test = hub.model_card(str(run.parent / name)).data["samples"]
        assert test == first[2] and train + val < first[0] + first[1]  # purged: the neighbours of the held block
        held += val
    assert held == first[0] + first[1]  # every sample before the test split validated once
    assert main(["predict", str(run), str(root / "speeds.csv"), "--out", str(tmp_path / "f.csv")]) == 0
    assert len(list(csv.DictReader(open(tmp_path / "f.csv")))) == 4  # a row per sensor


def _traffic_run(tmp_path, capsys, predictor: str):
    """``finetune traffic_gru`` for one epoch on a synthetic folder with ``--predictor``: the run folder, its
    ``metrics.json`` and the folder's speeds file."""
    import json
    from pathlib import Path

    root = _traffic_folder(tmp_path / "t")
    assert main(["finetune", "traffic_gru", "--data", str(root), "--output-dir", str(tmp_path / "runs"),
                 "--predictor", predictor, "--cv-folds", "0", "trainer.max_epochs=1", "trainer.accelerator=cpu",
                 "--no-progress"]) == 0
    run = Path(capsys.readouterr().out.split("run folder: ")[1].split()[0])
    return run, json.loads((run / "metrics.json").read_text()), root / "speeds.csv"


def _forecast_rows(path) -> np.ndarray:
    """A predict CSV's forecasts, its rows checked to be the four sensors: (4, 12)."""
    import csv

    rows = list(csv.DictReader(open(path)))
    assert [r["file"].rsplit(":", 1)[1] for r in rows] == ["s0", "s1", "s2", "s3"]
    return np.array([[float(r[f"speed_{5 * h}min"]) for h in range(1, 13)] for r in rows])


def test_traffic_run_kept_with_its_baseline_predicts_the_saved_profile_and_refuses_it_tampered(tmp_path, capsys):
    """--predictor baseline: metrics.json and the card record the predictor with each member's validation and test
    metrics (masked as the run's: the model's test/mae is the run's), predict gives the kept time-of-day profile's
    forecast with intervals from the baseline's residuals, export names the baseline, a tampered file is refused."""
    from hub.core.weights import sha256_bytes
    from hub.predictor import load_arrays
    from timeseries.baselines import TRAFFIC_ARRAYS, TRAFFIC_METHODS

    run, summary, speeds = _traffic_run(tmp_path, capsys, "baseline")
    entry = summary["predictor"]
    assert entry["asked"] == "baseline" and entry["chosen"] == "baseline" and entry["weight"] == 0.0
    assert entry["metric"] == "val/rmse" and set(entry["validation"]) == {"model", "baseline", "blend"}
    assert set(entry["test"]) == {"model", "baseline", "blend", "chosen"}
    assert entry["test"]["model"]["test/mae"] == pytest.approx(summary["test"]["test/mae"], rel=1e-6)
    kept = summary["baseline"]
    assert entry["test"]["baseline"]["test/mae"] == pytest.approx(kept["test"]["test/mae"], abs=1e-9)
    card = hub.model_card(str(run))
    assert card.predictor == entry and entry["baseline"] == {
        "name": kept["name"], "file": "baseline.safetensors",
        "sha256": sha256_bytes((run / "baseline.safetensors").read_bytes())}

    assert main(["predict", str(run), str(speeds), "--out", str(tmp_path / "p.csv")]) == 0
    got = _forecast_rows(tmp_path / "p.csv")
    arrays = load_arrays(run / "baseline.safetensors", entry["baseline"]["sha256"], TRAFFIC_ARRAYS)
    assert TRAFFIC_METHODS[int(arrays["method"][0])].replace("_", " ") == kept["name"]
    rows = len(speeds.read_text().splitlines()) - 1  # the folder: from midnight, a step every 5 min, 288 a day
    profile = arrays["profile"][(rows + np.arange(12)) % 288].T  # the 12 slots after the last row's: (4, 12)
    assert kept["name"] == "historical average"  # the folder's days repeat
    np.testing.assert_allclose(got, profile, atol=1e-4)
    conformal = card.calibration["conformal"]
    assert conformal["fitted_on"] == "validation split, residuals of the predictor (baseline)"
    assert len(conformal["half_width"]["0.9"]) == 12

    capsys.readouterr()  # the kept profile has no exported form: export names it, --model-only works
    assert main(["export", str(run), "--format", "onnx", "--out", str(tmp_path / "onnx")]) == 2
    err = capsys.readouterr().err
    assert f"({kept['name']}, inputs of kind 'traffic_series')" in err and "--model-only" in err
    assert main(["export", str(run), "--format", "onnx", "--out", str(tmp_path / "onnx"), "--model-only"]) == 0

    data = bytearray((run / "baseline.safetensors").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (run / "baseline.safetensors").write_bytes(bytes(data))
    capsys.readouterr()
    assert main(["predict", str(run), str(speeds)]) == 2
    err = capsys.readouterr().err
    assert str(run / "baseline.safetensors") in err and sha256_bytes(bytes(data)) in err


def test_forced_traffic_blend_predicts_the_weighted_mean_of_both_forecasts(tmp_path, capsys):
    """--predictor blend: predict gives ``w * model + (1 - w) * baseline`` of the model's forecast and the kept
    baseline's, in mph, with intervals fitted on the blend's validation residuals."""
    import csv

    import torch

    from hub.kinds import kind_of, predict_logits

    run, summary, speeds = _traffic_run(tmp_path, capsys, "blend")
    entry = summary["predictor"]
    assert entry["chosen"] == "blend" and 0 < entry["weight"] < 1 and entry["weight"] == entry["blend_weight"]
    assert main(["predict", str(run), str(speeds), "--out", str(tmp_path / "p.csv")]) == 0
    got = _forecast_rows(tmp_path / "p.csv")
    model = hub.load(str(run))
    card = model.pretrained_cfg
    with torch.inference_mode():
        ((_, ours),) = list(predict_logits(card, model, [str(speeds)], 64))  # (4, 12)
    theirs = kind_of(card).baseline_outputs(card, str(speeds))
    assert not np.allclose(ours.numpy(), theirs, atol=0.1)
    np.testing.assert_allclose(got, entry["weight"] * ours.numpy() + (1 - entry["weight"]) * theirs, atol=1e-4)
    conformal = card.calibration["conformal"]  # centred on the blend's forecasts, each of its bin's half width
    assert conformal["fitted_on"] == "validation split, residuals of the predictor (blend)"
    assert summary["intervals"]["half_width"] == conformal["half_width"]
    rows = list(csv.DictReader(open(tmp_path / "p.csv")))
    for row in rows:
        for h, widths, edges in zip(range(1, 13), conformal["half_width"]["0.9"], conformal["bin_edges"]):
            value, upper = float(row[f"speed_{5 * h}min"]), float(row[f"speed_{5 * h}min_upper_90"])
            assert upper - value == pytest.approx(widths[int(np.searchsorted(edges, value, side="right"))], abs=1e-4)
    assert max(w for widths in conformal["half_width"]["0.9"] for w in widths) > 0.1

def test_finetune_pulse_from_scratch_on_a_recordings_folder_beside_the_spectral_baseline(tmp_path, capsys):
    """``finetune pulse --data FOLDER`` on three short TROIKA recordings written as a user's CSVs: one epoch, the
    spectral baseline on the same test recording, then predict with the run."""
    from tests.integration.test_timeseries_data import write_troika_csvs

    folder = write_troika_csvs(tmp_path / "recordings")
    assert main(["finetune", "pulse", "--data", str(folder), "--output-dir", str(tmp_path / "runs"),
                 "trainer.max_epochs=1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "spectral peak" in out
    run = out.split("run folder: ")[1].split()[0]
    card = hub.model_card(run)
    assert card.input_spec["kind"] == "ppg_series" and card.data["name"] == "ppg_recordings"
    assert main(["predict", run, str(folder / "05_TYPE02.csv"), "--no-progress"]) == 0
    assert sum("05_TYPE02.csv:" in line for line in capsys.readouterr().out.splitlines()) == 17
