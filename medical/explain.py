"""TFCAM's explanations drawn: critical hours, the variable ranking, and variable-to-variable influence.

>>> plot_tfcam_explanations(model.explain(values, mask, static), VARIABLES, "explain.png")

    attnhub explain tfcam.physionet2012 --out figures     # the card's test stays
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from hub.errors import DataError
from hub.plotting import save_figure


def plot_tfcam_explanations(explained: dict[str, torch.Tensor], variables: list[str], path: str | Path,
                            top: int = 15) -> Path:
    """Three panels over the explained patients: mean (and interquartile band) attention per hour, the
    ``top`` variables by mean attention, and the (F, F) influence matrix of those variables."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hours = explained["critical_hours"].numpy()  # (B, T)
    ranking = explained["feature_ranking"].numpy().mean(0)  # (F,)
    influence = explained["feature_influence"].numpy()  # (F, F)
    order = np.argsort(ranking)[::-1][:top]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5), gridspec_kw={"width_ratios": [1.2, 1, 1.1]})
    steps = np.arange(hours.shape[1])
    axes[0].plot(steps, hours.mean(0), color="tab:red")
    axes[0].fill_between(steps, *np.percentile(hours, [25, 75], axis=0), color="tab:red", alpha=0.2)
    axes[0].set(title="critical time periods", xlabel="hour since ICU admission", ylabel="attention")
    axes[1].barh([variables[i] for i in order][::-1], ranking[order][::-1], color="tab:blue")
    axes[1].set(title=f"variable ranking (top {len(order)})", xlabel="attention")
    image = axes[2].imshow(influence[np.ix_(order, order)], cmap="viridis")
    names = [variables[i] for i in order]
    axes[2].set_xticks(range(len(order)), names, rotation=90, fontsize=7)
    axes[2].set_yticks(range(len(order)), names, fontsize=7)
    axes[2].set(title="influence across time (row attends to column)")
    fig.colorbar(image, ax=axes[2], fraction=0.046)
    fig.tight_layout()
    save_figure(fig, path)
    return Path(path)


def explain_stays(card, model, inputs: list[str], out_dir: Path):
    """``attnhub explain NAME [COUNT]``: the explanations over the first COUNT (default 256) test stays."""
    from hub.run.evaluate import card_data

    if not hasattr(model, "explain"):
        raise DataError(f"{card.family} has no attention to explain; TFCAM models do")
    try:
        count = int(inputs[0]) if inputs else 256
    except ValueError:
        raise DataError(f"expected a number of test stays to explain, got {inputs}") from None
    rows = card_data(card).test_set
    explained = model.explain(rows.values[:count], rows.mask[:count], rows.static[:count])
    yield plot_tfcam_explanations(explained, card.input_spec["variables"], Path(out_dir) / "tfcam_explanations.png")
