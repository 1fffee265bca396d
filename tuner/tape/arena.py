"""The arena and the tape: plain typed arrays, shared by recording and replay.

A `Tape` is a namedtuple of NumPy arrays, so `@njit` code receives it as one argument and reads its
raw index arrays directly. Nothing in it is a Python object per node:

* value arena: ``val`` and ``val_grad`` (f64, stored apart);
* pair arena: ``pair_val`` and ``pair_grad`` (f64, shape (n, 2): column 0 is mg, column 1 is eg);
* records: ``op`` (u8 tag), ``out``, ``lhs``, ``rhs`` (i32 arena indices) and ``scalar`` (f64);
  an n-ary record keeps its operands in ``opnd_index`` / ``opnd_coef`` from offset ``lhs``, ``rhs``
  of them;
* ``counts``: the fill levels (see the ``C_*`` constants).

Parameters occupy the first value and pair slots. `reset` truncates everything back to them, so one
tape is reused for every micro-batch without allocating. Capacities are fixed when the tape is made;
recording past one raises `TapeFullError` (never silent corruption), and `grow` returns a larger copy
outside the hot loop.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit

# Indices into Tape.counts.
C_VALUES = 0         # value slots in use (parameters included)
C_PAIRS = 1          # pair slots in use (parameters included)
C_RECORDS = 2        # records in use
C_OPERANDS = 3       # n-ary operand slots in use
C_VALUE_PARAMS = 4   # leading value slots that are parameters
C_PAIR_PARAMS = 5    # leading pair slots that are parameters
N_COUNTS = 6


class TapeFullError(RuntimeError):
    """A record, arena slot or operand did not fit in the tape's capacity."""


class Tape(NamedTuple):
    """Arena and tape as typed arrays; see the module docstring for the layout."""

    val: np.ndarray
    val_grad: np.ndarray
    pair_val: np.ndarray
    pair_grad: np.ndarray
    op: np.ndarray
    out: np.ndarray
    lhs: np.ndarray
    rhs: np.ndarray
    scalar: np.ndarray
    opnd_index: np.ndarray
    opnd_coef: np.ndarray
    counts: np.ndarray


def new_tape(n_value_params: int = 0, n_pair_params: int = 0, *, records: int = 1 << 16,
             values: int | None = None, pairs: int | None = None,
             operands: int | None = None) -> Tape:
    """A tape whose first slots are `n_value_params` values and `n_pair_params` pairs (all zero).

    `records` bounds the number of ops; the arena capacities default to one output per record
    beyond the parameters, and `operands` to 64 per record.
    """
    values = n_value_params + records if values is None else values
    pairs = n_pair_params + records if pairs is None else pairs
    operands = 64 * records if operands is None else operands
    if values < n_value_params or pairs < n_pair_params:
        raise ValueError("arena capacity is smaller than the number of parameters")
    counts = np.zeros(N_COUNTS, dtype=np.int64)
    counts[C_VALUES] = counts[C_VALUE_PARAMS] = n_value_params
    counts[C_PAIRS] = counts[C_PAIR_PARAMS] = n_pair_params
    return Tape(
        val=np.zeros(values), val_grad=np.zeros(values),
        pair_val=np.zeros((pairs, 2)), pair_grad=np.zeros((pairs, 2)),
        op=np.zeros(records, dtype=np.uint8), out=np.zeros(records, dtype=np.int32),
        lhs=np.zeros(records, dtype=np.int32), rhs=np.zeros(records, dtype=np.int32),
        scalar=np.zeros(records),
        opnd_index=np.zeros(operands, dtype=np.int32), opnd_coef=np.zeros(operands),
        counts=counts,
    )


def grow(tape: Tape, factor: int = 2) -> Tape:
    """A copy of `tape` with every capacity multiplied by `factor` (an empty one becomes
    `factor`) and the same contents."""
    fields = {}
    for name, arr in tape._asdict().items():
        if name == "counts":
            fields[name] = arr.copy()
            continue
        bigger = np.zeros((max(arr.shape[0], 1) * factor,) + arr.shape[1:], dtype=arr.dtype)
        bigger[: arr.shape[0]] = arr
        fields[name] = bigger
    return Tape(**fields)


def capacity(tape: Tape) -> dict[str, int]:
    """Capacities and fill levels, for error messages and diagnostics."""
    c = tape.counts
    return {
        "records": int(c[C_RECORDS]), "record_capacity": len(tape.op),
        "values": int(c[C_VALUES]), "value_capacity": len(tape.val),
        "pairs": int(c[C_PAIRS]), "pair_capacity": len(tape.pair_val),
        "operands": int(c[C_OPERANDS]), "operand_capacity": len(tape.opnd_index),
    }


@njit(cache=True, nogil=True)
def reset(tape: Tape) -> None:
    """Forget every record and temporary slot; parameters (values and gradients) are kept."""
    c = tape.counts
    c[C_VALUES] = c[C_VALUE_PARAMS]
    c[C_PAIRS] = c[C_PAIR_PARAMS]
    c[C_RECORDS] = 0
    c[C_OPERANDS] = 0


@njit(cache=True, nogil=True)
def zero_grad(tape: Tape) -> None:
    """Zero the gradients of every slot in use, parameters included."""
    tape.val_grad[: tape.counts[C_VALUES]] = 0.0
    tape.pair_grad[: tape.counts[C_PAIRS]] = 0.0


@njit(cache=True, nogil=True)
def zero_param_grad(tape: Tape) -> None:
    """Zero the parameter gradients only (after they were folded into a batch buffer)."""
    tape.val_grad[: tape.counts[C_VALUE_PARAMS]] = 0.0
    tape.pair_grad[: tape.counts[C_PAIR_PARAMS]] = 0.0


@njit(cache=True, nogil=True)
def ensure_room(tape: Tape, records: int, values: int, pairs: int, operands: int) -> None:
    """Raise TapeFullError unless that many more records, slots and operands fit."""
    c = tape.counts
    if (c[C_RECORDS] + records > tape.op.shape[0] or c[C_VALUES] + values > tape.val.shape[0]
            or c[C_PAIRS] + pairs > tape.pair_val.shape[0]
            or c[C_OPERANDS] + operands > tape.opnd_index.shape[0]):
        raise TapeFullError("tape capacity is full; grow the tape or record fewer positions")


@njit(cache=True, nogil=True, inline="always")
def alloc_value(tape: Tape) -> int:
    """A fresh value slot (its contents are set by the caller)."""
    i = tape.counts[C_VALUES]
    if i >= tape.val.shape[0]:
        raise TapeFullError("tape value arena is full; grow the tape or record fewer positions")
    tape.counts[C_VALUES] = i + 1
    return i


@njit(cache=True, nogil=True, inline="always")
def alloc_pair(tape: Tape) -> int:
    """A fresh pair slot (its contents are set by the caller)."""
    i = tape.counts[C_PAIRS]
    if i >= tape.pair_val.shape[0]:
        raise TapeFullError("tape pair arena is full; grow the tape or record fewer positions")
    tape.counts[C_PAIRS] = i + 1
    return i


@njit(cache=True, nogil=True)
def new_value(tape: Tape, x: float) -> int:
    """A leaf value (a constant input; not a record, so replay keeps it as it is)."""
    i = alloc_value(tape)
    tape.val[i] = x
    return i


@njit(cache=True, nogil=True)
def new_pair(tape: Tape, mg: float, eg: float) -> int:
    """A leaf pair (a constant input; not a record)."""
    i = alloc_pair(tape)
    tape.pair_val[i, 0] = mg
    tape.pair_val[i, 1] = eg
    return i
