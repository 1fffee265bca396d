"""Tape life cycle: reset, reuse, zero_grad / zero_param_grad, gradient accumulation, and overflow
(record capacity, value arena, pair arena, operand buffer) with `grow`.

A `Tape` is a recording (records, operands, fill levels) over an arena (values, gradients); leaves
are `const` / `const_pair` records. An overflowing call must raise TapeFullError and have no effect
at all: every array of the recording and of the arena is compared with a snapshot taken just before
the call.
"""
from __future__ import annotations

import numpy as np
import pytest

from tuner.tape import (Arena, Graph, Recording, Tape, TapeFullError, backward, capacity, forward,
                        grow, new_tape, reset, zero_grad, zero_param_grad)
from tuner.tape import ops
from tuner.tape.recording import (C_OPERANDS, C_PAIR_PARAMS, C_PAIRS, C_RECORDS, C_VALUE_PARAMS,
                                  C_VALUES, ensure_room)

NV, NP = 3, 2  # value / pair parameters of the test graphs


def params_graph(records=64):
    g = Graph(NV, NP, records=records)
    g.tape.arena.val[:NV] = (0.5, -1.25, 2.0)
    g.tape.arena.pair_val[:NP] = ((1.0, -0.5), (0.25, 3.0))
    return g


def build(g):
    """A small function of every parameter, touching value, pair and n-ary records and a leaf."""
    a, b, c = (g.value_param(i) for i in range(NV))
    p, q = g.pair_param(0), g.pair_param(1)
    k = g.value(0.75)
    r = (p * a + q.sigmoid()).add_clamped_eg(b * k)
    s = g.lincomb_pair([p, r, q, p], [1.0, -2.0, 0.5, 3.0])
    y = g.sum([s.phase(0.3), (c * c).exp() / 10.0, a * b, r.eg_scale(0.5).phase(0.9)])
    return (y - 1.0).sigmoid().log()


def arrays(t):
    """Every array of a tape, by dotted name (tape.rec.op, tape.arena.val, ...)."""
    assert isinstance(t, Tape) and isinstance(t.rec, Recording) and isinstance(t.arena, Arena)
    return {f"{part}.{k}": v for part in ("rec", "arena")
            for k, v in getattr(t, part)._asdict().items()}


def snapshot(t):
    return {k: v.copy() for k, v in arrays(t).items()}


def assert_unchanged(t, snap):
    for k, v in arrays(t).items():
        np.testing.assert_array_equal(v, snap[k], err_msg=f"tape.{k} changed")


# ------------------------------------------------------------------------------------------------
# reset, reuse, zero_grad.
# ------------------------------------------------------------------------------------------------

def test_reset_truncates_to_parameters_and_keeps_them():
    g = params_graph()
    t = g.tape
    y = build(g)
    g.backward(y)
    pv, pp = t.arena.val[:NV].copy(), t.arena.pair_val[:NP].copy()
    gv, gp = t.arena.val_grad[:NV].copy(), t.arena.pair_grad[:NP].copy()
    assert np.all(gv != 0) and np.all(gp != 0)
    assert t.rec.counts[C_RECORDS] > 0 and t.rec.counts[C_OPERANDS] > 0
    reset(t)
    assert t.rec.counts[C_VALUES] == NV and t.rec.counts[C_PAIRS] == NP
    assert t.rec.counts[C_RECORDS] == 0 and t.rec.counts[C_OPERANDS] == 0
    assert t.rec.counts[C_VALUE_PARAMS] == NV and t.rec.counts[C_PAIR_PARAMS] == NP
    np.testing.assert_array_equal(t.arena.val[:NV], pv)
    np.testing.assert_array_equal(t.arena.pair_val[:NP], pp)
    np.testing.assert_array_equal(t.arena.val_grad[:NV], gv)
    np.testing.assert_array_equal(t.arena.pair_grad[:NP], gp)
    # Nothing is replayed after a reset.
    forward(t)
    np.testing.assert_array_equal(t.arena.val[:NV], pv)


def test_reuse_after_reset_gives_identical_results_and_indices():
    g = params_graph()
    t = g.tape
    y1 = build(g)
    g.backward(y1)
    counts1 = t.rec.counts.copy()
    n_val, n_pair = int(t.rec.counts[C_VALUES]), int(t.rec.counts[C_PAIRS])
    vals1, pvals1 = t.arena.val[:n_val].copy(), t.arena.pair_val[:n_pair].copy()
    vg1, pg1 = t.arena.val_grad[:n_val].copy(), t.arena.pair_grad[:n_pair].copy()
    g.reset()
    g.zero_grad()
    first = g.value(1.0)
    assert first.index == NV  # temporaries restart right after the parameters
    assert g.pair(0.0, 0.0).index == NP
    g.reset()
    y2 = build(g)
    assert y2.index == y1.index
    np.testing.assert_array_equal(t.rec.counts, counts1)
    g.backward(y2)
    np.testing.assert_array_equal(t.arena.val[:n_val], vals1)
    np.testing.assert_array_equal(t.arena.pair_val[:n_pair], pvals1)
    np.testing.assert_array_equal(t.arena.val_grad[:n_val], vg1)
    np.testing.assert_array_equal(t.arena.pair_grad[:n_pair], pg1)


def test_parameter_gradients_accumulate_across_resets():
    """Micro-batch use: record, backward, reset, ... -- parameter gradients sum up."""
    g = params_graph()
    t = g.tape
    g.backward(build(g))
    gv, gp = t.arena.val_grad[:NV].copy(), t.arena.pair_grad[:NP].copy()
    for _ in range(3):
        g.reset()
        g.backward(build(g))
    # Each parameter receives several contributions per sweep, added one by one into the running
    # total, so 4 sweeps equal 4x one sweep up to rounding only.
    np.testing.assert_allclose(t.arena.val_grad[:NV], 4 * gv, rtol=1e-14, atol=0)
    np.testing.assert_allclose(t.arena.pair_grad[:NP], 4 * gp, rtol=1e-14, atol=0)


def test_backward_twice_and_different_outputs():
    """Temporaries are cleared by each backward (identical, bit for bit, the second time);
    parameters accumulate (+=): doubled, up to the rounding of adding several contributions into a
    non-zero running total."""
    g = params_graph()
    t = g.tape
    y = build(g)
    n_val, n_pair = int(t.rec.counts[C_VALUES]), int(t.rec.counts[C_PAIRS])
    g.backward(y)
    vg1, pg1 = t.arena.val_grad[:n_val].copy(), t.arena.pair_grad[:n_pair].copy()
    g.backward(y)
    np.testing.assert_array_equal(t.arena.val_grad[NV:n_val], vg1[NV:])
    np.testing.assert_array_equal(t.arena.pair_grad[NP:n_pair], pg1[NP:])
    np.testing.assert_allclose(t.arena.val_grad[:NV], 2 * vg1[:NV], rtol=1e-15, atol=0)
    np.testing.assert_allclose(t.arena.pair_grad[:NP], 2 * pg1[:NP], rtol=1e-15, atol=0)
    # Another output of the same tape: its own temporaries, parameter gradients added on top.
    z = g.value_param(0) * g.value_param(2)
    g.zero_grad()
    g.backward(z)
    zv = t.arena.val_grad[:NV].copy()
    np.testing.assert_array_equal(zv, [2.0, 0.0, 0.5])
    g.backward(y)
    np.testing.assert_allclose(t.arena.val_grad[:NV], zv + vg1[:NV], rtol=1e-15, atol=0)
    np.testing.assert_array_equal(t.arena.pair_grad[:NP], pg1[:NP])
    np.testing.assert_array_equal(t.arena.val_grad[NV:n_val], vg1[NV:])


def test_zero_grad_and_zero_param_grad():
    g = params_graph()
    t = g.tape
    y = build(g)
    n_val, n_pair = int(t.rec.counts[C_VALUES]), int(t.rec.counts[C_PAIRS])
    g.backward(y)
    vg, pg = t.arena.val_grad[:n_val].copy(), t.arena.pair_grad[:n_pair].copy()
    assert np.count_nonzero(vg[NV:]) > 0 and np.count_nonzero(pg[NP:]) > 0
    zero_param_grad(t)
    assert not np.any(t.arena.val_grad[:NV]) and not np.any(t.arena.pair_grad[:NP])
    np.testing.assert_array_equal(t.arena.val_grad[NV:n_val], vg[NV:])  # temporaries untouched
    np.testing.assert_array_equal(t.arena.pair_grad[NP:n_pair], pg[NP:])
    np.testing.assert_array_equal(t.arena.val[:NV], (0.5, -1.25, 2.0))  # values untouched
    g.backward(y)
    np.testing.assert_array_equal(t.arena.val_grad[:NV], vg[:NV])  # a fresh accumulation
    zero_grad(t)
    assert not np.any(t.arena.val_grad[:n_val]) and not np.any(t.arena.pair_grad[:n_pair])
    np.testing.assert_array_equal(t.arena.val[:NV], (0.5, -1.25, 2.0))


# ------------------------------------------------------------------------------------------------
# Overflow: TapeFullError with no side effect, then grow and continue.
# ------------------------------------------------------------------------------------------------

def _raises_without_effect(t, fn, *args):
    snap = snapshot(t)
    with pytest.raises(TapeFullError):
        fn(t, *args)
    assert_unchanged(t, snap)


def test_record_capacity_overflow():
    t = new_tape(1, 1, records=3, values=50, pairs=50, operands=50)
    t.arena.val[0] = 0.5
    a = ops.record_exp(t, 0)
    b = ops.record_mul(t, a, 0)
    p = ops.record_pair_mul_value(t, 0, b)
    assert t.rec.counts[C_RECORDS] == 3
    for fn, args in [(ops.record_exp, (b,)), (ops.record_pair_neg, (p,)),
                     (ops.record_phase, (p, 0.5)), (ops.record_add_clamped_eg, (p, a)),
                     (ops.record_add_winnable_eg, (p, a)), (ops.record_eg_scale_by_sign, (p, 1, 2)),
                     (ops.record_const, (1.0,)), (ops.record_const_pair, (1.0, 2.0))]:
        _raises_without_effect(t, fn, *args)
    # n-ary: the operands fit, the record does not.
    first = ops.operand_mark(t)
    ops.push_operand(t, a, 1.0)
    ops.push_operand(t, b, 1.0)
    _raises_without_effect(t, ops.record_sum, first)
    assert capacity(t)["records"] == capacity(t)["record_capacity"] == 3
    # The recorded part is still consistent.
    backward(t, b)
    assert t.arena.val_grad[0] == pytest.approx(np.exp(0.5) * 0.5 + np.exp(0.5))


def test_value_arena_overflow():
    t = new_tape(2, 1, records=50, values=4, pairs=50, operands=50)
    t.arena.val[:2] = (0.25, 2.0)
    a = ops.record_add(t, 0, 1)
    leaf = ops.record_const(t, 3.0)
    assert t.rec.counts[C_VALUES] == 4 == len(t.arena.val)
    _raises_without_effect(t, ops.record_const, 1.0)
    for fn, args in [(ops.record_add, (a, leaf)), (ops.record_sigmoid, (a,)),
                     (ops.record_mul_scalar, (a, 2.0)), (ops.record_scalar_div, (1.0, a)),
                     (ops.record_phase, (0, 0.5))]:
        _raises_without_effect(t, fn, *args)
    first = ops.operand_mark(t)
    ops.push_operand(t, a, 1.0)
    for fn in (ops.record_sum, ops.record_lincomb_value):
        _raises_without_effect(t, fn, first)
    # Pair records do not need a value slot.
    ops.record_pair_mul_value(t, 0, a)
    assert t.rec.counts[C_PAIRS] == 2


def test_pair_arena_overflow():
    t = new_tape(1, 2, records=50, values=50, pairs=4, operands=50)
    t.arena.pair_val[:2] = ((1.0, 2.0), (-3.0, 0.5))
    p = ops.record_pair_add(t, 0, 1)
    leaf = ops.record_const_pair(t, 1.0, 1.0)
    assert t.rec.counts[C_PAIRS] == 4 == len(t.arena.pair_val)
    _raises_without_effect(t, ops.record_const_pair, 0.0, 0.0)
    for fn, args in [(ops.record_pair_add, (p, leaf)), (ops.record_pair_sigmoid, (p,)),
                     (ops.record_value_mul_pair, (0, p)), (ops.record_eg_scale, (p, 0.5)),
                     (ops.record_add_clamped_eg, (p, 0)), (ops.record_scalar_div_pair, (1.0, p)),
                     (ops.record_add_winnable_eg, (p, 0)),
                     (ops.record_eg_scale_by_sign, (p, 0.5, 2.0))]:
        _raises_without_effect(t, fn, *args)
    first = ops.operand_mark(t)
    ops.push_operand(t, p, 1.0)
    _raises_without_effect(t, ops.record_lincomb_pair, first)
    # Value records do not need a pair slot.
    v = ops.record_phase(t, p, 0.5)
    assert t.arena.val[v] == pytest.approx(0.5 * -2.0 + 0.5 * 2.5)


def test_operand_buffer_overflow():
    t = new_tape(3, 0, records=50, values=50, pairs=50, operands=4)
    first = ops.operand_mark(t)
    for i in range(4):
        ops.push_operand(t, i % 3, 1.0)
    assert t.rec.counts[C_OPERANDS] == 4
    _raises_without_effect(t, ops.push_operand, 0, 1.0)
    assert t.rec.counts[C_OPERANDS] == 4
    # The operands pushed so far still make a valid record.
    t.arena.val[:3] = (1.0, 2.0, 4.0)
    s = ops.record_sum(t, first)
    assert t.arena.val[s] == 8.0


def test_overflow_through_the_front_end_then_grow_and_continue():
    """Record through Graph on a tape far too small, growing it whenever a call overflows and
    retrying that call: values and gradients equal those of a tape that was big enough."""
    def run(g, grow_on_overflow):
        n_grown = 0

        def call(fn):
            nonlocal n_grown
            while True:
                try:
                    return fn()
                except TapeFullError:
                    assert grow_on_overflow
                    cap = capacity(g.tape)
                    assert cap["records"] <= cap["record_capacity"]
                    assert cap["values"] <= cap["value_capacity"]
                    old, snap = g.tape, snapshot(g.tape)
                    g.tape = grow(g.tape)
                    assert_unchanged(old, snap)  # grow copies, the old tape is left alone
                    n_grown += 1

        x = g.value_param(0)
        acc = x
        for i in range(40):
            a = call(lambda: acc * 0.9)
            b = call(lambda: a + x)
            c = call(lambda: b.sigmoid())
            acc = call(lambda: c + i * 0.01)
        g.backward(acc)
        return acc, n_grown

    big = Graph(1, 0, records=1024)
    big.tape.arena.val[0] = 0.3
    y_big, _ = run(big, False)
    small = Graph(1, 0, records=16)
    small.tape.arena.val[0] = 0.3
    y_small, n_grown = run(small, True)
    assert n_grown == 4  # 16 -> 32 -> 64 -> 128 -> 256 >= 160 records
    assert y_small.index == y_big.index and y_small.value == y_big.value
    np.testing.assert_array_equal(small.tape.rec.counts, big.tape.rec.counts)
    n_val = int(big.tape.rec.counts[C_VALUES])
    np.testing.assert_array_equal(small.tape.arena.val[:n_val], big.tape.arena.val[:n_val])
    np.testing.assert_array_equal(small.tape.arena.val_grad[:n_val],
                                  big.tape.arena.val_grad[:n_val])


STEPS = [  # over 2 value parameters and 1 pair parameter
    lambda t: ops.record_mul(t, 0, 1),               # value 2
    lambda t: ops.record_pair_mul_value(t, 0, 2),    # pair 1
    lambda t: ops.record_add_clamped_eg(t, 1, 2),    # pair 2
    lambda t: ops.push_operand(t, 1, 2.0),
    lambda t: ops.push_operand(t, 2, -1.0),
    lambda t: ops.push_operand(t, 0, 0.5),
    lambda t: ops.push_operand(t, 1, 1.0),
    lambda t: ops.record_lincomb_pair(t, 0),         # pair 3
    lambda t: ops.record_phase(t, 3, 0.25),          # value 3
    lambda t: ops.record_sigmoid(t, 3),              # value 4
]  # 6 records, 5 values, 4 pairs, 4 operands in all


@pytest.mark.parametrize("which, size", [("records", 4), ("values", 4), ("pairs", 3),
                                         ("operands", 3)])
def test_grow_continues_each_kind_of_overflow(which, size):
    """Overflow one capacity, grow, retry the failed call and finish: same tape as a big one."""
    def fresh(**sizes):
        t = new_tape(2, 1, **dict(dict(records=64, values=64, pairs=64, operands=64), **sizes))
        t.arena.val[:2] = (1.5, -0.75)
        t.arena.pair_val[0] = (0.5, 2.0)
        return t

    ref = fresh()
    for step in STEPS:
        step(ref)
    backward(ref, 4)

    t = fresh(**{which: size})
    k, messages = 0, []
    while k < len(STEPS):
        try:
            STEPS[k](t)
        except TapeFullError as e:
            messages.append(str(e))
            cap = capacity(t)
            assert cap[which] == cap[which.rstrip("s") + "_capacity"] == size
            for name in ("record", "value", "pair", "operand"):
                assert cap[name + "s"] <= cap[name + "_capacity"]
            t = grow(t)
            continue  # retry the same call on the grown tape
        k += 1
    assert len(messages) == 1  # one overflow (of `which`, see the capacity check), one grow
    backward(t, 4)
    np.testing.assert_array_equal(t.rec.counts, ref.rec.counts)
    nv, npair = int(ref.rec.counts[C_VALUES]), int(ref.rec.counts[C_PAIRS])
    nr, no = int(ref.rec.counts[C_RECORDS]), int(ref.rec.counts[C_OPERANDS])
    for name, n in [("arena.val", nv), ("arena.val_grad", nv), ("arena.pair_val", npair),
                    ("arena.pair_grad", npair), ("rec.op", nr), ("rec.out", nr), ("rec.lhs", nr),
                    ("rec.rhs", nr), ("rec.scalar", nr), ("rec.opnd_index", no),
                    ("rec.opnd_coef", no)]:
        np.testing.assert_array_equal(arrays(t)[name][:n], arrays(ref)[name][:n], err_msg=name)
    # Replay and re-recording agree on the grown tape as well.
    t.arena.val[:2] = (0.5, 0.25)
    forward(t)
    again = fresh()
    again.arena.val[:2] = (0.5, 0.25)
    for step in STEPS:
        step(again)
    np.testing.assert_array_equal(t.arena.val[:nv], again.arena.val[:nv])
    np.testing.assert_array_equal(t.arena.pair_val[:npair], again.arena.pair_val[:npair])


def test_grow_keeps_contents_and_multiplies_capacities():
    t = new_tape(2, 1, records=8, values=10, pairs=6, operands=12)
    t.arena.val[:2] = (1.0, 2.0)
    ops.record_add(t, 0, 1)
    t2 = grow(t, 3)
    c, c2 = capacity(t), capacity(t2)
    for name in ("record", "value", "pair", "operand"):
        assert c2[name + "_capacity"] == 3 * c[name + "_capacity"]
        assert c2[name + "s"] == c[name + "s"]
    for k, v in arrays(t).items():
        v2 = arrays(t2)[k]
        assert v2.dtype == v.dtype and v2.shape[1:] == v.shape[1:]
        np.testing.assert_array_equal(v2[: len(v)], v)
        assert not np.shares_memory(v, v2)


def test_new_tape_rejects_capacity_below_parameters():
    with pytest.raises(ValueError):
        new_tape(3, 0, values=2)
    with pytest.raises(ValueError):
        new_tape(0, 3, pairs=2)
    t = new_tape(3, 2, values=3, pairs=2)  # exactly the parameters: allowed, and full
    with pytest.raises(TapeFullError):
        ops.record_const(t, 1.0)


def test_ensure_room_raises_without_effect():
    t = new_tape(1, 1, records=2, values=3, pairs=3, operands=2)
    ensure_room(t, 2, 2, 2, 2)  # exactly full: fine
    for need in ((3, 0, 0, 0), (0, 3, 0, 0), (0, 0, 3, 0), (0, 0, 0, 3)):
        _raises_without_effect(t, ensure_room, *need)
    ops.record_const(t, 1.0)
    ensure_room(t, 1, 1, 2, 2)
    for need in ((2, 0, 0, 0), (0, 2, 0, 0)):
        _raises_without_effect(t, ensure_room, *need)


@pytest.mark.parametrize("which", ["records", "values", "pairs", "operands"])
def test_grow_from_an_empty_capacity(which):
    """A tape made with a zero capacity (e.g. a pair-only tape with values=0) must be able to grow:
    after TapeFullError, grow-and-retry has to succeed, not loop forever (0 * factor == 0)."""
    n_value_params, n_pair_params = {"records": (1, 1), "values": (0, 1), "pairs": (1, 0),
                                     "operands": (1, 1)}[which]
    t = new_tape(n_value_params, n_pair_params, **dict({"records": 8}, **{which: 0}))
    call = {"records": lambda t: ops.record_const(t, 1.0),
            "values": lambda t: ops.record_phase(t, 0, 0.5),
            "pairs": lambda t: ops.record_lincomb_pair(t, ops.operand_mark(t)),
            "operands": lambda t: ops.push_operand(t, 0, 1.0)}[which]
    with pytest.raises(TapeFullError):
        call(t)
    t = grow(t)
    call(t)  # expected: the grown tape has room for at least one more slot
