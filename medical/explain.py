"""TFCAM's explanations drawn: critical hours, the variable ranking, and variable-to-variable influence.

>>> plot_tfcam_explanations(model.explain(values, mask, static), VARIABLES, "explain.png")

    attnhub explain tfcam.physionet2012 --out figures     # the card's test stays 1-4
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from hub.errors import DataError
from hub.explain import Explanation, class_target, integrated_gradients
from hub.plotting import save_figure


def plot_tfcam_explanations(explained: dict[str, torch.Tensor], variables: list[str], path: str | Path,
                            top: int = 15, title: str = "") -> Path:
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
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path)
    return Path(path)


def stay_explanation(card, model, values: torch.Tensor, mask: torch.Tensor, static: torch.Tensor,
                     target: int | None = None) -> Explanation:
    """What decided one stay's class: for the top class, TFCAM's attention of the hours on each variable (values (F,),
    ``feature_ranking``; the figure draws all three levels); for a class asked by ``target`` (the attention is the
    same for every class) and a family without that attention (``icu_gru``), Integrated Gradients (Captum) over the
    hourly values, summed over hours.
    Shapes: values, mask (1, T, F), static (1, S)."""
    model.eval()
    with torch.no_grad():
        chosen, probability = class_target(model(values, mask, static), target)
    variables = list(card.input_spec["variables"])
    if target is None and hasattr(model, "explain"):
        with torch.no_grad():
            explained = model.explain(values, mask, static)
        return Explanation(explained["feature_ranking"][0].numpy(), "TFCAM attention of the hours on each variable",
                           chosen, probability, labels=variables, axes=("variable",),
                           extra={"explained": explained})
    attribution = integrated_gradients(lambda v, s, m: model(v, m, s), (values, static), chosen, fixed=(mask,))[0]
    reason = ("the attention is the same for every class" if hasattr(model, "explain")
              else f"{type(model).__name__} has no attention to read")
    return Explanation(attribution[0].sum(0).numpy(), f"Integrated Gradients (Captum), summed over hours: {reason}",
                       chosen, probability, labels=variables, axes=("variable",))


def stay_samples(card, inputs: list[str]) -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    """``(stayN, {"values", "mask", "static"})`` per 1-based stay number of the card's test split (default: 1-4)."""
    from hub.run.evaluate import card_data

    rows = card_data(card).test_set
    try:
        stays = [int(i) for i in inputs] or list(range(1, min(4, len(rows.values)) + 1))
    except ValueError:
        raise DataError(f"expected test stay numbers (1-based) to explain, got {inputs}") from None
    bad = [i for i in stays if not 1 <= i <= len(rows.values)]
    if bad:
        raise DataError(f"stay numbers {bad} are outside the test split's stays 1-{len(rows.values)}")
    for i in stays:
        yield f"stay{i}", {"values": rows.values[i - 1:i], "mask": rows.mask[i - 1:i], "static": rows.static[i - 1:i]}


def patient_explanation(card, model, inputs: dict[str, torch.Tensor]) -> Explanation:
    """What decided one patient's risk: Integrated Gradients (Captum) over the clinical values and the measured genes
    (values (C + G,); an unmeasured gene gets 0). The gene attention relates genes to genes and says nothing of the
    clinical values, which join at the last layer, so attribution explains the risk."""
    model.eval()
    with torch.no_grad():
        risk = float(model(**inputs)[0])
    spec = card.input_spec
    if "genes" in inputs:
        mask = inputs.get("gene_mask", torch.ones_like(inputs["genes"], dtype=torch.bool))
        found = integrated_gradients(lambda c, g, m: model(c, g, m), (inputs["clinical"], inputs["genes"]), None,
                                     fixed=(mask,))
    else:
        found = integrated_gradients(lambda c: model(c), (inputs["clinical"],), None)
    values = torch.cat([a[0] for a in found])
    labels = list(spec.get("clinical", []))[:found[0].shape[1]] + list(spec.get("genes", []))[:values.numel()]
    labels += [f"input {i}" for i in range(len(labels), values.numel())]
    return Explanation(values.numpy(), "Integrated Gradients (Captum) of the risk: the gene attention does not reach "
                       "the clinical values", output=risk, labels=labels, axes=("input",))
