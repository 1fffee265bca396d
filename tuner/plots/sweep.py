"""The picture of a sweep (``results.png``): each trial's best validation loss against each swept
key, one panel per key, the best trial marked.

A key whose values are all numbers is drawn on a number axis (logarithmic when its positive values
span `LOG_RATIO_FROM` or more, as learning rates usually do); any other key (strings, lists,
tables) is drawn with one position per distinct value, in the order the trials first use them.
Failed trials (NaN loss) are left out.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure

from .figure import GRID_ALPHA, SMALL_FONT, new_figure, save_png

#: A panel's size in inches; at most this many panels in a row.
PANEL = (4.5, 3.6)
PER_ROW = 3
#: A number key whose largest / smallest positive value reaches this ratio gets a log axis.
LOG_RATIO_FROM = 10.0
MARKER_SIZE, BEST_MARKER_SIZE = 5, 14
TRIAL_COLOUR, BEST_COLOUR = "tab:blue", "tab:green"


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def sweep_figure(rows: Sequence[Mapping], keys: Sequence[str]) -> Figure:
    """The sweep picture of `rows` (each with the swept `keys` and ``best_val_loss``); the
    best trial (lowest finite loss) is drawn as a star in every panel. Raises ValueError when
    `keys` is empty or a row lacks one of them."""
    if not keys:
        raise ValueError("sweep picture: no swept key")
    missing = [k for k in (*keys, "best_val_loss") for r in rows if k not in r]
    if missing:
        raise ValueError(f"sweep picture: a row has no {missing[0]!r}")
    ok = [r for r in rows if math.isfinite(r["best_val_loss"])]
    best = min(ok, key=lambda r: r["best_val_loss"]) if ok else None
    cols = min(PER_ROW, len(keys))
    nrows = math.ceil(len(keys) / cols)
    fig = new_figure(PANEL[0] * cols, PANEL[1] * nrows)
    for i, key in enumerate(keys):
        ax = fig.add_subplot(nrows, cols, i + 1)
        values = [r[key] for r in ok]
        if all(_is_number(v) for v in values):
            xs = [float(v) for v in values]
            positive = [x for x in xs if x > 0]
            if len(positive) == len(xs) and xs and max(xs) / min(xs) >= LOG_RATIO_FROM:
                ax.set_xscale("log")
            place = float
        else:
            names = list(dict.fromkeys(json.dumps(v) for v in values))
            ax.set_xticks(range(len(names)), [n.strip('"') for n in names], rotation=30,
                          ha="right", fontsize=SMALL_FONT)
            place = lambda v, names=names: names.index(json.dumps(v))  # noqa: E731
        ax.plot([place(v) for v in values], [r["best_val_loss"] for r in ok], linestyle="none",
                marker="o", markersize=MARKER_SIZE, color=TRIAL_COLOUR, label="trial")
        if best is not None:
            ax.plot([place(best[key])], [best["best_val_loss"]], linestyle="none", marker="*",
                    markersize=BEST_MARKER_SIZE, color=BEST_COLOUR,
                    label=f"best ({best.get('trial', '')})")
        ax.set_xlabel(key)
        ax.set_ylabel("best validation loss")
        ax.grid(True, alpha=GRID_ALPHA)
        if i == 0:
            ax.legend(fontsize=SMALL_FONT)
    fig.suptitle(f"sweep: {len(ok)} trial(s)" + (f", {len(rows) - len(ok)} failed"
                                                   if len(ok) < len(rows) else ""))
    return fig


def write_sweep_plot(path: str | os.PathLike, rows: Sequence[Mapping],
                     keys: Sequence[str]) -> None:
    """Write `sweep_figure(rows, keys)` to `path` as a PNG, atomically."""
    save_png(sweep_figure(rows, keys), path)
