"""A matplotlib Figure on the Agg canvas, and its atomic write as a PNG.

Figures are built with `matplotlib.figure.Figure` directly, never through pyplot: no global state,
no interactive backend, no display needed, whatever ``MPLBACKEND`` says.
"""
from __future__ import annotations

import io
import os

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from tuner.fileio import atomic_write

#: Resolution of the written PNGs (dots per inch of the figure sizes given in inches).
DPI = 100
#: Shared style: opacity of grid lines, font size of dense labels (board cells, many ticks), the
#: height a figure title takes (inches).
GRID_ALPHA = 0.3
SMALL_FONT = 7
TITLE_INCHES = 0.6


def new_figure(width: float, height: float) -> Figure:
    """An empty figure of `width` x `height` inches on an Agg canvas, laid out automatically."""
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: str | os.PathLike) -> None:
    """Render `fig` as a PNG and replace `path` with it atomically (the old file or the whole new
    one, never half)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    atomic_write(path, buf.getvalue())


def number_text(x: float, digits: int) -> str:
    """`x` with `digits` decimals, never ``-0`` (a value that rounds to zero is written 0)."""
    text = f"{x:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text
