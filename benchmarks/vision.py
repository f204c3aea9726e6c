"""Vision families against the same timm model called directly (a bare training loop), in the same run:
training and inference images/s, peak memory, FLOPs; writes benchmarks/results/vision.md and vision.json.

    HUB_DATA_DIR=../shared/data python -m benchmarks.vision

The measurement is :mod:`benchmarks.report` (``attnhub bench``) restricted to the vision families; a ratio near 1
means the hub's task and training step add nothing to timm's module.
"""
import argparse

from benchmarks.report import run

VISION = "vit_*,coat_*,halonet*,resnet_cbam*,slot_*"

if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    print(run(VISION, report="vision"))
