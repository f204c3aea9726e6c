"""Where a traffic forecaster's 15-minute error comes from: MAPE and MAE by true-speed bin on the Los-loop test
split, the shipped ``testam.los_loop`` against the last-value baseline. Prints a markdown table.

    HUB_DATA_DIR=../shared/data python benchmarks/traffic_error_by_speed.py [--name testam.los_loop]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import hub  # noqa: E402
from timeseries.traffic_data import HORIZONS, baseline_forecasts, los_loop, masked_errors  # noqa: E402

BINS = ((0, 20), (20, 40), (40, 55), (55, 65), (65, 200))  # mph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="testam.los_loop", help="pretrained tag of a Los-loop forecaster")
    args = parser.parse_args()
    data = los_loop()
    data.setup()
    model = hub.load(args.name).eval()
    x, y = data.test_set.tensors  # (S, T_in, N, 2), (S, T_out, N)
    with torch.no_grad():
        pred = torch.cat([model(x[i:i + 64]) for i in range(0, len(x), 64)])
    step = HORIZONS["15"] - 1  # 1-based output step -> index
    last_value = torch.from_numpy(baseline_forecasts(data)["last_value"])
    true, forecasts = y[:, step], {args.name: pred[:, step], "last value": last_value[:, step]}
    observed = (true != 0).sum()
    print("| true speed (mph) | share | " + " | ".join(f"{n} MAPE / MAE" for n in forecasts) + " |")
    print("|---|---:|" + "---|" * len(forecasts))
    for low, high in ((0, 200), *BINS):
        part = (true >= low) & (true < high)
        cells = []
        for forecast in forecasts.values():
            errors = masked_errors(forecast[part], true[part])  # zero speeds are masked, as in the metrics
            cells.append(f"{100 * errors['rel'] / errors['count']:.1f}% / {errors['abs'] / errors['count']:.2f}")
        label = "all" if (low, high) == (0, 200) else f"{low}-{high if high < 200 else ''}"
        share = (part & (true != 0)).sum() / observed
        print(f"| {label} | {share:.3f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
