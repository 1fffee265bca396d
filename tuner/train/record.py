"""Recording positions for training: each position's evaluation and its loss chain on the tape.

The loss is recorded with the position: ``(sigmoid(K * eval) - target)^2`` or the cross-entropy
(`tuner.train.targets`), the target (game result, or its blend with the engine's score) being a
scalar of the record. A micro-batch is recorded in two segments (every evaluation, then every
loss chain; see `tuner.tape.player`), and ``slots[0, i]`` / ``slots[1, i]`` are position i's
evaluation and loss. The eager trainer does this every epoch and sweeps the recording; the replay
trainer does it once per position and freezes the recordings into a store (`StoreRecorder`,
`record_store`).
Both then run the same records through the same sweeps, so they agree bit for bit.
"""
from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
from numba import njit
from tuner.jit import BORROWED

from tuner.data.trace import concat_positions, position_count, take_positions
from tuner.tape import TapeFullError, grow, new_tape, reset
from tuner.tape.ops import F_SIGMOID_SQ_ERR, record_loss
from tuner.tape.player import Store, StoreBuilder, extract

#: Initial tape capacity per position (grown on demand, outside the hot loop).
RECORDS_PER_POSITION = 16
OPERANDS_PER_POSITION = 128
#: Segments of a recorded micro-batch: the evaluations, then the loss chains.
EVAL, LOSS = 0, 1
#: Positions a replay run records on a tape at a time (`StoreRecorder`): the store is the same
#: for any number (tests/test_train_replay.py), but each micro-batch's extraction and addition
#: to the store cost Python work (under the GIL, so that it does not run on two threads at
#: once) that 2048 positions share twice as thinly as 1024 do. More would save more (4096: a
#: quarter) but holds more per thread (measured at 1 M positions of clockwork-10d79e6 on 2
#: threads, benchmarks/memory.py: peak +12 MB at 2048, +40 MB at 4096).
RECORD_MICRO = 2048


@njit(**BORROWED)
def record_losses(tape, slots, results, rows, k, loss):
    """The loss of every position, record form `loss` (one of `tuner.tape.ops.LOSS_FORMS`) with
    K and the target as the record's scalars: ``slots[LOSS, i]`` from ``slots[EVAL, i]``."""
    for i in range(rows.shape[0]):
        slots[LOSS, i] = record_loss(tape, slots[EVAL, i], k, results[rows[i]], loss)


def new_training_tape(registry, micro: int):
    """A tape sized for `micro` positions of an evaluation with `registry`'s parameters. It
    does not evaluate its records as they are appended (``evaluate=False``): training freezes
    and replays them, and never reads the values recording would compute."""
    return new_tape(registry.n_values, registry.n_params,
                    records=micro * RECORDS_PER_POSITION + 8,
                    operands=micro * OPERANDS_PER_POSITION + 8, evaluate=False)


class Labelled(NamedTuple):
    """Positions with what their loss records need: `targets` (float64, one per position), K
    and the loss record form."""

    positions: object  # uint64[n, 9], or a trace's rows
    targets: np.ndarray
    k: float
    loss: int


def record_positions(evaluation, tape, scratch, batch: Labelled, rows, slots):
    """Record ``batch.positions[rows]`` with their losses on `tape` (from empty); ``slots``
    int64[2, n].

    Returns ``(tape, scratch)``: a full tape is grown (and the scratch, which a failed recording
    may have left with terms in it, made anew) and the micro-batch recorded again. An index out
    of range handed to a recorder raises `tuner.evals.EvaluationIndexError` naming the position.
    """
    positions, results, k, loss = batch
    while True:
        reset(tape)
        try:
            evaluation.record_batch(tape, scratch, positions, rows, slots[EVAL])
            record_losses(tape, slots, results, rows, k, loss)
            break
        except TapeFullError:
            tape, scratch = grow(tape), evaluation.new_scratch()
    evaluation.check_recording(tape, positions, rows, slots)
    return tape, scratch


class StoreRecorder:
    """Records positions into a `Store` as they come, batch by batch: what a replay run does
    while it reads its data (`tuner.train.stream`), so that the positions are never all held.

    Every position is recorded once with its loss (record form `loss`, K `k`, the target given
    with it) in micro-batches of `micro` consecutive positions counted from the first one given,
    whatever the batches `add` is called with: a batch's last, partial micro-batch waits for the
    next batch (or `finish`). Micro-batches are recorded on `n_threads` threads and go into the
    store in order as soon as their turn comes (a finished micro-batch waits only for the ones
    before it), so the recordings are never all held at once either; the store is the same for
    any thread count and any batches. With several threads, `add` returns as soon as the batch's
    recording has started, so that the caller reads the next batch meanwhile; the next `add`
    (or `finish`) waits for it and raises what it raised. `expected` positions (a hint) size the
    store's arrays. `progress(n)` is called (from the worker threads) after each micro-batch of
    n positions.
    """

    def __init__(self, evaluation, k: float, n_threads: int, micro: int = RECORD_MICRO,
                 expected: int = 0, progress=None, loss: int = F_SIGMOID_SQ_ERR):
        reg = evaluation.registry
        self.evaluation, self.k, self.loss, self.micro = evaluation, k, loss, micro
        self.n_threads, self.progress = n_threads, progress
        self.builder = StoreBuilder(reg.n_values, reg.n_params, expected)
        self.tapes = [new_training_tape(reg, micro) for _ in range(n_threads)]
        self.scratch = [evaluation.new_scratch() for _ in range(n_threads)]
        self.slots = [np.zeros((2, micro), np.int64) for _ in range(n_threads)]
        self.pool = ThreadPoolExecutor(n_threads) if n_threads > 1 else None
        self.lock = threading.Lock()
        self.done = 0                  # positions given to the workers
        self.pending = (None, np.zeros(0))   # a partial micro-batch (positions of any kind)
        self.running: list = []        # the workers' futures of the last batch

    def add(self, positions: np.ndarray, targets: np.ndarray) -> None:
        """Record `positions` (uint64[n, 9], or a trace's rows) with their targets
        (float64[n]), after the ones given before."""
        self.wait()
        if len(self.pending[1]):
            positions = concat_positions([self.pending[0], positions])
            targets = np.concatenate([self.pending[1], targets])
        whole = len(targets) // self.micro * self.micro
        self.pending = (take_positions(positions, np.arange(whole, len(targets))), targets[whole:].copy())
        self._record(positions, targets, whole)

    def finish(self) -> Store:
        """The store of every position added (the recorder is spent)."""
        try:
            self.wait()
            if len(self.pending[1]):
                self._record(*self.pending, len(self.pending[1]))
            self.wait()
            builder, self.builder = self.builder, None  # its arrays are the store's (or freed)
            return builder.finish()
        finally:
            self.close()

    def wait(self) -> None:
        """Until the last batch is recorded (its workers' exceptions raised here)."""
        running, self.running = self.running, []
        for f in running:
            f.result()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()

    def _record(self, positions, targets, n: int) -> None:
        """Start recording the first `n` of `positions` into the store, micro-batch by
        micro-batch (done before returning on one thread)."""
        micro, base = self.micro, self.done
        n_chunks = math.ceil(n / micro)
        ready: dict[int, object] = {}
        turn = [0]        # the next micro-batch to go into the store
        rows = np.arange(n, dtype=np.int64)
        batch = Labelled(positions, targets, self.k, self.loss)

        def work(w):
            for c in range(w, n_chunks, self.n_threads):
                lo, hi = c * micro, min(n, (c + 1) * micro)
                slots = self.slots[w][:, : hi - lo]
                self.tapes[w], self.scratch[w] = record_positions(
                    self.evaluation, self.tapes[w], self.scratch[w], batch, rows[lo:hi], slots)
                part = extract(self.tapes[w].rec, slots, base=base + lo)
                with self.lock:
                    ready[c] = part
                    while turn[0] in ready:
                        self.builder.add(ready.pop(turn[0]))
                        turn[0] += 1
                if self.progress is not None:
                    self.progress(hi - lo)

        self.done += n
        if self.pool is not None:
            self.running = [self.pool.submit(work, w) for w in range(self.n_threads)]
        else:
            work(0)


def record_store(evaluation, positions: np.ndarray, results: np.ndarray, k: float,
                 n_threads: int, micro: int = RECORD_MICRO, progress=None,
                 loss: int = F_SIGMOID_SQ_ERR) -> Store:
    """Record every position with its loss (record form `loss`, target `results`) once and
    freeze the recordings into a `Store` (a `StoreRecorder` given them all at once)."""
    recorder = StoreRecorder(evaluation, k, n_threads, micro, position_count(positions), progress,
                             loss)
    try:
        recorder.add(positions, results)
    except BaseException:
        recorder.close()
        raise
    return recorder.finish()
