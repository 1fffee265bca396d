"""How the training core reports progress: an observer whose methods the run calls.

`Run` (tuner/train/loop.py) and `record_store` know nothing about terminals: they call an
`Observer`'s methods as the long steps start, advance and end. The base class does nothing, which
is what tests and `tuner bench` use; `tuner.cli.terminal.TerminalObserver` draws progress bars with an
estimate on a terminal and prints plain lines otherwise. Counts are positions; epochs are numbered
from 1 as in the log.
"""
from __future__ import annotations


class Observer:
    """Progress events of a training run; every method is optional (the defaults do nothing).

    ``record_progress`` may be called from worker threads (one call at a time is not
    guaranteed: implementations that keep state must lock).
    """

    def compile_start(self) -> None:
        """Numba starts compiling the kernels (a cold cache: the first run of these sources)."""

    def compile_end(self, seconds: float) -> None:
        """The kernels are compiled, in `seconds` (only called after `compile_start`; the run
        logs it too)."""

    def load_start(self, names: list[str]) -> None:
        """Loading the datasets `names` starts."""

    def load_end(self, n_positions: int, seconds: float) -> None:
        """The datasets are loaded: `n_positions` positions in `seconds`."""

    def record_start(self, n_positions: int) -> None:
        """Recording every position once (the replay store) starts: `n_positions` of them, or
        at most that many (rows of the files, bad ones included) when a replay run records
        its positions as it reads them, between `load_start` and `load_end`."""

    def record_progress(self, n: int) -> None:
        """`n` more positions are recorded."""

    def record_end(self) -> None:
        """Recording ended (done, or stopped by an error)."""

    def epoch_start(self, epoch: int, epochs: int, n_positions: int) -> None:
        """Epoch `epoch` (1-based) of `epochs` starts over `n_positions` training positions."""

    def epoch_progress(self, done: int, loss: float) -> None:
        """`done` positions of the current epoch are trained; `loss` is their mean loss."""

    def epoch_end(self) -> None:
        """The epoch's batches ended (done, or stopped by an error); validation follows."""

    def epoch_done(self, stats: dict) -> None:
        """The epoch is complete and checkpointed: `stats` holds the fields of
        `tuner.train.checkpoint.HISTORY_FIELDS`."""
