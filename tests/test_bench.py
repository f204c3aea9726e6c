"""attnhub bench: the report has a row per matching family with sane figures and the timm reference ratio."""
import json
import math

from hub.bench import family_recipes, gemm_peak, write_page
from hub.cli import main


def test_family_recipes_prefer_cpu_then_gpu_then_a_sibling_family(repo, tmp_path):
    from hub.registry import list_models

    for name in ("a_gpu", "b"):
        (tmp_path / f"{name}.yaml").write_text("model: {name: vit_digits}\n")
    assert family_recipes(tmp_path, ["vit_digits"]) == {"vit_digits": (tmp_path / "b.yaml", "own CPU recipe")}
    recipes = family_recipes(repo / "recipes", list_models())
    assert recipes["vit_digits"] == (repo / "recipes" / "quickstart.yaml", "own CPU recipe")
    assert recipes["vit_tiny_patch4_32"] == (repo / "recipes/vision/vit_tiny_cifar10_gpu.yaml", "own GPU recipe, fp32")
    assert recipes["ast_base"] == (repo / "recipes/audio/ast_tiny_fsdd.yaml", "ast_tiny's recipe")
    from hub.registry import get_model_entry

    packages = ("hub", "vision", "graph", "audio", "tabular", "medical", "timeseries")  # not families tests add
    ours = {f for f in list_models() if get_model_entry(f).builder.__module__.split(".")[0] in packages}
    assert ours <= set(recipes), "every registered family has a recipe to be measured with"


def test_bench_writes_a_row_with_flops_throughput_and_reference(repo, tmp_path, capsys):
    assert main(["bench", "vit_digits", "--recipes", str(repo / "recipes"), "--out", str(tmp_path), "--steps", "1",
                 "--import-repeats", "1", "--no-progress"]) == 0
    report = json.loads((tmp_path / "RESULTS.json").read_text())
    (row,) = report["models"]
    assert row["family"] == "vit_digits" and row["params"] == 136_138
    assert row["forward_flops_per_item"] > 1e6 and row["train_flops_per_item"] > 2 * row["forward_flops_per_item"]
    assert row["train_items_per_s"] > 0 and row["reference"] == "the same timm module, bare loop"
    # a ratio of two timings, present and positive; its size is the report's to show, never a test's to assert
    # (on a loaded 2-core machine it was 13.5 for the same module)
    assert math.isfinite(row["speed_ratio"]) and row["speed_ratio"] > 0
    assert report["machine"]["gemm_peak_gflop_per_s"] > 0.1
    text = (tmp_path / "RESULTS.md").read_text()
    assert "| vit_digits | quickstart | classification | 136,138 |" in text and "import hub" in text


def test_gemm_peak_is_positive():
    assert gemm_peak(size=256, repeats=1) > 1e7


def test_write_page_keeps_the_hand_written_notes_below_the_heading(tmp_path):
    page = tmp_path / "page.md"
    write_page(page, "| a |\n\n", "## Notes")
    assert page.read_text() == "| a |\n\n## Notes\n"
    page.write_text(page.read_text() + "\nmeasured by hand\n")
    write_page(page, "| b |\n\n", "## Notes")
    assert page.read_text() == "| b |\n\n## Notes\n\nmeasured by hand\n"
