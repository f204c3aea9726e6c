"""``trainer.compile: true`` measured: a training step eager vs ``torch.compile`` (inductor), same model,
same real batch (each family's CPU recipe), in one process; compile time reported apart.

    HUB_DATA_DIR=../shared/data python -m benchmarks.compile [FAMILY ...]   # writes benchmarks/results/compile.md
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from benchmarks import RESULTS, ROOT
from benchmarks.report import family_recipes
from benchmarks.timing import timed
from hub.recipe import load_recipe
from hub.run.module import seed_all
from hub.run.train import build_data, build_model
from hub.tasks import create_task


def compare(recipe_path: Path, steps: int = 10) -> dict[str, float]:
    recipe = load_recipe(str(recipe_path))
    seed_all(0)
    data = build_data(recipe)
    model = build_model(recipe, data)
    task = create_task(data.task, **data.task_args())
    batch = next(iter(data.train_dataloader()))
    compiled = torch.compile(model)

    def stepper(module):
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)

        def step():
            optimizer.zero_grad(set_to_none=True)
            task.step(module, batch, "train")[0].backward()
            optimizer.step()
        return step

    eager_step, compiled_step = stepper(model), stepper(compiled)
    start = time.perf_counter()
    compiled_step()  # compiles
    compile_s = time.perf_counter() - start
    eager, fast = timed([eager_step, compiled_step], steps, 2, "cpu")
    return {"eager_s": eager, "compiled_s": fast, "speedup": eager / fast, "compile_s": compile_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("families", nargs="*", default=["vit_digits", "vit_micro_patch4_32"],
                        help="model families (default: vit_digits vit_micro_patch4_32)")
    families = parser.parse_args().families
    recipes = {family: path for family, (path, _) in family_recipes(ROOT / "recipes", families).items()}
    lines = ["# torch.compile against eager, one training step (CPU)", "",
             f"torch {torch.__version__}, {torch.get_num_threads()} thread(s). Medians of 10 interleaved steps after "
             "2 warm-up steps; `python -m benchmarks.compile` rewrites this file.", "",
             "| model | eager step (s) | compiled step (s) | speed-up | compile time (s) |",
             "| --- | ---: | ---: | ---: | ---: |"]
    for family in families:
        r = compare(recipes[family])
        lines.append(f"| {family} | {r['eager_s']:.4f} | {r['compiled_s']:.4f} | {r['speedup']:.2f}x | "
                     f"{r['compile_s']:.0f} |")
        print(lines[-1], flush=True)
    (RESULTS / "compile.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
