"""Explaining TESTAM: which expert the router picks for each sensor over time, and the plot of it.

    attnhub explain RUN_FOLDER --out figures     # -> figures/routing_test.png
    attnhub explain RUN_FOLDER val               # the validation split
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hub.adapters import register_explain_adapter
from hub.errors import DataError
from hub.plotting import save_figure
from timeseries.testam import EXPERTS


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


@register_explain_adapter("traffic_series")
def explain_routing(card, model, inputs: list[str], out_dir: Path):
    """``attnhub explain NAME [train|val|test]``: TESTAM's routing over the card's split (default test)."""
    from hub.run.evaluate import card_data

    if not hasattr(model, "forward_experts"):
        raise DataError(f"{card.family} has no experts to route between; explanations are TESTAM's routing")
    split = inputs[0] if inputs else "test"
    if split not in ("train", "val", "test") or len(inputs) > 1:
        raise DataError(f"expected one split name (train, val or test) to explain, got {inputs}")
    yield plot_routing(model, card_data(card), Path(out_dir) / f"routing_{split}.png", split)
