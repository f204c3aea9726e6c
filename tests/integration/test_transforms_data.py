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
