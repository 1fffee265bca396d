"""The lazy linear accumulator: parameter index -> integer coefficient.

An evaluation is mostly a linear combination of parameter pairs with small integer counts. Instead
of one record per term, terms are added here (duplicates merged) and the accumulator becomes a
single linear-combination record, with zero coefficients dropped, when the phase blend or a
non-linear op needs the sum.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

from .recording import C_OPERANDS, Tape, ensure_room
from .ops import operand_mark, record_lincomb_pair

JIT = dict(cache=True, nogil=True)


class LinearAccumulator(NamedTuple):
    """Dense coefficients plus the list of indices touched since the last clear."""

    coef: np.ndarray     # int64[n_params]
    seen: np.ndarray     # uint8[n_params]: 1 if the index is in `touched`
    touched: np.ndarray  # int32[n_params]: touched indices, first-touch order
    count: np.ndarray    # int64[1]: how many of `touched` are in use


def new_accumulator(n_params: int) -> LinearAccumulator:
    """An empty accumulator over `n_params` parameter pairs."""
    return LinearAccumulator(np.zeros(n_params, np.int64), np.zeros(n_params, np.uint8),
                             np.zeros(n_params, np.int32), np.zeros(1, np.int64))


@njit(**JIT)
def lin_add(acc: LinearAccumulator, index: int, coef: int) -> None:
    """coef[index] += coef (merged with earlier terms of the same index)."""
    if acc.seen[index] == 0:
        acc.seen[index] = 1
        acc.touched[acc.count[0]] = index
        acc.count[0] += 1
    acc.coef[index] += coef


@njit(**JIT)
def lin_clear(acc: LinearAccumulator) -> None:
    """Drop every term."""
    for i in range(acc.count[0]):
        j = acc.touched[i]
        acc.coef[j] = 0
        acc.seen[j] = 0
    acc.count[0] = 0


@njit(**JIT)
def lin_record_pair(t: Tape, acc: LinearAccumulator) -> int:
    """One linear-combination record of the parameter pairs with non-zero coefficients; clears.

    If the tape is full, TapeFullError is raised before anything changes (tape and accumulator),
    so the caller can grow the tape and call again.
    """
    coef, seen, touched, m = acc.coef, acc.seen, acc.touched, acc.count[0]
    n = 0
    for i in range(m):
        if coef[touched[i]] != 0:
            n += 1
    ensure_room(t, 1, 0, 1, n)
    first = operand_mark(t)
    idx, cf = t.rec.opnd_index, t.rec.opnd_coef
    q = first
    for i in range(m):
        j = touched[i]
        c = coef[j]
        if c != 0:  # room was checked above: write the operands directly
            idx[q] = j
            cf[q] = c
            q += 1
        coef[j] = 0
        seen[j] = 0
    acc.count[0] = 0
    t.rec.counts[C_OPERANDS] = q
    return record_lincomb_pair(t, first)
