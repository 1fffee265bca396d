"""The loss picture of a run (``loss.png``), drawn with matplotlib (Agg backend, no display).

`loss_figure` draws the training loss, the validation loss (only when the run has one), a marker at
the best epoch and the learning rate on a second y axis, against 1-based epochs; `write_loss_plot`
writes it as a PNG, atomically. Scales turn logarithmic where a linear one would flatten the curve:
the epoch axis for long runs (most of the descent happens in the first epochs), the loss axis when
the loss spans a large ratio, the learning-rate axis when the rate decays by a large factor.
"""
from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from tuner.plots.figure import GRID_ALPHA, new_figure, save_png

#: The keys `history` must have: 1-based epochs, then one value per epoch.
HISTORY_KEYS = ("epoch", "train_loss", "val_loss", "lr")
#: From this many epochs on, the epoch axis is logarithmic.
LOG_EPOCHS_FROM = 100
#: A loss or learning-rate series whose largest / smallest positive value reaches this ratio is
#: drawn on a logarithmic axis.
LOG_RATIO_FROM = 10.0
#: Series with at most this many epochs are drawn with a marker at every epoch; marker sizes
#: (points) of those and of the best epoch's star.
MARKERS_UP_TO = 60
MARKER_SIZE, BEST_MARKER_SIZE = 3, 14
#: Figure size in inches (1000 x 560 pixels at `tuner.plots.figure.DPI`).
SIZE = (10.0, 5.6)
#: Where the legend's top centre goes, in the loss axes' coordinates: under the epoch label.
LEGEND_ANCHOR = (0.5, -0.12)
TRAIN_COLOUR, VAL_COLOUR, BEST_COLOUR, LR_COLOUR = "tab:blue", "tab:red", "tab:green", "tab:gray"


def _series(history: Mapping[str, Sequence[float]]) -> dict[str, np.ndarray]:
    """The history's columns as float64 arrays, checked: ValueError naming the offending key."""
    missing = [k for k in HISTORY_KEYS if k not in history]
    if missing:
        raise ValueError(f"loss history: missing key(s) {', '.join(missing)} "
                         f"(expected {', '.join(HISTORY_KEYS)})")
    cols = {k: np.asarray(history[k], dtype=np.float64).reshape(-1) for k in HISTORY_KEYS}
    n = cols["epoch"].size
    if n == 0:
        raise ValueError("loss history: no epochs to plot")
    for k in HISTORY_KEYS[1:]:
        if cols[k].size != n:
            raise ValueError(f"loss history: {k} has {cols[k].size} values for {n} epochs")
    bad = [e for e in cols["epoch"] if not (math.isfinite(e) and e >= 1 and e == round(e))]
    if bad:
        raise ValueError(f"loss history: epoch {bad[0]} is not a 1-based epoch number")
    return cols


def _wants_log(values: np.ndarray) -> bool:
    """True if the positive finite `values` span at least `LOG_RATIO_FROM` (and none is <= 0)."""
    v = values[np.isfinite(values)]
    return v.size > 1 and bool((v > 0).all()) and v.max() / v.min() >= LOG_RATIO_FROM


def loss_figure(history: Mapping[str, Sequence[float]], *, best_epoch: int | None,
                title: str) -> Figure:
    """The loss picture of `history` (keys `HISTORY_KEYS`; ``val_loss`` NaN without validation).

    One Axes with the training loss, the validation loss if any value is finite, and, if
    `best_epoch` is given, a vertical line and a marker at that epoch on the validation curve (the
    training curve without validation); a twin Axes with the learning rate. Raises ValueError for
    a malformed history or a best epoch that is not one of its epochs.
    """
    cols = _series(history)
    epochs, train, val, lr = (cols[k] for k in HISTORY_KEYS)
    has_val = bool(np.isfinite(val).any())
    marker = "o" if epochs.size <= MARKERS_UP_TO else None

    fig = new_figure(*SIZE)
    ax = fig.add_subplot()
    ax.plot(epochs, train, color=TRAIN_COLOUR, marker=marker, markersize=MARKER_SIZE,
            label="training loss")
    if has_val:
        ax.plot(epochs, val, color=VAL_COLOUR, marker=marker, markersize=MARKER_SIZE,
                label="validation loss")
    if best_epoch is not None:
        hits = np.flatnonzero(epochs == best_epoch)
        if hits.size == 0:
            raise ValueError(f"loss history: best epoch {best_epoch} is not one of its epochs "
                             f"({int(epochs[0])}..{int(epochs[-1])})")
        at = (val if has_val else train)[hits[-1]]
        ax.axvline(best_epoch, color=BEST_COLOUR, linestyle=":")
        ax.plot([best_epoch], [at], linestyle="none", marker="*", markersize=BEST_MARKER_SIZE,
                color=BEST_COLOUR, label=f"best epoch {best_epoch}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss (mean squared error)")
    ax.set_title(title)
    ax.grid(True, which="major", alpha=GRID_ALPHA)
    if epochs.max() >= LOG_EPOCHS_FROM:
        ax.set_xscale("log")
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole epochs only
    if _wants_log(np.concatenate([train, val])):
        ax.set_yscale("log")

    ax_lr = ax.twinx()
    ax_lr.plot(epochs, lr, color=LR_COLOUR, linestyle="--", label="learning rate")
    ax_lr.set_ylabel("learning rate")
    if _wants_log(lr):
        ax_lr.set_yscale("log")

    handles, labels = ax.get_legend_handles_labels()
    lr_handles, lr_labels = ax_lr.get_legend_handles_labels()
    # below the axes, never over a curve or the best epoch's star
    ax.legend(handles + lr_handles, labels + lr_labels, loc="upper center",
              bbox_to_anchor=LEGEND_ANCHOR, ncols=len(labels) + len(lr_labels))
    return fig


def write_loss_plot(path: str | os.PathLike, history: Mapping[str, Sequence[float]], *,
                    best_epoch: int | None, title: str) -> None:
    """Write `loss_figure(history, best_epoch=..., title=...)` to `path` as a PNG, atomically."""
    save_png(loss_figure(history, best_epoch=best_epoch, title=title), path)
