"""``tuner verify``: check an evaluation written for the tuner against the engine it ports.

The engine is started as a UCI subprocess (`UciEngine`): ``uci`` / ``uciok`` (``UCI_Chess960`` is
switched on when the engine offers it, so Chess960 castling rights are understood), then for each
position ``position fen FEN``, the evaluation command (Clockwork's ``eval`` by default) and
``isready``: the reply is the line matching the reply pattern before ``readyok``. Every reply has
a time limit; an engine that exits or never answers ends the command with one line saying so.

The tuner's side is `tuner eval`'s: the same input reading, position checks and
`Evaluation.evaluate_positions` (tuner/evals/commands.py), so a position agrees exactly when
``tuner eval`` prints the engine's number. Registered on the main group in tuner/cli.py.
"""
from __future__ import annotations

import collections
import queue
import re
import shlex
import subprocess
import sys
import threading
import time

import click

from tuner.data.errors import clip

from .commands import position_options

#: Clockwork's answer to ``eval``: the static evaluation from the side to move's point of view.
DEFAULT_COMMAND = "eval"
DEFAULT_REPLY = r"^Evaluation \(stm\): (?P<eval>[+-]?\d+)\s*$"
#: The named group of the reply pattern that holds the evaluation.
EVAL_GROUP = "eval"
#: Points of view of the engine's number: the side to move's, or White's.
POVS = ("stm", "white")
DEFAULT_TIMEOUT = 10.0  # seconds for one reply (readyok, an evaluation)
#: Seconds at least for the handshake's replies: an engine may take a while to start.
STARTUP_TIMEOUT = 30.0
DEFAULT_SHOW = 10  # mismatches listed
CHESS960_OPTION = "UCI_Chess960"
#: A FEN's fields without and with the move counters, and the counters' values when left out.
FEN_FIELDS_MIN = 4
CLOCK_DEFAULTS = ["0", "1"]
#: Seconds an engine gets to exit after ``quit`` before it is killed.
QUIT_GRACE = 1.0
#: Engine stderr lines kept to quote when it dies.
STDERR_TAIL = 5
#: Positions between two redraws of the progress bar.
PROGRESS_STEP = 64


class EngineError(Exception):
    """The engine cannot be used: it did not start, exited, or did not answer in time. The
    message is one line naming the engine and what was awaited."""


class UciEngine:
    """A UCI engine subprocess read line by line, with a time limit on every reply.

    Use as a context manager: the engine is told ``quit`` (and killed if it does not exit) when
    the block ends, however it ends.
    """

    def __init__(self, command: str, timeout: float = DEFAULT_TIMEOUT):
        """Start `command` (a shell-like command line, split with shlex; not run by a shell)."""
        self.command = command
        self.timeout = timeout
        self.name = command  # replaced by the engine's `id name`
        self.offers_chess960 = False
        try:
            argv = shlex.split(command)
        except ValueError as e:
            raise EngineError(f"--engine {command!r}: {e}") from None
        if not argv:
            raise EngineError("--engine: empty command")
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, bufsize=1,
                                         errors="replace")
        except OSError as e:
            raise EngineError(f"--engine {command!r} cannot be started: {e}") from None
        self.lines: queue.Queue = queue.Queue()
        self.stderr_tail: collections.deque = collections.deque(maxlen=STDERR_TAIL)
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        self.stderr_pump = threading.Thread(target=self._pump_stderr, daemon=True)
        self.stderr_pump.start()

    def _pump_stdout(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\r\n"))
        self.lines.put(None)  # end of output: the engine exited

    def _pump_stderr(self) -> None:
        for line in self.proc.stderr:
            self.stderr_tail.append(line.rstrip("\r\n"))

    def __enter__(self) -> UciEngine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Ask the engine to quit; kill it if it is still running after `QUIT_GRACE` seconds."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
            except OSError:
                pass
            try:
                self.proc.wait(QUIT_GRACE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass

    def _exited(self, awaiting: str) -> EngineError:
        try:
            code = self.proc.wait(QUIT_GRACE)
        except subprocess.TimeoutExpired:
            code = None
        self.stderr_pump.join(QUIT_GRACE)  # its last words, if it exited
        how = "closed its output" if code is None else f"exited with code {code}"
        said = (f"; its last stderr line: {clip(self.stderr_tail[-1])!r}" if self.stderr_tail
                else "")
        return EngineError(f"engine {self.name!r} {how} while {awaiting}{said}")

    def send(self, line: str) -> None:
        """Write one command line to the engine."""
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except OSError:
            raise self._exited(f"sending {line!r}") from None

    def read_until(self, last: str, awaiting: str, timeout: float | None = None) -> list[str]:
        """The lines the engine prints up to the line `last` (excluded), within `timeout`
        seconds (default: the engine's time limit)."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        out = []
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise EngineError(f"engine {self.name!r} did not answer within {timeout:g} s "
                                  f"while {awaiting}") from None
            if line is None:
                raise self._exited(awaiting)
            if line.strip() == last:
                return out
            out.append(line)

    def start(self) -> None:
        """The UCI handshake: ``uci`` up to ``uciok`` (reading ``id name`` and whether
        ``UCI_Chess960`` is offered; if so it is switched on), then ``isready``; each reply within
        the time limit or `STARTUP_TIMEOUT`, whichever is longer."""
        startup = max(self.timeout, STARTUP_TIMEOUT)
        self.send("uci")
        for line in self.read_until("uciok", "waiting for 'uciok' after 'uci'", startup):
            words = line.split()
            if words[:2] == ["id", "name"] and len(words) > 2:
                self.name = " ".join(words[2:])
            elif words[:3] == ["option", "name", CHESS960_OPTION]:
                self.offers_chess960 = True
        if self.offers_chess960:
            self.send(f"setoption name {CHESS960_OPTION} value true")
        self.send("isready")
        self.read_until("readyok", "waiting for 'readyok' after the handshake", startup)

    def sync(self, awaiting: str) -> list[str]:
        """``isready``: the lines printed before ``readyok``."""
        self.send("isready")
        return self.read_until("readyok", awaiting)

    def exchange(self, fen: str, command: str) -> list[str]:
        """Set up `fen`, send `command`; the lines the engine printed in reply."""
        self.send(f"position fen {full_fen(fen)}")
        self.send(command)
        return self.sync(f"waiting for the reply to {command!r} on {fen!r}")


def full_fen(fen: str) -> str:
    """`fen` with the move counters the tuner lets a FEN leave out (``0 1``): UCI engines read
    six fields."""
    fields = fen.split()
    return " ".join(fields + CLOCK_DEFAULTS[len(fields) - FEN_FIELDS_MIN:])


def engine_value(lines: list[str], reply: re.Pattern, fen: str, pov: str,
                 engine: str) -> tuple[int, list[str]]:
    """White's point of view of the first line of `lines` matching `reply`, and the other lines
    (what the engine said besides, e.g. that it refused the FEN). EngineError if no line
    matches or the match is not an integer."""
    for k, line in enumerate(lines):
        m = reply.search(line)
        if m is None:
            continue
        text = m.group(EVAL_GROUP)
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise EngineError(f"engine {engine!r} on {fen!r}: {text!r} in reply "
                              f"{clip(line)!r} is not an integer") from None
        if pov == "stm" and fen.split()[1] == "b":
            value = -value
        return value, lines[:k] + lines[k + 1:]
    said = clip("; ".join(lines)) if lines else "nothing"
    raise EngineError(f"engine {engine!r} on {fen!r}: no line matches --reply "
                      f"{reply.pattern!r} (it printed: {said})")


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
def verify_cmd(fens, engine_cmd, file, evaluation, params, command, reply, pov, timeout, show,
               breakdown):
    if not fens and file is None:
        raise click.UsageError("give FEN arguments or --file F")
    pattern = compile_reply(reply)
    from tuner.compiling import watch_compilation
    from tuner.terminal import announce_compiling, compile_errors

    from . import EvaluationIndexError
    from .commands import _evaluation, _input_blocks, _parse_all, _read_params

    try:
        items = [item for block in _input_blocks(fens, file) for item in block]
    except OSError as e:
        raise click.ClickException(str(e)) from None
    ev = _evaluation(evaluation)
    reg = ev.registry if params is None else _read_params(params, ev)
    with watch_compilation(lambda: announce_compiling(f"the {ev.name} evaluation")), \
            compile_errors(ev.name):
        positions, ok, errors = _parse_all(items)
        for _, label, reason in errors:
            click.echo(f"{label}: {clip(reason)}", err=True)
        try:
            tuner_evals = ev.evaluate_positions(positions, reg)[0] if ok else []
        except EvaluationIndexError as e:  # a bug in the evaluation
            raise click.ClickException(str(e)) from None
    if not ok:
        raise click.ClickException("no valid position to verify")

    mismatches = []
    try:
        with UciEngine(engine_cmd, timeout) as engine:
            engine.start()
            with click.progressbar(length=len(ok), file=sys.stderr, show_eta=True, show_pos=True,
                                   label=f"verifying {len(ok):,} positions against "
                                         f"{engine.name!r}") as bar:
                for k, i in enumerate(ok):
                    label, fen = items[i]
                    try:
                        value, said = engine_value(engine.exchange(fen, command), pattern, fen,
                                                   pov, engine.name)
                    except EngineError as e:
                        raise EngineError(f"{label}: {e}") from None
                    if value != int(tuner_evals[k]):
                        mismatches.append((k, i, value, said))
                    if (k + 1) % PROGRESS_STEP == 0:
                        bar.update(PROGRESS_STEP)
                bar.update(len(ok) % PROGRESS_STEP)
    except EngineError as e:
        raise click.ClickException(str(e)) from None

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
