"""Time-series training and fine-tuning runs end to end on synthetic sensor units and traffic folders (no dataset):
bare families with their baselines, cross-fitted intervals, a run fine-tuned then predicted."""
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
    assert main(["finetune", str(run), "--data", str(other), "trainer.max_epochs=1", "trainer.limit_train_batches=2",
                 "--output-dir", str(tmp_path / "ft"), "--no-progress"]) == 0
    finetuned = capsys.readouterr().out.split("run folder: ")[1].split()[0]
    assert main(["predict", finetuned, str(other / "speeds.csv"), "--no-progress"]) == 0
    header, *lines = capsys.readouterr().out.strip().splitlines()
    names = [f"speed_{5 * h}min" for h in range(1, 13)]  # the folder's 288 steps a day
    columns = [c for n in names for c in (n, f"{n}_lower_90", f"{n}_upper_90")]
    assert header.split() == ["file", *columns, "ood_score", "ood"]  # the run's intervals and OOD statistics
    assert [line.split()[0].rsplit(":", 1)[1] for line in lines] == ["s0", "s1", "s2", "s3"]
    assert all(len(line.split()) == 1 + 3 * 12 + 2 for line in lines), lines
    assert main(["explain", finetuned, "val", "--out", str(tmp_path / "fig")]) == 0  # TESTAM's routing
    assert (tmp_path / "fig" / "routing_val.png").stat().st_size > 1000


def test_cli_trains_a_rul_family_from_scratch_on_any_sensor_names(tmp_path, capsys, caplog):
    import csv
    import json
    from pathlib import Path

    folder = _sensor_folder(tmp_path / "units")
    assert main(["finetune", "rul_attention", "--data", str(folder), "--output-dir", str(tmp_path / "runs"),
                 "trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress"]) == 0
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
                 "trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress"]) == 0
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
                 "trainer.max_epochs=1", "trainer.accelerator=cpu", "--no-progress"]) == 0
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
