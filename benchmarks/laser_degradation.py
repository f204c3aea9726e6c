"""The laser degradation model against the reliability field's methods, leaving each of the 15 GaAs lasers out.

For each laser in turn, the other 14 train (all their windows); the held-out laser is observed up to a cut-off
(1000, 2000 or 3000 h) and each method forecasts its path from there, then its failure time (the first crossing of
the 10% current increase, interpolated between inspections; forecasts are rolled on past 4000 h when needed):

* ``degradation_gru``: the attention GRU of ``recipes/timeseries/degradation_gru_laser.yaml`` (its model and optimiser;
  no validation lasers), trained from ``--seeds`` seeds per fold; each seed's own figures, then mean ± std over seeds;
* per-unit linear extrapolation: the held-out laser's observed points fitted by a line through the origin
  (Meeker & Escobar's approximate degradation analysis, Section 13.7);
* a Wiener-process degradation model with a random drift per unit (``X(t) = mu t + sigma B(t)``, mu ~ N(mu0, tau^2);
  Peng & Tseng, IEEE Trans. Reliab. 2009): mu0, tau and sigma fitted on the 14 training lasers by moments, the
  held-out laser's drift its posterior mean given its observed level; path ``x_c + mu (t - t_c)``, failure time the
  first-passage mean ``t_c + (10 - x_c) / mu``.

Truth: the path itself after the cut-off (RMSE over the inspections to 4000 h, in % points); the failure time is the
observed crossing for the 3 lasers that fail by 4000 h (units 1, 6, 10) and, for the 12 censored ones, Meeker &
Escobar's pseudo failure time (the line through the origin fitted to the whole 4000-h path). Failure-time error is
the median absolute error in hours over the 15 lasers (a forecast that never crosses within 40,000 h counts as
40,000 h). Writes ``benchmarks/results/laser_degradation.md``.

    HUB_DATA_DIR=../shared/data python -m benchmarks.laser_degradation
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import torch
import torch.nn.functional as F

import hub
from benchmarks import RESULTS
from hub.io import atomic_write_bytes
from hub.recipe import recipe_file
from timeseries.data import LASER_INFO, degradation_windows, read_laser_units
from timeseries.models.degradation_gru import threshold_crossing

RECIPE = "timeseries/degradation_gru_laser.yaml"
CUTOFFS = (1000, 2000, 3000)
LONGEST = 40_000.0  # hours: a forecast that has not crossed by then counts as crossing here


def origin_slope(hours: np.ndarray, path: np.ndarray) -> float:
    """Least-squares slope of a line through the origin."""
    return float((hours * path).sum() / (hours * hours).sum())


def true_failure_times(hours: np.ndarray, units: dict[int, np.ndarray], threshold: float) -> dict[int, float]:
    """The observed crossing where there is one, else the pseudo failure time of the whole path."""
    times = {}
    for unit, path in units.items():
        crossing = threshold_crossing(hours, path, threshold)
        times[unit] = crossing if math.isfinite(crossing) else threshold / origin_slope(hours[1:], path[1:])
    return times


def linear_forecast(hours, path, cut, threshold):
    """Per-unit linear extrapolation from the inspections up to index ``cut``: (future path, failure time)."""
    slope = origin_slope(hours[1:cut + 1], path[1:cut + 1])
    crossing = threshold_crossing(hours[:cut + 1], path[:cut + 1], threshold)
    return slope * hours[cut + 1:], crossing if math.isfinite(crossing) else threshold / max(slope, 1e-9)


def wiener_fit(hours: np.ndarray, paths: list[np.ndarray]) -> tuple[float, float, float]:
    """Moments of the random-drift Wiener process on full paths: (mu0, tau^2, sigma^2)."""
    dt = np.diff(hours)
    drifts = np.array([p[-1] / hours[-1] for p in paths])
    residuals = np.concatenate([(np.diff(p) - mu * dt) ** 2 / dt for p, mu in zip(paths, drifts)])
    sigma2 = residuals.sum() / (len(residuals) - len(paths))
    tau2 = max(drifts.var(ddof=1) - sigma2 / hours[-1], 1e-12)
    return float(drifts.mean()), float(tau2), float(sigma2)


def wiener_forecast(hours, path, cut, threshold, params):
    """The held-out unit's posterior drift given its level at ``hours[cut]``: (future path, failure time)."""
    mu0, tau2, sigma2 = params
    t_c, x_c = hours[cut], path[cut]
    mu = (mu0 / tau2 + x_c / sigma2) / (1 / tau2 + t_c / sigma2)
    crossing = threshold_crossing(hours[:cut + 1], path[:cut + 1], threshold)
    failure = crossing if math.isfinite(crossing) else t_c + (threshold - x_c) / max(mu, 1e-9)
    return x_c + mu * (hours[cut + 1:] - t_c), failure


def train_gru(paths: list[np.ndarray], seed: int):
    """The recipe's model and optimiser (AdamW, cosine after a linear warmup, clipping) on the windows of ``paths``."""
    recipe = recipe_file(RECIPE)
    args = recipe.data.args
    pairs = [degradation_windows(p, args["window"], args["horizon"]) for p in paths]
    x = torch.from_numpy(np.concatenate([a for a, _ in pairs]))
    y = torch.from_numpy(np.concatenate([b for _, b in pairs]))
    torch.manual_seed(seed)
    model = hub.create_model(recipe.model.name, window=args["window"], horizon=args["horizon"], **recipe.model.args)
    opt = recipe.optimizer
    optimizer = torch.optim.AdamW(model.parameters(), lr=opt.lr, weight_decay=opt.weight_decay)
    batches = math.ceil(len(x) / args["batch_size"])
    total, warmup = recipe.trainer.max_epochs * batches, recipe.scheduler.warmup_epochs * batches
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: (s + 1) / warmup if s < warmup else
                                                 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup))))
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(recipe.trainer.max_epochs):
        for idx in torch.randperm(len(x), generator=generator).split(args["batch_size"]):
            loss = F.mse_loss(model(x[idx]), y[idx])
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.trainer.gradient_clip_val)
            optimizer.step()
            schedule.step()
    return model.eval()


def gru_forecast(model, hours, path, cut, threshold):
    step = hours[1] - hours[0]
    steps = int(LONGEST // step) - cut
    future = model.forecast_path(torch.tensor(path[:cut + 1], dtype=torch.float32)[None, :, None], steps)[0].numpy()
    full_hours = np.concatenate([hours[:cut + 1], hours[cut] + step * np.arange(1, steps + 1)])
    crossing = threshold_crossing(full_hours, np.concatenate([path[:cut + 1], future]), threshold)
    return future[:len(hours) - cut - 1], crossing if math.isfinite(crossing) else LONGEST


def scores(forecasts: dict[int, tuple], units, truth, cut) -> tuple[float, float]:
    """(path RMSE over every held-out inspection after the cut-off, median |failure-time error| in hours)."""
    errors = np.concatenate([forecasts[u][0] - units[u][cut + 1:] for u in units])
    failure = np.array([abs(min(forecasts[u][1], LONGEST) - truth[u]) for u in units])
    return float(np.sqrt(np.mean(errors ** 2))), float(np.median(failure))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3, help="GRU seeds per held-out laser (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    options = parser.parse_args(argv)
    torch.set_num_threads(options.threads)
    threshold = LASER_INFO["failure_threshold"]
    hours, units = read_laser_units()
    truth = true_failure_times(hours, units, threshold)
    cuts = [int(np.searchsorted(hours, c)) for c in CUTOFFS]
    results = {c: {"linear": {}, "wiener": {}} for c in CUTOFFS}
    gru = {(c, s): {} for c in CUTOFFS for s in range(options.seeds)}
    for held in units:
        others = [units[u] for u in units if u != held]
        params = wiener_fit(hours, others)
        for c, cut in zip(CUTOFFS, cuts):
            results[c]["linear"][held] = linear_forecast(hours, units[held], cut, threshold)
            results[c]["wiener"][held] = wiener_forecast(hours, units[held], cut, threshold, params)
        for seed in range(options.seeds):
            model = train_gru(others, seed)
            for c, cut in zip(CUTOFFS, cuts):
                gru[c, seed][held] = gru_forecast(model, hours, units[held], cut, threshold)
        print(f"laser {held} done", flush=True)
    lines = ["# GaAs laser degradation: path forecasts and failure times, leaving each laser out", "",
             "Meeker & Escobar's 15 GaAs lasers (% operating-current increase every 250 h to 4000 h; failure at 10%).",
             "Each laser is held out in turn and observed up to the cut-off; the 14 others train (the GRU) or fit",
             "(the Wiener model's population drift). Path RMSE: % points over the held-out inspections after the",
             "cut-off to 4000 h. Failure time: median |error| in hours against the observed crossing (lasers 1, 6, 10)",
             "or the pseudo failure time of the whole path (the 12 others). The data is tiny: 15 paths, 240 values.",
             f"The GRU: {options.seeds} seeds per held-out laser, mean ± std over the seeds.",
             "`HUB_DATA_DIR=../shared/data python -m benchmarks.laser_degradation`", "",
             "| cut-off (h) | method | path RMSE (%) | failure-time median abs. error (h) |",
             "| ---: | --- | ---: | ---: |"]
    for c, cut in zip(CUTOFFS, cuts):
        seeds = np.array([scores(gru[c, s], units, truth, cut) for s in range(options.seeds)])
        mean, std = seeds.mean(0), seeds.std(0)
        lines.append(f"| {c} | attention GRU (degradation_gru) | {mean[0]:.3f} ± {std[0]:.3f} | "
                     f"{mean[1]:.0f} ± {std[1]:.0f} |")
        for name, label in (("linear", "per-unit linear extrapolation"), ("wiener", "Wiener process, random drift")):
            rmse, failure = scores(results[c][name], units, truth, cut)
            lines.append(f"| {c} | {label} | {rmse:.3f} | {failure:.0f} |")
    text = "\n".join(lines) + "\n"
    atomic_write_bytes(RESULTS / "laser_degradation.md", text.encode())
    print(text)


if __name__ == "__main__":
    main()
