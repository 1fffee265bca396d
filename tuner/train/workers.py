"""Worker threads, each with its own tape or arena: the parallel, deterministic gradient of a batch.

**The gradient of a batch is the compensated sum, in micro-batch order, of micro-batch gradients
computed by workers.** A batch, in store order, is cut into micro-batches ("chunks") of at most
`micro` positions, and at every *segment* of the store (``[training] segment`` consecutive rows):
no chunk holds rows of two segments (`tuner.train.kernels.cut_chunks`). Where a chunk ends
depends only on the batch's rows, so not on who computes it: a thread, or a cluster worker that
holds a range of whole segments. A *source* of micro-batch gradients computes the loss sum and
gradient of any chunks of a batch into the batch's ``sse[c]`` and ``chunk_grads[c]``:
`ReplaySource` plays them from a frozen store, `EagerSource` records, freezes and plays them (the
same records through the same sweeps, so the same bits). `Workers` runs one source on a pool of
threads, chunk c on thread ``c % threads``, and `reduce_chunks` adds the chunk gradients in chunk
order. Which worker computed which chunk therefore never changes a bit of the result, and
another kind of worker (another process, another machine) that fills the same chunks plugs in
at `Workers._compute`: Ray actors do, in `tuner.train.cluster`.

Every worker owns its scratch (`Source.scratch`: eager, a tape and the evaluation's scratch;
replay, a small arena for the player); the compiled chunk kernels release the GIL, so the
threads run in parallel without a lock in the hot path.

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
from .config import DEFAULT_SEGMENT
from .kernels import (ROWS_INCREASING, ROWS_OUTSIDE, WORD_BITS, Batch, cut_chunks, reduce_chunks,
                      replay_chunks, rows_kind, store_order, take_chunk)
from .record import Labelled, new_training_tape, record_positions


#: Replay stores of at least this many positions get a specialised player (see the module
#: docstring); `ReplaySource(specialised=...)` decides otherwise.
SPECIALISE_FROM = 100_000
#: The one chunk of a one-chunk `Batch` (an eager chunk, played alone).
FIRST_CHUNK = np.zeros(1, np.int64)
#: Where a segment ends when the batch is not in store order (`Workers(in_store_order=False)`):
#: never, so the chunks are cut every `micro` positions only.
NO_SEGMENTS = np.iinfo(np.int64).max


def one_chunk(n: int) -> np.ndarray:
    """The `Batch.starts` of one chunk of `n` positions."""
    return np.array([0, n], np.int64)


def at_least(buffer: np.ndarray, n: int) -> np.ndarray:
    """`buffer`, or a new one of `n` elements (its dtype) if it is shorter."""
    return buffer if len(buffer) >= n else np.empty(n, buffer.dtype)


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


class ReplaySource:
    """Micro-batch gradients played from `store` (`tuner.train.record.record_store`).
    `specialised` chooses the player: a specialised one (True), the interpreter (False) or by
    the store's size (None, see `SPECIALISE_FROM`); the results are the same bits either way."""

    def __init__(self, store, specialised: bool | None = None):
        self.store = store
        #: Positions the batches' rows index, and the length of the parameter vector.
        self.n_rows = store_len(store)
        self.n_pairs = int(store.params[1])
        self.n_theta = 2 * self.n_pairs + int(store.params[0])
        if specialised is None:
            specialised = self.n_rows >= SPECIALISE_FROM
        #: Whether the batches are played by a specialised player.
        self.specialised = bool(specialised and specialisable(store))
        #: The compiled driver: `replay_chunks`, over the interpreter or over the store's
        #: specialised player.
        self.replay_chunks = replay_chunks
        if self.specialised:
            self.replay_chunks = specialise(store, [replay_chunks]).replay_chunks
            self._warm()

    def scratch(self, micro: int):
        """A worker's own: an arena for one position's temporaries, and the outputs."""
        return new_arena(*arena_size(self.store)), np.zeros((micro, 2))

    def compute(self, scratch, theta_views, batch: Batch, chunks: np.ndarray,
                taken: np.ndarray) -> None:
        """The chunks of `chunks` that this worker takes (`take_chunk` of `taken`) of `batch` at
        the parameters `theta_views` (pairs, values): one compiled call."""
        arena, outputs = scratch
        set_params(arena, *theta_views)
        self.replay_chunks(self.store, arena, batch, chunks, taken, outputs)

    def _warm(self) -> None:
        """Compile (or load) the specialised driver now, on one position, not in the first
        epoch (into buffers of its own: it leaves no trace)."""
        if self.n_rows:
            one = np.zeros(1, np.int64)
            batch = Batch(one, one_chunk(1), 1.0, True, np.zeros((1, self.n_theta)),
                          np.zeros(1))
            self.replay_chunks(self.store, self.scratch(1)[0], batch, one, np.zeros(1, np.int64),
                               np.zeros((1, 2)))


class EagerSource:
    """Micro-batch gradients of in-memory `positions` recorded every time (loss record form
    `loss` at K `k`, fitted to `targets`), frozen and played as a store of one chunk."""

    def __init__(self, evaluation, positions, targets: np.ndarray, k: float,
                 loss: int = F_SIGMOID_SQ_ERR):
        self.evaluation = evaluation
        self.batch = Labelled(positions, targets, k, loss)
        self.n_rows = len(positions)
        reg = evaluation.registry
        self.n_pairs, self.n_theta = reg.n_params, 2 * reg.n_params + reg.n_values
        self.specialised = False

    def scratch(self, micro: int) -> dict:
        """A worker's own: a tape, the evaluation's scratch, slots, an arena and the outputs."""
        reg = self.evaluation.registry
        return dict(tape=new_training_tape(reg, micro), scratch=self.evaluation.new_scratch(),
                    slots=np.zeros((2, micro), np.int64),
                    arena=new_arena(reg.n_values, reg.n_params), outputs=np.zeros((micro, 2)))

    def compute(self, scratch: dict, theta_views, batch: Batch, chunks: np.ndarray,
                taken: np.ndarray) -> None:
        """Each chunk of `chunks` this worker takes (`take_chunk` of `taken`): recorded, frozen
        and played on its own (without gradients every chunk shares gradient buffer 0, which is
        not written)."""
        reg = self.evaluation.registry
        while (k := take_chunk(taken)) < len(chunks):
            c = chunks[k]
            rows = batch.order[batch.starts[c]: batch.starts[c + 1]]
            slots = scratch["slots"][:, : len(rows)]
            scratch["tape"], scratch["scratch"] = record_positions(
                self.evaluation, scratch["tape"], scratch["scratch"], self.batch, rows, slots)
            store = build_store([extract(scratch["tape"].rec, slots)], reg.n_values,
                                reg.n_params)
            arena = scratch["arena"]
            if any(need > have for need, have in zip(arena_size(store), (len(arena.val),
                                                                         len(arena.pair_val)))):
                arena = scratch["arena"] = new_arena(*arena_size(store))
            set_params(arena, *theta_views)
            g = c if batch.with_grad else 0
            one = Batch(np.arange(len(rows)), one_chunk(len(rows)), batch.seed,
                        batch.with_grad, batch.chunk_grads[g: g + 1], batch.sse[c: c + 1])
            replay_chunks(store, arena, one, FIRST_CHUNK, np.zeros(1, np.int64),
                          scratch["outputs"])


class Workers:
    """A pool of `n_threads` workers computing the micro-batches (of at most `micro` positions,
    none across two segments of `segment` rows of the store) of batches of at most `max_batch`
    from `source` (`ReplaySource` or `EagerSource`).

    `in_store_order` takes each batch's positions in store order (see the module docstring);
    False keeps the order given and cuts it every `micro` positions only, for benchmarks that
    compare the two.
    """

    def __init__(self, source, n_threads: int, micro: int, max_batch: int,
                 in_store_order: bool = True, segment: int = DEFAULT_SEGMENT):
        self.source = source
        self.n_threads = n_threads
        self.micro = micro
        self.segment = segment if in_store_order else NO_SEGMENTS
        #: At most one chunk more than `micro` fills per segment a batch touches.
        self.max_chunks = (math.ceil(max_batch / micro)
                           + min(max_batch, math.ceil(source.n_rows / segment)))
        self.chunk_grads = np.zeros((self.max_chunks, source.n_theta))
        self.grad = np.zeros(source.n_theta)
        self.scratch = [source.scratch(micro) for _ in range(n_threads)]
        self.pool = ThreadPoolExecutor(n_threads) if n_threads > 1 else None
        self.in_store_order = in_store_order
        self.bits = np.zeros(0, np.uint64)  # `store_order`'s bitmap, sized by the first batch
        self.sorted = np.zeros(max_batch, np.int64)
        self.starts = np.zeros(max_batch + 1, np.int64)  # `cut_chunks`' cuts, reused per batch

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown()

    def _in_store_order(self, order, n_rows: int):
        """`order` sorted: itself if it is already in increasing store order (as a full batch
        is), else a view of a buffer reused by the next call."""
        order = np.ascontiguousarray(order, dtype=np.int64)
        kind = rows_kind(order, n_rows)
        if kind == ROWS_OUTSIDE:
            raise IndexError(f"batch rows outside 0..{n_rows - 1}")
        if kind == ROWS_INCREASING:
            return order
        if len(order) > len(self.sorted):
            self.sorted = np.zeros(len(order), np.int64)
        if len(self.bits) * WORD_BITS < n_rows:
            self.bits = np.zeros(n_rows // WORD_BITS + 1, np.uint64)
        out = self.sorted[: len(order)]
        if store_order(order, self.bits, out) != len(order):  # a row twice: sort it plainly
            out[:] = np.sort(order)
        return out

    def loss_grad(self, theta: np.ndarray, order: np.ndarray, with_grad: bool = True):
        """Sum of the losses of the positions `order` and (if `with_grad`) the gradient of their
        mean.

        `theta` is the flat parameter vector (pairs row-major, then values). Returns
        ``(sse, grad)``; `grad` is flat like `theta` (a buffer reused by the next call) or None.
        """
        theta = np.ascontiguousarray(theta, dtype=np.float64).reshape(-1)
        if self.in_store_order:
            order = self._in_store_order(order, self.source.n_rows)
        n = len(order)
        starts = self.starts = at_least(self.starts, n + 1)
        n_chunks = cut_chunks(order, self.micro, self.segment, starts)
        if with_grad and n_chunks > self.max_chunks:
            raise ValueError("batch larger than the workers were sized for")
        batch = Batch(order, starts[: n_chunks + 1], 1.0 / n, with_grad, self.chunk_grads,
                      np.zeros(n_chunks))
        self._compute(theta, batch, n_chunks)
        total = math.fsum(batch.sse)
        if not with_grad:
            return total, None
        self.reduce(n_chunks)
        return total, self.grad

    def reduce(self, n_chunks: int) -> None:
        """`grad` = the sum of the first `n_chunks` chunk gradients in chunk order, each thread
        adding its share of the parameters (parameter by parameter, so any split of them gives
        the same bits)."""
        def share(w):
            lo, hi = (len(self.grad) * w // self.n_threads,
                      len(self.grad) * (w + 1) // self.n_threads)
            reduce_chunks(self.chunk_grads[:, lo:hi], n_chunks, self.grad[lo:hi])

        self._each_thread(share)

    def _compute(self, theta: np.ndarray, batch: Batch, n_chunks: int) -> None:
        """Every chunk of `batch` at the flat parameters `theta` into its ``sse[c]`` and
        ``chunk_grads[c]`` (`tuner.train.cluster.ClusterWorkers` computes them on Ray actors)."""
        self.compute_chunks(split_params(theta, self.source.n_pairs), batch,
                            np.arange(n_chunks))

    def compute_chunks(self, theta_views, batch: Batch, chunks: np.ndarray) -> None:
        """The chunks `chunks` of `batch` at the parameters `theta_views` (pairs, values) into
        their ``sse[c]`` and ``chunk_grads[c]``, each by the worker that takes it first
        (`take_chunk`: one counter for them all)."""
        chunks = np.ascontiguousarray(chunks, dtype=np.int64)
        taken = np.zeros(1, np.int64)
        self._each_thread(lambda w: self.source.compute(self.scratch[w], theta_views, batch,
                                                        chunks, taken))

    def _each_thread(self, fn) -> None:
        """fn(w) for every worker w, in parallel; exceptions propagate."""
        if self.pool is None:
            fn(0)
        else:
            for f in [self.pool.submit(fn, w) for w in range(self.n_threads)]:
                f.result()

