"""Pictures of an evaluation's parameters: piece-square tables as boards, the rest as bar charts.

Works from any evaluation's registry (`tuner.evals.registry`): a pair group of 64 entries (or of
shape 8 x 8) is a piece-square table, one of 48 entries a pawn table (the six ranks a pawn can
stand on); every other group is drawn as bars. A table's entry ``i`` is the square of index ``i``
counted from `FirstSquare` along the ranks: ``a8`` (Clockwork's tables: a8, b8, ..., h1, as the
side to which the table applies sees the board, the row of index 0 being its far rank) or ``a1``
(a1, b1, ..., h8). Boards are drawn with a1 at the bottom left, mg and eg side by side, on a signed
diverging colour scale centred on zero and shared by a table's mg and eg board.
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

from tuner.evals.registry import PAIR, ParamGroup, ParamRegistry
from tuner.fileio import read_json
from .figure import GRID_ALPHA, SMALL_FONT, TITLE_INCHES, new_figure, save_png

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
SCALAR_BAR_INCHES, SCALAR_FRAME_INCHES = 0.24, 0.8
COLOURBAR_INCHES = 1.2
PANEL_COLUMNS = 3
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


class ParamFileError(ValueError):
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
                ax.text(file, rank, f"{v:.{digits}f}", ha="center", va="center",
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


def _entry_labels(group: ParamGroup) -> list[str]:
    return [",".join(str(int(k)) for k in np.unravel_index(i, group.shape))
            for i in range(group.size)]


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


def _panels(registry: ParamRegistry, values: np.ndarray, value_values: np.ndarray):
    """(scalar panels, array panels) of the groups that are not boards."""
    pv = np.asarray(values, dtype=np.float64)
    vv = np.asarray(value_values, dtype=np.float64)
    scalars, arrays = [], []
    pair_scalars = [g for g in registry.pair_groups if not g.shape]
    value_scalars = [g for g in registry.value_groups if not g.shape]
    if pair_scalars:
        scalars.append(_Panel("scalar pairs", [g.name for g in pair_scalars],
                              pv[[g.offset for g in pair_scalars]], None))
    if value_scalars:
        scalars.append(_Panel("value parameters", [g.name for g in value_scalars], None,
                              vv[[g.offset for g in value_scalars]]))
    for g in registry.groups:
        if g.shape and not is_board(g):
            pairs = pv[g.slice] if g.kind == PAIR else None
            arrays.append(_Panel(g.name, _entry_labels(g), pairs,
                                 None if g.kind == PAIR else vv[g.slice]))
    return scalars, arrays


def tables_figure(registry: ParamRegistry, values: np.ndarray, value_values: np.ndarray,
                  title: str) -> Figure | None:
    """Bar charts of every group that is not a board: the scalar pairs in one horizontal chart,
    the scalar values in another, then one panel per array (Axes titled by the group's name);
    None if every group is a board."""
    scalars, arrays = _panels(registry, values, value_values)
    if not scalars and not arrays:
        return None
    array_rows = -(-len(arrays) // PANEL_COLUMNS)
    heights = [SCALAR_BAR_INCHES * len(p.labels) + SCALAR_FRAME_INCHES for p in scalars]
    heights += [PANEL_INCHES[1]] * array_rows
    fig = new_figure(PANEL_INCHES[0] * PANEL_COLUMNS, sum(heights) + TITLE_INCHES)
    fig.suptitle(title)
    grid = fig.add_gridspec(len(heights), PANEL_COLUMNS, height_ratios=heights)
    for row, p in enumerate(scalars):
        ax = fig.add_subplot(grid[row, :])
        draw_bars(ax, p.labels, p.pairs, p.values, horizontal=True)
        ax.set_title(p.title)
        ax.legend(loc="best")
    for k, p in enumerate(arrays):
        ax = fig.add_subplot(grid[len(scalars) + k // PANEL_COLUMNS, k % PANEL_COLUMNS])
        draw_bars(ax, p.labels, p.pairs, p.values)
        ax.set_title(p.title)
        ax.set_xlabel("index")
        if k == 0:
            ax.legend(loc="best")
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
                                        f"{name}: parameters")))
    written = []
    for suffix, fig in figures:
        if fig is not None:
            path = Path(f"{prefix}.{suffix}.png")
            save_png(fig, path)
            written.append(path)
    return written
