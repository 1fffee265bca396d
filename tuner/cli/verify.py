"""``tuner verify``: check an evaluation written for the tuner against the engine it ports.

The engine side (the UCI subprocess, its replies) is `tuner.evals.verify`; the tuner's side is
`tuner eval`'s (tuner/cli/evals.py): the same input reading, position checks and
`Evaluation.evaluate_positions`, so a position agrees exactly when ``tuner eval`` prints the
engine's number.
"""
from __future__ import annotations

import re
import sys
from dataclasses import dataclass

import click

from tuner.errors import TunerError, clip
from tuner.evals.verify import (DEFAULT_COMMAND, DEFAULT_REPLY, DEFAULT_TIMEOUT, EVAL_GROUP, POVS,
                                EngineError, UciEngine, engine_value)

from .evals import position_options

DEFAULT_SHOW = 10  # mismatches listed
#: Positions between two redraws of the progress bar.
PROGRESS_STEP = 64


def compile_reply(pattern: str) -> re.Pattern:
    """The reply regex, which must have the named group `EVAL_GROUP`; UsageError if not."""
    try:
        reply = re.compile(pattern)
    except re.error as e:
        raise click.UsageError(f"--reply {pattern!r}: not a regular expression ({e})") from None
    if EVAL_GROUP not in reply.groupindex:
        raise click.UsageError(f"--reply {pattern!r}: needs a named group (?P<{EVAL_GROUP}>...) "
                               f"holding the evaluation")
    return reply


@dataclass(frozen=True)
class UciSettings:
    """How `tuner verify` talks to the engine: its command line, the command that prints the
    static evaluation, the reply's pattern, its point of view and the seconds per reply."""

    engine_cmd: str
    command: str
    reply: str
    pov: str
    timeout: float


VERIFY_HELP = """Check an evaluation against the engine it ports, position by position.

Starts the engine (--engine CMD, a UCI engine; UCI_Chess960 is switched on when it offers it),
asks it for the static evaluation of every position (`position fen FEN`, then --command, then
`isready`; the reply is the first line before `readyok` matching --reply, whose named group
`eval` holds an integer from the point of view --pov) and compares it with the number `tuner eval`
prints for the same position, --evaluation and --params (default: the evaluation's own
parameters: build the engine with the same values, e.g. `tuner export` pasted into its source).

Positions come from FEN arguments and/or --file F, read as `tuner eval` reads them (the part of a
`FEN;eval` line after ';' is ignored). Prints the first --show mismatches (the engine's and the
tuner's number, what else the engine said; with --breakdown the tuner's breakdown of each) and
a summary line `N/M positions equal`. Exit code 1 on any mismatch or invalid line, or if the
engine exits or does not answer within --timeout seconds (said in one line). See docs/verify.md.
"""


@click.command("verify", help=VERIFY_HELP)
@click.option("--engine", "engine_cmd", required=True,
              help="The engine's command line (split like a shell does; not run by a shell).")
@position_options("Read positions from F (as `tuner eval --file`; '-' for stdin).")
@click.option("--command", "command", default=DEFAULT_COMMAND, show_default=True,
              help="The engine command that prints the static evaluation.")
@click.option("--reply", "reply", default=DEFAULT_REPLY, show_default=True,
              help="Regex for the engine's reply line, with a named group (?P<eval>...).")
@click.option("--pov", type=click.Choice(POVS), default="stm", show_default=True,
              help="Whose point of view the engine's number is: the side to move's or White's.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=DEFAULT_TIMEOUT,
              show_default=True, help="Seconds the engine gets for each reply (for those of the handshake, "
                                      "at least 30).")
@click.option("--show", type=click.IntRange(min=0), default=DEFAULT_SHOW, show_default=True,
              help="How many mismatches to print (all are counted).")
@click.option("--breakdown", is_flag=True,
              help="Print the tuner's breakdown of every mismatch printed.")
def verify_cmd(fens, file, evaluation, params, show, breakdown, **engine_options):
    uci = UciSettings(**engine_options)
    if not fens and file is None:
        raise click.UsageError("give FEN arguments or --file F")
    pattern = compile_reply(uci.reply)
    from tuner.compiling import watch_compilation

    from .evals import _evaluation, _input_blocks, _parse_all, _read_params
    from .terminal import announce_compiling, compile_errors

    items = [item for block in _input_blocks(fens, file) for item in block]
    ev = _evaluation(evaluation)
    reg = ev.registry if params is None else _read_params(params, ev)
    with watch_compilation(lambda: announce_compiling(f"the {ev.name} evaluation")), \
            compile_errors(ev.name):
        positions, ok, errors = _parse_all(items)
        for _, label, reason in errors:
            click.echo(f"{label}: {clip(reason)}", err=True)
        tuner_evals = ev.evaluate_positions(positions, reg)[0] if ok else []
    if not ok:
        raise TunerError("no valid position to verify")

    mismatches = []
    with UciEngine(uci.engine_cmd, uci.timeout) as engine:  # an EngineError ends the command
        engine.start()
        with click.progressbar(length=len(ok), file=sys.stderr, show_eta=True, show_pos=True,
                               label=f"verifying {len(ok):,} positions against "
                                     f"{engine.name!r}") as bar:
            for k, i in enumerate(ok):
                label, fen = items[i]
                try:
                    value, said = engine_value(engine.exchange(fen, uci.command), pattern, fen,
                                               uci.pov, engine.name)
                except EngineError as e:
                    raise EngineError(f"{label}: {e}") from None
                if value != int(tuner_evals[k]):
                    mismatches.append((k, i, value, said))
                if (k + 1) % PROGRESS_STEP == 0:
                    bar.update(PROGRESS_STEP)
            bar.update(len(ok) % PROGRESS_STEP)

    for k, i, value, said in mismatches[:show]:
        label, fen = items[i]
        tuner_value = int(tuner_evals[k])
        line = (f"{label}: {fen}: engine {value}, tuner {tuner_value} "
                f"(tuner - engine = {tuner_value - value:+d})")
        if said:
            line += f"; the engine also printed: {clip('; '.join(said))}"
        click.echo(line)
        if breakdown:
            click.echo(ev.breakdown(fen, positions[k], reg, tuner_value))
            click.echo("")
    equal = len(ok) - len(mismatches)
    click.echo(f"{equal:,}/{len(ok):,} positions equal ({len(mismatches):,} different; engine "
               f"{engine.name!r}, evaluation {ev.name}"
               f"{'' if params is None else ', parameters ' + params})")
    if mismatches or errors:
        sys.exit(1)
