"""Click commands of the evaluation layer: ``tuner eval`` and ``tuner export``.

Registered on the main group in tuner/cli.py ("evaluation commands" section). Heavy imports
(numba, the evaluation) happen inside the commands so ``tuner --help`` stays quick.
"""
from __future__ import annotations

import sys

import click

EVAL_HELP = """Evaluate positions with Clockwork's evaluation (White's point of view).

Positions come from FEN arguments (quote each FEN) and/or --file F, one position a line, either
`FEN` or `FEN;anything` (the part after the first ';' is ignored; blank lines are skipped). Each
valid position prints one line `FEN;<eval>` in input order, where <eval> is the engine's integer
`evaluate_white_pov` (16-bit packed score, phase blend with C++ truncating division).

With --params P.json (a parameter file in the registry's JSON schema, e.g. a tuned output) the
integer eval is defined as the engine would compute it after rounding every parameter to an integer
with std::round (half away from zero); --breakdown also shows the unrounded continuous eval.

Invalid lines are reported on stderr as `F:LINE: reason` (`arg:N: reason` for arguments); the
other lines are still evaluated, and the exit code is 1 if any line failed.
"""


def _read_inputs(fens, file):
    """[(label, fen)] in input order."""
    items = [(f"arg:{i}", f.strip()) for i, f in enumerate(fens, 1)]
    if file is not None:
        name = "<stdin>" if file == "-" else file
        stream = click.open_file(file, "r", encoding="utf-8", errors="surrogateescape")
        with stream:
            for lineno, line in enumerate(stream, 1):
                fen = line.split(";", 1)[0].strip()
                if not fen and ";" not in line:
                    continue  # blank line
                items.append((f"{name}:{lineno}", fen))
    return items


def _parse_all(items):
    """Bulk-parse; returns (positions of the valid items, [(index, label, fen)], [(label, reason)])."""
    import numpy as np

    from tuner.chess.position import parse_fen, parse_fen_list, status_reason

    from .clockwork import check_domain

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


def _breakdown(fen, pos, values, reg, int_eval_v):
    """Per-group (mg, eg) contributions of one position (net counts times values)."""
    import numpy as np

    from .clockwork import PHASE_MAX, feature_counts

    counts, phases = feature_counts(pos.reshape(1, 9))
    c = counts[0].astype(np.float64)
    ph = int(phases[0])
    alpha = ph / PHASE_MAX
    lines = [f"position: {fen}",
             f"{'term':<36} {'net counts':<34} {'mg':>10} {'eg':>10}"]
    tot_mg = tot_eg = 0.0
    for g in reg.groups:
        cg = counts[0, g.slice]
        if not cg.any():
            continue
        mg = float(c[g.slice] @ values[g.slice, 0])
        eg = float(c[g.slice] @ values[g.slice, 1])
        tot_mg += mg
        tot_eg += eg
        if g.shape:
            nz = np.nonzero(cg)[0]
            desc = " ".join(f"[{int(i)}]{int(cg[i]):+d}" for i in nz)
        else:
            desc = f"{int(cg[0]):+d}"
        lines.append(f"{g.name:<36} {desc:<34} {_fmt_num(mg):>10} {_fmt_num(eg):>10}")
    cont = alpha * tot_mg + (1.0 - alpha) * tot_eg
    lines += [f"{'total (MG, EG)':<36} {'':<34} {_fmt_num(tot_mg):>10} {_fmt_num(tot_eg):>10}",
              f"phase: {ph}/{PHASE_MAX} (alpha = {alpha:.6f})",
              f"continuous eval: {cont:.6f}",
              f"integer eval (White POV): {int_eval_v}"]
    return "\n".join(lines)


@click.command("eval", help=EVAL_HELP)
@click.argument("fens", nargs=-1)
@click.option("--file", "-f", "file", type=click.Path(dir_okay=False, allow_dash=True),
              help="Read positions from F (`FEN` or `FEN;anything` a line; '-' for stdin).")
@click.option("--params", "-p", "params", type=click.Path(exists=True, dir_okay=False),
              help="Parameter JSON (registry schema); default: the engine's shipped parameters.")
@click.option("--breakdown", is_flag=True,
              help="Print every term's (mg, eg) contribution, the phase, the continuous and the "
                   "integer eval (meant for one position; printed for each one given).")
def eval_cmd(fens, file, params, breakdown):
    if not fens and file is None:
        raise click.UsageError("give FEN arguments or --file F")
    try:
        items = _read_inputs(fens, file)
    except OSError as e:
        raise click.ClickException(str(e))

    from .clockwork import evaluate_positions, load_params, registry
    from .registry import ParamRegistry

    try:
        if params is None:
            reg = registry()
            values = load_params(None)
        else:
            reg = ParamRegistry.from_json(params)
            values = load_params(reg)
    except (OSError, ValueError, KeyError) as e:
        raise click.ClickException(f"{params}: {e}")

    positions, ok, errors = _parse_all(items)
    for _, label, reason in errors:
        click.echo(f"{label}: {reason}", err=True)
    if ok:
        ie, _, _, _, _ = evaluate_positions(positions, values)
        out = []
        for k, i in enumerate(ok):
            fen = items[i][1]
            if breakdown:
                out.append(_breakdown(fen, positions[k], values, reg, int(ie[k])))
                out.append("")
            out.append(f"{fen};{int(ie[k])}")
        click.echo("\n".join(out))
    if errors:
        sys.exit(1)


@click.command("export")
@click.argument("params", type=click.Path(exists=True, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["cpp", "json"]), default="cpp", show_default=True,
              help="cpp: Clockwork eval_constants.hpp source (values rounded with std::round, constant "
                   "entries as CS(..)); json: the registry schema (exact round trip).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              help="Output file (default: stdout).")
def export_cmd(params, fmt, output):
    """Export the parameters of PARAMS (registry JSON, e.g. a tuned output) as C++ or JSON."""
    from .export import export
    from .registry import ParamRegistry

    try:
        reg = ParamRegistry.from_json(params)
        text = export(reg, reg.defaults, fmt, None if output == "-" else output)
    except (OSError, ValueError, KeyError) as e:
        raise click.ClickException(f"{params}: {e}")
    if output == "-":
        click.echo(text, nl=False)
