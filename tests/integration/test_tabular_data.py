"""Tabular models and data: shapes, gradients, tiny overfit, TabR's retrieval (permutation invariance, a row
never retrieves itself), the preprocessor's JSON round trip and its errors, the datasets, the CLI fine-tune on
an unseen CSV and predict to proba_<class> columns, and the shipped weights reproducing their cards."""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import hub
from hub.errors import DataError


def test_shared_sets_split_and_columns():
    from tabular.data import adult, california_housing, churn_modelling

    sizes = {}
    for builder in (adult, california_housing, churn_modelling):
        data = builder()
        data.setup()
        sizes[builder.__name__] = (data.task, data.info["sizes"], data.preprocessor.categorical)
    assert sizes["adult"][1][2] == 16281 and sum(sizes["adult"][1][:2]) == 32561
    assert sizes["adult"][2] == ["workclass", "education", "marital_status", "occupation", "relationship", "race",
                                 "sex", "native_country"]
    assert sizes["california_housing"][0] == "regression" and sum(sizes["california_housing"][1]) == 20640
    assert sizes["churn_modelling"][2] == ["Geography", "Gender"] and sum(sizes["churn_modelling"][1]) == 10000


@pytest.mark.parametrize("name", ["tabr.adult", "tab_transformer.adult", "tabm.adult", "mlp.adult"])
def test_shipped_weights_reproduce_their_card_and_predict_raw_rows(name, tmp_path):
    from hub.cli import main
    from hub.run.evaluate import evaluate
    from tabular.data import ADULT_COLUMNS, data_file

    card = hub.model_card(name)
    assert card.local_file.stat().st_size < 4_000_000
    metrics = evaluate(name, progress=False)
    for key in ("test/auroc", "test/acc"):
        assert metrics[key] == pytest.approx(card.metrics[key]["values"][0], abs=1e-4)
    raw = pd.read_csv(data_file("adult.test"), header=None, names=ADULT_COLUMNS, skipinitialspace=True, skiprows=1,
                      nrows=5).drop(columns="income")  # raw rows, '?' and all: the card's preprocessor applies
    raw.to_csv(tmp_path / "rows.csv", index=False)
    assert main(["predict", name, "--data", str(tmp_path / "rows.csv"), "--out", str(tmp_path / "p.csv")]) == 0
    header = next(csv.reader(open(tmp_path / "p.csv")))
    assert header == ["row", "prediction", "proba_<=50K", "proba_>50K", *(["ood_score", "ood"] if card.ood else [])]


def test_explain_column_attention_and_retrieved_rows(tmp_path, capsys):
    from hub.cli import main
    from tabular.data import ADULT_COLUMNS, data_file

    test_rows = data_file("adult.test")  # first, so a missing Adult skips (tests/conftest.py) before the CLI
    assert main(["explain", "tab_transformer.adult", "2", "5", "--out", str(tmp_path)]) == 0
    figure = Path(capsys.readouterr().out.strip().splitlines()[-1])
    assert figure == tmp_path / "row5_explain.png" and figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert np.load(figure.with_suffix(".npy")).shape == (8, 8)  # the attention between adult's 8 categorical columns
    assert json.loads(figure.with_suffix(".json").read_text())["method"].startswith("TabTransformer attention")
    raw = pd.read_csv(test_rows, header=None, names=ADULT_COLUMNS, skipinitialspace=True, skiprows=1,
                      nrows=3).drop(columns="income")
    raw.to_csv(tmp_path / "rows.csv", index=False)
    assert main(["explain", "tabr.adult", "1", "3", "--data", str(tmp_path / "rows.csv"), "--out", str(tmp_path)]) == 0
    model = hub.load("tabr.adult")
    for row in ("1", "3"):
        record = json.loads((tmp_path / f"row{row}_explain.json").read_text())
        weights = [r["weight"] for r in record["retrieved"]]
        assert len(weights) == model.context_size and sum(weights) == pytest.approx(1.0, abs=1e-4)
        assert {r["training_label"] for r in record["retrieved"]} <= {"<=50K", ">50K"}
    assert main(["explain", "tabr.adult", "9", "--data", str(tmp_path / "rows.csv"), "--out", str(tmp_path)]) == 2
    assert "row numbers [9] are outside" in capsys.readouterr().err
    assert main(["explain", "mlp.adult", "1", "--out", str(tmp_path)]) == 0  # no attention: feature ablation
    assert "feature ablation (Captum)" in json.loads((tmp_path / "row1_explain.json").read_text())["method"]


def test_tabr_recipe_run_ships_its_training_rows_as_candidates(tmp_path):
    from hub.run.train import train
    from tabular.data import adult

    recipe = Path(__file__).parents[2] / "recipes" / "tabular" / "tabr_adult.yaml"
    run = train(str(recipe), ["model.args.dim=16", "trainer.max_epochs=1", "trainer.limit_train_batches=2",
                              "trainer.limit_val_batches=1", f"output_dir={tmp_path}"], progress=False)
    data = adult(batch_size=1024, split_seed=0, scaling="quantile")
    data.setup()
    model = hub.load(str(run))
    assert torch.equal(model.cand_y, data.train_set.y.float())
    assert torch.equal(model.cand_num, data.train_set.x_num) and torch.equal(model.cand_cat, data.train_set.x_cat.int())


def test_semi_supervised_recipe_pretrains_once_before_the_first_epoch(tmp_path):
    from hub.run.train import train

    recipe = Path(__file__).parents[2] / "recipes" / "tabular" / "tab_transformer_adult_semi.yaml"
    run = train(str(recipe), ["data.args.pretrain_epochs=2", "trainer.max_epochs=1", "trainer.limit_train_batches=2",
                              "trainer.limit_val_batches=2", f"output_dir={tmp_path}"], progress=False)
    card = json.loads((run / "card.json").read_text())
    assert len(card["data"]["pretrain_loss"]) == 2 and card["data"]["unlabelled_train_rows"] > 0
    with pytest.raises(DataError, match="only tab_transformer has the paper's pre-training"):
        train(str(recipe), ["model.name=mlp", "model.args={}", f"output_dir={tmp_path / 'mlp'}"], progress=False)
    assert not (tmp_path / "mlp").exists()  # refused before a run folder is made


def test_semi_supervised_setting_keeps_a_share_of_labels_and_pretrains_on_every_row():
    from types import SimpleNamespace

    from tabular.data import adult

    full, semi = adult(label_fraction=1.0), adult(label_fraction=0.05, pretrain_epochs=1, batch_size=512)
    full.setup(), semi.setup()
    n = len(full.train_set)
    assert len(semi.train_set) == pytest.approx(0.05 * n, abs=2)
    assert semi.info["unlabelled_train_rows"] == n - len(semi.train_set)
    assert len(semi.pretrain_x_cat) == n and len(semi.test_set) == len(full.test_set) and full.pretrain_x_cat is None
    assert semi.train_set.y.float().mean().item() == pytest.approx(full.train_set.y.float().mean().item(), abs=0.01)
    dims = {k: v for k, v in semi.model_args().items() if k != "num_candidates"}  # TabR's only
    model = hub.create_model("tab_transformer", dim=8, depth=1, num_heads=2, **dims)
    before = model.cat_embed.embed.weight.detach().clone()
    assert full.callbacks(model) == [] and len(semi.callbacks(model)) == 1
    pretraining = semi.callbacks(model)[0]
    pretraining.on_fit_start(SimpleNamespace(global_step=0, datamodule=semi), SimpleNamespace(plain_model=model))
    assert len(semi.info["pretrain_loss"]) == 1 and not torch.equal(before, model.cat_embed.embed.weight)
    after = model.cat_embed.embed.weight.detach().clone()
    pretraining.on_fit_start(SimpleNamespace(global_step=5, datamodule=semi), SimpleNamespace(plain_model=model))
    assert torch.equal(after, model.cat_embed.embed.weight)  # a resumed run keeps its checkpoint's weights
    with pytest.raises(DataError, match="only tab_transformer has the paper's pre-training"):
        semi.callbacks(hub.create_model("mlp", **dims))
    with pytest.raises(DataError, match="label_fraction"):
        adult(label_fraction=0.0)


def test_carte_tag_reproduces_its_card_predicts_raw_rows_and_reads_the_carte_tables(tmp_path):
    """carte.wine_pl (issue 67): its weights give the card's seed-0 test RMSE on the card's split, predict raw
    parquet rows (text cells embedded, a number in its column's scale), and the four CARTE tables load with their
    configs' targets and tasks, text columns kept as text."""
    from hub.cli import main
    from hub.run.evaluate import evaluate
    from tabular.data import CARTE_TABLES, carte_table, text_columns

    card = hub.model_card("carte.wine_pl")
    metrics = evaluate("carte.wine_pl", progress=False)
    assert metrics["test/rmse"] == pytest.approx(card.metrics["test/rmse"]["values"][0], abs=1e-4)
    frame, target, task = carte_table("wine_pl")
    frame.drop(columns=target).head(6).to_csv(tmp_path / "rows.csv", index=False)
    assert main(["predict", "carte.wine_pl", "--data", str(tmp_path / "rows.csv"), "--out",
                 str(tmp_path / "p.csv")]) == 0
    rows = list(csv.DictReader(open(tmp_path / "p.csv")))
    assert len(rows) == 6 and all(1.0 < float(r["price"]) < 4.5 for r in rows)  # log10 prices of the table
    found = {name: carte_table(name)[1:] for name in CARTE_TABLES}
    assert found == {"wine_pl": ("price", "regression"), "wine_vivino_price": ("Price", "regression"),
                     "wine_dot_com_prices": ("Prices", "regression"), "spotify": ("popularity", "binary")}
    assert "Year" in text_columns(carte_table("wine_vivino_price")[0])
