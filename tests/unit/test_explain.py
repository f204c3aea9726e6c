"""The explainers of issue 71 on tiny random models (no training, no data): CoaT's factorised attention, halo
attention (HaloNet, airbench-halo), CBAM inside airbench, the Captum fallbacks, the randomisation test's helpers and
the output contract of ``attnhub explain`` (X.png, X.npy, X.json, ``--target``)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

import hub
from hub.cli import main
from hub.errors import HubError
from hub.explain import class_target, randomized_copy, rank_correlation, sanity_failure
from vision.explain import IG_METHOD, _halo_received, attention_map, image_explanation


@pytest.mark.parametrize("family, method", [
    ("coat_lite_micro_32", "CoaT factorised attention"),
    ("cct_2_3x2_32", "attention of the pooling query"),
    ("halonet_micro_32", "halo attention"),
    ("airbench_halo_micro_32", "halo attention"),
    ("airbench_cbam_micro_32", "CBAM spatial attention"),  # crashed on global_pool before issue 71
])
def test_attention_maps_of_the_families_without_a_class_token_rollout(family, method):
    torch.manual_seed(0)
    model = hub.create_model(family).eval()
    x = torch.randn(2, 3, 32, 32)
    maps, name = attention_map(model, x)
    assert name.startswith(method) and maps.shape == (2, 32, 32)
    assert torch.isfinite(maps).all() and maps.min() == 0 and maps.max() == pytest.approx(1.0)
    assert not torch.allclose(maps[0], maps[1])  # the map depends on the image


def test_coat_class_token_weights_match_a_naive_reference():
    from timm.models.coat import FactorAttnConvRelPosEnc

    from vision.explain import _coat_weights

    torch.manual_seed(0)
    module = FactorAttnConvRelPosEnc(16, num_heads=2)
    tokens = torch.randn(1, 1 + 4 * 4, 16)
    q, k, _ = module.qkv(tokens).reshape(1, 17, 3, 2, 8).unbind(2)  # (1, N, heads, 8)
    naive = torch.zeros(2, 16)
    for h in range(2):  # q_cls . softmax over the tokens of k, for each patch n
        soft = torch.softmax(k[0, :, h], dim=0)  # (N, 8)
        naive[h] = torch.stack([q[0, 0, h] @ soft[n] for n in range(1, 17)])
    expected = naive.abs().mean(0).reshape(1, 1, 4, 4)
    torch.testing.assert_close(_coat_weights(module, (tokens, (4, 4))), expected.detach())


def test_halo_attention_received_matches_a_naive_reference():
    """Each pixel's mean attention from the queries whose window holds it, by explicit loops over blocks."""
    from timm.layers.halo_attn import HaloAttn

    torch.manual_seed(0)
    module = HaloAttn(8, num_heads=1, block_size=2, halo_size=1).eval()
    x = torch.randn(1, 8, 4, 4)
    block, halo, win = 2, 1, 4
    with torch.no_grad():
        q, kv = module.q(x), torch.nn.functional.pad(module.kv(x), [halo] * 4)
        total, count = torch.zeros(6, 6), torch.zeros(6, 6)
        for bi in range(2):
            for bj in range(2):
                queries = q[0, :, bi * 2:bi * 2 + 2, bj * 2:bj * 2 + 2].reshape(8, -1).T  # (4, 8)
                window = kv[0, :, bi * block:bi * block + win, bj * block:bj * block + win]  # (16, 4, 4)
                keys = window[:8].reshape(8, -1).T  # (16, 8)
                rel = module.pos_embed(queries[None, None])[0, 0]  # (4, 16)
                attn = (queries @ keys.T * module.scale + rel).softmax(-1)  # (queries, window pixels)
                total[bi * block:bi * block + win, bj * block:bj * block + win] += attn.sum(0).reshape(4, 4)
                count[bi * block:bi * block + win, bj * block:bj * block + win] += 4
        expected = (total / count.clamp_min(1))[halo:halo + 4, halo:halo + 4]
    torch.testing.assert_close(_halo_received(module, (x,))[0, 0], expected)


def test_a_family_without_attention_falls_back_to_integrated_gradients_and_target_picks_the_class():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 4)).eval()
    x = torch.randn(1, 3, 8, 8)
    found = image_explanation(model, x)
    assert found.method.startswith(IG_METHOD) and "Sequential has no attention" in found.method
    assert found.values.shape == (8, 8) and found.target == int(model(x).argmax())
    other = image_explanation(model, x, target=(found.target + 1) % 4)
    assert other.target == (found.target + 1) % 4 and "for the class asked" in other.method
    with pytest.raises(HubError, match="class 9 does not exist"):
        class_target(model(x), 9)


def test_randomisation_test_helpers():
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 16)
    before = model.weight.detach().clone()
    copy = randomized_copy(model)
    assert torch.equal(model.weight, before) and not torch.allclose(copy.weight, before)  # a copy is randomised
    assert float(copy.weight.detach().std()) == pytest.approx(float(before.std()), rel=0.3)  # the spread is kept
    a = np.arange(16.0).reshape(4, 4)
    assert rank_correlation(a, a) == pytest.approx(1.0)
    assert "barely changes" in sanity_failure([a], [a * 2 + 1], 0.5)
    assert "constant" in sanity_failure([a], [np.ones_like(a)], 0.5)
    assert "NaN" in sanity_failure([a * np.nan], [a], 0.5)
    assert sanity_failure([a], [a[::-1]], 0.5) is None


def test_explain_writes_figure_numbers_and_record_and_target_explains_another_class(tmp_path, capsys):
    from sklearn.datasets import load_digits

    path = tmp_path / "seven.png"
    Image.fromarray(np.round(load_digits().images[7] * 255 / 16).astype(np.uint8), mode="L").save(path)
    assert main(["explain", "vit_digits.sklearn", str(path), "--out", str(tmp_path / "top")]) == 0
    figure = tmp_path / "top" / "seven_explain.png"
    record = json.loads(figure.with_suffix(".json").read_text())
    assert record["method"] == "attention rollout over all blocks" and record["family"] == "vit_digits"
    assert record["input"] == "seven" and record["target_name"] == "7" and 0.5 < record["probability"] <= 1
    assert np.load(figure.with_suffix(".npy")).shape == (8, 8)
    assert main(["explain", "vit_digits.sklearn", str(path), "--target", "3", "--out", str(tmp_path / "three")]) == 0
    record = json.loads((tmp_path / "three" / "seven_explain.json").read_text())
    assert record["target"] == 3 and record["method"].startswith(IG_METHOD) and record["probability"] < 0.5
    capsys.readouterr()
    assert main(["explain", "vit_digits.sklearn", str(path), "--target", "cat", "--out", str(tmp_path)]) == 2
    assert "--target 'cat' is not a class of vit_digits.sklearn" in capsys.readouterr().err
    assert main(["explain", "vit_digits.sklearn", str(path), "--data", "x.csv", "--out", str(tmp_path)]) == 2
    assert "--data do not apply" in capsys.readouterr().err
    assert main(["explain", "rul_attention.fd001", "--target", "1", "--out", str(tmp_path)]) == 2
    assert "is not a classifier" in capsys.readouterr().err
    assert main(["explain", "vit_micro_patch4_32", "--out", str(tmp_path)]) == 2  # a family without weights
    assert "vit_micro_patch4_32 has no card of this hub" in capsys.readouterr().err
    assert main(["explain", "vit_digits.sklearn", str(tmp_path / "missing.png"), "--out", str(tmp_path)]) == 2
    assert "missing.png does not exist" in capsys.readouterr().err
    assert main(["explain", "survival_fusion.metabric", "--out", str(tmp_path)]) == 2
    assert "give the patients' CSV to explain" in capsys.readouterr().err


def test_node_attribution_on_the_k_hop_subgraph_equals_the_whole_graph_s():
    """A 2-layer GAT's output at a node depends only on its 2-hop neighbourhood, so Integrated Gradients on the
    subgraph that ``node_explanation`` cuts equal those on the whole graph."""
    from graph.explain import node_explanation
    from hub.explain import integrated_gradients

    torch.manual_seed(0)
    model = hub.create_model("gat", in_channels=6, num_classes=3, hidden=4, heads=2).eval()
    x, edge_index = torch.rand(40, 6), torch.randint(0, 40, (2, 120))
    node = int(torch.bincount(edge_index[1], minlength=40).argmax())
    found = node_explanation(model, x, edge_index, node, target=1)
    assert found.target == 1 and found.axes == ("attribution", "neighbour")
    whole = integrated_gradients(lambda f: torch.cat([model(item, edge_index)[node:node + 1] for item in f]),
                                 (x[None],), 1, steps=16)[0][0].sum(1)  # (N,)
    expected = whole[[int(n) for n in found.labels]]
    np.testing.assert_allclose(found.values[0], expected.numpy(), rtol=1e-4, atol=1e-6)


def test_families_without_a_tag_explain_themselves_too():
    """Random untagged families of each domain: the pooling attention of ``gat_pma``, AttentionGRU's attention over
    cycles, and Integrated Gradients for the GRUs and DeepSurv, which have no attention (titles say so)."""
    from types import SimpleNamespace

    from graph.explain import graph_explanation
    from medical.explain import patient_explanation, stay_explanation
    from timeseries.explain import traffic_explanation, window_explanation

    torch.manual_seed(0)
    graph = graph_explanation(hub.create_model("gat_pma"), torch.rand(12, 2), torch.randint(0, 12, (2, 40)))
    assert graph.method.startswith("attention of the pooling") and graph.values.sum() == pytest.approx(1.0, abs=1e-4)
    card = SimpleNamespace(input_spec={"variables": [f"v{i}" for i in range(37)], "sensors": []}, family="x")
    stay = stay_explanation(card, hub.create_model("icu_gru"), torch.rand(1, 48, 37), torch.rand(1, 48, 37) < 0.3,
                            torch.randn(1, 9))
    assert stay.method.startswith("Integrated Gradients") and "MaskedGRU has no attention" in stay.method
    window = window_explanation(card, hub.create_model("rul_attention_gru"), torch.rand(1, 30, 14))
    assert window.method.startswith("attention over the window's cycles") and window.values.shape == (30,)
    traffic = traffic_explanation(hub.create_model("traffic_gru", num_nodes=5), torch.randn(1, 12, 5, 2))
    assert traffic.values.shape == (12, 5) and np.isfinite(traffic.values).all()
    card.input_spec = {"clinical": list("abcde")}
    patient = patient_explanation(card, hub.create_model("deepsurv_mlp"), {"clinical": torch.randn(1, 5)})
    assert patient.labels == list("abcde") and np.ptp(patient.values) > 0
