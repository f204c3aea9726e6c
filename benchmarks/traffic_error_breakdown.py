"""Where a Los-loop forecaster's error comes from, on the test split, against the baselines. Prints two markdown
tables:

* by true speed: 15-minute MAPE and MAE per speed bin, the forecaster against last value;
* T-GCN's protocol: MAE and RMSE pooled over output steps 1-3, 1-6 and 1-12, which is what the T-GCN paper
  (Zhao et al. 2019) reports as its 15-, 30- and 60-minute figures (its model predicts 3, 6 or 12 steps and is
  scored over all of them, on the last 20% of the week). The hub's own metrics score step 3, 6 or 12 alone.

    HUB_DATA_DIR=../shared/data python -m benchmarks.traffic_error_breakdown [--name testam.los_loop]
    python -m benchmarks.traffic_error_breakdown --name runs/testam_los_loop/*   # several seeds' run folders
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

import hub
from timeseries.baselines import baseline_forecasts
from timeseries.data import los_loop
from timeseries.tasks import HORIZONS, masked_errors

BINS = ((0, 20), (20, 40), (40, 55), (55, 65), (65, 200))  # mph
TGCN_PUBLISHED = {"15": (3.18, 5.13)}  # Los-loop MAE, RMSE: the T-GCN paper, as issue 8 quotes them


def by_speed(forecasts: dict[str, torch.Tensor], true: torch.Tensor) -> None:
    step = HORIZONS["15"] - 1  # 1-based output step -> index
    true = true[:, step]
    observed = (true != 0).sum()
    print("| true speed (mph) | share | " + " | ".join(f"{n} MAPE / MAE" for n in forecasts) + " |")
    print("|---|---:|" + "---|" * len(forecasts))
    for low, high in ((0, 200), *BINS):
        part = (true >= low) & (true < high)
        cells = []
        for forecast in forecasts.values():
            errors = masked_errors(forecast[:, step][part], true[part])  # zero speeds are masked, as in the metrics
            cells.append(f"{100 * errors['rel'] / errors['count']:.1f}% / {errors['abs'] / errors['count']:.2f}")
        label = "all" if (low, high) == (0, 200) else f"{low}-{high if high < 200 else ''}"
        share = (part & (true != 0)).sum() / observed
        print(f"| {label} | {share:.3f} | " + " | ".join(cells) + " |")


def pooled_over_steps(forecasts: dict[str, torch.Tensor], true: torch.Tensor, models: list[str]) -> None:
    """One row per forecast, and the mean and std over ``models`` (several seeds) when there are more than one."""
    print("| model | " + " | ".join(f"{m} min: steps 1-{s} MAE / RMSE" for m, s in HORIZONS.items()) + " |")
    print("|---|" + "---|" * len(HORIZONS))
    scores = {}
    for name, forecast in forecasts.items():
        scores[name] = []
        for steps in HORIZONS.values():
            errors = masked_errors(forecast[:, :steps], true[:, :steps])
            scores[name].append((errors["abs"] / errors["count"], (errors["sq"] / errors["count"]).sqrt()))
        print(f"| {name} | " + " | ".join(f"{mae:.2f} / {rmse:.2f}" for mae, rmse in scores[name]) + " |")
    if len(models) > 1:
        table = torch.tensor([scores[m] for m in models])  # (models, horizons, 2)
        mean, std = table.mean(0), table.std(0)
        print(f"| mean ± std of the {len(models)} models | " + " | ".join(
            f"{mean[h, 0]:.2f} ± {std[h, 0]:.2f} / {mean[h, 1]:.2f} ± {std[h, 1]:.2f}" for h in range(len(HORIZONS))) +
            " |")
    print("| T-GCN (published, its own split) | " +
          " | ".join("{:.2f} / {:.2f}".format(*TGCN_PUBLISHED[m]) if m in TGCN_PUBLISHED else "-" for m in HORIZONS) +
          " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", nargs="+", default=["testam.los_loop"],
                        help="pretrained tags or run folders of Los-loop forecasters; the speed table uses the first")
    args = parser.parse_args()
    data = los_loop()
    data.setup()
    x, y = data.test_set.tensors  # (S, T_in, N, 2), (S, T_out, N)
    forecasts = {}
    for name in args.name:
        model = hub.load(name).eval()
        with torch.no_grad():
            forecasts[Path(name).name] = torch.cat([model(x[i:i + 64]) for i in range(0, len(x), 64)])
    models = list(forecasts)
    baselines = {k: torch.from_numpy(v) for k, v in baseline_forecasts(data).items()}
    by_speed({models[0]: forecasts[models[0]], "last value": baselines["last_value"]}, y)
    print()
    pooled_over_steps({**forecasts, "last value": baselines["last_value"],
                       "historical average": baselines["historical_average"]}, y, models)


if __name__ == "__main__":
    main()
