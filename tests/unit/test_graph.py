"""graph/ and hub.attention.graph: layers, models, data, user graph folders, shipped weights, CLI."""
from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GATConv
from torch_geometric.utils import scatter

import hub
from hub.attention.graph import CATLayer, GATLayer, conjoint_structure, sparse_input_dropout
from hub.errors import DataError

NODE_MODELS = [("gat", {}), ("gatv2", {}), ("cat", {"variant": "implicit"}), ("cat", {"variant": "explicit"})]


def ring(num_nodes: int = 12) -> torch.Tensor:
    """A ring with chords, both directions. Shapes: -> (2, E)."""
    src = torch.arange(num_nodes)
    pairs = [(src, (src + 1) % num_nodes), (src[::3], (src[::3] + 5) % num_nodes)]
    edges = torch.cat([torch.stack(p) for p in pairs], 1)
    return torch.cat([edges, edges.flip(0)], 1)


def karate():
    from hub.core.registry import get_dataset_entry

    data = get_dataset_entry("karate_club").builder()
    data.setup("fit")
    return data.graph


def test_sparse_input_dropout_keeps_zeros_and_scales_kept_entries():
    torch.manual_seed(0)
    x = (torch.rand(200, 300) < 0.05).float()
    out = sparse_input_dropout(x.to_sparse_csr(), 0.6, training=True).to_dense()
    assert (out[x == 0] == 0).all()
    kept = out[x != 0]
    assert set(kept.unique().tolist()) <= {0.0, 2.5}
    assert abs((kept > 0).float().mean().item() - 0.4) < 0.05
    assert sparse_input_dropout(x, 0.6, training=False) is x


@pytest.mark.parametrize("layer", ["gat", "gatv2", "implicit", "explicit"])
def test_layer_shapes_attention_sums_to_one_and_equivariance(layer):
    torch.manual_seed(0)
    n, edges = 12, ring(12)
    looped, structure = conjoint_structure(edges, n, num_clusters=3)
    if layer in ("gat", "gatv2"):
        module, graph, extra = GATLayer(5, 4, heads=3, v2=layer == "gatv2"), edges, {}
    else:
        module, graph, extra = CATLayer(5, 4, heads=3, variant=layer), looped, {"structure": structure}
    module.eval()
    x = torch.randn(n, 5)
    out, (att_edges, alpha) = module(x, graph, **extra, return_attention=True)
    assert out.shape == (n, 12) and alpha.shape == (att_edges.shape[1], 3)
    torch.testing.assert_close(scatter(alpha, att_edges[1], dim=0, dim_size=n, reduce="sum"), torch.ones(n, 3))
    perm = torch.randperm(n)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(n)
    out_perm = module(x[perm], inverse[graph], **extra)  # node i of the permuted graph is node perm[i]
    torch.testing.assert_close(out_perm, out[perm], atol=1e-5, rtol=1e-5)
    assert layer in repr(module) or "v2" in repr(module)


def test_cat_without_structure_is_gat():
    torch.manual_seed(0)
    n, edges = 12, ring(12)
    looped, structure = conjoint_structure(edges, n, num_clusters=3)
    gat, cat = GATConv(5, 4, heads=2), CATLayer(5, 4, heads=2, variant="explicit")
    with torch.no_grad():
        cat.lin.weight.copy_(gat.lin.weight)
        cat.att_src.copy_(gat.att_src)
        cat.att_dst.copy_(gat.att_dst)
        cat.bias.copy_(gat.bias)
    x = torch.randn(n, 5)
    expected = gat(x, edges)
    torch.testing.assert_close(cat(x, looped), expected)  # structural terms switched off
    with torch.no_grad():
        cat.structure_weight.zero_()  # explicit: zero structural weights leave GAT's scores
    torch.testing.assert_close(cat(x, looped, structure), expected)
    assert not torch.allclose(CATLayer(5, 4, heads=2, variant="implicit")(x, looped, structure),
                              CATLayer(5, 4, heads=2, variant="implicit")(x, looped))


def test_conjoint_structure_is_symmetric_and_bounded():
    n, edges = 12, ring(12)
    looped, structure = conjoint_structure(edges, n, num_clusters=3)
    assert looped.shape[1] == edges.shape[1] + n  # self-loops added once
    assert structure.shape == (looped.shape[1], 2)
    assert (structure[:, 0].abs() <= 1 + 1e-5).all() and (structure[:, 1] > 0).all() and (structure[:, 1] <= 1).all()
    loops = looped[0] == looped[1]
    torch.testing.assert_close(structure[loops], torch.ones(n, 2))
    perm = torch.randperm(n)
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(n)
    looped_p, structure_p = conjoint_structure(inverse[edges], n, num_clusters=3)
    key = lambda e: (e[0] * n + e[1]).argsort()  # noqa: E731
    torch.testing.assert_close(structure_p[key(looped_p), 1], structure[key(inverse[looped]), 1])


@pytest.mark.parametrize("name,args", NODE_MODELS)
def test_node_model_api_and_every_parameter_gets_a_gradient(name, args):
    torch.manual_seed(0)
    model = hub.create_model(name, in_channels=6, num_classes=3, hidden=4, heads=2, dropout=0.0, **args)
    x, edges = torch.randn(12, 6), ring(12)
    logits = model(x, edges)
    assert logits.shape == (12, 3) and torch.isfinite(logits).all()
    assert model.forward_features(x, edges).shape == (12, model.num_features)
    logits.sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    attention = model.attention(x, edges)
    assert [a.shape[1] for _, a in attention] == [2, 1]
    model.reset_classifier(5)
    assert model(x, edges).shape == (12, 5)


def test_sparse_and_dense_features_give_the_same_logits():
    torch.manual_seed(0)
    model = hub.create_model("gat", in_channels=30, num_classes=3, hidden=4, heads=2).eval()
    x = (torch.rand(12, 30) < 0.1).float()
    torch.testing.assert_close(model(x.to_sparse_csr(), ring(12)), model(x, ring(12)))


@pytest.mark.parametrize("name,args", NODE_MODELS[::2])
def test_overfits_karate_club(name, args):
    torch.manual_seed(0)
    graph = karate()
    model = hub.create_model(name, in_channels=34, num_classes=4, hidden=8, heads=4, dropout=0.0, **args)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(60):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(graph.x, graph.edge_index), graph.y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.1 * losses[0]


def test_gat_pma_graph_classifier_is_node_order_invariant():
    torch.manual_seed(0)
    model = hub.create_model("gat_pma", in_channels=2, num_classes=2).eval()
    x, edges = torch.randn(12, 2), ring(12)
    batch = torch.tensor([0] * 5 + [1] * 7)
    edges = edges[:, (batch[edges[0]] == batch[edges[1]])]  # keep edges inside each graph
    logits = model(x, edges, batch)
    assert logits.shape == (2, 2)
    perm = torch.cat([torch.randperm(5), 5 + torch.randperm(7)])
    inverse = torch.empty_like(perm)
    inverse[perm] = torch.arange(12)
    torch.testing.assert_close(model(x[perm], inverse[edges], batch), logits, atol=1e-5, rtol=1e-5)
    logits.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    assert model.attention(x, edges, batch)["pool"].shape[-1] == 7


def write_graph(root: Path, nodes: list[list], edges: list[list], header=("id", "f1", "f2", "label")) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "nodes.csv", "w", newline="") as f:
        csv.writer(f).writerows([list(header), *nodes])
    with open(root / "edges.csv", "w", newline="") as f:
        csv.writer(f).writerows([["src", "dst"], *edges])
    return root


def generated_graph(root: Path, num_nodes: int = 60, num_classes: int = 3, unlabelled: int = 6,
                    non_negative: bool = False) -> Path:
    """Nodes of a class share a feature mean and link mostly inside their class; the features are signed, or
    their absolute values when ``non_negative`` (like counts)."""
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(num_nodes) % num_classes
    feats = F.one_hot(labels, num_classes).float() + 0.3 * torch.randn(num_nodes, num_classes, generator=generator)
    feats = feats.abs() if non_negative else feats
    nodes = [[f"n{i}", *[f"{v:.3f}" for v in feats[i].tolist()], "" if i < unlabelled else f"c{labels[i]}"]
             for i in range(num_nodes)]
    edges = [[f"n{i}", f"n{j}"] for i in range(num_nodes) for j in range(i + 1, num_nodes)
             if labels[i] == labels[j] and torch.rand(1, generator=generator) < 0.2]
    return write_graph(root, nodes, edges, ("id", *[f"f{k}" for k in range(num_classes)], "label"))


GOOD_NODES = [["a", "1", "0", "x"], ["b", "0", "1", "x"], ["c", "1", "1", "x"],
              ["d", "0", "0", "y"], ["e", "1", "0", "y"], ["f", "0", "1", "y"], ["g", "1", "1", ""]]


GOOD_EDGES = [["a", "b"], ["c", "d"], ["e", "f"], ["g", "a"]]


@pytest.mark.parametrize("nodes,edges,message", [
    (GOOD_NODES, GOOD_EDGES + [["a", "zz"]], "edges.csv line 6 column 'dst': 'zz' is not an id in"),
    (GOOD_NODES + [["a", "0", "0", "y"]], GOOD_EDGES, "column 'id': duplicate id 'a' on lines 2 and 9"),
    ([[n[0], n[1], n[2], ""] for n in GOOD_NODES], GOOD_EDGES, "column 'label' is blank on every line"),
    ([["a", "1", "oops", "x"]] + GOOD_NODES[1:], GOOD_EDGES, "line 2 column 'f2': 'oops' is not a number"),
])
def test_bad_user_graphs_fail_clearly(tmp_path, nodes, edges, message):
    from graph.data import graph_folder

    root = write_graph(tmp_path / "g", nodes, edges)
    with pytest.raises(DataError) as err:
        graph_folder(str(root)).setup("fit")
    assert message in str(err.value)


def test_user_graph_split_and_missing_columns(tmp_path):
    from graph.data import graph_folder

    data = graph_folder(str(generated_graph(tmp_path / "g")))
    data.setup("fit")
    graph = data.graph
    masks = torch.stack([graph.train_mask, graph.val_mask, graph.test_mask])
    assert (masks.sum(0) <= 1).all() and masks.sum() == 54 and not masks[:, :6].any()
    assert data.model_args() == {"num_classes": 3, "in_channels": 3} and data.label_names == ["c0", "c1", "c2"]
    root = write_graph(tmp_path / "h", [["a", "1"]], [], header=("id", "f1"))
    with pytest.raises(DataError, match=r"missing column\(s\) \['label'\]"):
        graph_folder(str(root)).setup("fit")


def with_split_column(root: Path, split: list[str]) -> Path:
    """Add a ``split`` column (one value per node, in nodes.csv order) to the graph folder ``root``."""
    rows = list(csv.reader(open(root / "nodes.csv")))
    rows = [[*rows[0], "split"], *[[*row, value] for row, value in zip(rows[1:], split)]]
    csv.writer(open(root / "nodes.csv", "w", newline="")).writerows(rows)
    return root


def split_of(i: int, unlabelled: int = 6) -> str:
    return "" if i < unlabelled else ("train", "val", "test", "")[i % 4]


def test_user_graph_split_column_gives_the_masks(tmp_path):
    from graph.data import graph_folder

    data = graph_folder(str(with_split_column(generated_graph(tmp_path / "g"), [split_of(i) for i in range(60)])))
    data.setup("fit")
    for split in ("train", "val", "test"):
        assert data.graph[f"{split}_mask"].tolist() == [split_of(i) == split for i in range(60)]
    assert data.info["split_from"] == "the column 'split'" and data.ids[:2] == ["n0", "n1"]


@pytest.mark.parametrize("split,message", [
    ([""] * 6 + ["train", "val", "test", "exam"] * 13 + ["train", "val"],
     "line 11 column 'split': 'exam'; expected one of ['train', 'val', 'test']"),
    (["test", "train", "val"] * 20, "line 2: split 'test' but a blank 'label'"),
    ([""] * 6 + ["train", "test"] * 27, "column 'split' names no 'val' node"),
])
def test_bad_split_column_fails_clearly(tmp_path, split, message):
    from graph.data import graph_folder

    with pytest.raises(DataError) as err:
        graph_folder(str(with_split_column(generated_graph(tmp_path / "g"), split))).setup("fit")
    assert message in str(err.value)


def with_one_item_class(root: Path) -> Path:
    """The graph folder ``root`` with one more labelled node, the only one of its class 'solo', linked to n7."""
    with open(root / "nodes.csv", "a", newline="") as f:
        csv.writer(f).writerow(["lonely", "0.5", "0.5", "0.5", "solo"])
    with open(root / "edges.csv", "a", newline="") as f:
        csv.writer(f).writerow(["lonely", "n7"])
    return root


def test_a_one_item_class_stays_in_training_with_a_warning_naming_it(tmp_path, caplog):
    """Issue 68: a class with fewer labelled nodes than the split needs is neither dropped nor an error."""
    from graph.data import graph_folder

    data = graph_folder(str(with_one_item_class(generated_graph(tmp_path / "g"))))
    with caplog.at_level("WARNING"):
        data.setup("fit")
    assert "class(es) 'solo' (1) have fewer than the 3 labelled nodes" in caplog.text
    lonely = data.ids.index("lonely")
    assert data.label_names[-1] == "solo" and data.num_classes == 4
    assert bool(data.graph.train_mask[lonely]) and not data.graph.val_mask[lonely] and not data.graph.test_mask[lonely]
    assert int(((data.graph.y >= 0) & ~(data.graph.train_mask | data.graph.val_mask | data.graph.test_mask)).sum()) == 0


def test_graph_folds_and_refit_cover_the_labelled_nodes(tmp_path):
    """cv_fold trains on the other folds of the labelled non-test nodes and validates on one; over the folds each
    such node is validated once; refit trains on every labelled node (test included)."""
    from graph.data import cv_pool, graph_folder

    root = str(with_one_item_class(generated_graph(tmp_path / "g")))
    full = graph_folder(root)
    full.setup("fit")
    pool = set(cv_pool(full.graph).tolist())
    validated = []
    for index in range(3):
        fold = graph_folder(root, cv_fold=[3, index, 0])
        fold.setup("fit")
        g = fold.graph
        assert torch.equal(g.test_mask, full.graph.test_mask) and not bool((g.train_mask & g.val_mask).any())
        assert set(torch.nonzero(g.train_mask | g.val_mask).view(-1).tolist()) == pool
        validated += torch.nonzero(g.val_mask).view(-1).tolist()
    assert sorted(validated) == sorted(pool)
    refit = graph_folder(root, refit=True)
    refit.setup("fit")
    assert torch.equal(refit.graph.train_mask, refit.graph.y >= 0)
    with pytest.raises(DataError, match="cv_fold and refit exclude each other"):
        graph_folder(root, cv_fold=[3, 0, 0], refit=True).setup("fit")


def test_neighbour_mean_baseline_reads_the_neighbours():
    """Node features alone are too noisy to classify well; averaged over 8 same-class neighbours they are not."""
    from torch_geometric.data import Data

    from graph.baselines import logistic_on_neighbour_means

    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(300) % 3
    x = F.one_hot(labels, 3).float() + 1.5 * torch.randn(300, 3, generator=generator)
    same = [torch.nonzero(labels == c).view(-1) for c in range(3)]
    src = torch.arange(300).repeat_interleave(4)
    dst = torch.stack([same[int(labels[i])][torch.randint(0, 100, (4,), generator=generator)] for i in range(300)])
    edges = torch.stack([src, dst.view(-1)])
    part = torch.arange(300) // 3 % 3  # independent of the class
    graph = Data(x=x, edge_index=torch.cat([edges, edges.flip(0)], 1), y=labels, train_mask=part == 0,
                 val_mask=part == 1, test_mask=part == 2)
    ids = [f"node-{i}" for i in range(300)]
    result = logistic_on_neighbour_means(graph, ["a", "b", "c"], ids)
    assert result.metrics["test/acc"] > 0.95 and list(result.metrics) == ["test/acc", "test/f1"]
    assert logistic_on_neighbour_means(graph, ["a", "b", "c"], ids, hops=0).metrics["test/acc"] < 0.8
    test = [i for i in range(300) if part[i] == 2]
    assert result.predictions["id"] == [ids[i] for i in test]
    assert result.predictions["target"] == [["a", "b", "c"][i % 3] for i in test]
    assert list(result.predictions)[3:] == ["proba_a", "proba_b", "proba_c"]


def test_user_graph_features_are_row_normalised_when_non_negative(tmp_path):
    from graph.data import graph_folder
    from graph.io import read_graph_folder

    for non_negative in (False, True):
        root = generated_graph(tmp_path / str(non_negative), non_negative=non_negative)
        raw = read_graph_folder(root)[0].x
        assert bool((raw < 0).any()) is not non_negative
        data = graph_folder(str(root))  # normalize="auto"
        data.setup("fit")
        assert data.input_spec["normalize"] is non_negative
        torch.testing.assert_close(data.graph.x, raw / raw.sum(1, keepdim=True) if non_negative else raw)
    forced = graph_folder(str(root), normalize=False)  # the non-negative one, left as given
    forced.setup("fit")
    assert forced.input_spec["normalize"] is False
    torch.testing.assert_close(forced.graph.x, raw)
    with pytest.raises(DataError, match=r"normalize='yes'; expected true, false or 'auto'"):
        graph_folder(str(root), normalize="yes").setup("fit")


def test_graph_classifier_from_scratch_on_user_data_is_refused_naming_what_it_needs(tmp_path, capsys):
    from hub.cli import main

    root = generated_graph(tmp_path / "graph")
    assert main(["finetune", "gat_pma", "--data", str(root), "--output-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "no user data format for graph classification" in err and "graphs.csv: graph id, label" in err
    assert f"attnhub finetune gat --data {root}" in err and not (tmp_path / "runs").exists()


def test_pubmed_names_the_missing_allx_file(tmp_path, monkeypatch):
    from graph.data import PLANETOID_FILES, pubmed

    (tmp_path / "planetoid").mkdir()
    for suffix in PLANETOID_FILES:
        if suffix != "allx":
            (tmp_path / "planetoid" / f"ind.pubmed.{suffix}").write_bytes(b"")
    monkeypatch.setenv("HUB_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match=r"ind\.pubmed\.allx missing from .*planetoid"):
        pubmed().setup("fit")


def test_neighbourhood_attention_matches_the_layer_and_is_drawn(tmp_path):
    """The attention into a node is the layer's own alpha on the edges into it, sums to 1 per head, and
    does not depend on the order the edges are listed in; the ego-graph figure is written."""
    from graph.explain import neighbourhood_attention, plot_node_attention

    graph = karate()
    model = hub.create_model("gat", in_channels=graph.x.shape[1], num_classes=4).eval()
    node = 0
    layers = neighbourhood_attention(model, graph.x, graph.edge_index, node)
    degree = int((graph.edge_index[1] == node).sum())
    assert [tuple(alpha.shape) for _, alpha in layers] == [(degree + 1, 8), (degree + 1, 1)]
    for neighbours, alpha in layers:
        assert node in neighbours.tolist()
        torch.testing.assert_close(alpha.sum(0), torch.ones(alpha.shape[1]))
    edges, alpha = model.attention(graph.x, graph.edge_index)[0]
    into = edges[1] == node
    expected = dict(zip(edges[0, into].tolist(), alpha[into].tolist()))
    assert all(torch.allclose(torch.tensor(expected[n]), a) for n, a in zip(layers[0][0].tolist(), layers[0][1]))
    order = torch.randperm(graph.edge_index.shape[1], generator=torch.Generator().manual_seed(0))
    shuffled = graph.edge_index[:, order]
    for (n1, a1), (n2, a2) in zip(layers, neighbourhood_attention(model, graph.x, shuffled, node)):
        assert torch.equal(n1, n2)
        torch.testing.assert_close(a1, a2)
    path = plot_node_attention(model, graph.x, graph.edge_index, node, tmp_path / "node0.png",
                               classes=["a", "b", "c", "d"])
    assert path.stat().st_size > 10_000
    with pytest.raises(DataError, match="outside the graph"):
        neighbourhood_attention(model, graph.x, graph.edge_index, 10_000)
