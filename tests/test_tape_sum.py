"""The compensated (Neumaier) sum record against math.fsum (the correctly rounded sum).

What is asserted, case by case:

* cancellation cases whose exact sum fits in a double-double (1e16 + 1 - 1e16, 0.1 * 10, ...):
  exactly equal to fsum;
* cases whose exact sum lies on or next to a rounding tie of a double (2^53 - 0.5 - 2^-54, ...),
  and 1e20 + 0.1 * 10 - 1e20: within 1 ulp of fsum (Neumaier rounds the running sum and its
  compensation separately, so the final ``s + c`` can double-round, and the compensation is itself
  a naive sum);
* 10^6 random values at various scales (condition number up to ~10^13): within 1 ulp of fsum (in
  practice equal);
* beyond double-double conditioning (condition number ~10^17, or CPython's msum test vector):
  within Neumaier's error bound ``2u|S| + 4 n u^2 sum|x|``, orders of magnitude better than naive;
* the gradient: 1 for every operand, up to the largest operand count a sweep takes (a store keeps
  n-ary counts as u16: one more operand is refused by name, never swept wrongly).

A plain left-to-right sum is shown to differ from fsum on the same inputs, so the comparison can
tell a compensated sum from a naive one.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from tuner.tape import FreezeError, Graph, backward, forward, new_tape
from tuner.tape.player import MAX_NARY
from tuner.tape.recording import C_OPERANDS
from tuner.tape.ops import record_sum

U = 2.0 ** -53  # unit roundoff


def tape_sum_graph(xs):
    """The sum record through the public front end (leaves + Graph.sum)."""
    g = Graph(0, 0, records=4)
    g.tape = new_tape(0, 0, records=len(xs) + 4, operands=len(xs) + 4)  # a leaf is a record
    return g.sum([g.value(x) for x in xs]).value


def tape_sum_bulk(xs):
    """The sum record over n value parameters, their values and the operands written straight
    into the tape.

    Equivalent to n `push_operand` calls over parameters 0..n-1 (the documented layout: operand
    i -> value slot i), without 10^6 Python -> Numba calls. (Parameters, not leaves: a leaf is a
    `const` record, and an operand slot that no record writes is not a parameter cannot be swept.)
    """
    xs = np.asarray(xs, dtype=np.float64)
    n = len(xs)
    t = new_tape(n, 0, records=1, values=n + 1, operands=n)
    t.arena.val[:n] = xs
    t.rec.opnd_index[:n] = np.arange(n, dtype=np.int32)
    t.rec.opnd_coef[:n] = 1.0
    t.rec.counts[C_OPERANDS] = n
    o = record_sum(t, 0)
    assert o == n
    return float(t.arena.val[o]), t


def naive_sum(xs):
    """Left-to-right float sum (what an uncompensated reduction does)."""
    s = 0.0
    for x in xs:
        s += x
    return s


def ulps(a, b):
    """|a - b| in units of the last place of b."""
    return abs(a - b) / math.ulp(b)


EXACT_CASES = {
    "1e16+1-1e16": [1e16, 1.0, -1e16],
    "1+1e100+1-1e100": [1.0, 1e100, 1.0, -1e100],
    "0.1*10": [0.1] * 10,
    "two exact cancellations": [1e16 - 2.0, 1.0 - 2.0 ** -53, -(1e16 - 2.0), -(1.0 - 2.0 ** -53)],
    "1e-16 lost in 1": [1.0, 1e-16, -1.0],
    "harmonic 1000": [1.0 / n for n in range(1, 1001)],
    "alternating harmonic 1000": [(-1.0) ** n / n for n in range(1, 1001)],
    "empty": [],
    "single": [3.25],
    "zeros": [0.0, -0.0, 0.0],
    "big and small": [2.0 ** 60, 1.0, 2.0 ** -60, -(2.0 ** 60)],
}

ONE_ULP_CASES = {  # CPython test_math.testFsum vectors whose answer needs correct rounding
    "2^53-0.5-2^-54": ([2.0 ** 53, -0.5, -(2.0 ** -54)], 2.0 ** 53 - 1.0),
    "2^53+1+2^-100": ([2.0 ** 53, 1.0, 2.0 ** -100], 2.0 ** 53 + 2.0),
    "2^53+10+1+2^-100": ([2.0 ** 53 + 10.0, 1.0, 2.0 ** -100], 2.0 ** 53 + 12.0),
    "2^53-4+0.5+2^-54": ([2.0 ** 53 - 4.0, 0.5, 2.0 ** -54], 2.0 ** 53 - 3.0),
    "1e16+1+1e-16": ([1e16, 1.0, 1e-16], 10000000000000002.0),
    # The compensation is itself summed without compensation: the ten 0.1 add up in c naively.
    "1e20+0.1*10-1e20": ([1e20] + [0.1] * 10 + [-1e20], 1.0),
}


@pytest.mark.parametrize("name", list(EXACT_CASES))
def test_classic_cases_exact(name):
    xs = EXACT_CASES[name]
    exact = math.fsum(xs)
    assert tape_sum_graph(xs) == exact
    assert tape_sum_bulk(xs)[0] == exact


@pytest.mark.parametrize("name", list(ONE_ULP_CASES))
def test_rounding_cases_within_one_ulp(name):
    xs, exact = ONE_ULP_CASES[name]
    assert math.fsum(xs) == exact
    assert ulps(tape_sum_graph(xs), exact) <= 1.0
    assert ulps(tape_sum_bulk(xs)[0], exact) <= 1.0


def test_naive_sum_is_distinguishable():
    """The tests above would catch an uncompensated sum: naive summation is off on these cases."""
    wrong = [name for name, xs in EXACT_CASES.items() if naive_sum(xs) != math.fsum(xs)]
    assert {"1e16+1-1e16", "1+1e100+1-1e100", "0.1*10", "two exact cancellations"} <= set(wrong)
    assert naive_sum([1e16, 1.0, -1e16]) == 0.0 and tape_sum_graph([1e16, 1.0, -1e16]) == 1.0


def _neumaier_bound(xs, exact):
    n = len(xs)
    return 2 * U * abs(exact) + 4 * n * U * U * math.fsum(abs(x) for x in xs)


def test_beyond_double_double_within_neumaier_bound():
    """CPython's msum vector needs more than double-double precision: Neumaier returns 0, not
    1e-100 -- allowed by its error bound (naive summation returns 0 too)."""
    xs = [1e100, 1.0, -1e100, 1e-100, 1e50, -1.0, -1e50]
    exact = math.fsum(xs)
    assert exact == 1e-100
    got = tape_sum_graph(xs)
    assert abs(got - exact) <= _neumaier_bound(xs, exact)


def _random_sets():
    rng = np.random.default_rng(20240611)
    n = 10 ** 6
    sets = {
        "uniform[-1,1]": rng.uniform(-1.0, 1.0, n),
        "positive, 16 decades": rng.uniform(0.0, 1.0, n) * 10.0 ** rng.uniform(-8, 8, n),
        "signed, 30 decades": rng.standard_normal(n) * 10.0 ** rng.uniform(-15, 15, n),
        "large mean, small spread": 1e9 + rng.standard_normal(n),
    }
    half = rng.standard_normal(n // 2) * 10.0 ** rng.uniform(-10, 10, n // 2)
    x = np.concatenate([half, -half, rng.standard_normal(1000)])
    rng.shuffle(x)
    sets["x, -x and noise (cond ~1e13)"] = x
    return sets


RANDOM_SETS = _random_sets()


@pytest.mark.parametrize("name", list(RANDOM_SETS))
def test_million_random_values_within_one_ulp(name):
    xs = RANDOM_SETS[name]
    exact = math.fsum(xs)
    got, _ = tape_sum_bulk(xs)
    assert ulps(got, exact) <= 1.0, (got, exact, ulps(got, exact))
    # The gradient of a sum is 1 for every operand (as many as one swept record takes).
    n = MAX_NARY
    got, t = tape_sum_bulk(xs[:n])
    assert ulps(got, math.fsum(xs[:n])) <= 1.0
    t.arena.val[n] = np.nan
    backward(t, n)  # (parameter gradients accumulate: they start at 0 on a fresh tape)
    assert t.arena.val[n] == got  # swept again, bit for bit
    assert np.all(t.arena.val_grad[:n] == 1.0)


def test_sweeping_a_sum_of_too_many_operands_is_refused_by_name():
    """Recording a record of MAX_NARY + 1 operands works (the value is right); sweeping it raises
    FreezeError naming the record, rather than truncating its operand count."""
    xs = RANDOM_SETS["uniform[-1,1]"][: MAX_NARY + 1]
    got, t = tape_sum_bulk(xs)
    assert ulps(got, math.fsum(xs)) <= 1.0
    for sweep in (lambda: backward(t, len(xs)), lambda: forward(t)):
        with pytest.raises(FreezeError, match=rf"position 0, record 0 \(tag \d+, sum\): has more "
                                              rf"than {MAX_NARY} operands"):
            sweep()


def test_million_random_values_naive_is_worse():
    xs = RANDOM_SETS["x, -x and noise (cond ~1e13)"]
    exact = math.fsum(xs)
    naive = float(np.cumsum(xs)[-1])  # strictly sequential left-to-right sum
    assert ulps(naive, exact) > 1e6
    assert ulps(tape_sum_bulk(xs)[0], exact) <= 1.0


def test_million_values_cond_1e17_within_neumaier_bound():
    """x, -x(1 + 1e-15 noise): the exact sum is ~1e-17 of sum|x|; Neumaier is still within its
    bound (and ~10^12 times closer than naive)."""
    rng = np.random.default_rng(5)
    half = rng.standard_normal(500_000) * 10.0 ** rng.uniform(-10, 10, 500_000)
    xs = np.concatenate([half, -half * (1 + 1e-15 * rng.standard_normal(500_000))])
    rng.shuffle(xs)
    exact = math.fsum(xs)
    got = tape_sum_bulk(xs)[0]
    err = abs(got - exact)
    assert err <= _neumaier_bound(xs, exact)
    assert abs(float(np.cumsum(xs)[-1]) - exact) > 1e6 * err
