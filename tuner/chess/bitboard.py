"""Bitboard primitives (njit).

Squares: a1 = 0 ... h8 = 63 (``8*rank + file``); bit ``s`` of a uint64 stands for square ``s``.

Everything here takes and returns ``np.uint64`` (square indices are returned as int64). Inside
njit code, mixing uint64 with signed integers makes numba promote to float64, so every constant
is a ``np.uint64`` and every shift count is cast explicitly.

Directional shifts never wrap across board edges (docs/reference-eval.md section 1).
Colour-relative directions are not needed: the evaluation mirrors Black's bitboards
(`flip_vertical`) instead.
"""

import numpy as np
from llvmlite import ir
from numba import njit, types
from tuner.jit import JIT
from numba.extending import intrinsic

U64 = np.uint64

EMPTY = U64(0)
ALL = U64(0xFFFFFFFFFFFFFFFF)
FILE_A = U64(0x0101010101010101)
FILE_H = U64(0x8080808080808080)
NOT_FILE_A = U64(0xFEFEFEFEFEFEFEFE)
NOT_FILE_H = U64(0x7F7F7F7F7F7F7F7F)
NOT_FILE_AB = U64(0xFCFCFCFCFCFCFCFC)
NOT_FILE_GH = U64(0x3F3F3F3F3F3F3F3F)
RANK_1 = U64(0x00000000000000FF)
RANK_2 = U64(0x000000000000FF00)
RANK_3 = U64(0x0000000000FF0000)
RANK_4 = U64(0x00000000FF000000)
RANK_5 = U64(0x000000FF00000000)
RANK_6 = U64(0x0000FF0000000000)
RANK_7 = U64(0x00FF000000000000)
RANK_8 = U64(0xFF00000000000000)
BACK_RANKS = RANK_1 | RANK_8
LIGHT_SQUARES = U64(0x55AA55AA55AA55AA)
DARK_SQUARES = U64(0xAA55AA55AA55AA55)
CENTRAL_FILES = U64(0x3C3C3C3C3C3C3C3C)

_S1 = U64(1)
_S7 = U64(7)
_S8 = U64(8)
_S9 = U64(9)


# ---------------------------------------------------------------------------------------------
# LLVM intrinsics on uint64: bswap / ctpop / cttz / ctlz (single instructions where the CPU has them)


def _u64_intrinsic(name, build):
    """A Numba intrinsic returning ``build(builder, x)`` for one 64-bit integer x, as uint64."""
    def typer(typingctx, x):
        if not isinstance(x, types.Integer) or x.bitwidth != 64:
            return None

        def codegen(context, builder, signature, args):
            return build(builder, args[0])

        return types.uint64(x), codegen

    typer.__name__ = typer.__qualname__ = name
    return intrinsic(typer)


_FALSE = ir.Constant(ir.IntType(1), 0)  # is_zero_poison = false: cttz(0) = ctlz(0) = 64
_bswap64 = _u64_intrinsic("_bswap64", lambda b, x: b.bswap(x))
_ctpop64 = _u64_intrinsic("_ctpop64", lambda b, x: b.ctpop(x))
_cttz64 = _u64_intrinsic("_cttz64", lambda b, x: b.cttz(x, _FALSE))
_ctlz64 = _u64_intrinsic("_ctlz64", lambda b, x: b.ctlz(x, _FALSE))


@njit(**JIT)
def flip_vertical(bb):
    """The bitboard mirrored vertically (square s -> s ^ 56): one byte swap."""
    return _bswap64(U64(bb))


@njit(**JIT)
def popcount(x):
    """Number of set bits of a uint64 (int64 result)."""
    return np.int64(_ctpop64(U64(x)))


@njit(**JIT)
def lsb(x):
    """Index of the lowest set bit (64 when x == 0)."""
    return np.int64(_cttz64(U64(x)))


@njit(**JIT)
def msb(x):
    """Index of the highest set bit (-1 when x == 0)."""
    return np.int64(63) - np.int64(_ctlz64(U64(x)))


@njit(**JIT)
def pop_lsb(x):
    """x with its lowest set bit cleared."""
    x = U64(x)
    return x & (x - _S1)


@njit(**JIT)
def bit(sq):
    """Bitboard with only square ``sq`` set."""
    return _S1 << U64(sq)


@njit(**JIT)
def test_bit(bb, sq):
    return ((U64(bb) >> U64(sq)) & _S1) != U64(0)


@njit(**JIT)
def file_of(sq):
    return np.int64(sq) & 7


@njit(**JIT)
def rank_of(sq):
    return np.int64(sq) >> 3


@njit(**JIT)
def relative_square(sq, colour):
    """sq for White, sq ^ 56 (vertical mirror) for Black."""
    return np.int64(sq) ^ (np.int64(56) * np.int64(colour))


@njit(**JIT)
def relative_rank(sq, colour):
    return (np.int64(sq) >> 3) ^ (np.int64(7) * np.int64(colour))


@njit(**JIT)
def rank_mask(r):
    return U64(0xFF) << U64(8 * r)


@njit(**JIT)
def file_mask(f):
    return FILE_A << U64(f)


@njit(**JIT)
def chebyshev(a, b):
    df = abs((np.int64(a) & 7) - (np.int64(b) & 7))
    dr = abs((np.int64(a) >> 3) - (np.int64(b) >> 3))
    return max(df, dr)


# ---------------------------------------------------------------------------------------------
# Edge-safe directional shifts


@njit(**JIT)
def north(bb):
    return U64(bb) << _S8


@njit(**JIT)
def south(bb):
    return U64(bb) >> _S8


@njit(**JIT)
def east(bb):
    return (U64(bb) & NOT_FILE_H) << _S1


@njit(**JIT)
def west(bb):
    return (U64(bb) & NOT_FILE_A) >> _S1


@njit(**JIT)
def north_east(bb):
    return (U64(bb) & NOT_FILE_H) << _S9


@njit(**JIT)
def north_west(bb):
    return (U64(bb) & NOT_FILE_A) << _S7


@njit(**JIT)
def south_east(bb):
    return (U64(bb) & NOT_FILE_H) >> _S7


@njit(**JIT)
def south_west(bb):
    return (U64(bb) & NOT_FILE_A) >> _S9


@njit(**JIT)
def north_fill(bb):
    """bb and every square north of a member (Kogge-Stone fill)."""
    bb = U64(bb)
    bb |= bb << _S8
    bb |= bb << U64(16)
    bb |= bb << U64(32)
    return bb


@njit(**JIT)
def south_fill(bb):
    bb = U64(bb)
    bb |= bb >> _S8
    bb |= bb >> U64(16)
    bb |= bb >> U64(32)
    return bb


@njit(**JIT)
def file_fill(bb):
    return north_fill(bb) | south_fill(bb)
