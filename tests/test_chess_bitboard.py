"""tuner.chess.bitboard against plain-Python references (docs/reference-eval.md section 1)."""

import numpy as np
import pytest

from numba import types

from tuner.chess import bitboard as B

M = (1 << 64) - 1
FILE_A = 0x0101010101010101
FILE_H = 0x8080808080808080


def _values():
    rng = np.random.default_rng(11)
    vals = [0, 1, M, 1 << 63, FILE_A, FILE_H, 0xFF, 0xFF << 56, 0x8000000000000001]
    vals += [1 << s for s in range(64)]
    vals += [int(x) for x in rng.integers(0, 2**63, size=150, dtype=np.uint64) * np.uint64(2)
             + rng.integers(0, 2, size=150, dtype=np.uint64)]
    return vals


VALUES = _values()


def _shift(x, df, dr):
    """Reference: move every member by (df files, dr ranks), dropping those that leave the board."""
    out = 0
    for s in range(64):
        if x >> s & 1:
            f, r = (s & 7) + df, (s >> 3) + dr
            if 0 <= f < 8 and 0 <= r < 8:
                out |= 1 << (8 * r + f)
    return out


SHIFTS = {
    "north": (0, 1), "south": (0, -1), "east": (1, 0), "west": (-1, 0),
    "north_east": (1, 1), "north_west": (-1, 1), "south_east": (1, -1), "south_west": (-1, -1),
}


def test_popcount_lsb_msb():
    for x in VALUES:
        u = np.uint64(x)
        assert B.popcount(u) == bin(x).count("1")
        assert B.lsb(u) == ((x & -x).bit_length() - 1 if x else 64)
        assert B.msb(u) == x.bit_length() - 1
        assert int(B.pop_lsb(u)) == x & (x - 1) & M
    # plain Python ints / signed ints are accepted too
    assert B.popcount(255) == 8 and B.lsb(8) == 3 and B.msb(8) == 3


@pytest.mark.parametrize("name", sorted(SHIFTS))
def test_shifts(name):
    fn = getattr(B, name)
    df, dr = SHIFTS[name]
    for x in VALUES:
        assert int(fn(np.uint64(x))) == _shift(x, df, dr)
    # typed uint64 inside njit code (no float64 promotion)
    assert all(sig.return_type == types.uint64 for sig in fn.nopython_signatures)


def test_square_helpers():
    for s in range(64):
        assert B.file_of(s) == s % 8 and B.rank_of(s) == s // 8
        assert B.relative_square(s, 0) == s and B.relative_square(s, 1) == s ^ 56
        assert B.relative_rank(s, 0) == s // 8 and B.relative_rank(s, 1) == 7 - s // 8
        assert int(B.bit(s)) == 1 << s
        assert B.test_bit(np.uint64(1 << s), s) and not B.test_bit(np.uint64(M ^ (1 << s)), s)
        for t in range(0, 64, 5):
            assert B.chebyshev(s, t) == max(abs(s % 8 - t % 8), abs(s // 8 - t // 8))
    for r in range(8):
        assert int(B.rank_mask(r)) == 0xFF << (8 * r)
        assert int(B.file_mask(r)) == FILE_A << r
    assert int(B.LIGHT_SQUARES) == sum(1 << s for s in range(64) if (s % 8 + s // 8) % 2 == 1)
    assert int(B.DARK_SQUARES) == M ^ int(B.LIGHT_SQUARES)
    assert int(B.CENTRAL_FILES) == sum(FILE_A << f for f in range(2, 6))


def test_fills():
    for x in VALUES[::4]:
        n = s_ = f_ = 0
        for s in range(64):
            if x >> s & 1:
                for r in range(s // 8, 8):
                    n |= 1 << (8 * r + s % 8)
                for r in range(0, s // 8 + 1):
                    s_ |= 1 << (8 * r + s % 8)
                f_ |= FILE_A << (s % 8)
        assert int(B.north_fill(np.uint64(x))) == n
        assert int(B.south_fill(np.uint64(x))) == s_
        assert int(B.file_fill(np.uint64(x))) == f_
