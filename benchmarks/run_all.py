"""Write benchmarks/RESULTS.md and RESULTS.json for every registered model family.

    HUB_DATA_DIR=../shared/data python benchmarks/run_all.py [PATTERN] [--steps N]

The same as ``attnhub bench``; see :mod:`hub.bench` for what is measured and how.
"""
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hub.bench import run  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("pattern", nargs="?", default="*", help="glob over family names (default: all)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per model (default 5)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default cpu)")
    args = parser.parse_args()
    print(run(args.pattern, recipes_dir=str(ROOT / "recipes"), out_dir=str(ROOT / "benchmarks"), steps=args.steps,
              device=args.device))
