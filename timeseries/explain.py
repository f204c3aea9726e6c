"""Explanations of the time-series models.

RUL trajectories and forecasts of test units, and their plot (predicted vs true RUL per unit).

For each unit the model slides over its whole observed history (the RUL estimated at every cycle), and
from the last observed window forecasts the RUL over the next ``horizon`` cycles (the ForeNet idea:
a forward window for maintenance planning). True values are the piecewise-linear RUL capped at the
data's ``rul_cap``, counted back from the official RUL after the last cycle.

    attnhub explain rul_attention.fd001 --out figures         # -> figures/rul_forecast.png
    attnhub explain RUN 3 17 42                               # units 3, 17 and 42

Explaining TESTAM: which expert the router picks for each sensor over time, and the plot of it.

    attnhub explain RUN_FOLDER --out figures     # -> figures/routing_test.png
    attnhub explain RUN_FOLDER val               # the validation split
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hub.errors import DataError
from hub.plotting import save_figure
from timeseries.data import RULWindowData, rul_targets, sliding_windows
from timeseries.models.testam import EXPERTS


def rul_trajectories(model: torch.nn.Module, data: RULWindowData, units: list[int]) -> dict[int, dict[str, np.ndarray]]:
    """Per unit: ``cycles`` (N,), ``estimate`` and ``truth`` (N,) of the RUL now at each window end, and
    ``forecast``/``forecast_truth`` (horizon,) from the last window at ``forecast_cycles``."""
    out = {}
    model.eval()
    for unit in units:
        series = data.test_units[unit]  # (L, S), scaled
        windows = torch.from_numpy(sliding_windows(series, data.window))  # (N, window, S)
        with torch.inference_mode():
            pred = model(windows).numpy()  # (N, horizon)
        truth = rul_targets(len(series), data.window, pred.shape[1], data.rul_cap,
                            data.test_rul_at_end.get(unit, 0.0))  # (N, horizon)
        last = len(series)
        out[unit] = {"cycles": np.arange(data.window, last + 1), "estimate": pred[:, 0], "truth": truth[:, 0],
                     "forecast_cycles": last + np.arange(pred.shape[1]), "forecast": pred[-1],
                     "forecast_truth": truth[-1]}
    return out


def plot_rul_forecast(model: torch.nn.Module, data: RULWindowData, path: str | Path, units: list[int] | None = None,
                      max_units: int = 6) -> Path:
    """Write a PNG with one panel per unit: true and estimated RUL over the history, then the forecast."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    units = list(units) if units else sorted(data.test_units)[:max_units]
    trajectories = rul_trajectories(model, data, units)
    columns = min(3, len(units))
    rows = -(-len(units) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.0 * rows), squeeze=False)
    for ax, unit in zip(axes.flat, units):
        t = trajectories[unit]
        ax.plot(t["cycles"], t["truth"], color="black", label="true RUL")
        ax.plot(t["cycles"], t["estimate"], color="tab:blue", label="estimated")
        ax.plot(t["forecast_cycles"], t["forecast_truth"], color="black", linestyle=":")
        ax.plot(t["forecast_cycles"], t["forecast"], color="tab:orange", marker=".", label="forecast")
        ax.set_title(f"unit {unit}")
        ax.set_xlabel("cycle")
        ax.set_ylabel("RUL (cycles)")
    for ax in list(axes.flat)[len(units):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    save_figure(fig, path)
    return path


def explain_units(card, model, inputs: list[str], out_dir: Path):
    """``attnhub explain NAME [UNIT...]``: predicted vs true RUL and the forecast of the card's test units
    (unit numbers; default: the first 6)."""
    from hub.run.evaluate import card_data

    try:
        units = [int(u) for u in inputs] or None
    except ValueError:
        raise DataError(f"expected test unit numbers to explain, got {inputs}") from None
    yield plot_rul_forecast(model, card_data(card), Path(out_dir) / "rul_forecast.png", units)


def routing_over_time(model: torch.nn.Module, data, split: str = "test", batch_size: int = 64) -> np.ndarray:
    """The router's chosen expert per sample and sensor. Shapes: -> (S, N) ints indexing ``EXPERTS``;
    sample s starts at the step ``data.splits[split][0][s, 0]``."""
    x = getattr(data, f"{split}_set").tensors[0]  # (S, T, N, 2)
    model.eval()
    with torch.inference_mode():
        return torch.cat([model.routing(x[i:i + batch_size]).argmax(-1) for i in range(0, len(x), batch_size)]).numpy()


def plot_routing(model: torch.nn.Module, data, path: str | Path, split: str = "test") -> Path:
    """Write a PNG: the chosen expert per sensor (rows) and sample (columns), and each expert's share over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    choice = routing_over_time(model, data, split)  # (S, N)
    hours = data.splits[split][0][:, data.input_steps - 1] * 5 / 60  # hour of the last input step
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(10, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    cmap = ListedColormap(["tab:blue", "tab:orange", "tab:green"])
    top.imshow(choice.T, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=len(EXPERTS) - 1,
               extent=(hours[0], hours[-1], choice.shape[1], 0))
    top.set_ylabel("sensor")
    top.set_title(f"expert chosen by the router ({split} split): " +
                  ", ".join(f"{name} = {color}" for name, color in zip(EXPERTS, ("blue", "orange", "green"))))
    for e, name in enumerate(EXPERTS):
        bottom.plot(hours, (choice == e).mean(1), color=cmap(e), label=name)
    bottom.set_xlabel("hours since the start of the recording")
    bottom.set_ylabel("share of sensors")
    bottom.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    save_figure(fig, path)
    return path


def explain_routing(card, model, inputs: list[str], out_dir: Path):
    """``attnhub explain NAME [train|val|test]``: TESTAM's routing over the card's split (default test)."""
    from hub.run.evaluate import card_data

    if not hasattr(model, "forward_experts"):
        raise DataError(f"{card.family} has no experts to route between; explanations are TESTAM's routing")
    split = inputs[0] if inputs else "test"
    if split not in ("train", "val", "test") or len(inputs) > 1:
        raise DataError(f"expected one split name (train, val or test) to explain, got {inputs}")
    yield plot_routing(model, card_data(card), Path(out_dir) / f"routing_{split}.png", split)
