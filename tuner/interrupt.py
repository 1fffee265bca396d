"""SIGTERM handled like Ctrl-C: raised as an exception in the main thread, so that every
``finally`` and atomic writer cleans up, and the command says what was kept."""
from __future__ import annotations

import contextlib
import signal
from typing import Iterator

#: Exit status of a process stopped by signal N: 128 + N (what shells report).
SIGNAL_EXIT_BASE = 128


class Terminated(KeyboardInterrupt):
    """The process received SIGTERM."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def exit_status(exc: KeyboardInterrupt) -> int:
    """The exit status for an interruption: 128 + the signal's number (SIGINT for Ctrl-C)."""
    return SIGNAL_EXIT_BASE + (exc.signum if isinstance(exc, Terminated) else signal.SIGINT)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` (a KeyboardInterrupt) in the main thread."""
    def handler(signum, frame):
        raise Terminated(signum)

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not in the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
