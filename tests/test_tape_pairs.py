"""The two-lane pair kernels (`tuner.tape.pairs`) give the bits of the scalar loops: a dot
product in four partial sums (operand ``first + k`` into sum ``k % 4``, then
``(s0 + s1) + (s2 + s3)``), an axpy in operand order."""
import numpy as np
import pytest
from numba import njit

from tuner.jit import JIT
from tuner.tape.pairs import ACCUMULATORS, TABLE_BITS, pair_axpy, pair_dot

BITS = 4


@njit(**JIT)
def _both(pv, pg, idx, first, n, bits, g0, g1):
    """(pair_dot's pair, the scalar loop's pair); `pair_axpy` adds into `pg`."""
    mg, eg = pair_dot(pv, idx, first, n, bits)
    sums = np.zeros((ACCUMULATORS, 2))
    for i in range(first, first + n):
        w = np.int64(idx[i])
        c = np.float64((w & ((1 << bits) - 1)) - (1 << (bits - 1)))
        k = (i - first) % ACCUMULATORS
        sums[k, 0] += c * pv[w >> bits, 0]
        sums[k, 1] += c * pv[w >> bits, 1]
    pair_axpy(pg, idx, first, n, bits, g0, g1)
    return (mg, eg, (sums[0, 0] + sums[1, 0]) + (sums[2, 0] + sums[3, 0]),
            (sums[0, 1] + sums[1, 1]) + (sums[2, 1] + sums[3, 1]))


@njit(**JIT)
def _one_sum(pv, idx, first, n, bits):
    """The dot product summed in one running sum, first to last."""
    mg = 0.0
    eg = 0.0
    for i in range(first, first + n):
        w = np.int64(idx[i])
        c = np.float64((w & ((1 << bits) - 1)) - (1 << (bits - 1)))
        mg += c * pv[w >> bits, 0]
        eg += c * pv[w >> bits, 1]
    return mg, eg


def _words(rng, slots, n, bits, dtype=np.uint16):
    return (rng.integers(0, slots, n) << bits | rng.integers(0, 1 << bits, n)).astype(dtype)


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
    words = _words(rng, slots, 500, BITS, dtype)
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


@pytest.mark.parametrize("bits", [BITS, TABLE_BITS, TABLE_BITS + 1, 12])
def test_every_length_is_summed_in_four_partial_sums(bits):
    """Every operand count from 0 to 13 (the tail of n % 4 operands and none), from an offset
    that is not a multiple of four, coefficients from the table or converted; values of mixed
    magnitudes, so that the order of the adds shows in the bits."""
    rng = np.random.default_rng(bits)
    slots = 1 << (16 - bits)
    words = _words(rng, slots, 64, bits)
    pv = rng.normal(size=(slots, 2)) * 10.0 ** rng.integers(-12, 12, size=(slots, 2))
    differs = False
    for n in range(14):
        for first in (0, 5):
            pg = np.zeros((slots, 2))
            mg, eg, smg, seg = _both(pv, pg, words, first, n, bits, 1.0, 1.0)
            assert (mg, eg) == (smg, seg), (n, first)
            differs |= (mg, eg) != _one_sum(pv, words, first, n, bits)
    assert differs  # the partial sums are not one running sum's order


def test_the_unpacked_loop_sums_in_the_same_order():
    """`tuner.tape.ops`'s loop over unpacked operands (slots and coefficients apart, bits 0)
    gives the packed kernel's bits, for every operand count from 0 to 13."""
    from tuner.tape.ops import _lincomb_pair_fwd

    rng = np.random.default_rng(7)
    slots = 1 << (16 - BITS)
    words = _words(rng, slots, 32, BITS)
    index = (words >> BITS).astype(np.int32)
    coef = ((words & ((1 << BITS) - 1)).astype(np.int64) - (1 << (BITS - 1))).astype(np.int8)
    pv = np.zeros((slots + 2, 2))
    pv[:slots] = rng.normal(size=(slots, 2)) * 10.0 ** rng.integers(-12, 12, size=(slots, 2))
    for n in range(14):
        _lincomb_pair_fwd(pv, words, coef[:0], slots, 3, n, BITS)
        _lincomb_pair_fwd(pv, index, coef, slots + 1, 3, n, 0)
        assert pv[slots].tobytes() == pv[slots + 1].tobytes(), n
