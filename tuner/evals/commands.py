"""Click commands of the evaluation layer: ``tuner eval`` and ``tuner export``.

Registered on the main group in tuner/cli.py ("evaluation commands" section). Heavy imports
(numba, the evaluation) happen inside the commands so ``tuner --help`` stays quick.
"""
from __future__ import annotations

import sys

import click

EVAL_HELP = """Evaluate positions with one of Clockwork's evaluations (White's point of view).

--evaluation picks it: "clockwork" (engine commit cde2ced, linear; the default) or
"clockwork-10d79e6" (the engine's newest evaluation: sigmoid king safety, winnable, endgame
scaling).

Positions come from FEN arguments (quote each FEN) and/or --file F: one position a line, either
`FEN` or `FEN;anything` (the part after the first ';' is ignored), or any text format `tuner
convert` reads (FEN [1.0], FEN | score | wdl, EPD; detected from the first lines, results
ignored), plain or gzip/zstd/bz2/lz4-compressed; blank lines are skipped and lines end at LF
(a CR before it is dropped). A Parquet dataset gives the FENs of its `fen` column (labelled
F:row N, from 0); other binary files are refused. Each valid position prints one line
`FEN;<eval>` in input order, where <eval> is the engine's integer `evaluate_white_pov` (16-bit
packed scores, C++ truncating divisions).

With --params P.json (a parameter file of that evaluation in the registry's JSON schema, e.g. a
tuned output) the integer eval is defined as the engine would compute it after rounding every
parameter to an integer with std::round (half away from zero); --breakdown also shows the
unrounded continuous eval (the tuner's), and for clockwork-10d79e6 every non-linear step.

Invalid lines are reported on stderr as `F:LINE: reason` (`arg:N: reason` for arguments); the
other lines are still evaluated, and the exit code is 1 if any line failed.
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
        raise click.ClickException(str(e))
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
                                   f"({e})")
    if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
        raise click.ClickException(f"{path}: the fen column holds {column.type}, not strings")
    return [(f"{path}:row {i}", fen or "") for i, fen in enumerate(column.to_pylist())]


def _parse_all(items):
    """Bulk-parse; returns (positions of the valid items, [(index, label, fen)], [(label, reason)])."""
    import numpy as np

    from tuner.chess.position import parse_fen, parse_fen_list, status_reason

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


def _fmt_num(x) -> str:
    x = float(x)
    return str(int(x)) if x.is_integer() else f"{x:.4f}"


def _fmt_pair(p) -> str:
    return f"{_fmt_num(p[0]):>10} {_fmt_num(p[1]):>10}"


def _group_rows(groups, counts, values):
    """Table rows `name  net counts  mg  eg` of the groups with non-zero counts; their total."""
    import numpy as np

    rows = []
    total = np.zeros(2)
    for g in groups:
        cg = counts[g.slice]
        if not cg.any():
            continue
        contrib = cg.astype(np.float64) @ values[g.slice]
        total += contrib
        if g.shape:
            desc = " ".join(f"[{','.join(str(int(k)) for k in np.unravel_index(i, g.shape))}]"
                            f"{int(cg[i]):+d}" for i in np.nonzero(cg)[0])
        else:
            desc = f"{int(cg[0]):+d}"
        rows.append(f"{g.name:<36} {desc:<34} {_fmt_pair(contrib)}")
    return rows, total


_TABLE_HEAD = f"{'term':<36} {'net counts':<34} {'mg':>10} {'eg':>10}"


def _breakdown_cde2ced(fen, pos, reg, int_eval_v):
    """Per-group (mg, eg) contributions of one position (net counts times values)."""
    from .clockwork import PHASE_MAX, feature_counts

    counts, phases = feature_counts(pos.reshape(1, 9))
    ph = int(phases[0])
    alpha = ph / PHASE_MAX
    rows, total = _group_rows(reg.groups, counts[0], reg.defaults)
    cont = alpha * total[0] + (1.0 - alpha) * total[1]
    return "\n".join([f"position: {fen}", _TABLE_HEAD, *rows,
                      f"{'total (MG, EG)':<36} {'':<34} {_fmt_pair(total)}",
                      f"phase: {ph}/{PHASE_MAX} (alpha = {alpha:.6f})",
                      f"continuous eval: {cont:.6f}",
                      f"integer eval (White POV): {int_eval_v}"])


def _breakdown_10d79e6(fen, pos, reg, int_eval_v):
    """Every step of one position's 10d79e6 evaluation: the three pair sums term by term, then the
    activations, winnable, eg scale and blend, integer (engine) beside continuous (tuner)."""
    from . import clockwork_10d79e6 as ev

    b = ev.breakdown(pos, reg)
    c, i, ints = b["cont"], b["int"], b["counts"]["ints"]
    pairs = b["pairs"]
    lines = [f"position: {fen}", _TABLE_HEAD]
    rows, _ = _group_rows(reg.pair_groups, b["counts"]["linear"], pairs)
    lines += rows
    lines.append(f"{'linear sum L (tempo included)':<71} {_fmt_pair(c['l'])}")
    lines.append(f"{'  of which tempo':<71} {_fmt_pair(b['tempo'])}")
    for key, total, act, title in (
            ("attack_white", "aw", "actw", "A_W: White's attack on Black's king"),
            ("attack_black", "ab", "actb", "A_B: Black's attack on White's king")):
        rows, _ = _group_rows(reg.pair_groups, b["counts"][key], pairs)
        lines += ["", title, *rows,
                  f"{'  total':<71} {_fmt_pair(c[total])}",
                  f"{'  act = a*sigmoid(x/32 + c/32), continuous':<71} {_fmt_pair(c[act])}",
                  f"{'  act, integer (table)':<71} {_fmt_pair((i[act + '_mg'], i[act + '_eg']))}"]
    lines += ["",
              f"{'S = L + act(A_W) - act(A_B), continuous':<71} {_fmt_pair(c['s'])}",
              f"{'S, integer (16-bit halves)':<71} {_fmt_pair((i['s_mg'], i['s_eg']))}",
              f"winnable counts: pawns {ints[ev.WINNABLE_PAWNS]}, symmetric files "
              f"{ints[ev.WINNABLE_SYM]}, asymmetric files {ints[ev.WINNABLE_ASYM]}, pawn endgame "
              f"{ints[ev.WINNABLE_PAWN_ENDGAME]}, bias {ints[ev.WINNABLE_BIAS]}",
              f"winnable w = {c['w']:.6f} (integer, sign of eg applied: {i['winnable']})",
              f"eg after winnable: continuous {c['win'][1]:.6f}, integer {i['win_eg']}",
              f"eg scale (out of {ev.EG_SCALE_MAX}): {ints[ev.INT_ALPHA_WHITE]} if White is the "
              f"strong side (eg > 0), {ints[ev.INT_ALPHA_BLACK]} otherwise; integer applies "
              f"{i['alpha']}",
              f"eg after scaling: continuous {c['scaled'][1]:.6f}, integer {i['scaled_eg']}",
              f"phase: {ints[ev.INT_PHASE]}/{ev.PHASE_MAX}",
              f"continuous eval: {c['eval']:.6f}",
              f"integer eval (White POV): {int_eval_v}"]
    return "\n".join(lines)


#: Evaluations `tuner eval` knows: name -> breakdown formatter.
_BREAKDOWNS = {"clockwork": _breakdown_cde2ced, "clockwork-10d79e6": _breakdown_10d79e6}


@click.command("eval", help=EVAL_HELP)
@click.argument("fens", nargs=-1)
@click.option("--file", "-f", "file", type=click.Path(dir_okay=False, allow_dash=True),
              help="Read positions from F (`FEN` or `FEN;anything` a line; '-' for stdin).")
@click.option("--evaluation", "-e", "evaluation", type=click.Choice(sorted(_BREAKDOWNS)),
              default="clockwork", show_default=True, help="Which evaluation to run.")
@click.option("--params", "-p", "params", type=click.Path(exists=True, dir_okay=False),
              help="Parameter JSON (registry schema); default: the engine's shipped parameters.")
@click.option("--breakdown", is_flag=True,
              help="Print every term's (mg, eg) contribution, the phase, the continuous and the "
                   "integer eval (meant for one position; printed for each one given).")
def eval_cmd(fens, file, evaluation, params, breakdown):
    if not fens and file is None:
        raise click.UsageError("give FEN arguments or --file F")
    try:
        items = _read_inputs(fens, file)
    except OSError as e:
        raise click.ClickException(str(e))

    import importlib

    from . import EVALUATIONS
    from .registry import ParamFileError, ParamRegistry

    module = importlib.import_module(EVALUATIONS[evaluation])
    try:
        reg = module.registry() if params is None else ParamRegistry.from_json(params)
        module.load_params(reg)  # checks the layout
    except ParamFileError as e:  # names the file and the entry
        raise click.ClickException(str(e))
    except (OSError, ValueError, KeyError) as e:
        raise click.ClickException(f"{params}: {e}")

    from tuner.data.errors import clip

    positions, ok, errors = _parse_all(items)
    for _, label, reason in errors:
        click.echo(f"{label}: {clip(reason)}", err=True)
    if ok:
        ie = module.evaluate_positions(positions, reg)[0]
        out = []
        for k, i in enumerate(ok):
            fen = items[i][1]
            if breakdown:
                out.append(_BREAKDOWNS[evaluation](fen, positions[k], reg, int(ie[k])))
                out.append("")
            out.append(f"{fen};{int(ie[k])}")
        click.echo("\n".join(out))
    if errors:
        sys.exit(1)


@click.command("export")
@click.argument("params", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["cpp", "json"]), default="cpp", show_default=True,
              help="cpp: Clockwork eval_constants.hpp source (values rounded with std::round, constant "
                   "entries as CS(..); a clockwork-10d79e6 file in that commit's own header layout, "
                   "value parameters and sigmoid included); json: the registry schema (exact round "
                   "trip).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              help="Output file (default: stdout).")
def export_cmd(params, fmt, output):
    """Export the parameters of PARAMS (registry JSON, e.g. a tuned output) as C++ or JSON.

    A clockwork-10d79e6 file (value parameters, king-safety sigmoid) is written as that engine
    commit's own src/eval_constants.hpp."""
    from .export import export
    from .registry import ParamRegistry

    try:
        reg = ParamRegistry.from_json(params)
        text = export(reg, reg.defaults, fmt, None if output == "-" else output, reg.value_defaults)
    except (OSError, ValueError, KeyError) as e:
        raise click.ClickException(f"{params}: {e}")
    if output == "-":
        click.echo(text, nl=False)
