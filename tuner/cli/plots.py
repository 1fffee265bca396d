"""Click commands of the pictures: ``tuner plot`` and ``tuner diff``.

Registered on the main group in tuner/cli/__init__.py ("picture commands" section). matplotlib is
imported inside the commands so ``tuner --help`` stays quick.
"""
from __future__ import annotations

from pathlib import Path

import click

from tuner.errors import TunerError
from tuner.fileio import WriteError

#: How many changes `tuner diff` prints and draws unless told otherwise.
DEFAULT_TOP = 20


#: The option of both commands: how a table's entries map to squares.
FIRST_SQUARE = click.option(
    "--first-square", type=click.Choice(["a8", "a1"]), default="a8", show_default=True,
    help="The square of entry 0 of a 64-entry table: a8 (entries a8..h8, a7..h7, ...; "
         "Clockwork's tables, seen from the side they apply to) or a1 (a1..h1, a2..h2, ...). A "
         "48-entry pawn table starts one rank further in (a7 or a2).")


def _stem(path: str) -> str:
    """`path` without a trailing ``.json``: the default prefix of the pictures drawn from it."""
    return path[:-len(".json")] if path.endswith(".json") else path


@click.command("plot")
@click.argument("params")
@click.option("-o", "--out", "prefix", metavar="PREFIX",
              help="Write PREFIX.boards.png and PREFIX.tables.png (default: PARAMS without "
                   ".json, beside it).")
@FIRST_SQUARE
def plot_cmd(params: str, prefix: str | None, first_square: str) -> None:
    """Draw the parameters of PARAMS (registry JSON of any evaluation, e.g. a run's params.json).

    Piece-square tables (pair parameters of 64 entries, or 48 for pawns) become 8x8 boards, mg and
    eg side by side, a1 at the bottom left, on a signed colour scale centred on zero, in
    PREFIX.boards.png; every other parameter becomes a bar chart (mg and eg bars, values alone;
    each scalar on its own scale) in PREFIX.tables.png."""
    from tuner.plots.params import FirstSquare, load_params, write_param_plots

    registry = load_params(params)  # a ParamFileError names the file and the reason
    try:
        written = write_param_plots(registry, prefix or _stem(params), FirstSquare(first_square))
    except WriteError:  # names the file and the reason
        raise
    except OSError as e:
        raise TunerError(f"{prefix or _stem(params)}: cannot write the pictures "
                         f"({e.strerror or e})") from None
    for path in written:
        click.echo(f"wrote {path}")


@click.command("diff")
@click.argument("before", metavar="A.json")
@click.argument("after", metavar="B.json")
@click.option("--top", type=click.IntRange(min=1), default=DEFAULT_TOP, show_default=True,
              help="How many of the largest changes to print and draw.")
@click.option("-o", "--out", type=click.Path(dir_okay=False),
              help="The picture of the changes (default: B without .json, plus .diff.png).")
@FIRST_SQUARE
def diff_cmd(before: str, after: str, top: int, out: str | None, first_square: str) -> None:
    """Print the largest changes from A.json to B.json (two parameter files of one evaluation) and
    draw them.

    An entry's change is the larger of its |mg delta| and |eg delta| (|delta| for a value
    parameter); entries are ranked by it, largest first, and unchanged entries are left out. Each
    line shows the entry's name (a table's entry by its square: KNIGHT_PSQT[e4]), then mg before /
    after / delta and eg before / after / delta."""
    from tuner.plots.diff import changes, check_same_layout, format_changes, write_changes_plot
    from tuner.plots.params import FirstSquare, load_params

    a, b = load_params(before), load_params(after)  # ParamFileErrors naming the file
    check_same_layout(a, b, before, after)
    found = changes(a, b, FirstSquare(first_square))
    if not found:
        click.echo(f"no parameter differs between {before} and {after}")
        return
    shown = min(top, len(found))
    click.echo(f"{len(found)} entries changed; the {shown} largest:")
    click.echo(format_changes(found, top))
    path = Path(out or f"{_stem(after)}.diff.png")
    try:
        write_changes_plot(found, top, path, f"largest changes: {Path(before).name} -> "
                                             f"{Path(after).name}")
    except WriteError:  # names the file and the reason
        raise
    except OSError as e:
        raise TunerError(f"{path}: cannot write the picture ({e.strerror or e})") from None
    click.echo(f"wrote {path}")
