"""The two-lane pair kernels (`tuner.tape.pairs`) give the bits of the scalar loops."""
import numpy as np
import pytest
from numba import njit

from tuner.jit import JIT
from tuner.tape.pairs import TABLE_BITS, pair_axpy, pair_dot, pair_dot_axpy

BITS = 4


@njit(**JIT)
def _both(pv, pg, idx, first, n, bits, g0, g1):
    """(pair_dot's pair, the scalar loop's pair); `pair_axpy` adds into `pg`."""
    mg, eg = pair_dot(pv, idx, first, n, bits)
    smg = 0.0
    seg = 0.0
    for i in range(first, first + n):
        w = np.int64(idx[i])
        c = np.float64((w & ((1 << bits) - 1)) - (1 << (bits - 1)))
        smg += c * pv[w >> bits, 0]
        seg += c * pv[w >> bits, 1]
    pair_axpy(pg, idx, first, n, bits, g0, g1)
    return mg, eg, smg, seg


def _scalar_axpy(pg, idx, first, n, bits, g0, g1):
    for i in range(first, first + n):
        w = int(idx[i])
        c = float((w & ((1 << bits) - 1)) - (1 << (bits - 1)))
        pg[w >> bits, 0] += c * g0
        pg[w >> bits, 1] += c * g1


@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.int64])
def test_pair_kernels_are_the_scalar_loops_bit_for_bit(dtype):
    rng = np.random.default_rng(1)
    slots = 40
    # repeated slots (a backward adds twice into one row) and every coefficient of 4 bits
    words = (rng.integers(0, slots, 500) << BITS | rng.integers(0, 1 << BITS, 500)).astype(dtype)
    pv = rng.normal(size=(slots, 2)) * 10.0 ** rng.integers(-8, 8, size=(slots, 2))
    pg = rng.normal(size=(slots, 2))
    expect = pg.copy()
    g0, g1 = 0.1 / 3, -7.0 / 9
    mg, eg, smg, seg = _both(pv, pg, words, 17, 450, BITS, g0, g1)
    _scalar_axpy(expect, words, 17, 450, BITS, g0, g1)
    assert (mg, eg) == (smg, seg) and mg != 0.0
    assert pg.tobytes() == expect.tobytes()


def test_pair_kernels_of_no_operands():
    pv = np.ones((3, 2))
    pg = np.ones((3, 2))
    assert _both(pv, pg, np.zeros(4, np.uint16), 2, 0, BITS, 1.0, 1.0)[:2] == (0.0, 0.0)
    assert np.all(pg == 1.0)


@njit(**JIT)
def _interleaved(pv, pg, idx, bits, fwd, bwd, g):
    return pair_dot_axpy(pv, pg, idx, bits, fwd, bwd, g)


@njit(**JIT)
def _apart(pv, pg, idx, bits, fwd, bwd, g):
    pair_axpy(pg, idx, bwd[0], bwd[1], bits, g[0], g[1])
    return pair_dot(pv, idx, fwd[0], fwd[1], bits)


@pytest.mark.parametrize("bits", [BITS, TABLE_BITS, TABLE_BITS + 1, 12])
@pytest.mark.parametrize("fwd, bwd", [((3, 40), (100, 25)), ((50, 7), (0, 90)), ((9, 0), (20, 30)),
                                      ((9, 30), (20, 0)), ((0, 0), (0, 0)), ((10, 60), (30, 60))])
def test_the_interleaved_kernel_gives_the_bits_of_the_two_apart(bits, fwd, bwd):
    """Coefficients from the table (at most TABLE_BITS bits) or converted; either list longer,
    empty, or overlapping the other (the same words read by both)."""
    rng = np.random.default_rng(bits)
    slots = 1 << (16 - bits)
    words = (rng.integers(0, slots, 200) << bits | rng.integers(0, 1 << bits, 200)).astype(np.uint16)
    pv = rng.normal(size=(slots, 2)) * 10.0 ** rng.integers(-8, 8, size=(slots, 2))
    pg = rng.normal(size=(slots, 2))
    got, expect = pg.copy(), pg.copy()
    g = (0.1 / 3, -7.0 / 9)
    pair = _interleaved(pv, got, words, bits, fwd, bwd, g)
    assert pair == _apart(pv, expect, words, bits, fwd, bwd, g)
    assert got.tobytes() == expect.tobytes()
    assert (pair != (0.0, 0.0)) == (fwd[1] > 0) and (got != pg).any() == (bwd[1] > 0)
