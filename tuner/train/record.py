"""Recording positions for training: each position's evaluation and its loss chain on the tape.

The loss is recorded with the position: ``(sigmoid(K * eval) - target)^2`` or the cross-entropy
(`tuner.train.targets`), the target (game result, or its blend with the engine's score) being a
scalar of the record. A micro-batch is recorded in two segments (every evaluation, then every
loss chain; see `tuner.tape.player`), and ``slots[0, i]`` / ``slots[1, i]`` are position i's
evaluation and loss. The eager trainer does this every epoch and sweeps the recording; the replay
trainer does it once per position and freezes the recordings into a store (`record_store`).
Both then run the same records through the same sweeps, so they agree bit for bit.
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from tuner.tape import TapeFullError, grow, new_tape, reset
from tuner.tape.ops import F_SIGMOID_SQ_ERR, F_SIGMOID_XENT, record_sigmoid_sq_err, record_sigmoid_xent
from tuner.tape.player import Store, build_store, extract

JIT = dict(cache=True, nogil=True, error_model="numpy")
#: Initial tape capacity per position (grown on demand, outside the hot loop).
RECORDS_PER_POSITION = 16
OPERANDS_PER_POSITION = 128
#: Segments of a recorded micro-batch: the evaluations, then the loss chains.
EVAL, LOSS = 0, 1


@njit(**JIT)
def record_losses(tape, slots, results, rows, k, loss):
    """The loss of every position, record form `loss` (F_SIGMOID_SQ_ERR or F_SIGMOID_XENT) with
    K and the target as the record's scalars: ``slots[LOSS, i]`` from ``slots[EVAL, i]``."""
    for i in range(rows.shape[0]):
        if loss == F_SIGMOID_XENT:
            slots[LOSS, i] = record_sigmoid_xent(tape, slots[EVAL, i], k, results[rows[i]])
        else:
            slots[LOSS, i] = record_sigmoid_sq_err(tape, slots[EVAL, i], k, results[rows[i]])


def new_training_tape(registry, micro: int):
    """A tape sized for `micro` positions of an evaluation with `registry`'s parameters."""
    return new_tape(registry.n_values, registry.n_params,
                    records=micro * RECORDS_PER_POSITION + 8,
                    operands=micro * OPERANDS_PER_POSITION + 8)


def record_positions(evaluation, tape, scratch, positions, results, rows, k, loss, slots):
    """Record ``positions[rows]`` with their losses on `tape` (from empty); ``slots`` int64[2, n].

    Returns ``(tape, scratch)``: a full tape is grown (and the scratch, which a failed recording
    may have left with terms in it, made anew) and the micro-batch recorded again.
    """
    while True:
        reset(tape)
        try:
            evaluation.record_batch(tape, scratch, positions, rows, slots[EVAL])
            record_losses(tape, slots, results, rows, k, loss)
            return tape, scratch
        except TapeFullError:
            tape, scratch = grow(tape), evaluation.new_scratch()


def record_store(evaluation, positions: np.ndarray, results: np.ndarray, k: float,
                 n_threads: int, micro: int = 1024, progress=None,
                 loss: int = F_SIGMOID_SQ_ERR) -> Store:
    """Record every position with its loss (record form `loss`) once and freeze the recordings
    into a `Store`.

    Micro-batches are recorded in parallel; the store is the same for any thread count.
    `progress(n)` is called (from the worker threads) after each micro-batch of n positions.
    """
    reg = evaluation.registry
    n = len(positions)
    n_chunks = math.ceil(n / micro)
    parts: list = [None] * n_chunks
    rows = np.arange(n, dtype=np.int64)

    def work(w):
        tape, scratch = new_training_tape(reg, micro), evaluation.new_scratch()
        slots = np.zeros((2, micro), np.int64)
        for c in range(w, n_chunks, n_threads):
            lo, hi = c * micro, min(n, (c + 1) * micro)
            tape, scratch = record_positions(evaluation, tape, scratch, positions, results,
                                             rows[lo:hi], k, loss, slots[:, : hi - lo])
            parts[c] = extract(tape.rec, slots[:, : hi - lo], base=lo)
            if progress is not None:
                progress(hi - lo)

    if n_threads > 1:
        with ThreadPoolExecutor(n_threads) as pool:
            for f in [pool.submit(work, w) for w in range(n_threads)]:
                f.result()
    else:
        work(0)
    return build_store(parts, reg.n_values, reg.n_params)
