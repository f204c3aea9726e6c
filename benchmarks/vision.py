"""Vision families against the same timm model called directly (a bare training loop), in the same run:
training and inference images/s, peak memory, FLOPs; writes benchmarks/vision.md and vision.json.

    HUB_DATA_DIR=../shared/data python benchmarks/vision.py

The measurement is :mod:`hub.bench` (``attnhub bench``) restricted to the vision families; a ratio near 1
means the hub's task and training step add nothing to timm's module.
"""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hub.bench import run  # noqa: E402

VISION = "vit_*,coat_*,halonet*,resnet_cbam*,slot_*"

if __name__ == "__main__":
    print(run(VISION, recipes_dir=str(ROOT / "recipes"), out_dir=str(ROOT / "benchmarks"), report="vision"))
