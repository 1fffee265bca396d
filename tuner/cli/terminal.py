"""The terminal side of long commands: progress bars with an estimate on a terminal, plain lines
otherwise (a log, a pipe, CI).

`TerminalObserver` renders the events of `tuner.train.progress.Observer` with Click; the training
core itself never prints. Progress goes to stderr, so stdout keeps only the results and log lines.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import click
from numba.core.errors import NumbaError

from tuner.compiling import COMPILING
from tuner.errors import TunerError
from tuner.train.progress import Observer


#: What a training run compiles, as the announcement names it.
TRAINING_KERNELS = "the training kernels"


def announce_compiling(what: str) -> None:
    """The line a command prints (stderr) when Numba starts compiling `what`."""
    click.echo(f"{COMPILING}: Numba is compiling {what} (later runs load the machine code from "
               f"the cache) ...", err=True)


@contextmanager
def compile_errors(name: str) -> Iterator[None]:
    """Turn Numba's refusal to compile evaluation `name` (a typing error in its code, with the
    file and line) into a `TunerError` (one line, see `tuner.cli.errors`) instead of a
    traceback."""
    try:
        yield
    except NumbaError as e:
        raise TunerError(f"evaluation {name!r} does not compile with Numba: "
                         f"{str(e).strip()}") from None


class TerminalObserver(Observer):
    """Bars with an ETA when stderr is a terminal (`tty` None: detect it), plain lines when not."""

    def __init__(self, tty: bool | None = None, what: str = TRAINING_KERNELS):
        self.tty = sys.stderr.isatty() if tty is None else tty
        self.what = what
        self.bar = None
        self.lock = threading.Lock()  # record_progress comes from the recording threads
        self.loss_text = ""

    def _line(self, text: str) -> None:
        click.echo(text, err=True)

    def _open(self, length: int, label: str, show_item: bool = False) -> None:
        if self.tty:
            self.bar = click.progressbar(length=length, label=label, file=sys.stderr,
                                         show_eta=True, show_pos=True,
                                         item_show_func=(lambda _: self.loss_text)
                                         if show_item else None)
            self.bar.render_progress()
        else:
            self._line(f"{label} ...")

    def _close(self) -> None:
        if self.bar is not None:
            self.bar.render_finish()
            self.bar = None

    def compile_start(self) -> None:
        announce_compiling(self.what)

    def load_start(self, names: list[str]) -> None:
        self._line(f"loading {', '.join(names)} ...")

    def load_end(self, n_positions: int, seconds: float) -> None:
        self._line(f"loaded {n_positions:,} positions in {seconds:.2f} s")

    def record_start(self, n_positions: int) -> None:
        self._open(n_positions, f"recording {n_positions:,} positions")

    def record_progress(self, n: int) -> None:
        with self.lock:
            if self.bar is not None:
                self.bar.update(n)

    def record_end(self) -> None:
        self._close()

    def epoch_start(self, epoch: int, epochs: int, n_positions: int) -> None:
        self.loss_text = ""
        if self.tty:  # without a terminal the epoch's log line says it all
            self._open(n_positions, f"epoch {epoch}/{epochs}", show_item=True)

    def epoch_progress(self, done: int, loss: float) -> None:
        if self.bar is not None:
            self.loss_text = f"loss {loss:.6f}"
            self.bar.update(done - self.bar.pos)

    def epoch_end(self) -> None:
        self._close()
