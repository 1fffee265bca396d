"""The lazy linear accumulator: parameter index -> integer coefficient.

An evaluation is mostly a linear combination of parameter pairs with small integer counts. Instead
of one record per term, terms are added here (duplicates merged) and the accumulator becomes a
single linear-combination record, with zero coefficients dropped, when the phase blend or a
non-linear op needs the sum.

An index outside the accumulator is not added: it is kept (the first one) in ``count`` and passed
on to the tape's index error word by the next `lin_record_pair`, which also checks that every
index it records is a pair parameter of the tape (see `tuner.tape.recording`, "Index checks").
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from tuner.jit import BORROWED, JIT, RECORDER

from .recording import (C_OPERANDS, C_PAIR_PARAMS, E_PARAM_INDEX, OPERAND_LIST, Tape,
                        ensure_room, note_index_error)
from .ops import (F_LINCOMB_PAIR, operand_mark, append_checked_lincomb_pair,
                  record_lincomb_pair, tag)



class LinearAccumulator(NamedTuple):
    """Dense coefficients plus the list of indices touched since the last clear."""

    coef: np.ndarray     # int64[n_params]
    seen: np.ndarray     # uint8[n_params]: 1 if the index is in `touched`
    touched: np.ndarray  # int32[n_params + 1]: touched indices, first-touch order (+ a spare:
                         # `lin_add` writes there before it knows whether the index is new)
    count: np.ndarray    # int64[A_SIZE]: how many of `touched` are in use; a bad index given


# Fields of LinearAccumulator.count.
A_IN_USE = 0         # how many of `touched` are in use
A_BAD = 1            # 1 if an index outside the accumulator was given since the last record
A_BAD_INDEX = 2      # the first such index
A_SIZE = 3


def new_accumulator(n_params: int) -> LinearAccumulator:
    """An empty accumulator over `n_params` parameter pairs."""
    return LinearAccumulator(np.zeros(n_params, np.int64), np.zeros(n_params, np.uint8),
                             np.zeros(n_params + 1, np.int32), np.zeros(A_SIZE, np.int64))


def accumulator_problem(acc: LinearAccumulator) -> str | None:
    """What makes `acc` unfit for `lin_add` and `lin_record_pair`, which do not check it (they
    are compiled for speed), or None: its arrays must be the ones `new_accumulator` makes for
    its number of parameters (the length of `coef`)."""
    coef = acc.coef
    n = coef.shape[0] if isinstance(coef, np.ndarray) and coef.ndim == 1 else 0
    made = new_accumulator(n)  # (the layout, declared once there)
    for name, want in zip(LinearAccumulator._fields, made):
        a = getattr(acc, name)
        if not (isinstance(a, np.ndarray) and a.dtype == want.dtype and a.ndim == 1):
            got = f"{a.dtype}{list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
            return f"its {name} is {got}, not a one-dimensional {want.dtype.name} array"
        if a.shape[0] != want.shape[0]:
            return f"its {name} has {a.shape[0]} entries, not {want.shape[0]} (for {n} parameters)"
    return None


@njit(**BORROWED)
def lin_add(acc: LinearAccumulator, index: int, coef: int) -> None:
    """coef[index] += coef (merged with earlier terms of the same index). An index outside the
    accumulator is not added (a zero is added to index 0 instead) but kept for the next
    `lin_record_pair` to report. (Compiled without reference counting, `tuner.jit.BORROWED`: the
    rare bad index is a branch of its own. The usual path has no branch: the index is written
    at the end of `touched` whether or not it is new, and the count of those in use advances
    only if it is, so that a repeated index is overwritten by the next new one; a branch on
    whether it is new was mispredicted often enough to cost 40 ns of a position's 450 in
    clockwork-10d79e6's features.)"""
    count = acc.count
    j = np.uint64(index)  # (unsigned, once in range: no wraparound in the indexing below)
    if not 0 <= index < acc.coef.shape[0]:
        j = np.uint64(0)
        coef = 0
        if count[A_BAD] == 0:
            count[A_BAD_INDEX] = index
            count[A_BAD] = 1
    n = np.uint64(count[A_IN_USE])
    acc.touched[n] = j
    count[A_IN_USE] = n + np.uint64(1 - acc.seen[j])
    acc.seen[j] = 1
    acc.coef[j] += coef


@njit(**BORROWED)
def lin_clear(acc: LinearAccumulator) -> None:
    """Drop every term (a bad index given is kept for `lin_record_pair` to report)."""
    for i in range(acc.count[0]):
        j = acc.touched[i]
        acc.coef[j] = 0
        acc.seen[j] = 0
    acc.count[0] = 0


@njit(**JIT)
def _note_lin_errors(counts: np.ndarray, acc_count: np.ndarray, worst: int, n_params: int):
    """Pass a bad `lin_add` index on to the error word of the recording of `counts`, else an
    accumulated index `worst` that is not a pair parameter (out of line: see `lin_add`)."""
    if acc_count[A_BAD]:
        note_index_error(counts, E_PARAM_INDEX, acc_count[A_BAD_INDEX], n_params, OPERAND_LIST,
                         tag(F_LINCOMB_PAIR))
        acc_count[A_BAD] = 0
    elif worst >= n_params:
        note_index_error(counts, E_PARAM_INDEX, worst, n_params, OPERAND_LIST,
                         tag(F_LINCOMB_PAIR))


@njit(**RECORDER)
def lin_record_pair(t: Tape, acc: LinearAccumulator) -> int:
    """One linear-combination record of the parameter pairs with non-zero coefficients; clears.

    A bad index `lin_add` was given, or an index that is not one of the tape's pair parameters,
    is noted in the tape's index error word (for this record). If the tape is full,
    TapeFullError is raised before anything changes (tape and accumulator), so the caller can
    grow the tape and call again: room for an operand per index touched, the non-zero ones being
    at most as many. (One pass over the indices touched, writing each and keeping it only if
    its coefficient is non-zero: 70 ns less a clockwork-10d79e6 position than counting them in
    a pass before, and branching on each.)
    """
    coef, seen, touched, m = acc.coef, acc.seen, acc.touched, acc.count[0]
    n_params = t.rec.counts[C_PAIR_PARAMS]
    ensure_room(t, 1, 0, 1, m)  # (room for every index touched: the non-zero ones are fewer)
    first = operand_mark(t)
    idx, cf = t.rec.opnd_index, t.rec.opnd_coef
    q = np.uint64(first)
    worst = -1  # the largest index recorded: branch-free, one check after the loop
    for i in range(m):
        # one pass, no branch: every index is written, and the next one overwrites it unless
        # its coefficient is non-zero (unsigned: `lin_add` keeps them in range, no wraparound)
        j = np.uint64(touched[i])
        c = coef[j]
        idx[q] = j
        cf[q] = c
        q += np.uint64(c != 0)
        worst = max(worst, np.int64(j) if c != 0 else -1)
        coef[j] = 0
        seen[j] = 0
    checked = worst < n_params and acc.count[A_BAD] == 0
    if not checked:
        _note_lin_errors(t.rec.counts, acc.count, worst, n_params)
    acc.count[0] = 0
    t.rec.counts[C_OPERANDS] = q
    if checked:
        return append_checked_lincomb_pair(t, first, np.int64(q) - first)
    return record_lincomb_pair(t, first)
