"""The engine side of ``tuner verify`` (the command: tuner/cli/verify.py): check an evaluation
written for the tuner against the engine it ports.

The engine is started as a UCI subprocess (`UciEngine`): ``uci`` / ``uciok`` (``UCI_Chess960`` is
switched on when the engine offers it, so Chess960 castling rights are understood), then for each
position ``position fen FEN``, the evaluation command (Clockwork's ``eval`` by default) and
``isready``: the reply is the line matching the reply pattern before ``readyok``. Every reply has
a time limit; an engine that exits or never answers ends the command with one line saying so.

The tuner's side is `tuner eval`'s: the same input reading, position checks and
`Evaluation.evaluate_positions` (tuner/cli/evals.py), so a position agrees exactly when
``tuner eval`` prints the engine's number.
"""
from __future__ import annotations

import collections
import queue
import re
import shlex
import subprocess
import threading
import time

from tuner.errors import TunerError, clip

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
CHESS960_OPTION = "UCI_Chess960"
#: A FEN's fields without and with the move counters, and the counters' values when left out.
FEN_FIELDS_MIN = 4
CLOCK_DEFAULTS = ["0", "1"]
#: Seconds an engine gets to exit after ``quit`` before it is killed.
QUIT_GRACE = 1.0
#: Engine stderr lines kept to quote when it dies.
STDERR_TAIL = 5


class EngineError(TunerError):
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
