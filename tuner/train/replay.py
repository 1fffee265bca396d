"""Record once, replay every epoch: the fast path for evaluations that are linear in their parameters.

A position's tape depends only on the position, never on the parameter values (DESIGN.md). For a
linear evaluation it is two records: a linear combination of parameter pairs with small integer
coefficients, and the phase blend. `build_store` records every position once, checks that shape,
and keeps the operands compactly (u16 parameter index, i8 or i16 coefficient: about 3 bytes per
term) with each position's phase fraction. `replay_chunk` then sweeps those records forward and
backward each epoch with the op table's own form functions (`tuner.tape.ops`), without touching a
board again.

Replay is arithmetic-for-arithmetic the eager path: the same forward functions, the loss chain in
the same order, the backward seeds and the parameter-gradient accumulation in the same order. Its
gradients, and so a whole training run, are bitwise identical to eager mode (a test shows it).
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from tuner.tape import TapeFullError, grow, new_accumulator, new_tape, reset
from tuner.tape.arena import C_RECORDS
from tuner.tape.ops import (F_LINCOMB_PAIR, F_PHASE, K_MUL, K_SIGMOID, K_SUB, _lincomb_pair_bwd,
                            _lincomb_pair_fwd, _phase_bwd, _phase_fwd, kernel, neumaier_add)

JIT = dict(cache=True, nogil=True, error_model="numpy")
#: How many positions ahead the replay prefetches a position's header, and its terms.
PREFETCH_ROW, PREFETCH_TERMS = 16, 8


@intrinsic
def _prefetch(typingctx, arr, i):
    """Hint the CPU to fetch ``arr[i]`` into cache (llvm.prefetch; no effect on results)."""
    if not isinstance(arr, types.Array) or not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
            "llvm.prefetch.p0")
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])  # read, high locality, data cache
        return context.get_dummy_value()

    return types.void(arr, i), codegen


class ReplayUnsupported(ValueError):
    """The evaluation records something other than one linear combination and a phase blend."""


@dataclass
class ReplayStore:
    """Recorded linear forms of positions: position i has operands ``offsets[i]:offsets[i+1]``."""

    offsets: np.ndarray   # int64[N + 1]
    index: np.ndarray     # uint16[M]: parameter index of each term
    coef: np.ndarray      # int8[M] or int16[M]: its integer coefficient
    alpha: np.ndarray     # float64[N]: the phase blend's scalar

    def __len__(self) -> int:
        return len(self.alpha)

    @property
    def nbytes(self) -> int:
        return self.offsets.nbytes + self.index.nbytes + self.coef.nbytes + self.alpha.nbytes


@njit(**JIT)
def _extract_linear(tape, evals, n_params, index, coef, alpha, counts):
    """Copy the recorded linear forms of a micro-batch out of the tape.

    Position i must be recorded as records 2i (a linear combination of parameter pairs with
    integer coefficients) and 2i+1 (the phase blend of that pair, giving ``evals[i]``). Fills
    ``counts[i]`` (its number of terms), `index`, `coef` and `alpha`; returns the number of terms,
    or -1 - i if position i does not have that shape.
    """
    n = evals.shape[0]
    if tape.counts[C_RECORDS] != 2 * n:
        return -1
    m = 0
    for i in range(n):
        r = 2 * i
        if (tape.op[r] >> 4 != F_LINCOMB_PAIR or tape.op[r + 1] >> 4 != F_PHASE
                or tape.lhs[r + 1] != tape.out[r] or tape.out[r + 1] != evals[i]):
            return -1 - i
        first, cnt = tape.lhs[r], tape.rhs[r]
        for q in range(first, first + cnt):
            j, c = tape.opnd_index[q], tape.opnd_coef[q]
            if j < 0 or j >= n_params or c != np.round(c) or abs(c) > 32767:
                return -1 - i
            index[m] = j
            coef[m] = c
            m += 1
        counts[i] = cnt
        alpha[i] = tape.scalar[r + 1]
    return m


def build_store(evaluation, positions: np.ndarray, n_threads: int, micro: int = 1024,
                progress=None) -> ReplayStore:
    """Record every position once and keep its linear form (raises ReplayUnsupported)."""
    n_params = evaluation.registry.n_params
    if n_params > 65536:
        raise ReplayUnsupported("replay stores parameter indices in 16 bits")
    n = len(positions)
    n_chunks = math.ceil(n / micro)
    parts: list = [None] * n_chunks
    rows = np.arange(n, dtype=np.int64)

    def work(w):
        tape = new_tape(0, n_params, records=2 * micro + 8, operands=micro * 128)
        acc = new_accumulator(n_params)
        evals = np.zeros(micro, dtype=np.int64)
        for c in range(w, n_chunks, n_threads):
            lo, hi = c * micro, min(n, (c + 1) * micro)
            while True:
                reset(tape)
                try:
                    evaluation.record_batch(tape, acc, positions, rows[lo:hi], evals[: hi - lo])
                    break
                except TapeFullError:
                    tape = grow(tape)
            cap = int(tape.counts[3])
            index = np.empty(cap, np.uint16)
            coef = np.empty(cap, np.int16)
            alpha = np.empty(hi - lo)
            counts = np.empty(hi - lo, np.int64)
            m = _extract_linear(tape, evals[: hi - lo], n_params, index, coef, alpha, counts)
            if m < 0:
                raise ReplayUnsupported(
                    f"evaluation {evaluation.name!r} does not record position {lo - 1 - m} as one "
                    f"linear combination of parameters and a phase blend; use [training] "
                    f"mode = 'eager'")
            parts[c] = (index[:m], coef[:m], alpha, counts)
            if progress is not None:
                progress(hi - lo)

    if n_threads > 1:
        with ThreadPoolExecutor(n_threads) as pool:
            for f in [pool.submit(work, w) for w in range(n_threads)]:
                f.result()
    else:
        work(0)
    coef = np.concatenate([p[1] for p in parts])
    small = coef.size == 0 or (coef.min() >= -128 and coef.max() <= 127)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.concatenate([p[3] for p in parts]), out=offsets[1:])
    return ReplayStore(offsets, np.concatenate([p[0] for p in parts]),
                       coef.astype(np.int8) if small else coef,
                       np.concatenate([p[2] for p in parts]))


@njit(**JIT)
def replay_chunk(pv, pg, val, vg, offsets, index, coef, alpha, results, rows, k, scale, losses,
                 with_grad):
    """Texel loss of positions `rows` from their stored linear forms, and its gradient.

    `pv` / `pg` are the thread's pair values and gradients: the parameters in rows 0..P-1 and one
    working pair in row P; `val` / `vg` hold one working value; `losses` is float64 scratch of
    ``len(rows)``. The parameter gradients of ``scale * sum of losses`` are left in ``pg[:P]``.
    Returns the unscaled sum of squared errors (as `tuner.train.kernels.texel_chunk` does).

    Each position's backward sweep follows its forward sweep at once, while its terms are still in
    cache, and positions are taken last to first: the order in which the eager tape's backward
    sweep adds into the parameter gradients. The losses are then summed first to last, as the
    eager tape's compensated sum does.
    """
    o = pv.shape[0] - 1
    n = rows.shape[0]
    if with_grad:
        pg[:, :] = 0.0
    # Every "0.0 +" mirrors an accumulation into a cleared gradient slot on the eager tape, so that
    # even the signs of zeros agree.
    g = 0.0 + kernel(K_MUL, 0.0, scale)[1] * 1.0     # d(scale * sum) / d loss_i
    for i in range(n - 1, -1, -1):
        # Positions come in shuffled order: fetch ahead what the next ones will read.
        if i >= PREFETCH_ROW:
            ahead = rows[i - PREFETCH_ROW]
            _prefetch(offsets, ahead)
            _prefetch(alpha, ahead)
            _prefetch(results, ahead)
        if i >= PREFETCH_TERMS:
            ahead = rows[i - PREFETCH_TERMS]
            q, end = offsets[ahead], offsets[ahead + 1]
            while q < end:  # every cache line of its terms
                _prefetch(index, q)
                _prefetch(coef, q)
                q += 32
        r = rows[i]
        first, count, a = offsets[r], offsets[r + 1] - offsets[r], alpha[r]
        _lincomb_pair_fwd(pv, index, coef, o, first, count)
        _phase_fwd(val, pv, 0, o, a)
        x = kernel(K_MUL, val[0], k)[0]
        sig = kernel(K_SIGMOID, x, 0.0)[0]
        d = kernel(K_SUB, sig, results[r])[0]
        losses[i] = kernel(K_MUL, d, d)[0]
        if with_grad:
            gd = 0.0 + d * g
            gd += d * g                              # d * d: both operands
            gs = 0.0 + 1.0 * gd                      # d (sig - result) / d sig
            gx = 0.0 + sig * (1.0 - sig) * gs        # the sigmoid kernel's partial
            vg[0] = 0.0 + k * gx                     # d (e * k) / d e
            pg[o, 0] = 0.0
            pg[o, 1] = 0.0
            _phase_bwd(vg, pg, 0, o, a)
            _lincomb_pair_bwd(pg, index, coef, o, first, count)
    s = 0.0
    c = 0.0
    for i in range(n):
        s, c = neumaier_add(s, c, losses[i])
    return s + c


@njit(**JIT)
def replay_chunks(pv, pg, val, vg, offsets, index, coef, alpha, results, order, micro, chunks,
                  k, scale, losses, with_grad, chunk_grads, sse):
    """For each chunk c in `chunks` (positions ``order[c*micro:(c+1)*micro]``): its loss into
    ``sse[c]`` and, with `with_grad`, its parameter gradients into ``chunk_grads[c]``. One call
    per worker and batch, so Python is not in the loop."""
    p = pv.shape[0] - 1
    n = order.shape[0]
    for c in chunks:
        rows = order[c * micro: min(n, (c + 1) * micro)]
        sse[c] = replay_chunk(pv, pg, val, vg, offsets, index, coef, alpha, results, rows, k,
                              scale, losses, with_grad)
        if with_grad:
            chunk_grads[c, :, :] = pg[:p, :]
