"""Worker threads, each with its own tape or arena: the parallel, deterministic gradient of a batch.

Every worker owns its scratch (eager: a tape and the evaluation's scratch; replay: a small arena
for the player); the compiled chunk kernels release the GIL, so the threads run in parallel
without a lock in the hot path. Chunk c of a batch always covers the same positions and writes
only ``chunk_grads[c]``; `reduce_chunks` then adds them in chunk order. Which thread ran which
chunk therefore never changes a bit of the result.

**Order inside a batch.** The epoch's shuffle decides which positions form a batch; inside it,
the positions are taken in store order (increasing row), not in the shuffled order. The batch's
gradient is the same sum in a fixed order (only its rounding differs from the shuffled order's),
and the player then reads the store forwards instead of jumping about it: each position's data
follows the previous one's closely, so the memory system streams it instead of paying a random
access per position (see the README's Performance section for the measured difference).

**Specialised players.** A replay store of at least `SPECIALISE_FROM` positions is played by
code written for its templates (`tuner.tape.specialise`): the same op calls as the interpreter,
so the same bits, without decoding every record of every position. Compiling it takes seconds
(once per evaluation and version of the sources: Numba caches it), which a smaller store would
not win back.
"""
from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tuner.tape import new_arena, set_params
from tuner.tape.ops import F_SIGMOID_SQ_ERR
from tuner.tape.player import arena_size, build_store, extract, store_len
from tuner.tape.specialise import specialisable, specialise
from .kernels import WORD_BITS, reduce_chunks, replay_chunks, store_order
from .record import new_training_tape, record_positions


#: Replay stores of at least this many positions get a specialised player (see the module
#: docstring); `Workers(specialised=...)` decides otherwise.
SPECIALISE_FROM = 100_000


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
    `in_store_order` takes each batch's positions in store order (see the module docstring);
    False keeps the order given, for benchmarks that compare the two. `specialised` chooses the
    replay player: a specialised one (True), the interpreter (False) or by the store's size
    (None, see `SPECIALISE_FROM`); the results are the same bits either way.
    """

    def __init__(self, evaluation, n_threads: int, micro: int, max_batch: int, store=None,
                 loss: int = F_SIGMOID_SQ_ERR, in_store_order: bool = True,
                 specialised: bool | None = None):
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
        self.in_store_order = in_store_order
        self.bits = np.zeros(0, np.uint64)  # `store_order`'s bitmap, sized by the first batch
        self.sorted = np.zeros(max_batch, np.int64)
        if store is None:  # eager: a tape, the evaluation's scratch and slots per worker
            self.tapes = [new_training_tape(reg, micro) for _ in range(n_threads)]
            self.scratch = [evaluation.new_scratch() for _ in range(n_threads)]
            self.slots = [np.zeros((2, micro), np.int64) for _ in range(n_threads)]
            self.arenas = [new_arena(self.n_values, self.n_pairs) for _ in range(n_threads)]
        else:  # replay: parameters plus one position's temporaries, per worker
            self.arenas = [new_arena(*arena_size(store)) for _ in range(n_threads)]
        if specialised is None:
            specialised = store is not None and store_len(store) >= SPECIALISE_FROM
        #: Whether replay epochs run a specialised player.
        self.specialised = bool(specialised and store is not None and specialisable(store))
        #: The compiled driver of replay epochs: `replay_chunks`, over the interpreter or over
        #: the store's specialised player.
        self.replay_chunks = replay_chunks
        if self.specialised:
            self.replay_chunks = specialise(store, [replay_chunks]).replay_chunks
            self._warm()

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

    def _warm(self) -> None:
        """Compile (or load) the replay driver now, on one position, not in the first epoch
        (it leaves no trace: the gradient buffer it writes is zeroed again)."""
        if store_len(self.store):
            one = np.zeros(1, np.int64)
            self.replay_chunks(self.store, self.arenas[0], one, 1, one, 1.0, True,
                               self.outputs[0], self.chunk_grads, np.zeros(1))
            self.chunk_grads[0] = 0.0

    def _in_store_order(self, order, n_rows: int):
        """`order` sorted (a view of a buffer reused by the next call)."""
        order = np.ascontiguousarray(order, dtype=np.int64)
        if len(order) > len(self.sorted):
            self.sorted = np.zeros(len(order), np.int64)
        if len(self.bits) * WORD_BITS < n_rows:
            self.bits = np.zeros(n_rows // WORD_BITS + 1, np.uint64)
        out = self.sorted[: len(order)]
        if len(order) and (order.min() < 0 or order.max() >= n_rows):
            raise IndexError(f"batch rows outside 0..{n_rows - 1}")
        if store_order(order, self.bits, out) != len(order):  # a row twice: sort it plainly
            out[:] = np.sort(order)
        return out

    def loss_grad(self, theta, positions, results, order, k, with_grad=True):
        """Sum of squared errors over `order` and (if `with_grad`) the gradient of its mean.

        `theta` is the flat parameter vector (pairs row-major, then values). Returns
        ``(sse, grad)``; `grad` is flat like `theta` (a buffer reused by the next call) or None.
        """
        theta = np.ascontiguousarray(theta, dtype=np.float64).reshape(-1)
        if self.in_store_order:
            order = self._in_store_order(order, len(positions) if self.store is None
                                         else store_len(self.store))
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
                self.replay_chunks(self.store, self.arenas[w], order, self.micro,
                              np.arange(w, n_chunks, self.n_threads), seed, with_grad,
                              self.outputs[w], self.chunk_grads, sse)
                return
            for c in range(w, n_chunks, self.n_threads):
                start = c * self.micro
                rows = order[start: min(n, start + self.micro)]
                # Without gradients every chunk shares buffer 0 (it is not written).
                sse[c] = self._eager_chunk(w, pairs, values, positions, results, rows, k, seed,
                                           self.chunk_grads[c if with_grad else 0], with_grad)

        def reduce(w):  # parameter by parameter, so any split of them gives the same bits
            lo, hi = (len(self.grad) * w // self.n_threads,
                      len(self.grad) * (w + 1) // self.n_threads)
            reduce_chunks(self.chunk_grads[:, lo:hi], n_chunks, self.grad[lo:hi])

        self._each_thread(work)
        total = math.fsum(sse)
        if not with_grad:
            return total, None
        self._each_thread(reduce)
        return total, self.grad

    def _each_thread(self, fn) -> None:
        """fn(w) for every worker w, in parallel; exceptions propagate."""
        if self.pool is None:
            fn(0)
        else:
            for f in [self.pool.submit(fn, w) for w in range(self.n_threads)]:
                f.result()

