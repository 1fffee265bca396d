"""The two-lane pair kernels (`tuner.tape.pairs`) give the bits of the scalar loops."""
import numpy as np
import pytest
from numba import njit

from tuner.jit import JIT
from tuner.tape.pairs import pair_axpy, pair_dot

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
