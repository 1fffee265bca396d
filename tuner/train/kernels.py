"""Compiled kernels of the epoch loop: a micro-batch's loss and gradient, the ordered reduction,
optimisers.

A batch is cut into micro-batches ("chunks") whose boundaries do not depend on the thread count
or the number of cluster workers (`cut_chunks`: every `micro` positions and at every segment of the
store).
Each chunk's loss and parameter gradient come from `replay_chunks`: its positions played from a
frozen store, built once for the whole dataset (replay) or from this epoch's recording of the
chunk (eager, `tuner.train.record`). Either way the same records run through the same sweeps,
positions last to first, and the losses are summed first to last: the modes are bitwise
identical. `reduce_chunks` adds the chunk gradients in
chunk order with compensated sums, so the result is bitwise identical for any number of threads.

Gradients are flat: the pair parameters' (mg, eg) row-major, then the value parameters; the
optimisers work on flat vectors with a mask.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit, types
from numba.extending import intrinsic
from tuner.jit import INLINE, JIT

from tuner.chess.bitboard import lsb, pop_lsb
from tuner.tape.ops import neumaier_add
from tuner.tape.player import play
from .record import LOSS



@njit(**JIT)
def _param_grads_out(arena, n_values, n_pairs, grad_out):
    """Copy the arena's parameter gradients into a flat vector (pairs, then values)."""
    for i in range(n_pairs):
        grad_out[2 * i] = arena.pair_grad[i, 0]
        grad_out[2 * i + 1] = arena.pair_grad[i, 1]
    for i in range(n_values):
        grad_out[2 * n_pairs + i] = arena.val_grad[i]


@njit(**JIT)
def _zero_param_grads(arena, n_values, n_pairs):
    arena.val_grad[:n_values] = 0.0
    arena.pair_grad[:n_pairs] = 0.0


@njit(**JIT)
def _sum_losses(outputs, n):
    """Compensated sum of the loss column, first to last."""
    s = 0.0
    c = 0.0
    for i in range(n):
        s, c = neumaier_add(s, c, outputs[i, LOSS])
    return s + c


class Batch(NamedTuple):
    """One batch's micro-batches ("chunks") as the kernels see them: chunk c is the positions
    ``order[starts[c]:starts[c + 1]]`` (`cut_chunks`); its loss sum goes to ``sse[c]`` and,
    `with_grad`, ``seed`` times its flat parameter gradient to ``chunk_grads[c]`` (seed = 1 /
    batch size: the gradient of the batch's mean loss)."""

    order: np.ndarray
    starts: np.ndarray
    seed: float
    with_grad: bool
    chunk_grads: np.ndarray
    sse: np.ndarray


@intrinsic
def _fetch_add(typingctx, counter, x):
    """``counter[0] += x`` in one atomic operation (int64[:]); returns the value before."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64
            and isinstance(x, types.Integer)):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        add = context.cast(builder, args[1], signature.args[1], types.int64)
        return builder.atomic_rmw("add", ary.data, add, "monotonic")

    return types.int64(counter, x), codegen


@njit(**JIT)
def take_chunk(taken) -> int:
    """The next index into a batch's chunks for the worker that asks: ``taken[0]`` (int64[1],
    shared by the workers of a batch, from 0), counted up in one atomic operation, so that each
    index goes to one worker, whichever asks first. Which worker computes a chunk does not change
    its loss or gradient (each has its own buffer, reduced in chunk order), so workers take
    chunks as they finish the last one: none waits for another's share."""
    return _fetch_add(taken, 1)


@njit(**JIT)
def replay_chunks(store, arena, batch, chunks, taken, outputs):
    """The chunks ``chunks[k]`` of `batch` (`Batch`) for the indices k this worker takes
    (`take_chunk` of `taken`, until they run out) played from `store` in `arena`, their
    outputs in `outputs` (float64[micro, 2]). One call per worker and batch, so Python is not in
    the loop; a worker alone (`taken` its own, from 0) plays them all, in order."""
    order, starts, seed, with_grad = batch.order, batch.starts, batch.seed, batch.with_grad
    chunk_grads, sse = batch.chunk_grads, batch.sse
    n_values, n_pairs = store.params[0], store.params[1]
    while True:
        k = take_chunk(taken)
        if k >= chunks.shape[0]:
            break
        c = chunks[k]
        rows = order[starts[c]: starts[c + 1]]
        if with_grad:
            _zero_param_grads(arena, n_values, n_pairs)
        if play(store, arena, rows, seed, with_grad, outputs) >= 0:
            raise ValueError("unknown record tag in a sweep")
        sse[c] = _sum_losses(outputs, rows.shape[0])
        if with_grad:
            _param_grads_out(arena, n_values, n_pairs, chunk_grads[c])


@njit(**JIT)
def cut_chunks(order, micro, segment, starts) -> int:
    """Cut a batch's rows `order` (in increasing store order, or of any order if `segment`
    holds every row) into chunks: a chunk ends after `micro` positions, and before the first
    row of another segment of the store (rows ``s * segment`` to ``(s + 1) * segment - 1``),
    where the count of `micro` starts again. Chunk c is then ``order[starts[c]:starts[c + 1]]``
    (`starts`: int64, at least ``len(order) + 1``); returns the number of chunks. No chunk holds
    rows of two segments, and where a chunk ends depends only on the rows, `micro` and
    `segment`: so a cluster worker holding whole segments computes whole chunks, the same for
    any number of workers. A chunk's rows are not read but its first and last, and where a
    segment ends within it, which a binary search finds: O(chunks log micro), not O(rows)."""
    n = order.shape[0]
    starts[0] = 0
    k = 0
    i = 0
    while i < n:
        hi = _segment_end(order[i], segment)
        j = min(i + micro, n)
        if order[j - 1] >= hi:  # the segment ends within: at the first row of the next
            j = i + np.searchsorted(order[i:j], hi)
        k += 1
        starts[k] = j
        i = j
    return k


@njit(**INLINE)
def _segment_end(row, segment):
    """The first row of the segment after `row`'s (within int64: a segment starts at a row, so
    it ends at most `segment` rows past one)."""
    lo = row // segment * segment
    return lo + min(segment, np.iinfo(np.int64).max - lo)


#: Bits per word of the bitmap `store_order` sorts with.
WORD_BITS = 64
#: What `rows_kind` says of a batch's rows: one is outside the store, they are in increasing
#: store order already (each row once), or neither.
ROWS_OUTSIDE, ROWS_INCREASING, ROWS_UNORDERED = range(3)


@njit(**JIT)
def rows_kind(rows, n_rows) -> int:
    """`ROWS_OUTSIDE` if a row of `rows` is not in 0..n_rows-1, else `ROWS_INCREASING` if every
    row is greater than the one before it (a full batch, taken as it is: nothing to sort), else
    `ROWS_UNORDERED`. One pass over the rows without a branch in it: for a full batch, a tenth of
    the time of the range check and bitmap sort it spares (measured)."""
    n = rows.shape[0]
    if n == 0:
        return ROWS_INCREASING
    lo = hi = rows[0]
    increasing = True
    for i in range(1, n):
        r = rows[i]
        lo = min(lo, r)
        hi = max(hi, r)
        increasing &= r > rows[i - 1]
    if lo < 0 or hi >= n_rows:
        return ROWS_OUTSIDE
    return ROWS_INCREASING if increasing else ROWS_UNORDERED


@njit(**JIT)
def store_order(rows, bits, out) -> int:
    """``out[:len(rows)]`` = `rows` in increasing order, if they are distinct: each row sets its
    bit in `bits` (uint64, all zero, at least ``max(rows) // 64 + 1`` words), then the words
    between the lowest and highest row are read back in order and cleared again. O(rows +
    span / 64): a batch of a shuffled epoch costs about a tenth of a comparison sort.

    Returns how many rows were written: fewer than ``len(rows)`` means some row came twice
    (`bits` is left all zero either way; the caller sorts another way).
    """
    lo = bits.shape[0]
    hi = -1
    for r in rows:
        w = r // WORD_BITS
        bits[w] |= np.uint64(1) << np.uint64(r % WORD_BITS)
        lo = min(lo, w)
        hi = max(hi, w)
    k = 0
    for w in range(lo, hi + 1):
        x = bits[w]
        while x:
            out[k] = w * WORD_BITS + lsb(x)
            x = pop_lsb(x)
            k += 1
        bits[w] = 0
    return k


@njit(**JIT)
def reduce_chunks(chunk_grads, n_chunks, out):
    """out = sum over chunks 0..n_chunks-1 of chunk_grads, in chunk order, compensated. Every
    parameter's running sum is kept while the chunks are read row after row, in one stream:
    for each parameter the same sum in the same order as reading its column, measured about 6
    times faster (a full batch's 6,807 chunks; a column's reads are a row's length apart)."""
    n = out.shape[0]
    s = np.zeros(n)
    c = np.zeros(n)
    for ch in range(n_chunks):
        row = chunk_grads[ch]
        for i in range(n):
            s[i], c[i] = neumaier_add(s[i], c[i], row[i])
    for i in range(n):
        out[i] = s[i] + c[i]


class AdamW(NamedTuple):
    """AdamW's settings (``[optimizer]``), as floats."""

    beta1: float
    beta2: float
    eps: float
    weight_decay: float


@njit(**JIT)
def adamw_step(params, grad, m, v, mask, lr, hyper, step):
    """One AdamW step (Clockwork's form) on the entries where `mask` is true (flat vectors),
    with the settings `hyper` (`AdamW`).

    m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;  theta -= lr (m^ / (sqrt(v^) + eps) + wd theta)
    with bias corrections m^ = m / (1 - b1^step), v^ = v / (1 - b2^step). Masked-out entries keep
    their value and moments.
    """
    beta1, beta2, eps, weight_decay = hyper
    c1 = 1.0 - beta1 ** step
    c2 = 1.0 - beta2 ** step
    for i in range(params.shape[0]):
        if not mask[i]:
            continue
        g = grad[i]
        m[i] = beta1 * m[i] + (1.0 - beta1) * g
        v[i] = beta2 * v[i] + (1.0 - beta2) * g * g
        mhat = m[i] / c1
        vhat = v[i] / c2
        params[i] -= lr * mhat / (np.sqrt(vhat) + eps) + lr * weight_decay * params[i]


@njit(**JIT)
def sgd_step(params, grad, velocity, mask, lr, momentum, weight_decay):
    """One SGD step with (heavy-ball) momentum and decoupled weight decay, where `mask` is true."""
    for i in range(params.shape[0]):
        if not mask[i]:
            continue
        velocity[i] = momentum * velocity[i] + grad[i]
        params[i] -= lr * velocity[i] + lr * weight_decay * params[i]
