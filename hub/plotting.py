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
    """The figure of a map without a picture to lay it over: bars for a (K,) or (1, K) map (named by ``labels``), a
    heat map for a (R, K) map (its columns named by ``labels``, and its rows too when it is square)."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    values = np.asarray(values, dtype=float)
    values = values[0] if values.ndim == 2 and values.shape[0] == 1 else values
    names = labels or [str(i) for i in range(values.shape[-1])]
    square = values.ndim == 2 and values.shape[0] == values.shape[1] == len(names)
    fig, ax = plt.subplots(figsize=(max(5.5, min(12.0, 0.25 * values.shape[-1] + 2)), 4.2 if square else 3.4))
    if values.ndim == 1:
        ax.bar(range(len(values)), values, color=np.where(values >= 0, "tab:blue", "tab:red"))
        ax.axhline(0, color="0.5", linewidth=0.5)
    else:
        image = ax.imshow(values.reshape(-1, values.shape[-1]), aspect="auto", cmap="viridis",
                          interpolation="nearest")
        fig.colorbar(image, ax=ax, fraction=0.046)
        if square:
            ax.set_yticks(range(len(names)), names, fontsize=6)
    if len(names) <= 40:
        ax.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
    ax.set(xlabel=xlabel, ylabel=ylabel)
    ax.set_title("\n".join(part for line in title.splitlines() for part in textwrap.wrap(line, 90)), fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)
