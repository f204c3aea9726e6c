"""attnhub bench: the report has a row per matching family with sane figures and the timm reference ratio."""
import json

from hub.bench import family_recipes, gemm_peak
from hub.cli import main


def test_family_recipes_skip_gpu_variants(repo):
    recipes = family_recipes(repo / "recipes")
    assert recipes["vit_digits"].name == "quickstart.yaml"
    assert not any(path.stem.endswith("_gpu") for path in recipes.values())


def test_bench_writes_a_row_with_flops_throughput_and_reference(repo, tmp_path, capsys):
    assert main(["bench", "vit_digits", "--recipes", str(repo / "recipes"), "--out", str(tmp_path), "--steps", "1",
                 "--import-repeats", "1", "--no-progress"]) == 0
    report = json.loads((tmp_path / "RESULTS.json").read_text())
    (row,) = report["models"]
    assert row["family"] == "vit_digits" and row["params"] == 136_138
    assert row["forward_flops_per_item"] > 1e6 and row["train_flops_per_item"] > 2 * row["forward_flops_per_item"]
    assert row["train_items_per_s"] > 0 and row["reference"] == "the same timm module, bare loop"
    assert report["machine"]["gemm_peak_gflop_per_s"] > 0.1
    text = (tmp_path / "RESULTS.md").read_text()
    assert "| vit_digits | classification | 136,138 |" in text and "import hub" in text


def test_gemm_peak_is_positive():
    assert gemm_peak(size=256, repeats=1) > 1e7
