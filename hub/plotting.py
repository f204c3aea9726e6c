"""Saving matplotlib figures the way every run artefact is saved: rendered in memory, written atomically."""
from __future__ import annotations

import io
import os

from hub.io import atomic_write_bytes


def save_figure(fig, path: str | os.PathLike, dpi: int = 90, **savefig_kwargs) -> None:
    """Render ``fig`` as PNG, close it, and write it to ``path`` with a temporary file and a rename."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, **savefig_kwargs)
    plt.close(fig)
    atomic_write_bytes(path, buffer.getvalue())


def save_map_figure(values, path: str | os.PathLike, title: str, labels: list[str] | None = None,
                    xlabel: str = "", ylabel: str = "") -> None:
    """The figure of a map without a picture to lay it over: bars for a (K,) map (named by ``labels``), a heat map
    for a (R, K) map (its columns named by ``labels``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    values = np.asarray(values, dtype=float)
    names = labels or [str(i) for i in range(values.shape[-1])]
    fig, ax = plt.subplots(figsize=(max(4.0, min(12.0, 0.25 * values.shape[-1] + 2)), 3.2))
    if values.ndim == 1:
        ax.bar(range(len(values)), values, color="tab:blue")
    else:
        image = ax.imshow(values.reshape(-1, values.shape[-1]), aspect="auto", cmap="viridis")
        fig.colorbar(image, ax=ax, fraction=0.046)
    if len(names) <= 40:
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
