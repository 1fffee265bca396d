"""Worker threads, each with its own tape or arena: the parallel, deterministic gradient of a batch.

Every worker owns its scratch (eager: a tape and the evaluation's scratch; replay: a small arena
for the player); the compiled chunk kernels release the GIL, so the threads run in parallel
without a lock in the hot path. Chunk c of a batch always covers the same positions and writes
only ``chunk_grads[c]``; `reduce_chunks` then adds them in chunk order. Which thread ran which
chunk therefore never changes a bit of the result.
"""
from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tuner.tape import new_arena, set_params
from tuner.tape.ops import F_SIGMOID_SQ_ERR
from tuner.tape.player import arena_size, build_store, extract, play
from .kernels import reduce_chunks, replay_chunks
from .record import new_training_tape, record_positions, record_store


def resolve_threads(threads: int) -> int:
    """0 means every core available to this process."""
    if threads > 0:
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def split_params(theta: np.ndarray, n_pairs: int):
    """Views of a flat parameter vector: pairs float64[n_pairs, 2] and values float64[rest]."""
    return theta[: 2 * n_pairs].reshape(n_pairs, 2), theta[2 * n_pairs:]


class Workers:
    """A pool of `n_threads` workers evaluating micro-batches of `micro` positions.

    Eager without a `store` (each micro-batch recorded on the worker's tape every time); with one
    (`tuner.train.record.record_store`) the frozen positions are played instead.
    """

    def __init__(self, evaluation, n_threads: int, micro: int, max_batch: int, store=None,
                 loss: int = F_SIGMOID_SQ_ERR):
        reg = evaluation.registry
        self.loss = loss  # the loss record form eager epochs record
        self.evaluation = evaluation
        self.store = store
        self.n_pairs, self.n_values = reg.n_params, reg.n_values
        self.n_threads = n_threads
        self.micro = micro
        self.max_chunks = math.ceil(max_batch / micro)
        self.chunk_grads = np.zeros((self.max_chunks, 2 * self.n_pairs + self.n_values))
        self.grad = np.zeros(2 * self.n_pairs + self.n_values)
        self.pool = ThreadPoolExecutor(n_threads) if n_threads > 1 else None
        self.outputs = [np.zeros((micro, 2)) for _ in range(n_threads)]
        if store is None:  # eager: a tape, the evaluation's scratch and slots per worker
            self.tapes = [new_training_tape(reg, micro) for _ in range(n_threads)]
            self.scratch = [evaluation.new_scratch() for _ in range(n_threads)]
            self.slots = [np.zeros((2, micro), np.int64) for _ in range(n_threads)]
            self.arenas = [new_arena(self.n_values, self.n_pairs) for _ in range(n_threads)]
        else:  # replay: parameters plus one position's temporaries, per worker
            self.arenas = [new_arena(*arena_size(store)) for _ in range(n_threads)]

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()

    def _eager_chunk(self, w, pairs, values, positions, results, rows, k, seed, grad_out,
                     with_grad):
        """Record the chunk `rows` this epoch, freeze it and play it (the store's order is
        the chunk's); its loss sum, and its gradient into `grad_out`."""
        n = len(rows)
        slots = self.slots[w][:, :n]
        self.tapes[w], self.scratch[w] = record_positions(
            self.evaluation, self.tapes[w], self.scratch[w], positions, results, rows, k,
            self.loss, slots)
        store = build_store([extract(self.tapes[w].rec, slots)], self.n_values, self.n_pairs)
        if any(need > have for need, have in zip(arena_size(store), (len(a) for a in (
                self.arenas[w].val, self.arenas[w].pair_val)))):
            self.arenas[w] = new_arena(*arena_size(store))
        set_params(self.arenas[w], pairs, values)
        sse = np.zeros(1)
        replay_chunks(store, self.arenas[w], np.arange(n), n, np.zeros(1, np.int64), seed,
                      with_grad, self.outputs[w], grad_out.reshape(1, -1), sse)
        return sse[0]

    def loss_grad(self, theta, positions, results, order, k, with_grad=True):
        """Sum of squared errors over `order` and (if `with_grad`) the gradient of its mean.

        `theta` is the flat parameter vector (pairs row-major, then values). Returns
        ``(sse, grad)``; `grad` is flat like `theta` (a buffer reused by the next call) or None.
        """
        theta = np.ascontiguousarray(theta, dtype=np.float64).reshape(-1)
        n = len(order)
        n_chunks = math.ceil(n / self.micro)
        if with_grad and n_chunks > self.max_chunks:
            raise ValueError("batch larger than the workers were sized for")
        sse = np.zeros(n_chunks)
        seed = 1.0 / n
        pairs, values = split_params(theta, self.n_pairs)

        def work(w):
            if self.store is not None:  # replay: one compiled call for all of w's chunks
                set_params(self.arenas[w], pairs, values)
                replay_chunks(self.store, self.arenas[w], order, self.micro,
                              np.arange(w, n_chunks, self.n_threads), seed, with_grad,
                              self.outputs[w], self.chunk_grads, sse)
                return
            for c in range(w, n_chunks, self.n_threads):
                start = c * self.micro
                rows = order[start: min(n, start + self.micro)]
                # Without gradients every chunk shares buffer 0 (it is not written).
                sse[c] = self._eager_chunk(w, pairs, values, positions, results, rows, k, seed,
                                           self.chunk_grads[c if with_grad else 0], with_grad)

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


def continuous_evals(evaluation, theta, positions, n_threads: int, micro: int) -> np.ndarray:
    """The evaluation (the value the tape records, White's point of view) of every position at the
    flat parameters `theta`: recorded once and played forward, for any evaluation."""
    n = len(positions)
    store = record_store(evaluation, positions, np.zeros(n), 1.0, n_threads, micro)
    arena = new_arena(*arena_size(store))
    set_params(arena, *split_params(np.ascontiguousarray(theta, np.float64),
                                    evaluation.registry.n_params))
    outputs = np.zeros((n, 2))
    if play(store, arena, np.arange(n, dtype=np.int64), 0.0, False, outputs) >= 0:
        raise ValueError("unknown record tag in a sweep")
    return outputs[:, 0].copy()
