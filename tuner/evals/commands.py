"""Click commands of the evaluation layer: ``tuner eval`` and ``tuner export``.

Registered on the main group in tuner/cli.py ("evaluation commands" section). Heavy imports
(numba, the evaluation) happen inside the commands so ``tuner --help`` stays quick.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

EVAL_HELP = """Evaluate positions (White's point of view).

--evaluation picks the evaluation: a registered name ("clockwork", engine commit cde2ced, linear,
the default; "clockwork-10d79e6", the engine's newest evaluation: sigmoid king safety, winnable,
endgame scaling; "material"), a module path (mypkg.myeval) or a file (path/to/myeval.py) defining
EVALUATION (see docs/evaluations.md).

Positions come from FEN arguments (quote each FEN) and/or --file F: one position a line, either
`FEN` or `FEN;anything` (the part after the first ';' is ignored), or any text format `tuner
convert` reads (FEN [1.0], FEN | score | wdl, EPD; detected from the first lines, results
ignored), plain or gzip/zstd/bz2/lz4-compressed; blank lines are skipped and lines end at LF
(a CR before it is dropped). A Parquet dataset gives the FENs of its `fen` column (labelled
F:row N, from 0); other binary files are refused. Each valid position prints one line
`FEN;<eval>` in input order. For Clockwork's evaluations <eval> is the engine's integer
`evaluate_white_pov` (16-bit packed scores, C++ truncating divisions); for others, the
evaluation recorded with every parameter rounded, rounded (see docs/evaluations.md).

With --params P.json (a parameter file of that evaluation in the registry's JSON schema, e.g. a
tuned output) the integer eval is defined as the engine would compute it after rounding every
parameter to an integer with std::round (half away from zero); --breakdown also shows the
unrounded continuous eval (the tuner's) and every term's contribution (for clockwork-10d79e6
every non-linear step; for evaluations without a breakdown of their own, each parameter group's
value times the gradient).

Invalid lines are reported on stderr as `F:LINE: reason` (`arg:N: reason` for arguments); the
other lines are still evaluated, and the exit code is 1 if any line failed. The first run of an
evaluation compiles it (Numba), which is said on stderr.
"""

def _read_inputs(fens, file):
    """[(label, fen)] in input order: the FEN arguments, then the positions of `file` (see
    EVAL_HELP). A file that cannot be used is a ClickException naming it."""
    from pathlib import Path

    from tuner.data.convert import DETECT_BYTES, DETECT_LINES, open_input
    from tuner.data.errors import DatasetError
    from tuner.data.formats import FEN_OF_LINE, binary_kind, detect_format, not_text_hint

    items = [(f"arg:{i}", f.strip()) for i, f in enumerate(fens, 1)]
    if file is None:
        return items
    name = "<stdin>" if file == "-" else file
    try:
        if file == "-":
            data = sys.stdin.buffer.read()
        else:
            with open_input(Path(file)) as (read, _):
                data = b"".join(iter(lambda: read(1 << 24), b""))
    except DatasetError as e:
        raise click.ClickException(str(e)) from None
    what = binary_kind(data[:DETECT_BYTES])
    if what == "a Parquet file" and file != "-":
        return items + _parquet_fens(file)
    if what is not None:
        raise click.ClickException(not_text_hint(name, what))
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    text = [ln.removesuffix(b"\r").decode("utf-8", "surrogateescape") for ln in lines]
    fmt, _ = detect_format([t for t in text[:DETECT_LINES] if t.strip()])
    fen_of = FEN_OF_LINE[fmt]
    items.extend((f"{name}:{lineno}", fen_of(line)) for lineno, line in enumerate(text, 1)
                 if line.strip())
    return items


def _parquet_fens(path: str) -> list:
    """[(label, fen)] of the ``fen`` column of a Parquet file (nulls as empty FENs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        column = pq.read_table(path, columns=["fen"]).column("fen")
    except (pa.ArrowException, OSError, KeyError) as e:
        raise click.ClickException(f"{path}: a Parquet file whose fen column cannot be read "
                                   f"({e})") from None
    if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
        raise click.ClickException(f"{path}: the fen column holds {column.type}, not strings")
    return [(f"{path}:row {i}", fen or "") for i, fen in enumerate(column.to_pylist())]


def _parse_all(items):
    """Bulk-parse; returns (positions of the valid items, [(index, label, fen)], [(label, reason)])."""
    import numpy as np

    from tuner.chess.fen import parse_fen, parse_fen_list
    from tuner.chess.status import status_reason

    from .common import check_domain

    fens = [fen for _, fen in items]
    positions, status = parse_fen_list(fens) if fens else (np.empty((0, 9), np.uint64),
                                                           np.empty(0, np.int32))
    ok = []
    errors = []
    for i, (label, fen) in enumerate(items):
        if not fen:
            errors.append((i, label, "empty FEN"))
            continue
        if status[i] != 0:
            try:  # the single-FEN parser names the offending text
                parse_fen(fen)
                reason = status_reason(int(status[i]))
            except ValueError as e:
                reason = str(e)
            errors.append((i, label, reason))
            continue
        try:
            check_domain(positions[i])
        except ValueError as e:
            errors.append((i, label, str(e)))
            continue
        ok.append(i)
    return positions[ok], ok, errors


def _evaluation(spec: str):
    """The evaluation `spec` names, or a one-line ClickException."""
    from . import get_evaluation

    try:
        return get_evaluation(spec)
    except (ValueError, TypeError) as e:
        raise click.ClickException(f"--evaluation: {e}") from None


def _read_params(path: str, evaluation):
    """The registry of parameter file `path`, checked against `evaluation` (if given)."""
    from .registry import ParamFileError, ParamRegistry

    try:
        reg = ParamRegistry.from_json(path)
        if evaluation is not None:
            evaluation.check_params(reg)
    except ParamFileError as e:  # names the file and the entry
        raise click.ClickException(str(e)) from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise click.ClickException(f"{path}: {e}") from None
    return reg


@click.command("eval", help=EVAL_HELP)
@click.argument("fens", nargs=-1)
@click.option("--file", "-f", "file", type=click.Path(dir_okay=False, allow_dash=True),
              help="Read positions from F (`FEN` or `FEN;anything` a line; '-' for stdin).")
@click.option("--evaluation", "-e", "evaluation", default="clockwork", show_default=True,
              help="Which evaluation: a registered name, a module path or a .py file.")
@click.option("--params", "-p", "params", type=click.Path(exists=True, dir_okay=False),
              help="Parameter JSON (registry schema); default: the evaluation's own parameters.")
@click.option("--breakdown", is_flag=True,
              help="Print every term's (mg, eg) contribution, the continuous and the integer "
                   "eval (meant for one position; printed for each one given).")
def eval_cmd(fens, file, evaluation, params, breakdown):
    if not fens and file is None:
        raise click.UsageError("give FEN arguments or --file F")
    try:
        items = _read_inputs(fens, file)
    except OSError as e:
        raise click.ClickException(str(e)) from None

    from tuner.compiling import watch_compilation
    from tuner.terminal import announce_compiling, compile_errors

    from tuner.data.errors import clip

    from . import EvaluationIndexError

    ev = _evaluation(evaluation)
    reg = ev.registry if params is None else _read_params(params, ev)
    out = []
    with watch_compilation(lambda: announce_compiling(f"the {ev.name} evaluation")), \
            compile_errors(ev.name):
        positions, ok, errors = _parse_all(items)
        for _, label, reason in errors:
            click.echo(f"{label}: {clip(reason)}", err=True)
        try:
            ie = ev.evaluate_positions(positions, reg)[0] if ok else []
            for k, i in enumerate(ok):
                fen = items[i][1]
                if breakdown:
                    out.append(ev.breakdown(fen, positions[k], reg, int(ie[k])))
                    out.append("")
                out.append(f"{fen};{int(ie[k])}")
        except EvaluationIndexError as e:  # a bug in the evaluation: nothing is printed
            raise click.ClickException(str(e)) from None
    if out:
        click.echo("\n".join(out))
    if errors:
        sys.exit(1)


@click.command("export")
@click.argument("params", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["cpp", "json"]), default="cpp", show_default=True,
              help="cpp: C++ in the evaluation's export style (Clockwork's eval_constants.hpp for "
                   "Clockwork's evaluations, the generic array form for others; values rounded "
                   "with std::round); json: the registry schema (exact round trip).")
@click.option("--evaluation", "-e", "evaluation",
              help="The evaluation the parameters belong to (a registered name, a module path or "
                   "a .py file): checks the layout and picks its C++ style. Default: the "
                   "registered evaluation with this layout, else the generic array form.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              help="Output file (default: stdout).")
def export_cmd(params, fmt, evaluation, output):
    """Export the parameters of PARAMS (registry JSON, e.g. a tuned output) as C++ or JSON.

    Clockwork's parameters are written as Clockwork's src/eval_constants.hpp (a clockwork-10d79e6
    file in that engine commit's own layout, value parameters and sigmoid included); any other
    evaluation's in the generic array form of docs/evaluations.md."""
    from . import CPP_ARRAY, evaluation_of_params
    from .export import export

    ev = None if evaluation is None else _evaluation(evaluation)
    reg = _read_params(params, ev)
    if ev is None:
        ev = evaluation_of_params(reg)
    style, name = (CPP_ARRAY, Path(params).stem) if ev is None else (ev.cpp, ev.name)
    try:
        text = export(reg, reg.defaults, fmt, None if output == "-" else output,
                      reg.value_defaults, cpp_style=style, name=name)
    except (OSError, ValueError, KeyError) as e:
        raise click.ClickException(f"{params}: {e}") from None
    if output == "-":
        click.echo(text, nl=False)
