"""The recording (records and operands, no values) and the recorder that writes it.

A `Recording` is plain data in typed arrays, so `@njit` code receives it as one argument:

* records: ``op`` (u16 tag, see `tuner.tape.ops.tag`), ``out``, ``lhs``, ``rhs`` (i32 slot
  indices) and ``scalar`` (f64, two per record: most scalar ops use column 0; an op choosing
  between two constants uses both);
* an n-ary record keeps its operands in ``opnd_index`` / ``opnd_coef`` from offset ``lhs``,
  ``rhs`` of them;
* ``counts``: fill levels (the ``C_*`` constants), including how many value and pair slots the
  records use and how many of those lead as parameters, the *index error word*: the first
  out-of-range index a recorder was handed (``C_ERROR`` and after, see below), and whether the
  records are evaluated as they are appended (``C_EVALUATE``).

It holds no values: those live in an `Arena` (`tuner.tape.arena`). A `Tape` is a recorder, a
recording and the arena its records are forward-evaluated in as they are appended (unless the
tape is made with ``evaluate=False``: a recording that is only frozen and replayed, as training
does, never reads the values its recorder would compute, so it skips their cost); every
``record_*`` of `tuner.tape.ops` takes one. `reset` truncates back to the parameters, so one tape
is reused for every micro-batch without allocating. Capacities are fixed when the tape is made;
recording past one raises `TapeFullError` (never silent corruption), and `grow` returns a larger
copy outside the hot loop.

**Index checks.** Every index handed to a recorder is checked where it is used: a ``lin_add``
parameter index against the accumulator (`tuner.tape.linear`), every operand slot of every
``record_*`` (lhs, rhs and each operand of an n-ary list) against the value or pair slots in use
(``0 <= slot <`` the top). A violation never reads or writes outside the arrays: the recorder
uses slot 0 instead and notes the first violation in the error word (which check, the index, the
bound it broke, the record, the operand and the record's tag), and recording goes on, so the hot
loops never raise for it. Whoever finishes a recording reads the word (`index_error`) and turns
it into one error naming the position (`tuner.evals.Evaluation.check_recording`); freezing
refuses a recording whose word is set. `reset` clears it.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from tuner.jit import JIT, INLINE, RECORDER

from .arena import Arena, new_arena

# Indices into Recording.counts.
C_VALUES = 0         # value slots in use (parameters included)
C_PAIRS = 1          # pair slots in use (parameters included)
C_RECORDS = 2        # records in use
C_OPERANDS = 3       # n-ary operand slots in use
C_VALUE_PARAMS = 4   # leading value slots that are parameters
C_PAIR_PARAMS = 5    # leading pair slots that are parameters
C_ERROR = 6          # the first index violation: one of the E_* codes (E_NONE: none)
C_ERROR_INDEX = 7    # the index that was out of range
C_ERROR_LIMIT = 8    # the bound it broke: valid indices are 0 .. limit - 1
C_ERROR_RECORD = 9   # the record it concerns (the one being appended)
C_ERROR_OPERAND = 10  # which operand: OPERAND_LHS, OPERAND_RHS, or OPERAND_LIST + i (list item i)
C_ERROR_TAG = 11     # the tag of that record
C_EVALUATE = 12      # 1: every record is forward-evaluated in the arena as it is appended
N_COUNTS = 13

# Index violations (C_ERROR).
E_NONE = 0
E_PARAM_INDEX = 1    # a lin_add index outside the accumulator, or an accumulated index that is
                     # not a pair parameter
E_VALUE_SLOT = 2     # an operand that is not a value slot in use
E_PAIR_SLOT = 3      # an operand that is not a pair slot in use
E_OPERAND_LIST = 4   # an n-ary record's first operand outside the operands pushed
# Which operand (C_ERROR_OPERAND).
OPERAND_LHS, OPERAND_RHS, OPERAND_LIST = 0, 1, 2



class TapeFullError(RuntimeError):
    """A record, arena slot or operand did not fit in the tape's capacity."""


class Recording(NamedTuple):
    """Records and operands as typed arrays; see the module docstring for the layout."""

    op: np.ndarray          # uint16[R]
    out: np.ndarray         # int32[R]
    lhs: np.ndarray         # int32[R]
    rhs: np.ndarray         # int32[R]
    scalar: np.ndarray      # float64[R, 2]
    opnd_index: np.ndarray  # int32[M]
    opnd_coef: np.ndarray   # float64[M]
    counts: np.ndarray      # int64[N_COUNTS]


class Tape(NamedTuple):
    """A recorder: the recording being written and the arena its records run in."""

    rec: Recording
    arena: Arena


def new_recording(n_value_params: int, n_pair_params: int, records: int, operands: int,
                  evaluate: bool = True) -> Recording:
    """An empty recording over `n_value_params` value and `n_pair_params` pair parameters
    (`evaluate`: see ``C_EVALUATE``)."""
    counts = np.zeros(N_COUNTS, dtype=np.int64)
    counts[C_VALUES] = counts[C_VALUE_PARAMS] = n_value_params
    counts[C_PAIRS] = counts[C_PAIR_PARAMS] = n_pair_params
    counts[C_EVALUATE] = evaluate
    return Recording(
        op=np.zeros(records, dtype=np.uint16), out=np.zeros(records, dtype=np.int32),
        lhs=np.zeros(records, dtype=np.int32), rhs=np.zeros(records, dtype=np.int32),
        scalar=np.zeros((records, 2)),
        opnd_index=np.zeros(operands, dtype=np.int32), opnd_coef=np.zeros(operands),
        counts=counts)


def new_tape(n_value_params: int = 0, n_pair_params: int = 0, *, records: int = 1 << 16,
             values: int | None = None, pairs: int | None = None,
             operands: int | None = None, evaluate: bool = True) -> Tape:
    """A tape whose first slots are `n_value_params` values and `n_pair_params` pairs (all zero).

    `records` bounds the number of ops; the arena capacities default to one output per record
    beyond the parameters, and `operands` to 64 per record. ``evaluate=False``: the recorders do
    not run the records' forward functions, so the arena's values stay as they are (a recording
    made only to be frozen and replayed; the slots are allocated all the same).
    """
    values = n_value_params + records if values is None else values
    pairs = n_pair_params + records if pairs is None else pairs
    operands = 64 * records if operands is None else operands
    if values < n_value_params or pairs < n_pair_params:
        raise ValueError("arena capacity is smaller than the number of parameters")
    return Tape(new_recording(n_value_params, n_pair_params, records, operands, evaluate),
                new_arena(values, pairs))


def _grown(arr: np.ndarray, factor: int) -> np.ndarray:
    bigger = np.zeros((max(arr.shape[0], 1) * factor,) + arr.shape[1:], dtype=arr.dtype)
    bigger[: arr.shape[0]] = arr
    return bigger


def grow(tape: Tape, factor: int = 2) -> Tape:
    """A copy of `tape` with every capacity multiplied by `factor` (an empty one becomes
    `factor`) and the same contents."""
    rec = Recording(**{name: arr.copy() if name == "counts" else _grown(arr, factor)
                       for name, arr in tape.rec._asdict().items()})
    return Tape(rec, Arena(*(_grown(a, factor) for a in tape.arena)))


def capacity(tape: Tape) -> dict[str, int]:
    """Capacities and fill levels, for error messages and diagnostics."""
    c = tape.rec.counts
    return {
        "records": int(c[C_RECORDS]), "record_capacity": len(tape.rec.op),
        "values": int(c[C_VALUES]), "value_capacity": len(tape.arena.val),
        "pairs": int(c[C_PAIRS]), "pair_capacity": len(tape.arena.pair_val),
        "operands": int(c[C_OPERANDS]), "operand_capacity": len(tape.rec.opnd_index),
    }


@njit(**JIT)
def reset(tape: Tape) -> None:
    """Forget every record and temporary slot; parameters (values and gradients) are kept."""
    c = tape.rec.counts
    c[C_VALUES] = c[C_VALUE_PARAMS]
    c[C_PAIRS] = c[C_PAIR_PARAMS]
    c[C_RECORDS] = 0
    c[C_OPERANDS] = 0
    c[C_ERROR] = E_NONE


@njit(**JIT)
def note_index_error(c: np.ndarray, code: int, index: int, limit: int, operand: int,
                     tag: int) -> None:
    """Note an out-of-range index in the error word of a recording's counts `c`, unless one is
    noted already (the first violation is the one reported). The record it concerns is the next
    one appended. (A call of its own, taking the counts rather than the Tape: a check written
    inline, or passing the Tape, keeps Numba from pruning the reference counting of the
    recorder's arrays, which would cost every record far more than the check.)"""
    if c[C_ERROR] == E_NONE:
        c[C_ERROR] = code
        c[C_ERROR_INDEX] = index
        c[C_ERROR_LIMIT] = limit
        c[C_ERROR_RECORD] = c[C_RECORDS]
        c[C_ERROR_OPERAND] = operand
        c[C_ERROR_TAG] = tag


@njit(**JIT)
def zero_grad(tape: Tape) -> None:
    """Zero the gradients of every slot in use, parameters included."""
    tape.arena.val_grad[: tape.rec.counts[C_VALUES]] = 0.0
    tape.arena.pair_grad[: tape.rec.counts[C_PAIRS]] = 0.0


@njit(**JIT)
def zero_param_grad(tape: Tape) -> None:
    """Zero the parameter gradients only (after they were folded into a batch buffer)."""
    tape.arena.val_grad[: tape.rec.counts[C_VALUE_PARAMS]] = 0.0
    tape.arena.pair_grad[: tape.rec.counts[C_PAIR_PARAMS]] = 0.0


@njit(**RECORDER)
def ensure_room(tape: Tape, records: int, values: int, pairs: int, operands: int) -> None:
    """Raise TapeFullError unless that many more records, slots and operands fit."""
    c = tape.rec.counts
    if (c[C_RECORDS] + records > tape.rec.op.shape[0]
            or c[C_VALUES] + values > tape.arena.val.shape[0]
            or c[C_PAIRS] + pairs > tape.arena.pair_val.shape[0]
            or c[C_OPERANDS] + operands > tape.rec.opnd_index.shape[0]):
        raise TapeFullError("tape capacity is full; grow the tape or record fewer positions")


@njit(**INLINE)
def alloc_value(tape: Tape) -> int:
    """A fresh value slot (its contents are set by the caller)."""
    i = tape.rec.counts[C_VALUES]
    if i >= tape.arena.val.shape[0]:
        raise TapeFullError("tape value arena is full; grow the tape or record fewer positions")
    tape.rec.counts[C_VALUES] = i + 1
    return i


@njit(**INLINE)
def alloc_pair(tape: Tape) -> int:
    """A fresh pair slot (its contents are set by the caller)."""
    i = tape.rec.counts[C_PAIRS]
    if i >= tape.arena.pair_val.shape[0]:
        raise TapeFullError("tape pair arena is full; grow the tape or record fewer positions")
    tape.rec.counts[C_PAIRS] = i + 1
    return i
