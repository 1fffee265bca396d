"""The largest changes between two parameter files of one evaluation (``tuner diff``).

Every entry (each (mg, eg) pair and each value) of B is compared with the same entry of A; an
entry's change is the larger of ``|mg_B - mg_A|`` and ``|eg_B - eg_A|`` (``|B - A|`` for a value).
Entries are ranked by that change, largest first; equal changes keep the registry's order (pairs
in registration order, then values). Unchanged entries are left out. An entry of a 64-entry table
is named by its square (``KNIGHT_PSQT[e4]``), in the order `tuner plot` draws the table.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from tuner.evals.registry import PAIR, ParamRegistry
from .figure import new_figure, save_png
from .params import FirstSquare, ParamFileError, draw_bars, entry_names

#: Inches of figure height per ranked change, and the fixed part (title, axis, legend).
CHANGE_INCHES, FRAME_INCHES = 0.28, 1.4
FIGURE_WIDTH = 10.0


@dataclass(frozen=True)
class Change:
    """One entry that differs: its name (``NAME`` or ``NAME[i]...``), its kind and its values in A
    and B (mg, eg for a pair; the value and NaN for a value parameter)."""

    name: str
    kind: str
    before: tuple[float, float]
    after: tuple[float, float]

    @property
    def delta(self) -> tuple[float, float]:
        return (self.after[0] - self.before[0], self.after[1] - self.before[1])

    @property
    def size(self) -> float:
        """The ranking key: the largest absolute change of the entry's components."""
        return max(abs(d) for d in self.delta if not math.isnan(d))


def _layout(registry: ParamRegistry) -> list[tuple[str, str, tuple]]:
    return [(g.name, g.kind, g.shape) for g in registry.groups]


def check_same_layout(a: ParamRegistry, b: ParamRegistry, a_name: str, b_name: str) -> None:
    """ParamFileError naming the first group that differs unless `a` and `b` hold the same
    parameters (names, kinds and shapes, in order)."""
    la, lb = _layout(a), _layout(b)
    for k, (ga, gb) in enumerate(zip(la, lb)):
        if ga != gb:
            raise ParamFileError(
                f"{b_name}: not the parameters of {a_name}: group {k} is {gb[0]} ({gb[1]}, shape "
                f"{list(gb[2])}) there and {ga[0]} ({ga[1]}, shape {list(ga[2])}) in {a_name}")
    if len(la) != len(lb):
        longer, name = (la, a_name) if len(la) > len(lb) else (lb, b_name)
        extra = longer[min(len(la), len(lb))][0]
        raise ParamFileError(f"{b_name}: not the parameters of {a_name}: {len(lb)} groups vs "
                             f"{len(la)} (first extra group: {extra} in {name})")


def changes(a: ParamRegistry, b: ParamRegistry,
            first: FirstSquare = FirstSquare.A8) -> list[Change]:
    """The entries whose values differ from `a` (before) to `b` (after), largest change first;
    a table's entries are named by square, its entry 0 on `first`. The registries must have the
    same layout (see `check_same_layout`)."""
    found = []
    pa, pb = a.defaults, b.defaults
    pair_names, value_names = entry_names(a, first)
    for i, name in enumerate(pair_names):
        if (pa[i] != pb[i]).any():
            found.append(Change(name, PAIR, tuple(map(float, pa[i])), tuple(map(float, pb[i]))))
    va, vb = a.value_defaults, b.value_defaults
    for i, name in enumerate(value_names):
        if va[i] != vb[i]:
            found.append(Change(name, "value", (float(va[i]), math.nan), (float(vb[i]), math.nan)))
    # sorted() is stable: equal changes keep the registry's order.
    return sorted(found, key=lambda c: -c.size)


def _num(x: float) -> str:
    return "-" if math.isnan(x) else f"{x + 0.0:.6g}"  # + 0.0: -0.0 is written 0


def format_changes(found: list[Change], top: int) -> str:
    """A text table of the first `top` changes: name, mg before/after/delta, eg before/after/delta
    (``-`` for the eg of a value parameter)."""
    width = max([len("name")] + [len(c.name) for c in found[:top]])
    head = (f"{'name':<{width}}  {'mg before':>10} {'mg after':>10} {'mg delta':>10}  "
            f"{'eg before':>10} {'eg after':>10} {'eg delta':>10}")
    lines = [head]
    for c in found[:top]:
        cells = []
        for k in range(2):
            cells += [_num(c.before[k]), _num(c.after[k]), _num(c.delta[k])]
        lines.append(f"{c.name:<{width}}  {cells[0]:>10} {cells[1]:>10} {cells[2]:>10}  "
                     f"{cells[3]:>10} {cells[4]:>10} {cells[5]:>10}")
    return "\n".join(lines)


def changes_figure(found: list[Change], top: int, title: str) -> Figure:
    """Horizontal bars of the mg and eg deltas of the first `top` changes, largest at the top
    (a value parameter's delta is drawn as its mg bar)."""
    shown = found[:top]
    fig = new_figure(FIGURE_WIDTH, FRAME_INCHES + CHANGE_INCHES * max(1, len(shown)))
    ax = fig.add_subplot()
    deltas = np.array([[d if not math.isnan(d) else 0.0 for d in c.delta] for c in shown],
                      dtype=np.float64).reshape(-1, 2)
    draw_bars(ax, [c.name for c in shown], deltas, None, horizontal=True)
    ax.set_title(title)
    ax.set_xlabel("change (after - before)")
    fig.legend(*ax.get_legend_handles_labels(), loc="outside upper right", ncols=2)
    return fig


def write_changes_plot(found: list[Change], top: int, path: str | os.PathLike,
                       title: str) -> None:
    """`changes_figure` written to `path` as a PNG, atomically."""
    save_png(changes_figure(found, top, title), path)
