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
