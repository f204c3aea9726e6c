"""Explanations of the time-series models.

RUL models: the attention pooling over the cycles of a test unit's last window (:func:`window_explanation`).

    attnhub explain rul_attention.fd001 --out figures         # -> figures/unit1_explain.png, ... (units 1-3)
    attnhub explain RUN 3 17 42                               # units 3, 17 and 42

PULSE: the cross-attention of the PPG's heart-rate bins over the accelerometer's (:func:`pulse_explanation`).

    attnhub explain pulse.troika run.csv:40 --out figures     # the window starting at 40 s

TESTAM: Integrated Gradients (Captum) of the forecast over input steps and sensors (:func:`traffic_explanation`);
which expert the router picks for each sensor over time, and the plot of it (:func:`plot_routing`).

    attnhub explain testam.los_loop 1 2 --out figures         # test samples 1 and 2
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from hub.errors import DataError
from hub.explain import Explanation, integrated_gradients
from hub.plotting import save_figure
from timeseries.data import sliding_windows
from timeseries.models.testam import EXPERTS


def window_explanation(card, model: torch.nn.Module, x: torch.Tensor) -> Explanation:
    """What decided one window's RUL forecast: the attention over the cycles (values (T,), mean over heads):
    RULAttention's pooling (its pooling over the sensors in ``details``), AttentionGRU's last state over its states;
    for a family without attention maps, Integrated Gradients (Captum) of the RUL now over the window, summed over
    sensors. Shapes: x (1, window, sensors)."""
    model.eval()
    sensors = list(card.input_spec.get("sensors", []))
    with torch.no_grad():
        rul = float(model(x)[0, 0])
    cycles = [f"t-{x.shape[1] - 1 - i}" if i < x.shape[1] - 1 else "t" for i in range(x.shape[1])]
    if hasattr(model, "attention_maps"):
        with torch.no_grad():
            maps = model.attention_maps(x)  # RULAttention: time_pool, sensor_pool; AttentionGRU: time (B, H, 1, T)
        over_cycles = maps.get("time_pool", maps.get("time")).mean(1)[0, 0]  # (T,)
        details = {}
        if "sensor_pool" in maps:
            names = sensors or [str(i) for i in range(x.shape[2])]
            details["sensor_attention"] = dict(zip(names, maps["sensor_pool"].mean(1)[0, 0].tolist()))
        return Explanation(over_cycles.numpy(), "attention over the window's cycles (mean over heads)" +
                           ("; over the sensors in the JSON" if details else ""), output=rul, labels=cycles,
                           axes=("cycle",), details=details)
    values = integrated_gradients(lambda w: model(w)[:, 0], (x,), None)[0][0].sum(1)
    return Explanation(values.numpy(), f"Integrated Gradients (Captum): {type(model).__name__} has no attention "
                       "maps to read", output=rul, labels=cycles, axes=("cycle",))


def path_explanation(model: torch.nn.Module, x: torch.Tensor) -> Explanation:
    """What decided one unit's forecast: Integrated Gradients (Captum) of the furthest forecast level (``horizon``
    inspections ahead) over the window's inspections, the last state's attention over them in ``details``. The
    attention alone fails the randomisation test on a 4-inspection window (rank correlation 0.73 with random weights
    on degradation_gru.laser, tests/unit/test_explain_tags.py), so attribution draws the map.
    Shapes: x (1, window, 1)."""
    model.eval()
    with torch.no_grad():
        furthest = float(model(x)[0, -1])
        attention = model.attention_maps(x)["time"].mean(1)[0, 0] if hasattr(model, "attention_maps") else None
    values = integrated_gradients(lambda w: model(w)[:, -1], (x,), None)[0][0].sum(1)  # (window,)
    steps = [f"t-{x.shape[1] - 1 - i}" if i < x.shape[1] - 1 else "t" for i in range(x.shape[1])]
    details = {} if attention is None else {"attention_over_inspections": dict(zip(steps, attention.tolist()))}
    return Explanation(values.numpy(), "Integrated Gradients (Captum) of the furthest forecast level over the "
                       "inspections", output=furthest, labels=steps, axes=("inspection",), details=details)


def pulse_explanation(model: torch.nn.Module, x: torch.Tensor) -> Explanation:
    """What decided one window's heart rate: the cross-attention of the PPG's heart-rate bins (rows, queries) over the
    accelerometer's (columns, keys and values), mean over heads, each row weighted by the probability the model gives
    its bin (so the rows that decided the output stand out); the unweighted map's strongest accelerometer bins per
    likely heart rate in the JSON. Shapes: x (1, 5, T) -> values (F, F)."""
    model.eval()
    with torch.no_grad():
        probs = model.bin_logits(x).softmax(-1)[0]  # (F,)
        cross = model.attention_maps(x)["cross"].mean(1)[0]  # (F, F)
        bpm = float(probs @ model.bpm)
    labels = [f"{b:g}" for b in model.bpm.tolist()]
    low, step = float(model.bpm[0]), float(model.bpm[1] - model.bpm[0])
    top = probs.topk(3).indices.tolist()
    details = {"bin_probability": dict(zip(labels, probs.tolist())),
               "likely_bpm_attends_to_acc_bpm": {labels[i]: labels[int(cross[i].argmax())] for i in top}}
    return Explanation((cross * probs[:, None]).numpy(), "cross-attention of the PPG's heart-rate bins over the "
                       "accelerometer's (mean over heads), rows weighted by the model's bin probability", output=bpm,
                       labels=labels, axes=("PPG bin (BPM)", f"accelerometer bin (index i: {low:g} + {step:g} i BPM)"),
                       details=details)


def unit_samples(card, inputs: list[str]) -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    """``(unitN, {"x": (1, window, sensors)})``: the last window of each test unit of the card's data (unit
    numbers; default: the first three)."""
    from hub.run.evaluate import card_data

    try:
        units = [int(u) for u in inputs]
    except ValueError:
        raise DataError(f"expected test unit numbers to explain, got {inputs}") from None
    data = card_data(card)
    unknown = [u for u in units if u not in data.test_units]
    if unknown:
        raise DataError(f"test units {unknown} do not exist: the test units are {min(data.test_units)}-"
                        f"{max(data.test_units)}")
    for unit in units or sorted(data.test_units)[:3]:
        windows = sliding_windows(data.test_units[unit], data.window)  # (N, window, S)
        yield f"unit{unit}", {"x": torch.from_numpy(windows[-1:]).float()}


def traffic_explanation(model: torch.nn.Module, x: torch.Tensor) -> Explanation:
    """What decided one sample's forecast: Integrated Gradients (Captum) of the mean forecast over the input steps
    and sensors, summed over speed and time of day (values (T, N)). TESTAM's own attention is spread over three
    experts and a router, none of which says alone what the forecast rests on. Shapes: x (1, T, N, 2)."""
    model.eval()
    with torch.no_grad():
        mean = float(model(x).mean())
    values = integrated_gradients(lambda w: model(w).flatten(1).mean(1), (x,), None, steps=16)[0][0].sum(-1)
    return Explanation(values.numpy(), "Integrated Gradients (Captum) of the mean forecast: TESTAM's attention is "
                       "split over experts and a router", output=mean, axes=("input step", "sensor"))


def traffic_samples(card, inputs: list[str]) -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    """``(sampleN, {"x": (1, T, N, 2)})`` per 1-based sample number of the card's test split (default: 1)."""
    from hub.run.evaluate import card_data

    x = card_data(card).test_set.tensors[0]  # (S, T, N, 2)
    try:
        samples = [int(i) for i in inputs] or [1]
    except ValueError:
        raise DataError(f"expected test sample numbers (1-based) to explain, got {inputs}") from None
    bad = [i for i in samples if not 1 <= i <= len(x)]
    if bad:
        raise DataError(f"sample numbers {bad} are outside the test split's samples 1-{len(x)}")
    for i in samples:
        yield f"sample{i}", {"x": x[i - 1:i]}


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
