"""njit helpers shared by the Clockwork evaluations.

* The engine's integer score semantics: a ``PScore`` is one 32-bit integer ``eg * 65536 + mg``
  (wrapping), read back as two 16-bit halves; C++ division truncates toward zero.
* `add_nonzero`: `lin_add` for counts that are often zero, so that they never reach the tape.
* `check_domain`: the positions both evaluations define.
"""
from __future__ import annotations

import numpy as np
from numba import njit
from tuner.jit import INLINE

from tuner.chess.bitboard import BACK_RANKS
from tuner.chess.position import W_BLACK, W_KING, W_PAWN, W_WHITE
from tuner.tape import lin_add


_MASK16 = 0xFFFF
_SIGN16 = 0x8000
_MASK32 = 0xFFFFFFFF
_HALF = 16


@njit(**INLINE)
def s16(x):
    """x narrowed to a signed 16-bit integer (two's complement wrap), as int64."""
    x = np.int64(x) & _MASK16
    return x - (_MASK16 + 1) if x >= _SIGN16 else x


@njit(**INLINE)
def pack_score(mg, eg):
    """The engine's packed score ``eg * 65536 + mg`` modulo 2^32 (as a non-negative int64).
    Packing is linear modulo 2^32, so sums of packed scores are packed sums."""
    return (np.int64(eg) * (_MASK16 + 1) + np.int64(mg)) & _MASK32


@njit(**INLINE)
def add_packed(a, b):
    """Packed a + b (32-bit wrap)."""
    return (a + b) & _MASK32


@njit(**INLINE)
def sub_packed(a, b):
    """Packed a - b (32-bit wrap)."""
    return (a - b) & _MASK32


@njit(**INLINE)
def score_mg(packed):
    """``PScore::mg()``: the low 16 bits, signed."""
    return s16(packed)


@njit(**INLINE)
def score_eg(packed):
    """``PScore::eg()``: the high 16 bits after rounding by the low half's sign, signed."""
    return s16(((packed + _SIGN16) & _MASK32) >> _HALF)


@njit(**INLINE)
def trunc_div(num, den):
    """C++ integer division (truncates toward zero) of int64 num by a positive den."""
    q = abs(num) // den
    return -q if num < 0 else q


@njit(**INLINE)
def add_nonzero(acc, index, coef):
    """lin_add for counts that are often zero: skip them, so they never reach the tape."""
    if coef != 0:
        lin_add(acc, index, coef)


def check_domain(pos) -> None:
    """Raise ValueError for positions the engine's evaluation does not define
    (docs/reference-eval.md section 10): not exactly one king per colour, or pawns on the first or
    last rank."""
    pos = np.asarray(pos, dtype=np.uint64)
    white, black, pawns, kings = (int(pos[W_WHITE]), int(pos[W_BLACK]), int(pos[W_PAWN]),
                                  int(pos[W_KING]))
    for name, side in (("white", white), ("black", black)):
        n = bin(side & kings).count("1")
        if n != 1:
            raise ValueError(f"{name} has {n} kings (the evaluation needs exactly one per side)")
    if pawns & int(BACK_RANKS):
        raise ValueError("pawn on the first or last rank (outside the evaluation's domain)")
