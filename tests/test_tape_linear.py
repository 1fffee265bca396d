"""The lazy linear accumulator (tuner.tape.linear): merged duplicates, dropped zeros, the recorded
linear combination (value and gradient), clearing, and behaviour when the tape overflows."""
from __future__ import annotations

import numpy as np
import pytest

from tuner.tape import (TapeFullError, backward, capacity, grow, lin_add, lin_clear,
                        lin_record_pair, new_accumulator, new_tape, reset)
from tuner.tape import ops
from tuner.tape.recording import C_OPERANDS, C_RECORDS

N = 12  # parameter pairs


def param_tape(rng=None, **sizes):
    t = new_tape(0, N, **sizes)
    rng = rng or np.random.default_rng(0)
    t.arena.pair_val[:N] = rng.uniform(-2, 2, (N, 2))
    return t


def operands_of_last_record(t):
    r = int(t.rec.counts[C_RECORDS]) - 1
    assert ops.tag_name(int(t.rec.op[r])) == "lincomb_pair"
    lo, n = int(t.rec.lhs[r]), int(t.rec.rhs[r])
    return list(t.rec.opnd_index[lo: lo + n]), list(t.rec.opnd_coef[lo: lo + n])


def assert_empty(acc):
    assert acc.count[0] == 0
    assert not np.any(acc.coef) and not np.any(acc.seen)


def test_duplicates_are_merged():
    acc = new_accumulator(N)
    lin_add(acc, 3, 2)
    lin_add(acc, 5, -1)
    lin_add(acc, 3, 1)
    lin_add(acc, 3, 4)
    assert acc.count[0] == 2
    assert list(acc.touched[:2]) == [3, 5]  # first-touch order
    assert acc.coef[3] == 7 and acc.coef[5] == -1
    t = param_tape()
    o = lin_record_pair(t, acc)
    idx, coef = operands_of_last_record(t)
    assert idx == [3, 5] and coef == [7.0, -1.0]
    pv = t.arena.pair_val
    np.testing.assert_allclose(pv[o], 7 * pv[3] - pv[5], rtol=1e-15)


def test_zero_coefficients_are_dropped():
    """A term added and subtracted leaves no operand; a zero-coefficient add leaves none either."""
    acc = new_accumulator(N)
    lin_add(acc, 2, 1)
    lin_add(acc, 7, 3)
    lin_add(acc, 2, -1)
    lin_add(acc, 9, 0)
    lin_add(acc, 4, -2)
    t = param_tape()
    o = lin_record_pair(t, acc)
    idx, coef = operands_of_last_record(t)
    assert idx == [7, 4] and coef == [3.0, -2.0]
    assert t.rec.counts[C_OPERANDS] == 2
    pv = t.arena.pair_val
    np.testing.assert_allclose(pv[o], 3 * pv[7] - 2 * pv[4], rtol=1e-15)
    assert_empty(acc)


def test_all_terms_cancel_records_a_zero_pair():
    acc = new_accumulator(N)
    lin_add(acc, 1, 5)
    lin_add(acc, 1, -5)
    t = param_tape()
    o = lin_record_pair(t, acc)
    assert operands_of_last_record(t) == ([], [])
    np.testing.assert_array_equal(t.arena.pair_val[o], [0.0, 0.0])
    v = ops.record_phase(t, o, 0.5)
    backward(t, v)
    assert not np.any(t.arena.pair_grad[:N])


def test_random_terms_value_and_gradient():
    """Random integer terms (many duplicates, some cancelling): the recorded pair is
    sum_j c_j * param_j and, through phase(alpha), d/d param_j = c_j * (alpha, 1 - alpha)."""
    rng = np.random.default_rng(42)
    t = param_tape(rng)
    acc = new_accumulator(N)
    for trial in range(50):
        dense = np.zeros(N, dtype=np.int64)
        for _ in range(int(rng.integers(0, 40))):
            j, c = int(rng.integers(0, N)), int(rng.integers(-3, 4))
            lin_add(acc, j, c)
            dense[j] += c
        if trial % 5 == 0:  # an index whose terms cancel
            j = int(rng.integers(0, N))
            lin_add(acc, j, -int(dense[j]))
            dense[j] = 0
        alpha = float(rng.uniform(0, 1))
        reset(t)
        t.arena.pair_grad[:N] = 0.0
        o = lin_record_pair(t, acc)
        assert_empty(acc)
        idx, coef = operands_of_last_record(t)
        nz = np.flatnonzero(dense)
        assert sorted(idx) == sorted(nz.tolist())       # each non-zero index exactly once
        assert all(dense[i] == c for i, c in zip(idx, coef))
        expected = (dense[:, None] * t.arena.pair_val[:N]).sum(axis=0)
        np.testing.assert_allclose(t.arena.pair_val[o], expected, rtol=1e-13, atol=1e-13)
        v = ops.record_phase(t, o, alpha)
        backward(t, v)
        np.testing.assert_allclose(t.arena.pair_grad[:N, 0], dense * alpha, rtol=1e-15, atol=0)
        np.testing.assert_allclose(t.arena.pair_grad[:N, 1], dense * (1 - alpha), rtol=1e-15,
                                   atol=0)


def test_cleared_after_recording_and_reusable():
    acc = new_accumulator(N)
    t = param_tape()
    lin_add(acc, 4, 2)
    lin_add(acc, 6, 1)
    first = lin_record_pair(t, acc)
    assert_empty(acc)
    lin_add(acc, 6, -1)  # a fresh start: index 6 is not merged with the recorded +1
    second = lin_record_pair(t, acc)
    assert operands_of_last_record(t) == ([6], [-1.0])
    np.testing.assert_array_equal(t.arena.pair_val[second], -t.arena.pair_val[6])
    pv = t.arena.pair_val
    np.testing.assert_allclose(pv[first], 2 * pv[4] + pv[6])


def test_lin_clear():
    acc = new_accumulator(N)
    for j in (1, 5, 1, 11):
        lin_add(acc, j, 3)
    lin_clear(acc)
    assert_empty(acc)
    lin_add(acc, 5, 2)
    t = param_tape()
    lin_record_pair(t, acc)
    assert operands_of_last_record(t) == ([5], [2.0])


# ------------------------------------------------------------------------------------------------
# Overflow while recording the accumulator.
# ------------------------------------------------------------------------------------------------

def _terms(acc):
    lin_add(acc, 1, 2)
    lin_add(acc, 3, -1)
    lin_add(acc, 5, 4)
    lin_add(acc, 1, 1)  # merged: index 1 has 3


@pytest.mark.parametrize("which, sizes", [
    ("operands", dict(records=8, pairs=N + 8, operands=2)),   # fails while pushing the 3rd term
    ("records", dict(records=1, pairs=N + 8, operands=8)),    # fails after pushing all terms
    ("pairs", dict(records=8, pairs=N, operands=8)),          # no pair slot for the output
])
def test_overflow_raises_and_the_record_can_be_retried_after_grow(which, sizes):
    """TapeFullError, counts within capacity, and no silent corruption: after growing the tape,
    recording the same accumulator again gives the full combination 3 p1 - p3 + 4 p5.

    (Expected behaviour: a failed lin_record_pair must leave the accumulator holding its terms --
    or, equivalently, a retry must not silently lose them.)"""
    t = param_tape(**sizes)
    if which == "records":
        ops.record_pair_neg(t, 0)  # the only record slot is taken
    n_records = int(t.rec.counts[C_RECORDS])
    acc = new_accumulator(N)
    _terms(acc)
    with pytest.raises(TapeFullError):
        lin_record_pair(t, acc)
    cap = capacity(t)
    for name in ("record", "value", "pair", "operand"):
        assert cap[name + "s"] <= cap[name + "_capacity"]
    assert cap["records"] == n_records
    t = grow(t)
    o = lin_record_pair(t, acc)
    expected = 3 * t.arena.pair_val[1] - t.arena.pair_val[3] + 4 * t.arena.pair_val[5]
    np.testing.assert_allclose(t.arena.pair_val[o], expected, rtol=1e-15,
                               err_msg="terms lost by the failed lin_record_pair")
    assert_empty(acc)


def test_overflow_then_clear_and_rerecord():
    """The documented-safe recovery path (lin_clear, grow, re-add the terms) works."""
    t = param_tape(records=8, pairs=N + 8, operands=2)
    acc = new_accumulator(N)
    _terms(acc)
    with pytest.raises(TapeFullError):
        lin_record_pair(t, acc)
    lin_clear(acc)
    assert_empty(acc)
    t = grow(t)
    reset(t)
    _terms(acc)
    o = lin_record_pair(t, acc)
    pv = t.arena.pair_val
    np.testing.assert_allclose(pv[o], 3 * pv[1] - pv[3] + 4 * pv[5], rtol=1e-15)


def test_every_index_touched_and_touched_again():
    """With every index in use, a repeated one is written to the spare entry at the end of
    `touched` (lin_add writes before it knows whether the index is new) and not counted: the
    record holds each index once, merged, in first-touch order, zeros dropped. Checked against
    the sums done in Python."""
    rng = np.random.default_rng(3)
    t = param_tape()
    acc = new_accumulator(N)
    order = [int(j) for j in rng.permutation(N)]
    adds = [(j, int(rng.integers(1, 4))) for j in order]
    adds += [(int(j), int(rng.integers(-3, 4))) for j in rng.integers(0, N, 40)]
    adds += [(order[2], 0), (order[5], 7), (order[5], -7)]  # a zero, and a cancelled pair
    want: dict[int, int] = {}
    for j, c in adds:
        lin_add(acc, j, c)
        want[j] = want.get(j, 0) + c
    assert acc.count[0] == N and acc.touched.shape[0] == N + 1
    lin_record_pair(t, acc)
    index, coef = operands_of_last_record(t)
    kept = [j for j in order if want[j] != 0]
    assert index == kept and coef == [float(want[j]) for j in kept]
    assert_empty(acc)


def test_an_accumulator_not_made_by_new_accumulator_is_named():
    """`accumulator_problem`: None for what new_accumulator makes; the field and what is wrong
    for an accumulator whose `touched` has no spare entry, or whose arrays have other types."""
    from tuner.tape import LinearAccumulator
    from tuner.tape.linear import accumulator_problem

    good = new_accumulator(N)
    assert accumulator_problem(good) is None
    short = good._replace(touched=np.zeros(N, np.int32))
    assert accumulator_problem(short) == (f"its touched has {N} entries, not {N + 1} (for {N} "
                                          f"parameters)")
    wide = LinearAccumulator(good.coef, good.seen.astype(np.int64), good.touched, good.count)
    assert "its seen is int64" in accumulator_problem(wide)
