"""Click commands of the evaluation layer: ``tuner eval``, ``tuner export``, ``tuner params`` and
``tuner examples``.

Registered on the main group in tuner/cli/__init__.py ("evaluation commands" section). Heavy
imports (numba, the evaluation) happen inside the commands so ``tuner --help`` stays quick.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from tuner.errors import TunerError

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

The file is read, parsed and evaluated a block at a time (memory does not grow with it). Invalid
lines are reported on stderr as `F:LINE: reason` (`arg:N: reason` for arguments), the first 10
of them; past those, a count and a file in the temporary folder that lists every one. The other
lines are still evaluated, and the exit code is 1 if any line failed. A UTF-8 byte order mark
at the start of the file is skipped. The first run of an
evaluation compiles it (Numba), which is said on stderr.
"""

#: Input read, parsed and evaluated at a time: memory stays bounded whatever the file's size.
EVAL_BLOCK_BYTES = 1 << 20


def _input_blocks(fens, file):
    """Lists [(label, fen)] in input order, one block at a time: the FEN arguments, then the
    positions of `file` (see EVAL_HELP), streamed. A file that cannot be used is a
    `TunerError` (a `DatasetError`) naming it."""
    from contextlib import nullcontext

    from tuner.data.convert import (DETECT_BYTES, DETECT_LINES, line_blocks, open_input,
                                    skip_bom)
    from tuner.data.formats import FEN_OF_LINE, binary_kind, detect_format, not_text_hint

    if fens:
        yield [(f"arg:{i}", f.strip()) for i, f in enumerate(fens, 1)]
    if file is None:
        return
    name = "<stdin>" if file == "-" else file
    source = (nullcontext((skip_bom(sys.stdin.buffer.read), lambda: 0)) if file == "-"
              else open_input(Path(file)))
    with source as (read, tell):
        head = [read(EVAL_BLOCK_BYTES)]
        what = binary_kind(head[0][:DETECT_BYTES])
        if what == "a Parquet file" and file != "-":
            yield _parquet_fens(file)
            return
        if what is not None:
            raise TunerError(not_text_hint(name, what))
        fen_of, lineno = None, 0
        for _, raw in line_blocks(lambda n: head.pop() if head else read(n), tell,
                                  EVAL_BLOCK_BYTES):
            if not raw:  # within a line longer than a block
                continue
            lines = [ln.removesuffix(b"\r").decode("utf-8", "surrogateescape")
                     for ln in raw.split(b"\n")[:-1 if raw.endswith(b"\n") else None]]
            if fen_of is None and any(t.strip() for t in lines):
                fmt, _ = detect_format([t for t in lines if t.strip()][:DETECT_LINES])
                fen_of = FEN_OF_LINE[fmt]
            yield [(f"{name}:{k}", fen_of(line))
                   for k, line in enumerate(lines, lineno + 1) if line.strip()]
            lineno += len(lines)


def _parquet_fens(path: str) -> list:
    """[(label, fen)] of the ``fen`` column of a Parquet file (nulls as empty FENs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(path).names
        if "fen" not in names:
            raise TunerError(
                f"{path}: a Parquet file without a fen column (its columns: "
                f"{', '.join(names) or 'none'}); eval --file reads the FENs of a `fen` column")
        column = pq.read_table(path, columns=["fen"]).column("fen")
    except (pa.ArrowException, OSError) as e:
        raise TunerError(f"{path}: a Parquet file whose fen column cannot be read "
                         f"({e})") from None
    if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
        raise TunerError(f"{path}: the fen column holds {column.type}, not strings")
    return [(f"{path}:row {i}", fen or "") for i, fen in enumerate(column.to_pylist())]


class _ErrorReport:
    """The invalid lines of one ``tuner eval``: the first SHOW_BAD printed on stderr as they
    come, every one also written to a report file in the temporary folder, which is kept (and
    named) only when they were more than printed."""

    def __init__(self):
        self.count = 0
        self.report = None

    def add(self, label: str, reason: str) -> None:
        import os
        import tempfile
        import time

        from tuner.data.convert import BadLineReport
        from tuner.data.errors import SHOW_BAD, clip

        line = f"{label}: {clip(reason)}"
        self.count += 1
        if self.count <= SHOW_BAD:
            click.echo(line, err=True)
        if self.report is None:
            stem = f"tuner-eval-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
            self.report = BadLineReport(Path(tempfile.gettempdir()) / stem)
        self.report.add(line)

    def close(self) -> None:
        """Keep the report and say where it is if not every invalid line was printed."""
        from tuner.data.errors import SHOW_BAD

        if self.report is None:
            return
        if self.count > SHOW_BAD:
            path = self.report.keep()
            click.echo(f"... and {self.count - SHOW_BAD:,} more invalid lines "
                       f"({self.count:,} in all; every one: {path})", err=True)
        else:
            self.report.discard()
        self.report = None


def _parse_all(items):
    """Bulk-parse; returns (positions of the valid items, [(index, label, fen)], [(label, reason)])."""
    import numpy as np

    from tuner.chess.fen import parse_fen, parse_fen_list
    from tuner.chess.status import status_reason

    from tuner.evals.common import check_domain

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
    """The evaluation `spec` names; a `TunerError` naming the option if there is none."""
    from tuner.evals import get_evaluation

    try:
        return get_evaluation(spec)
    except (ValueError, TypeError) as e:
        raise TunerError(f"--evaluation: {e}") from None


def _read_params(path: str, evaluation):
    """The registry of parameter file `path`, checked against `evaluation` (if given)."""
    from tuner.evals.registry import ParamFileError, ParamRegistry

    try:
        reg = ParamRegistry.from_json(path)
        if evaluation is not None:
            evaluation.check_params(reg)
    except ParamFileError:  # names the file and the entry: reported as it is
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise TunerError(f"{path}: {e}") from None
    return reg


def position_options(file_help: str):
    """The arguments of a command that evaluates positions (`eval`, `verify`): FEN arguments,
    ``--file`` (`file_help`), ``--evaluation`` and ``--params``."""
    options = [
        click.argument("fens", nargs=-1),
        click.option("--file", "-f", "file", type=click.Path(dir_okay=False, allow_dash=True),
                     help=file_help),
        click.option("--evaluation", "-e", "evaluation", default="clockwork", show_default=True,
                     help="Which evaluation: a registered name, a module path or a .py file."),
        click.option("--params", "-p", "params", type=click.Path(exists=True, dir_okay=False),
                     help="Parameter JSON (registry schema); default: the evaluation's own "
                          "parameters."),
    ]

    def apply(command):
        for option in reversed(options):
            command = option(command)
        return command
    return apply


@click.command("eval", help=EVAL_HELP)
@position_options("Read positions from F (`FEN` or `FEN;anything` a line; '-' for stdin).")
@click.option("--breakdown", is_flag=True,
              help="Print every term's (mg, eg) contribution, the continuous and the integer "
                   "eval (meant for one position; printed for each one given).")
def eval_cmd(fens, file, evaluation, params, breakdown):
    if not fens and file is None:
        raise click.UsageError("give FEN arguments or --file F")

    from tuner.compiling import watch_compilation

    from .terminal import announce_compiling, compile_errors

    ev = _evaluation(evaluation)
    if ev.trace is not None:
        raise TunerError(f"--evaluation: {ev.name} is the evaluation of a trace's "
                         f"rows; it has no boards to evaluate FENs with "
                         f"(docs/trace.md)")
    reg = ev.registry if params is None else _read_params(params, ev)
    errors = _ErrorReport()
    try:
        with watch_compilation(lambda: announce_compiling(f"the {ev.name} evaluation")), \
                compile_errors(ev.name):
            for items in _input_blocks(fens, file):
                _eval_block(ev, reg, items, breakdown, errors)
    finally:  # also when an error (an EvaluationIndexError: a bug in the evaluation; its block
        errors.close()  # is not printed) ends the command
    if errors.count:
        sys.exit(1)


def _eval_block(ev, reg, items, breakdown: bool, errors: _ErrorReport) -> None:
    """Evaluate one block of (label, fen) items: the invalid ones to `errors`, the others
    printed as `FEN;<eval>` (after their breakdown with `breakdown`)."""
    positions, ok, bad = _parse_all(items)
    for _, label, reason in bad:
        errors.add(label, reason)
    if not ok:
        return
    ie = ev.evaluate_positions(positions, reg)[0]
    out = []
    for k, i in enumerate(ok):
        fen = items[i][1]
        if breakdown:
            out.append(ev.breakdown(fen, positions[k], reg, int(ie[k])))
            out.append("")
        out.append(f"{fen};{int(ie[k])}")
    click.echo("\n".join(out))


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
    evaluation's in the generic array form of docs/evaluations.md, in a namespace named after the
    evaluation (the file's "evaluation" field, which runs write; else the file's name). The
    C++ of a run's output starts with its note as comments (the K it trained with, the best
    epoch): `tuner export DIR/best.json` is DIR/best.hpp."""
    from tuner.fileio import atomic_write

    from tuner.evals import CPP_ARRAY, evaluation_of_params
    from tuner.evals.export import cpp_comments, export

    ev = None if evaluation is None else _evaluation(evaluation)
    reg = _read_params(params, ev)
    if ev is None:
        ev = evaluation_of_params(reg)
    named = reg.meta.get("evaluation")  # written by runs and `tuner params`
    name = named if isinstance(named, str) and named else Path(params).stem
    style, name = (CPP_ARRAY, name) if ev is None else (ev.cpp, ev.name)
    try:
        text = export(reg, reg.defaults, fmt, None, reg.value_defaults, cpp_style=style, name=name)
        if fmt == "cpp":
            text = cpp_comments(reg.meta.get("note")) + text
        if output != "-":
            atomic_write(output, text)
    except (OSError, ValueError, KeyError) as e:
        raise TunerError(f"{params}: {e}") from None
    if output == "-":
        click.echo(text, nl=False)


@click.command("params")
@click.argument("evaluation", required=False)
@click.option("--config", "config_name", metavar="CONFIG",
              help="Write what this configuration's run starts from (its [evaluation] name, "
                   "init and random_* keys, and its K when it is a number); not with "
                   "EVALUATION or the options below.")
@click.option("--init", help="'zero' (the default of [evaluation] init), 'default' (the "
                             "evaluation's own values), 'random' or a parameter JSON file.")
@click.option("--random-seed", type=int, help="Seed of --init random (default: 0).")
@click.option("--random-center", type=float, help="Centre of --init random (default: 0).")
@click.option("--random-range", type=float, help="Half-width of --init random (default: 100).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              help="Output file (default: stdout).")
def params_cmd(evaluation, config_name, init, random_seed, random_center, random_range, output):
    """Write the parameters a run starts from, as a parameter file (registry JSON).

    EVALUATION is a registered name, a module path or a .py file; --init and --random-* mean
    what the [evaluation] keys of a configuration mean (`tuner train --help-config`), and the
    values are computed by the same code as a run's start (constants keep their defaults). The
    file names the evaluation; use it as `tuner diff START.json DIR/best.json`, as --params or
    as [evaluation] init.

    \b
      tuner params examples/kingsafety.py --init default -o start.json
      tuner params --config examples/kingsafety.toml -o start.json"""
    from tuner.fileio import atomic_write
    from tuner.shipped import find_config
    from tuner.train.config import SCHEMA, Config, load_config
    from tuner.train.loop import initial_params

    options = {"init": init, "random_seed": random_seed, "random_center": random_center,
               "random_range": random_range}
    given = {k: v for k, v in options.items() if v is not None}
    if config_name is not None:
        if evaluation is not None or given:
            raise click.UsageError("--config takes the evaluation and init from the "
                                   "configuration: give neither EVALUATION nor --init/--random-*")
        cfg = load_config(find_config(config_name))
    else:
        if evaluation is None:
            raise click.UsageError("give EVALUATION (or --config CONFIG)")
        keys = SCHEMA["evaluation"]
        for k, v in given.items():
            err = keys[k].check(v) if keys[k].check else None
            if err:
                raise click.BadParameter(err, param_hint=f"--{k.replace('_', '-')}")
        cfg = Config({"evaluation": {**{k: key.default for k, key in keys.items()},
                                     "name": evaluation, **given}})
    ev = _evaluation_at(cfg)
    theta = initial_params(cfg, ev.registry)
    n = ev.registry.n_params
    meta = {"evaluation": ev.name}
    k = cfg.values.get("loss", {}).get("k")
    if isinstance(k, (int, float)):
        meta["K"] = float(k)
    text = ev.registry.with_meta(**meta).dumps(theta[:2 * n].reshape(n, 2),
                                               value_values=theta[2 * n:])
    if output == "-":
        click.echo(text, nl=False)
        return
    atomic_write(output, text)
    click.echo(f"wrote {output}", err=True)


def _evaluation_at(cfg):
    """The evaluation of `cfg`'s ``[evaluation] name`` (a file relative to the config's folder),
    or a `TunerError` naming the key."""
    from tuner.evals import get_evaluation

    try:
        return get_evaluation(cfg["evaluation"]["name"], cfg.resolve_path("."))
    except (ValueError, TypeError) as e:
        where = f"{cfg.path}: [evaluation] name" if cfg.path else "EVALUATION"
        raise TunerError(f"{where}: {e}") from None


@click.command("examples")
@click.argument("directory", type=click.Path(file_okay=False), default="examples")
def examples_cmd(directory):
    """Write the tutorial's example evaluation (docs/tutorial.md: kingsafety.py and the
    configuration that trains it, kingsafety.toml) into DIRECTORY (default: ./examples), to
    follow the tutorial from an installed copy. Files already there are not overwritten."""
    from tuner.shipped import write_examples

    written = write_examples(Path(directory))  # FileExistsError naming a file already there
    for path in written:
        click.echo(f"wrote {path}")
