"""Tabular models and data: shapes, gradients, tiny overfit, TabR's retrieval (permutation invariance, a row
never retrieves itself), the preprocessor's JSON round trip and its errors, the datasets and the shipped weights
reproducing their cards (the CLI fine-tune runs: tests/integration/test_tabular_runs.py)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

import hub
from hub.errors import DataError, HubError
from hub.tasks import create_task
from hub.testing import assert_overfits, params_without_grad
from tabular.io import TabularPreprocessor, read_table

DIMS = dict(num_numeric=3, cat_cardinalities=[4, 5])


_TT = dict(dim=16, depth=1, num_heads=2, dropout=0.0, mlp_dropout=0.0)


TINY = {  # test id -> (family, tiny arguments)
    "mlp": ("mlp", dict(hidden=16, depth=2, dropout=0.0)), "tabm": ("tabm", dict(hidden=16, depth=2, k=4, dropout=0.0)),
    "tab_transformer": ("tab_transformer", _TT),
    "tab_transformer_periodic": ("tab_transformer", dict(_TT, numeric_embedding="periodic", num_embed_dim=4)),
    "tab_transformer_periodic_full": ("tab_transformer", dict(_TT, numeric_embedding="periodic_full", num_embed_dim=4)),
    "tabr": ("tabr", dict(dim=16, context_size=3, num_candidates=8, dropout=0.0))}


def _batch(n=8, classes=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x_num, x_cat = torch.randn(n, 3, generator=g), torch.randint(0, 4, (n, 2), generator=g)
    return {"x_num": x_num, "x_cat": x_cat, "index": torch.arange(n)}, torch.arange(n) % classes


def _model(test_id, classes=3):
    torch.manual_seed(0)
    family, args = TINY[test_id]
    model = hub.create_model(family, num_classes=classes, **DIMS, **args)
    if family == "tabr":
        inputs, y = _batch(classes=classes)
        model.set_candidates(inputs["x_num"], inputs["x_cat"], y)
    return model


@pytest.mark.parametrize("family", list(TINY))
def test_shapes_gradients_and_reset_classifier(family):
    model = _model(family)
    inputs, y = _batch()
    loss, preds, _ = create_task("classification", num_classes=3).step(model.train(), (inputs, y), "train")
    loss.backward()
    assert params_without_grad(model) == []
    model.eval()
    logits = model(**inputs)
    assert logits.shape == (8, 3) and torch.isfinite(logits).all() and preds.shape == (8, 3)
    features = model.forward_features(inputs["x_num"], inputs["x_cat"])
    assert features.shape[-1] == model.num_features
    model.reset_classifier(5)
    assert model(inputs["x_num"], inputs["x_cat"]).shape == (8, 5)


@pytest.mark.parametrize("family", list(TINY))
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_tiny_overfit(family, task):
    model = _model(family, classes=3 if task == "classification" else 1)
    inputs, y = _batch()
    target = y if task == "classification" else y.float() - 1
    step = create_task(task, num_classes=3).step
    assert_overfits(model, lambda: step(model, (inputs, target), "train")[0], steps=150, lr=5e-3)


def test_tabm_predicts_the_mean_of_its_members():
    model = _model("tabm")
    inputs, _ = _batch()
    members = model.train().forward_head(model.forward_features(inputs["x_num"], inputs["x_cat"]))  # (B, k, C)
    model.eval()
    assert members.shape == (8, 4, 3)
    expected = members.softmax(-1).mean(1)
    assert torch.allclose(model(inputs["x_num"], inputs["x_cat"]).softmax(-1), expected, atol=1e-6)


def test_tabr_retrieval_is_invariant_to_candidate_order_and_never_retrieves_the_row_itself():
    model = _model("tabr").eval()
    inputs, y = _batch()  # the candidates _model set
    query = _batch(n=5, seed=2)[0]
    before = model(query["x_num"], query["x_cat"])
    order = torch.randperm(8, generator=torch.Generator().manual_seed(0))
    model.set_candidates(inputs["x_num"][order], inputs["x_cat"][order], y[order])
    assert torch.allclose(model(query["x_num"], query["x_cat"]), before, atol=1e-5)
    rows, weights = model.retrieve(query["x_num"], query["x_cat"])
    assert rows.shape == weights.shape == (5, 3) and torch.allclose(weights.sum(-1), torch.ones(5))
    model.train()
    _, k = model.encode(model.cand_num, model.cand_cat)
    neighbours = model._neighbours(k, torch.arange(8))
    assert not (neighbours == torch.arange(8)[:, None]).any()
    no_exclusion = model._neighbours(k, None)
    assert (no_exclusion[:, 0] == torch.arange(8)).all()  # without the index, the nearest is the row itself


def test_tab_transformer_column_attention():
    model = _model("tab_transformer").eval()
    weights = model.column_attention(_batch()[0]["x_cat"])
    assert weights.shape == (8, 1, 2, 2, 2) and torch.allclose(weights.sum(-1), torch.ones(8, 1, 2, 2))


def _frame(n=40):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"age": rng.normal(40, 10, n), "n": rng.integers(0, 3, n).astype(float),
                          "city": rng.choice(["a", "b", "c"], n), "y": rng.choice(["no", "yes"], n)})
    frame.loc[[1, 5], "age"] = np.nan
    frame.loc[[2], "city"] = np.nan
    return frame


@pytest.mark.parametrize("scaling", ["quantile", "standard"])
def test_preprocessor_json_round_trip_and_codes(scaling):
    frame = _frame()
    pre = TabularPreprocessor.fit(frame, "y", scaling=scaling)
    assert (pre.task, pre.numeric, pre.categorical, pre.indicators, pre.classes) == \
           ("binary", ["age", "n"], ["city"], ["age"], ["no", "yes"])
    again = TabularPreprocessor.from_dict(json.loads(json.dumps(pre.to_dict())))
    for a, b in zip(pre.transform(frame), again.transform(frame)):
        np.testing.assert_array_equal(a, b)
    x_num, x_cat = pre.transform(frame)
    assert x_num.shape == (40, 3) and x_num[[1, 5], 2].tolist() == [1, 1] and np.isfinite(x_num).all()
    assert x_cat[2, 0] == 0  # missing category code
    unseen = pre.transform(frame.assign(city="zz"))[1]
    assert (unseen == 1).all()  # the unknown bucket
    overridden = TabularPreprocessor.fit(frame, "y", categorical=["n"])
    assert overridden.categorical == ["n", "city"] and overridden.numeric == ["age"]


def test_regression_target_is_standardised():
    frame = _frame().assign(y=np.linspace(0, 100, 40))
    pre = TabularPreprocessor.fit(frame, "y")
    z = pre.transform_target(frame["y"])
    assert pre.task == "regression" and abs(z.mean()) < 1e-6 and abs(z.std() - 1) < 1e-5


def test_data_errors_name_the_column(tmp_path):
    frame = _frame()
    with pytest.raises(DataError, match="target column 'label' is not in the table"):
        TabularPreprocessor.fit(frame, "label")
    with pytest.raises(DataError, match="single class"):
        TabularPreprocessor.fit(frame.assign(y="no"), "y")
    with pytest.raises(DataError, match=r"\['empty'\] are empty in every training row"):
        TabularPreprocessor.fit(frame.assign(empty=np.nan), "y")
    with pytest.raises(DataError, match="numeric column 'n' holds text"):
        TabularPreprocessor.fit(frame.assign(n=frame["n"].astype(object).where(frame.index != 3, "three")), "y",
                                numeric=["age", "n"])
    pre = TabularPreprocessor.fit(frame, "y")
    with pytest.raises(DataError, match=r"missing \['n', 'city'\]"):
        pre.transform(frame.drop(columns=["city", "n", "y"]))
    with pytest.raises(DataError, match=r"numeric column 'age' holds text .*'old'.* at rows 4"):
        pre.transform(frame.assign(age=frame["age"].astype(object).where(frame.index != 3, "old")))
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(DataError, match="is empty"):
        read_table(tmp_path / "empty.csv")
    (tmp_path / "header.csv").write_text("a,b,y\n")
    with pytest.raises(DataError, match="no data rows"):
        read_table(tmp_path / "header.csv")


@pytest.mark.parametrize("name,task,classes,width", [("breast_cancer", "classification", 2, 30),
                                                      ("wine", "classification", 3, 13),
                                                      ("diabetes", "regression", 1, 10)])
def test_sklearn_sets(name, task, classes, width):
    from hub.core.registry import get_dataset_entry

    data = get_dataset_entry(name).builder()
    data.setup()
    inputs, y = data.train_set[0]
    assert (data.task, data.num_classes, inputs["x_num"].shape[0]) == (task, classes, width)
    assert sum(data.info["sizes"]) == len(data.frames["train"]) + len(data.frames["val"]) + len(data.frames["test"])


def test_tab_transformer_replaced_token_detection_pretraining_learns():
    from tabular.models.tab_transformer import pretrain

    torch.manual_seed(0)
    model = hub.create_model("tab_transformer", num_numeric=0, cat_cardinalities=[6, 6, 6], dim=16, depth=1,
                             num_heads=2, dropout=0.0)
    base = torch.randint(0, 6, (256, 1))
    x_cat = torch.cat([base, (base + 1) % 6, (base + 2) % 6], 1)  # columns that predict each other
    before = model.cat_embed.embed.weight.clone()
    history = pretrain(model, x_cat, epochs=15, batch_size=64, lr=3e-3)
    assert history[-1] < 0.8 * history[0] and not torch.equal(before, model.cat_embed.embed.weight)


def test_periodic_embeddings_match_a_per_feature_loop():
    from hub.layers import PeriodicEmbeddings

    torch.manual_seed(0)
    x = torch.randn(5, 3)
    for lite in (True, False):
        embed = PeriodicEmbeddings(3, 4, num_frequencies=2, sigma=1.0, lite=lite)
        out = embed(x)
        assert out.shape == (5, 3, 4)
        for f in range(3):
            angles = 2 * torch.pi * embed.frequencies[f] * x[:, f:f + 1]  # (5, 2)
            periodic = torch.cat([angles.cos(), angles.sin()], -1)  # (5, 4)
            linear = (lambda p: embed.linear(p)) if lite else (lambda p: p @ embed.weight[f] + embed.bias[f])
            assert torch.allclose(out[:, f], torch.relu(linear(periodic)), atol=1e-5)
    with pytest.raises(HubError, match=r"expected numerics of shape \(batch, 3\), got \(5, 4\)"):
        PeriodicEmbeddings(3, 4)(torch.randn(5, 4))
    with pytest.raises(HubError, match="model 'tab_transformer': numeric_embedding must be"):
        hub.create_model("tab_transformer", numeric_embedding="bins", **DIMS)
