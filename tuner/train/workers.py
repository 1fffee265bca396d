"""Worker threads, each with its own tape: the parallel, deterministic gradient of a batch.

Every worker owns a tape, a linear accumulator and scratch; the compiled chunk kernel releases the
GIL, so the threads run in parallel without a lock in the hot path. Chunk c of a batch always
covers the same positions and writes only ``chunk_grads[c]``; `reduce_chunks` then adds them in
chunk order. Which thread ran which chunk therefore never changes a bit of the result.
"""
from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tuner.tape import TapeFullError, grow, new_accumulator, new_tape, reset
from .kernels import reduce_chunks, texel_chunk
from .replay import replay_chunks

#: Initial tape capacity per position (grown on demand, outside the hot loop).
RECORDS_PER_POSITION = 16
OPERANDS_PER_POSITION = 128


def resolve_threads(threads: int) -> int:
    """0 means every core available to this process."""
    if threads > 0:
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class Workers:
    """A pool of `n_threads` workers evaluating micro-batches of `micro` positions.

    Eager by default (each micro-batch recorded on the worker's tape); with a `store`
    (`tuner.train.replay.build_store`) the recorded linear forms are replayed instead.
    """

    def __init__(self, evaluation, n_threads: int, micro: int, max_batch: int, store=None):
        self.evaluation = evaluation
        self.store = store
        self.n_params = evaluation.registry.n_params
        self.n_threads = n_threads
        self.micro = micro
        self.max_chunks = math.ceil(max_batch / micro)
        self.chunk_grads = np.zeros((self.max_chunks, self.n_params, 2))
        self.grad = np.zeros((self.n_params, 2))
        self.pool = ThreadPoolExecutor(n_threads) if n_threads > 1 else None
        if store is None:  # eager: a tape, an accumulator and output slots per worker
            records = micro * RECORDS_PER_POSITION + 8
            self.tapes = [new_tape(0, self.n_params, records=records,
                                   operands=micro * OPERANDS_PER_POSITION + 8)
                          for _ in range(n_threads)]
            self.accs = [new_accumulator(self.n_params) for _ in range(n_threads)]
            self.slots = [np.zeros(micro, dtype=np.int64) for _ in range(n_threads)]
        else:  # replay: the parameters plus one working slot, per worker
            self.pv = [np.zeros((self.n_params + 1, 2)) for _ in range(n_threads)]
            self.pg = [np.zeros((self.n_params + 1, 2)) for _ in range(n_threads)]
            self.val = [np.zeros(1) for _ in range(n_threads)]
            self.vg = [np.zeros(1) for _ in range(n_threads)]
            self.losses = [np.zeros(micro) for _ in range(n_threads)]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()

    def _run_chunk(self, w, params, positions, results, order, start, stop, k, scale, c,
                   with_grad):
        while True:
            tape = self.tapes[w]
            tape.pair_val[: self.n_params] = params
            try:
                reset(tape)
                rows, slots = order[start:stop], self.slots[w][: stop - start]
                self.evaluation.record_batch(tape, self.accs[w], positions, rows, slots)
                return texel_chunk(tape, slots, results, rows, k, scale, self.chunk_grads[c],
                                   with_grad)
            except TapeFullError:
                self.tapes[w] = grow(tape)

    def loss_grad(self, params, positions, results, order, k, with_grad=True):
        """Sum of squared errors over `order` and (if `with_grad`) the gradient of its mean.

        Returns ``(sse, grad)``; `grad` is float64[n_params, 2] (a buffer reused by the next call)
        or None.
        """
        n = len(order)
        n_chunks = math.ceil(n / self.micro)
        if with_grad and n_chunks > self.max_chunks:
            raise ValueError("batch larger than the workers were sized for")
        sse = np.zeros(n_chunks)
        scale = 1.0 / n

        def work(w):
            if self.store is not None:  # replay: one compiled call for all of w's chunks
                st, pv = self.store, self.pv[w]
                pv[: self.n_params] = params
                replay_chunks(pv, self.pg[w], self.val[w], self.vg[w], st.offsets, st.index,
                              st.coef, st.alpha, results, order, self.micro,
                              np.arange(w, n_chunks, self.n_threads), k, scale, self.losses[w],
                              with_grad, self.chunk_grads, sse)
                return
            for c in range(w, n_chunks, self.n_threads):
                start = c * self.micro
                stop = min(n, start + self.micro)
                # Without gradients every chunk shares buffer 0 (it is not written).
                sse[c] = self._run_chunk(w, params, positions, results, order, start, stop, k,
                                         scale, c if with_grad else 0, with_grad)

        if self.pool is None:
            work(0)
        else:
            for f in [self.pool.submit(work, w) for w in range(self.n_threads)]:
                f.result()
        total = math.fsum(sse)
        if not with_grad:
            return total, None
        reduce_chunks(self.chunk_grads, n_chunks, self.grad)
        return total, self.grad
