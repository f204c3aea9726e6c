"""``hub.transforms(name)`` on the public raw files of the shared datasets: raw data in gives the card's test
metric out (of the shipped weights: the card's first seed), for every shipped tag of the kinds covered here."""
from __future__ import annotations

import pandas as pd
import pytest
import torch
from sklearn.metrics import accuracy_score, roc_auc_score

import hub
from hub.data import data_dir
from hub.errors import DatasetUnavailable
from tests.unit.test_transforms import assert_reproduces


@pytest.mark.parametrize("name", ["mlp.adult", "tabm.adult", "tab_transformer.adult", "tabr.adult"])
def test_raw_adult_test_file_reproduces_the_card(name):
    from tabular.data import ADULT_COLUMNS

    path = data_dir() / "adult" / "adult.test"
    if not path.is_file():
        raise DatasetUnavailable("adult", f"{path} not found")
    # as adult.names documents the file: no header, '?' for unknown, labels written '>50K.' in the test file
    rows = pd.read_csv(path, header=None, names=ADULT_COLUMNS, skiprows=1, skipinitialspace=True, na_values=["?"])
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    with torch.no_grad():
        proba = torch.softmax(model(**prepare(rows.drop(columns="income"))), -1)[..., 1].numpy()
    proba = proba.mean(1) if proba.ndim == 2 else proba  # TabM: the mean over its k members' probabilities
    truth = (rows["income"].str.rstrip(".") == ">50K").to_numpy()
    assert_reproduces(card, "test/auroc", roc_auc_score(truth, proba))
    assert_reproduces(card, "test/acc", accuracy_score(truth, proba > 0.5))


def _raw_file(folder: str, file: str):
    path = data_dir() / folder / file
    if not path.is_file():
        raise DatasetUnavailable(folder, f"{path} not found")
    return path


def test_raw_cmapss_test_engines_reproduce_the_rul_card():
    import numpy as np

    name = "rul_attention.fd001"
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    # as the C-MAPSS readme documents the files: whitespace-separated, no header, 26 columns
    columns = ["unit", "cycle", "setting1", "setting2", "setting3", *(f"s{i}" for i in range(1, 22))]
    rows = pd.read_csv(_raw_file("cmapss", "test_FD001.txt"), sep=r"\s+", header=None, names=columns)
    true_rul = np.loadtxt(_raw_file("cmapss", "RUL_FD001.txt"))  # after each test engine's last cycle, by unit
    with torch.no_grad():
        rul = model(torch.stack([prepare(engine) for _, engine in rows.groupby("unit")]))[:, 0].numpy()
    # the card's test split: the last window of each official test engine, its true RUL capped as in training
    capped = np.minimum(true_rul, card.data["args"]["test_rul_cap"])
    assert_reproduces(card, "test/rmse", float(np.sqrt(np.mean((rul - capped) ** 2))))


def test_raw_los_loop_speeds_reproduce_the_testam_card():
    import numpy as np

    from timeseries.tasks import MaskedForecastError

    name = "testam.los_loop"
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    speeds = pd.read_csv(_raw_file("los_loop", "los_speed.csv"))  # a header of sensor ids, one row per 5 minutes
    # Los-loop holds no timestamps: its rows are consecutive five-minute steps, the first at midnight
    speeds.index = pd.date_range("2012-03-01", periods=len(speeds), freq="5min")
    args = card.data["args"]
    steps_in, steps_out = args["input_steps"], args["output_steps"]
    # the card's chronological split: the last test_fraction of the samples (steps_in in, steps_out out)
    starts = np.arange(len(speeds) - steps_in - steps_out + 1)
    test = starts[len(starts) - round(len(starts) * args["test_fraction"]):]
    mae = MaskedForecastError("mae")
    with torch.no_grad():
        for batch in np.array_split(test, 4):
            forecast = model(torch.stack([prepare(speeds.iloc[s:s + steps_in]) for s in batch]))  # (B, T_out, N)
            truth = np.stack([speeds.iloc[s + steps_in:s + steps_in + steps_out].to_numpy() for s in batch])
            mae.update(forecast, torch.from_numpy(truth).float())
    assert_reproduces(card, "test/mae", float(mae.compute()))


def test_raw_metabric_rows_reproduce_the_survival_fusion_card():
    import h5py

    from medical.survival_metrics import harrell_c

    name = "survival_fusion.metabric"
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    # the DeepSurv file's published test split: x (n, 9) as PROVENANCE.md documents it (4 genes, then 5 clinical)
    with h5py.File(_raw_file("deepsurv", "metabric_IHC4_clinical_train_test.h5"), "r") as f:
        x, time, event = (f["test"][key][:] for key in ("x", "t", "e"))
    with torch.no_grad():
        risk = model(**prepare(x)).numpy()
    assert_reproduces(card, "test/cindex", harrell_c(time, event, risk))
    named = pd.DataFrame(x, columns=card.input_spec["genes"] + card.input_spec["clinical"])
    assert all(torch.equal(a, b) for a, b in zip(prepare(named).values(), prepare(x).values()))


def test_raw_physionet_records_reproduce_the_tfcam_card():
    import numpy as np
    from torch.utils.data import default_collate

    from hub.data import stratified_split

    name = "tfcam.physionet2012"
    card, model, prepare = hub.model_card(name), hub.load(name), hub.transforms(name)
    outcomes = pd.read_csv(_raw_file("physionet2012", "Outcomes-a.txt"), dtype={"RecordID": str})
    outcomes = outcomes.sort_values("RecordID").reset_index(drop=True)
    died = outcomes["In-hospital_death"].to_numpy()
    # the card's split: fold `fold` of 5 folds stratified by outcome (seed 2012) over the records in id order
    test = stratified_split(died, (0.2,) * 5, seed=2012)[card.data["args"]["fold"]]
    records = [data_dir() / "physionet2012" / "set-a" / f"{outcomes['RecordID'][i]}.txt" for i in test]
    with torch.no_grad():
        proba = torch.softmax(model(**default_collate([prepare(r) for r in records])), -1)[:, 1].numpy()
    assert len(records) == card.data["sizes"][2] and np.isfinite(proba).all()
    assert_reproduces(card, "test/auroc", roc_auc_score(died[test], proba))
