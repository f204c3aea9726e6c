"""attnhub bench (benchmarks.report), its parts: recipes per family, the GEMM peak, the refusal of a row above it,
the references' ratios (one family measured end to end: tests/integration/test_bench_runs.py)."""

import pytest

from benchmarks.report import ImplausibleRow, family_recipes, format_table
from benchmarks.timing import gemm_peak


def test_family_recipes_prefer_cpu_then_gpu_then_a_sibling_family(repo, tmp_path):
    from hub.core.registry import list_models

    for name in ("a_gpu", "b"):
        (tmp_path / f"{name}.yaml").write_text("model: {name: vit_digits}\n")
    assert family_recipes(tmp_path, ["vit_digits"]) == {"vit_digits": (tmp_path / "b.yaml", "own CPU recipe")}
    recipes = family_recipes(repo / "recipes", list_models())
    assert recipes["vit_digits"] == (repo / "recipes" / "vision" / "vit_digits_sklearn.yaml", "own CPU recipe")
    assert recipes["cct_digits"] == (repo / "recipes" / "quickstart.yaml", "own CPU recipe")
    assert recipes["vit_tiny_patch4_32"] == (repo / "recipes/vision/vit_tiny_cifar10_gpu.yaml", "own GPU recipe, fp32")
    assert recipes["ast_base"] == (repo / "recipes/audio/ast_tiny_fsdd.yaml", "ast_tiny's recipe")
    from hub.core.registry import get_model_entry

    packages = ("hub", "vision", "graph", "audio", "tabular", "medical", "timeseries")  # not families tests add
    ours = {f for f in list_models() if get_model_entry(f).builder.__module__.split(".")[0] in packages}
    assert ours <= set(recipes), "every registered family has a recipe to be measured with"


def test_gemm_peak_is_positive():
    assert gemm_peak(sizes=(128, 256), repeats=1) > 1e7


def _row(family: str, train_gflop_per_s: float, peak_gflop_per_s: float) -> dict:
    return {"family": family, "recipe": "recipes/graph/gat_citeseer.yaml", "task": "node-classification",
            "params": 10, "forward_flops_per_item": 1e6, "items_per_batch": 1, "train_items_per_s": 1.0,
            "infer_items_per_s": 1.0, "train_flop_per_s": train_gflop_per_s * 1e9, "peak_memory_mb": 1.0,
            "gemm_peak_flop_per_s": peak_gflop_per_s * 1e9}


def test_the_builder_refuses_a_row_above_the_measured_gemm_peak():
    (row,) = format_table([_row("vit_digits", 40.0, 50.0)])[2:]
    assert "| 40.00 | 80.0 |" in row
    with pytest.raises(ImplausibleRow, match=r"gat: .* 102\.02 GFLOP/s is 179\.0% .* \(57\.00 GFLOP/s\)"):
        format_table([_row("vit_digits", 40.0, 50.0), _row("gat", 102.02, 57.0)])


def test_gat_is_compared_with_pyg_on_sparse_and_on_dense_features():
    import torch
    from torch_geometric.data import Data

    from benchmarks.references import reference_steps
    from hub import create_model

    generator = torch.Generator().manual_seed(0)
    x = (torch.rand(30, 12, generator=generator) < 0.2).float()
    graph = Data(x=x.to_sparse_csr(), edge_index=torch.randint(0, 30, (2, 80), generator=generator),
                 y=torch.randint(0, 3, (30,), generator=generator), train_mask=torch.arange(30) < 10)
    model = create_model("gat", in_channels=12, num_classes=3)
    fed = []
    comparisons = reference_steps("gat", model, graph, lambda batch: lambda: fed.append(batch.x.layout))
    assert [(name, ours is None) for name, ours, _ in comparisons] == [
        ("minimal PyG GAT, sparse CSR input", True), ("minimal PyG GAT, dense input", False)]
    for _, ours, reference in comparisons:
        reference()  # PyG's GATConv trains on either layout
        if ours is not None:
            ours()
    assert fed == [torch.strided], "our step of the dense comparison is fed dense features"
    assert reference_steps("gatv2", model, graph, lambda batch: None) == []


def test_the_table_gives_each_reference_its_ratio():
    row = {**_row("gat", 1.0, 50.0), "references": [
        {"reference": "minimal PyG GAT, sparse CSR input", "speed_ratio": 1.1},
        {"reference": "minimal PyG GAT, dense input", "speed_ratio": 0.95}]}
    (line,) = format_table([row])[2:]
    assert line.endswith("| minimal PyG GAT, sparse CSR input; minimal PyG GAT, dense input | 1.10x; 0.95x |")


def test_uncertainty_report_rewrites_the_measured_tags_rows_and_keeps_the_others():
    from benchmarks.uncertainty import OOD_HEADER, merged, table_rows

    old = ["# report", "", *OOD_HEADER, "| gat.cora | none | - |", "| mlp.adult | old 1 |",
           "| vit_digits.sklearn | a |", "| mlp.adult | old 2 |", "", "text"]
    rows = table_rows(old, OOD_HEADER)
    assert rows == old[4:8]
    new = merged(rows, ["| mlp.adult | new 1 |", "| mlp.adult | new 2 |"], ["mlp.adult"])
    assert new == ["| vit_digits.sklearn | a |", "| mlp.adult | new 1 |", "| mlp.adult | new 2 |",
                   "| gat.cora | none | - |"]
    assert table_rows(["# no table"], OOD_HEADER) == []
