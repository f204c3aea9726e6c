"""Write benchmarks/results/RESULTS.md and RESULTS.json for every registered model family.

    HUB_DATA_DIR=../shared/data python -m benchmarks.run_all [PATTERN] [--steps N] [--device cuda]

``attnhub bench`` runs the same; see :mod:`benchmarks.report` for what is measured and how.
"""
import argparse

from benchmarks import RESULTS, ROOT
from benchmarks.report import run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pattern", nargs="?", default="*", help="glob over family names (default: all)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per model (default 5)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    args = parser.parse_args(argv)
    print(run(args.pattern, recipes_dir=ROOT / "recipes", out_dir=RESULTS, steps=args.steps, device=args.device))


if __name__ == "__main__":
    main()
