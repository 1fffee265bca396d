"""Pictures of an evaluation's parameters: piece-square tables as boards, the rest as bar charts.

Works from any evaluation's registry (`tuner.evals.registry`): a pair group of 64 entries (or of
shape 8 x 8) is a piece-square table, one of 48 entries a pawn table (the six ranks a pawn can
stand on); every other group is drawn as bars. A table's entry ``i`` is the square of index ``i``
counted from `FirstSquare` along the ranks: ``a8`` (Clockwork's tables: a8, b8, ..., h1, as the
side to which the table applies sees the board, the row of index 0 being its far rank) or ``a1``
(a1, b1, ..., h8). Boards are drawn with a1 at the bottom left, mg and eg side by side, on a signed
diverging colour scale centred on zero and shared by a table's mg and eg board. Every scalar gets a
bar panel of its own scale; an entry of a table is named by its square (``KNIGHT_PSQT[e4]``).
"""
from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from tuner.evals.registry import PAIR, ParamGroup, ParamRegistry
from tuner.errors import TunerError
from tuner.fileio import read_json
from .figure import GRID_ALPHA, SMALL_FONT, TITLE_INCHES, new_figure, number_text, save_png

FILES = "abcdefgh"
RANKS = "12345678"
BOARD_SIZE = 8
SQUARES = BOARD_SIZE * BOARD_SIZE
#: A pawn table leaves out the first and last rank.
PAWN_SQUARES = SQUARES - 2 * BOARD_SIZE
PHASES = ("mg", "eg")
PHASE_COLOURS = ("tab:blue", "tab:orange")
VALUE_COLOUR = "tab:purple"
BOARD_CMAP = "RdBu_r"  # signed: blue below zero, white at zero, red above
EMPTY_SQUARE = "#d9d9d9"  # squares a table does not cover (a pawn table's first and last rank)
#: Inches per board, per bar-chart panel (width, height), per bar of a scalar chart plus its
#: frame (title, axis), and of a row's colour bar; panels per row of bars.
BOARD_INCHES = 3.4
PANEL_INCHES = (5.4, 3.0)
SCALAR_PANEL_INCHES = 1.2
COLOURBAR_INCHES = 1.2
PANEL_COLUMNS = 3
#: Scalars are drawn one a panel (each on its own scale: a material value of thousands would
#: flatten a tempo bonus of ten), this many panels a row.
SCALAR_COLUMNS = 5
SCALAR_TICKS = 3  # at most this many ticks on a scalar's axis
#: Colour bars span this fraction of their row; bars of one label share this width (1 = touching
#: the next label's); tick labels turn vertical from this many bars on.
COLOURBAR_SHRINK = 0.8
BAR_GROUP_WIDTH = 0.8
VERTICAL_LABELS_FROM = 16
ZERO_LINE_WIDTH = 0.6
#: Cells whose value is at least this fraction of the scale get white text (dark background);
#: cells show whole numbers when the scale reaches WHOLE_NUMBERS_FROM, one decimal below it.
DARK_CELL_FRACTION = 0.6
WHOLE_NUMBERS_FROM = 10


class FirstSquare(str, enum.Enum):
    """The square of a table's entry 0; entries run along its rank, then to the next rank."""

    A8 = "a8"  # Clockwork: a8..h8, a7..h7, ..., a1..h1 (a pawn table: a7..h2)
    A1 = "a1"  # a1..h1, ..., a8..h8 (a pawn table: a2..h7)


class ParamFileError(TunerError, ValueError):
    """A file that is not a readable parameter file; the message names the file and the problem."""


def load_params(path: str | os.PathLike) -> ParamRegistry:
    """The parameter registry in `path` (the registry's JSON schema, e.g. a run's params.json);
    ParamFileError with a one-line reason otherwise."""
    data = read_json(path, ParamFileError)
    try:
        return ParamRegistry.from_dict(data)
    except KeyError as e:
        raise ParamFileError(f"{path}: not a parameter file: no field {e} (expected the registry "
                             f"schema: {{\"params\": [{{\"name\", \"shape\", \"offset\", "
                             f"\"values\", ...}}]}})") from None
    except (TypeError, AttributeError) as e:
        raise ParamFileError(f"{path}: not a parameter file in the registry schema ({e})") from None
    except ValueError as e:
        raise ParamFileError(f"{path}: {e}") from None


def is_board(group: ParamGroup) -> bool:
    """True for a piece-square table: a pair group of 64 squares (flat or 8 x 8) or 48 (pawns)."""
    return group.kind == PAIR and (group.shape in ((SQUARES,), (PAWN_SQUARES,),
                                                   (BOARD_SIZE, BOARD_SIZE)))


def square_name(index: int, first: FirstSquare, size: int = SQUARES) -> str:
    """The square of entry `index` of a table of `size` entries (64, or 48 for a pawn table)
    whose entry 0 is on `first`'s square (the order `board_grid` draws)."""
    j = index + (SQUARES - size) // 2
    rank, file = divmod(j, BOARD_SIZE)
    return FILES[file] + RANKS[BOARD_SIZE - 1 - rank if first == FirstSquare.A8 else rank]


def entry_indices(group: ParamGroup, i: int, first: FirstSquare) -> list[str]:
    """The indices of entry `i` of `group` as text: a board's entry is its square; in an array
    whose last axis has 64 entries, that axis is a square (``[2, "e4"]`` for ``PSQT[2][e4]``)."""
    if is_board(group):
        return [square_name(i, first, group.size)]
    idx = [int(k) for k in np.unravel_index(i, group.shape)]
    if group.shape[-1] == SQUARES:
        return [str(k) for k in idx[:-1]] + [square_name(idx[-1], first)]
    return [str(k) for k in idx]


def entry_names(registry: ParamRegistry, first: FirstSquare) -> tuple[list[str], list[str]]:
    """Readable names of every pair entry and every value entry, in flat order: ``NAME`` for a
    scalar, ``NAME[i]`` for an array, ``NAME[e4]`` for a table's square (see `entry_indices`)."""
    def names(groups):
        return [g.name + "".join(f"[{k}]" for k in entry_indices(g, i, first)) if g.shape
                else g.name for g in groups for i in range(g.size)]
    return names(registry.pair_groups), names(registry.value_groups)


def board_grid(values: np.ndarray, first: FirstSquare) -> np.ndarray:
    """float64[8, 8] of one table's 64 or 48 values, ``grid[rank, file]`` with rank 0 = rank 1
    (draw with ``origin="lower"`` for a1 at the bottom left); NaN on squares it does not cover."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    if v.size not in (SQUARES, PAWN_SQUARES):
        raise ValueError(f"a board has {SQUARES} or {PAWN_SQUARES} squares, not {v.size}")
    full = np.full(SQUARES, np.nan)
    skip = (SQUARES - v.size) // 2  # a pawn table starts on the second rank from entry 0's
    full[skip:skip + v.size] = v
    grid = full.reshape(BOARD_SIZE, BOARD_SIZE)
    return grid[::-1] if first == FirstSquare.A8 else grid


def _scale(values: np.ndarray) -> float:
    """Half-width of a signed colour scale centred on zero covering `values` (1 if all zero)."""
    m = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 0.0
    return m if m > 0 else 1.0


def _draw_board(ax, grid: np.ndarray, norm: Normalize, title: str):
    cmap = colormaps[BOARD_CMAP].with_extremes(bad=EMPTY_SQUARE)
    image = ax.imshow(grid, origin="lower", cmap=cmap, norm=norm)
    ax.set_xticks(range(BOARD_SIZE), list(FILES))
    ax.set_yticks(range(BOARD_SIZE), list(RANKS))
    ax.tick_params(length=0)
    ax.set_title(title)
    digits = 0 if norm.vmax >= WHOLE_NUMBERS_FROM else 1
    for rank in range(BOARD_SIZE):
        for file in range(BOARD_SIZE):
            v = grid[rank, file]
            if np.isfinite(v):
                dark = abs(v) >= DARK_CELL_FRACTION * norm.vmax
                ax.text(file, rank, number_text(v, digits), ha="center", va="center",
                        fontsize=SMALL_FONT, color="white" if dark else "black")
    return image


def boards_figure(registry: ParamRegistry, values: np.ndarray, first: FirstSquare,
                  title: str) -> Figure | None:
    """One row per piece-square table of `registry` (pair values float64[n_params, 2]): its mg
    and eg boards (Axes titled ``NAME mg`` / ``NAME eg``) and their shared colour bar; None if the
    registry has no table."""
    tables = [g for g in registry.pair_groups if is_board(g)]
    if not tables:
        return None
    fig = new_figure(2 * BOARD_INCHES + COLOURBAR_INCHES, BOARD_INCHES * len(tables) + TITLE_INCHES)
    fig.suptitle(title)
    axes = fig.subplots(len(tables), len(PHASES), squeeze=False)
    for row, g in zip(axes, tables):
        pairs = np.asarray(values, dtype=np.float64)[g.slice]
        norm = Normalize(-_scale(pairs), _scale(pairs))
        for k, (ax, phase) in enumerate(zip(row, PHASES)):
            image = _draw_board(ax, board_grid(pairs[:, k], first), norm, f"{g.name} {phase}")
        fig.colorbar(image, ax=list(row), shrink=COLOURBAR_SHRINK)
    return fig


def _entry_labels(group: ParamGroup, first: FirstSquare) -> list[str]:
    return [",".join(entry_indices(group, i, first)) for i in range(group.size)]


def draw_bars(ax, labels: list[str], pairs: np.ndarray | None, values: np.ndarray | None,
              horizontal: bool = False) -> None:
    """Bars of one panel: mg and eg side by side per label (`pairs` float64[n, 2]) or one bar per
    label (`values` float64[n]); a zero line; horizontal bars read top to bottom."""
    pos = np.arange(len(labels), dtype=np.float64)
    if horizontal:
        pos = pos[::-1]
    series = ([(pairs[:, k], phase, colour) for k, (phase, colour)
               in enumerate(zip(PHASES, PHASE_COLOURS))] if pairs is not None
              else [(values, "value", VALUE_COLOUR)])
    width = BAR_GROUP_WIDTH / len(series)
    for k, (v, label, colour) in enumerate(series):
        at = pos + (k - (len(series) - 1) / 2) * width * (-1 if horizontal else 1)
        (ax.barh if horizontal else ax.bar)(at, v, width, color=colour, label=label)
    if horizontal:
        ax.set_yticks(pos, labels)
        ax.axvline(0, color="black", linewidth=ZERO_LINE_WIDTH)
    else:
        ax.set_xticks(pos, labels, rotation=90 if len(labels) >= VERTICAL_LABELS_FROM else 0,
                      fontsize=SMALL_FONT)
        ax.axhline(0, color="black", linewidth=ZERO_LINE_WIDTH)
    ax.grid(True, axis="x" if horizontal else "y", alpha=GRID_ALPHA)


@dataclass(frozen=True)
class _Panel:
    title: str
    labels: list
    pairs: np.ndarray | None
    values: np.ndarray | None


def _panels(registry: ParamRegistry, values: np.ndarray, value_values: np.ndarray,
            first: FirstSquare):
    """(scalar panels, array panels) of the groups that are not boards: one panel per scalar
    (its mg and eg bars, or its value), one per array."""
    pv = np.asarray(values, dtype=np.float64)
    vv = np.asarray(value_values, dtype=np.float64)
    scalars, arrays = [], []
    for g in registry.groups:
        pairs = pv[g.slice] if g.kind == PAIR else None
        vals = None if g.kind == PAIR else vv[g.slice]
        if not g.shape:
            scalars.append(_Panel(g.name, list(PHASES) if g.kind == PAIR else ["value"],
                                  pairs, vals))
        elif not is_board(g):
            arrays.append(_Panel(g.name, _entry_labels(g, first), pairs, vals))
    return scalars, arrays


def _grid_rows(n: int, columns: int) -> int:
    return -(-n // columns)


def tables_figure(registry: ParamRegistry, values: np.ndarray, value_values: np.ndarray,
                  title: str, first: FirstSquare = FirstSquare.A8) -> Figure | None:
    """Bar charts of every group that is not a board: one small panel per scalar, on its own
    scale (a pair's mg and eg bars, a value's bar), then one panel per array (every Axes titled by
    its group's name; a table's entries labelled by square, `entry_indices`); None if every
    group is a board."""
    scalars, arrays = _panels(registry, values, value_values, first)
    if not scalars and not arrays:
        return None
    scalar_rows = _grid_rows(len(scalars), SCALAR_COLUMNS)
    array_rows = _grid_rows(len(arrays), PANEL_COLUMNS)
    heights = [SCALAR_PANEL_INCHES] * scalar_rows + [PANEL_INCHES[1]] * array_rows
    fig = new_figure(PANEL_INCHES[0] * PANEL_COLUMNS, sum(heights) + TITLE_INCHES)
    fig.suptitle(title)
    outer = fig.add_gridspec(len(heights), 1, height_ratios=heights)
    for k, p in enumerate(scalars):
        row = outer[k // SCALAR_COLUMNS].subgridspec(1, SCALAR_COLUMNS)
        ax = fig.add_subplot(row[k % SCALAR_COLUMNS])
        if p.pairs is not None:  # mg above eg, in the colours of the legend
            ax.barh([1, 0], p.pairs[0], BAR_GROUP_WIDTH, color=PHASE_COLOURS)
        else:
            ax.barh([0], p.values, BAR_GROUP_WIDTH, color=VALUE_COLOUR)
        ax.set_yticks([])
        ax.xaxis.set_major_locator(MaxNLocator(SCALAR_TICKS))
        ax.axvline(0, color="black", linewidth=ZERO_LINE_WIDTH)
        ax.tick_params(labelsize=SMALL_FONT)
        ax.grid(True, axis="x", alpha=GRID_ALPHA)
        ax.set_title(p.title, fontsize=SMALL_FONT + 1)
    for k, p in enumerate(arrays):
        row = outer[scalar_rows + k // PANEL_COLUMNS].subgridspec(1, PANEL_COLUMNS)
        ax = fig.add_subplot(row[k % PANEL_COLUMNS])
        draw_bars(ax, p.labels, p.pairs, p.values)
        ax.set_title(p.title)
        ax.set_xlabel("index")
    handles = []  # the colours, outside every panel
    if any(p.pairs is not None for p in scalars + arrays):
        handles += [Patch(color=c, label=ph) for ph, c in zip(PHASES, PHASE_COLOURS)]
    if any(p.values is not None for p in scalars + arrays):
        handles.append(Patch(color=VALUE_COLOUR, label="value"))
    fig.legend(handles=handles, loc="outside upper right", ncols=len(handles))
    return fig


def write_param_plots(registry: ParamRegistry, prefix: str | os.PathLike,
                      first: FirstSquare = FirstSquare.A8) -> list[Path]:
    """Draw the values held by `registry` (as loaded from a parameter file) into
    ``PREFIX.boards.png`` (piece-square tables) and ``PREFIX.tables.png`` (everything else),
    each only if it has something to draw; returns the paths written."""
    name = Path(prefix).name
    figures = (("boards", boards_figure(registry, registry.defaults, first,
                                         f"{name}: piece-square tables (a1 bottom left)")),
               ("tables", tables_figure(registry, registry.defaults, registry.value_defaults,
                                        f"{name}: parameters", first)))
    written = []
    for suffix, fig in figures:
        if fig is not None:
            path = Path(f"{prefix}.{suffix}.png")
            save_png(fig, path)
            written.append(path)
    return written
