"""The player (tuner/tape/player.py): freezing a recording of many positions into a `Store` and
replaying it.

* Random composite graphs (the generator of test_tape_graphs.py) recorded as the positions of one
  recording, in two segments (every position's evaluation, then every position's loss), as the
  trainer records a micro-batch: replaying the frozen store at new parameter values equals
  re-recording each position at those values, bit for bit (NaN payloads aside), for the segment
  outputs, every slot of the position, and the parameter gradients.
* Templates: positions of equal structure share one, different structures get their own (also
  across the chunks of `build_store`); a scalar equal over every position of a template lives in
  the template (``t_scol == -1``), a varying one in the position's row.
* Operands: slots kept as u16 and coefficients as i8 when they fit, i32 / i16 / f64 otherwise;
  slot and integer coefficient in one u16 word when their bits fit in 16 together.
* Validation: every `FreezeError` names the position and record (or the output slot).
* Order: `play` takes the positions last to first; the parameter gradients equal, bit for bit,
  running `backward` on each position's own tape in that order.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tuner.tape import (FreezeError, Graph, Value, backward, forward, freeze, freeze_tape,
                        new_arena, new_tape, ops, play, set_params)
from tuner.tape.player import (MAX_NARY, arena_size, build_store, check_played,
                               coef_bits_needed, extract, store_len)
from tuner.tape.recording import C_OPERANDS, C_PAIRS, C_RECORDS, C_VALUES

from test_tape_graphs import N_PP, N_VP, SETTINGS, describe, plans, record_plan

K = 0.7  # the loss's scale: the same for every position (a template constant)


# ------------------------------------------------------------------------------------------------
# Helpers.
# ------------------------------------------------------------------------------------------------

def same_bits(a, b):
    """Equal bit for bit, except that any NaN equals any NaN (a NaN's payload and sign depend on
    which operand LLVM puts first in a commutative op, which is not the player's business)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape
    return bool(np.all((a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))))


def assert_same_bits(a, b, what=""):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    if not same_bits(a, b):
        ok = (a.view(np.int64) == b.view(np.int64)) | (np.isnan(a) & np.isnan(b))
        bad = np.flatnonzero(~ok)
        raise AssertionError(f"{what}: {len(bad)} differ, first at {bad[:5]}: "
                             f"{a.reshape(-1)[bad[:5]]} != {b.reshape(-1)[bad[:5]]}")


def loss(g, out, target):
    """The loss of one position, as the trainer records it: (sigmoid(K out) - target)^2, then a
    scale (so that the loss segment has more than one record)."""
    return Value(g, ops.record_sigmoid_sq_err(g.tape, out.index, K, target)) * 0.5


def record_positions(plan_steps, targets, vparams, pparams):
    """Every plan as one position of one recording: first each position's evaluation (segment 0,
    ending in the plan's output), then each position's loss (segment 1). The graph and the
    ``outputs`` (2, n) of `freeze`."""
    g = Graph(N_VP, N_PP, records=sum(len(s) for s in plan_steps) + 8 * len(plan_steps))
    g.tape.arena.val[:N_VP] = vparams
    g.tape.arena.pair_val[:N_PP] = pparams
    outs = [record_plan(steps, vparams, pparams, g)[1][-1] for steps in plan_steps]
    losses = [loss(g, o, y) for o, y in zip(outs, targets)]
    return g, np.array([[o.index for o in outs], [x.index for x in losses]], np.int64)


def record_alone(steps, target, vparams, pparams):
    """One position on its own tape (what the eager trainer would record); graph and outputs."""
    g, V, _ = record_plan(steps, vparams, pparams)
    out = V[-1]
    return g, out, loss(g, out, target)


def position_tags(g, outputs, i):
    """The tags of position i's records (segment 0, then 1), read off the recording."""
    rec = g.tape.rec
    n_rec = int(rec.counts[C_RECORDS])
    ends = []
    r = 0
    for s in range(outputs.shape[0]):
        for j in range(outputs.shape[1]):
            first = r
            while not (rec.out[r] == outputs[s, j] and
                       ops.FORM_OUT[rec.op[r] >> ops.KERNEL_BITS] == ops.S_VALUE):
                r += 1
            r += 1
            assert r <= n_rec
            if j == i:
                ends.append(tuple(int(x) for x in rec.op[first:r]))
    return tuple(ends)


def fresh_arena(store, vparams, pparams):
    arena = new_arena(*arena_size(store))
    set_params(arena, pparams, vparams)
    return arena


def run(store, arena, rows, with_grad=True, seed=1.0):
    rows = np.asarray(rows, np.int64)
    outputs = np.zeros((len(rows), store.t_out_slots.shape[1]))
    assert play(store, arena, rows, seed, with_grad, outputs) == -1
    return outputs


def n_templates(store):
    return len(store.t_first) - 1


def template_records(store, t):
    return range(int(store.t_first[t]), int(store.t_first[t + 1]))


# ------------------------------------------------------------------------------------------------
# Random graphs as positions: replay equals re-recording.
# ------------------------------------------------------------------------------------------------

@SETTINGS
@given(st.lists(plans(), min_size=2, max_size=3), st.integers(0, 2 ** 32 - 1))
def test_random_positions_replay_equals_rerecording(plan_list, seed2):
    base_v, base_p = plan_list[0][1], plan_list[0][2]
    # The first plan twice more: positions of equal structure (same template).
    position_plans = [p[0] for p in plan_list] + [plan_list[0][0], plan_list[0][0]]
    which = list(range(len(plan_list))) + [0, 0]
    n = len(position_plans)
    rng = np.random.default_rng(seed2)
    targets = rng.uniform(0, 1, n)
    what = "; ".join(describe(p[0], p[3]) for p in plan_list) + f"; seed2 {seed2}"

    g, outputs = record_positions(position_plans, targets, base_v, base_p)
    store = freeze(g.tape.rec, outputs)
    assert store_len(store) == n
    # Templates: equal plans share one; positions whose tags differ cannot.
    tags = [position_tags(g, outputs, i) for i in range(n)]
    for i in range(n):
        for j in range(n):
            if which[i] == which[j]:
                assert store.tmpl[i] == store.tmpl[j], what
            elif tags[i] != tags[j]:
                assert store.tmpl[i] != store.tmpl[j], what
    assert n_templates(store) == len(set(store.tmpl.tolist()))
    # The loss's K is the same for every position: in the template; the targets vary.
    t0 = store.tmpl[0]
    r = int(store.t_first[t0 + 1]) - 2
    assert ops.tag_name(int(store.t_op[r])) == "sigmoid_sq_err"
    assert store.t_scol[r, 0] == -1 and store.t_sconst[r, 0] == K
    assert store.t_scol[r, 1] >= 0
    assert store.scalars[which.index(0), store.t_scol[r, 1]] == targets[0]
    # Recording the store's positions evaluated them at the base point: segment outputs match.
    arena = fresh_arena(store, base_v, base_p)
    got = run(store, arena, np.arange(n), with_grad=False)
    assert_same_bits(got, g.tape.arena.val[outputs.T], what + " (base point)")

    for scale in (1e-2, 1.0):  # a small move (same branches) and an arbitrary one
        new_v = base_v + scale * rng.uniform(-1, 1, N_VP)
        new_p = base_p + scale * rng.uniform(-1, 1, (N_PP, 2))
        alone = [record_alone(position_plans[i], targets[i], new_v, new_p) for i in range(n)]
        # Each position alone: every slot of the arena equals the position's own tape.
        for i, (ga, out, y) in enumerate(alone):
            backward(ga.tape, y.index)
            arena = fresh_arena(store, new_v, new_p)
            got = run(store, arena, [i])
            w = f"{what}, scale {scale}, position {i}"
            assert_same_bits(got[0], [out.value, y.value], w + " outputs")
            nv, npair = int(ga.tape.rec.counts[C_VALUES]), int(ga.tape.rec.counts[C_PAIRS])
            t = store.tmpl[i]
            assert (nv, npair) == (N_VP + store.t_temps[t, 0], N_PP + store.t_temps[t, 1]), w
            a, e = arena, ga.tape.arena
            assert_same_bits(a.val[:nv], e.val[:nv], w + " values")
            assert_same_bits(a.pair_val[:npair], e.pair_val[:npair], w + " pair values")
            assert_same_bits(a.val_grad[:nv], e.val_grad[:nv], w + " value gradients")
            assert_same_bits(a.pair_grad[:npair], e.pair_grad[:npair], w + " pair gradients")
            # Without gradients: the same values, and the gradients are left alone.
            a.val_grad[:] = 5.0
            assert_same_bits(run(store, a, [i], with_grad=False), got, w + " forward only")
            assert np.all(a.val_grad == 5.0)
        # All positions in a shuffled order (one repeated): gradients accumulate like running
        # each position's own backward, last row first, into one running total.
        rows = rng.permutation(n).tolist() + [int(rng.integers(0, n))]
        arena = fresh_arena(store, new_v, new_p)
        got = run(store, arena, rows)
        run_v, run_p = np.zeros(N_VP), np.zeros((N_PP, 2))
        for k in reversed(range(len(rows))):
            ga, out, y = alone[rows[k]]
            ga.tape.arena.val_grad[:N_VP] = run_v
            ga.tape.arena.pair_grad[:N_PP] = run_p
            backward(ga.tape, y.index)
            run_v = ga.tape.arena.val_grad[:N_VP].copy()
            run_p = ga.tape.arena.pair_grad[:N_PP].copy()
            assert_same_bits(got[k], [out.value, y.value], f"{what}, scale {scale}, row {k}")
        assert_same_bits(arena.val_grad[:N_VP], run_v, f"{what}, scale {scale}: value grads")
        assert_same_bits(arena.pair_grad[:N_PP], run_p, f"{what}, scale {scale}: pair grads")


# ------------------------------------------------------------------------------------------------
# Templates and scalars.
# ------------------------------------------------------------------------------------------------

def simple_position(t, s, x, n_terms):
    """One position over value parameter 0 and pair parameters 0..3: a fixed structure whose
    scalars `s` (mul_scalar) and `x` (eg_scale_by_sign's s_nonpos) and n-ary operand count
    vary; everything else is the same for every position."""
    a = ops.record_mul_scalar(t, 0, s)
    first = ops.operand_mark(t)
    for j in range(n_terms):
        ops.push_operand(t, j % 4, float(j + 1))
    p = ops.record_lincomb_pair(t, first)
    q = ops.record_eg_scale_by_sign(t, ops.record_eg_scale(t, p, 0.5), 0.75, x)
    c = ops.record_const(t, 2.0)
    b = ops.record_phase(t, ops.record_add_winnable_eg(t, q, a), 0.25)
    return ops.record_mul(t, ops.record_add(t, b, c), a)


def other_position(t, s):
    """A different structure (an extra record)."""
    return ops.record_exp(t, ops.record_mul_scalar(t, 0, s))


def simple_tape():
    t = new_tape(1, 4, records=256)
    t.arena.val[0] = 0.8
    t.arena.pair_val[:4] = ((1.0, 2.0), (-0.5, 1.5), (0.25, -3.0), (2.0, 0.5))
    return t


def replay_matches_eager(store, t_eager, outs_eager, vparams, pparams):
    """Play every position of `store` at (vparams, pparams): outputs equal the eager tape's."""
    t_eager.arena.val[: len(vparams)] = vparams
    t_eager.arena.pair_val[: len(pparams)] = pparams
    forward(t_eager)
    arena = fresh_arena(store, vparams, pparams)
    got = run(store, arena, np.arange(store_len(store)), with_grad=False)
    assert_same_bits(got[:, 0], t_eager.arena.val[outs_eager], "replayed outputs")


def test_equal_structures_share_a_template_different_ones_do_not():
    t = simple_tape()
    outs = [simple_position(t, 1.5, 0.5, 3), other_position(t, 2.0),
            simple_position(t, -2.5, 0.25, 5),  # other scalars and n-ary count: same template
            other_position(t, -1.0), simple_position(t, 0.5, 0.5, 1)]
    store = freeze(t.rec, np.array([outs]))
    assert n_templates(store) == 2
    assert store.tmpl.tolist() == [0, 1, 0, 1, 0]
    assert store.t_temps.tolist() == [[5, 4], [2, 0]]  # value / pair temporaries per template
    assert store.nary[[0, 2, 4], 0].tolist() == [3, 5, 1]
    assert np.diff(store.opnd_off).tolist() == [3, 0, 5, 0, 1]
    assert arena_size(store) == (1 + 5, 4 + 4)
    replay_matches_eager(store, t, outs, np.array([-0.3]),
                         np.array([(0.5, -1.0), (1.5, 0.25), (-2.0, 1.0), (0.75, -0.5)]))


def test_templates_are_shared_across_the_chunks_of_build_store():
    chunks, tapes = [], []
    for k, maker in enumerate([lambda t: [simple_position(t, 1.5, 0.5, 3), other_position(t, 1.0)],
                               lambda t: [other_position(t, 3.0), simple_position(t, 2.0, 0.1, 2)],
                               lambda t: [other_position(t, 0.5)]]):
        t = simple_tape()
        outs = maker(t)
        chunks.append(extract(t.rec, np.array([outs]), base=2 * k))
        tapes.append((t, outs))
    store = build_store(chunks, 1, 4)
    assert n_templates(store) == 2 and store.tmpl.tolist() == [0, 1, 1, 0, 1]
    # Scalars are decided over the whole store: mul_scalar's varies across chunks.
    arena = fresh_arena(store, np.array([0.8]), tapes[0][0].arena.pair_val[:4])
    got = run(store, arena, np.arange(5), with_grad=False)[:, 0]
    eager = np.concatenate([t.arena.val[outs] for t, outs in tapes])
    assert_same_bits(got, eager, "chunks")


def test_constant_scalars_move_into_the_template_varying_ones_do_not():
    t = simple_tape()
    outs = [simple_position(t, s, x, 2) for s, x in ((1.5, 0.5), (-2.5, 0.5), (0.5, 0.25))]
    store = freeze(t.rec, np.array([outs]))
    assert n_templates(store) == 1
    names = [ops.tag_name(int(op)) for op in store.t_op]
    assert names == ["vs:mul", "lincomb_pair", "eg_scale", "eg_scale_by_sign", "const",
                     "add_winnable_eg", "phase", "vv:add", "vv:mul"]
    scol = {name: store.t_scol[r].tolist() for name, r in zip(names, range(len(names)))}
    const = {name: store.t_sconst[r].tolist() for name, r in zip(names, range(len(names)))}
    # s of mul_scalar varies (its own column); s_nonpos of eg_scale_by_sign too, its s_pos is
    # constant; eg_scale's 0.5, const's 2.0 and phase's 0.25 are constant.
    assert scol["vs:mul"][0] >= 0 and scol["eg_scale_by_sign"][1] >= 0
    assert scol["vs:mul"][0] != scol["eg_scale_by_sign"][1]
    for name, col in [("eg_scale_by_sign", 0), ("eg_scale", 0), ("const", 0), ("phase", 0)]:
        assert scol[name][col] == -1, name
    assert const["eg_scale"][0] == 0.5 and const["const"][0] == 2.0
    assert const["phase"][0] == 0.25 and const["eg_scale_by_sign"][0] == 0.75
    # Records without scalars (or an unused second one) read nothing.
    for name in ("lincomb_pair", "add_winnable_eg", "vv:add", "vv:mul"):
        assert scol[name] == [-1, -1], name
    assert scol["vs:mul"][1] == scol["eg_scale"][1] == scol["const"][1] == -1
    # The per-position rows hold exactly the varying scalars.
    assert store.scalars.shape == (3, 2)
    assert store.scalars[:, scol["vs:mul"][0]].tolist() == [1.5, -2.5, 0.5]
    assert store.scalars[:, scol["eg_scale_by_sign"][1]].tolist() == [0.5, 0.5, 0.25]
    replay_matches_eager(store, t, outs, np.array([0.3]),
                         np.array([(0.5, -1.0), (1.5, 0.25), (-2.0, 1.0), (0.75, -0.5)]))


def test_a_template_of_one_position_keeps_every_scalar():
    t = simple_tape()
    outs = [simple_position(t, 1.5, 0.5, 2), other_position(t, 2.0), other_position(t, 3.0)]
    store = freeze(t.rec, np.array([outs]))
    for r in template_records(store, store.tmpl[0]):
        assert store.t_scol[r].tolist() == [-1, -1]
    r = next(r for r in template_records(store, store.tmpl[1])
             if ops.tag_name(int(store.t_op[r])) == "vs:mul")
    assert store.t_scol[r, 0] >= 0


def test_scalars_that_differ_only_in_the_sign_of_zero_are_not_merged():
    """0.0 and -0.0 compare equal but replay differently (x * -0.0 is -0.0): kept apart."""
    t = new_tape(1, 0, records=16)
    t.arena.val[0] = 3.0
    outs = [ops.record_mul_scalar(t, 0, 0.0), ops.record_mul_scalar(t, 0, -0.0)]
    store = freeze(t.rec, np.array([outs]))
    assert store.t_scol[0, 0] >= 0
    got = run(store, fresh_arena(store, np.array([3.0]), np.zeros((0, 2))), [0, 1])
    assert_same_bits(got[:, 0], [0.0, -0.0], "signed zeros")


# ------------------------------------------------------------------------------------------------
# Operand dtypes.
# ------------------------------------------------------------------------------------------------

def lincomb_positions(n_pair_params, terms_per_position):
    """One lincomb_pair (+ phase) position per list of (pair parameter, coefficient) terms."""
    t = new_tape(0, n_pair_params, records=4 * len(terms_per_position) + 4)
    t.arena.pair_val[:n_pair_params] = np.random.default_rng(1).uniform(-2, 2, (n_pair_params, 2))
    outs = []
    for terms in terms_per_position:
        first = ops.operand_mark(t)
        for j, c in terms:
            ops.push_operand(t, j, c)
        outs.append(ops.record_phase(t, ops.record_lincomb_pair(t, first), 0.25))
    return t, outs


def operands(store):
    """The store's operand slots and coefficients, unpacked if they share index words."""
    bits = int(store.coef_bits[0])
    if not bits:
        return store.index, store.coef
    w = store.index.astype(np.int64)
    return w >> bits, (w & ((1 << bits) - 1)) - (1 << (bits - 1))


@pytest.mark.parametrize("coefs, dtype, packed", [
    ([1.0, -3.0, 127.0, -128.0], np.int8, True),
    ([1.0, 128.0], np.int16, True),
    ([-129.0, 2.0], np.int16, True),
    ([32767.0, -32768.0], np.int16, False),   # 16 coefficient bits and 2 slot bits
    ([32768.0], np.float64, False),
    ([-32769.0, 1.0], np.float64, False),
    ([0.5, 1.0], np.float64, False),
    ([1.0, 1e-300], np.float64, False),
])
def test_coefficients_narrow_when_they_fit(coefs, dtype, packed):
    terms = [[(i % 3, c) for i, c in enumerate(coefs)], [(1, 2.0)]]
    t, outs = lincomb_positions(3, terms)
    assert extract(t.rec, np.array([outs])).coef.dtype == dtype
    store = freeze(t.rec, np.array([outs]))
    slots, got = operands(store)
    assert got.tolist() == coefs + [2.0]
    assert slots.tolist() == [j for ts in terms for j, _ in ts]
    assert store.index.dtype == np.uint16
    assert (store.coef_bits[0] > 0) == packed
    if packed:
        assert store.coef.size == 0
        assert store.coef_bits[0] == coef_bits_needed(int(min(coefs + [2])), int(max(coefs + [2])))
    else:
        assert store.coef.dtype == dtype
    replay_matches_eager(store, t, outs, np.zeros(0), t.arena.pair_val[:3] * 1.5)


@pytest.mark.parametrize("top, coef, packed", [(0x3FF, 31.0, True), (0x3FF, 32.0, False),
                                               (0x7FF, -16.0, True), (0x7FF, -17.0, False)])
def test_operands_pack_when_slot_and_coefficient_bits_fit_16(top, coef, packed):
    t, outs = lincomb_positions(top + 1, [[(0, 1.0), (top, coef)], [(top, -1.0)]])
    store = freeze(t.rec, np.array([outs]))
    assert (store.coef_bits[0] > 0) == packed
    slots, coefs = operands(store)
    assert slots.tolist() == [0, top, top] and coefs.tolist() == [1, coef, -1]
    replay_matches_eager(store, t, outs, np.zeros(0), t.arena.pair_val[: top + 1] - 0.5)


def test_coefficient_bits_hold_their_range():
    for lo, hi in [(0, 0), (-1, 0), (0, 1), (-2, 1), (-15, 14), (-16, 15), (-128, 127), (-3, 20)]:
        k = coef_bits_needed(lo, hi)
        assert -(1 << (k - 1)) <= lo and hi <= (1 << (k - 1)) - 1
        assert k == 1 or not (-(1 << (k - 2)) <= lo and hi <= (1 << (k - 2)) - 1)


@pytest.mark.parametrize("top, dtype", [(0xFFFF, np.uint16), (0x10000, np.int32)])
def test_operand_slots_narrow_when_they_fit(top, dtype):
    t, outs = lincomb_positions(top + 1, [[(0, 1.0), (top, 2.0)], [(top, -1.0)]])
    store = freeze(t.rec, np.array([outs]))
    assert store.index.dtype == dtype and store.coef_bits[0] == 0  # 16 slot bits: no room
    assert store.index.tolist() == [0, top, top]
    assert store.coef.dtype == np.int8
    replay_matches_eager(store, t, outs, np.zeros(0), t.arena.pair_val[: top + 1] - 0.5)


def test_chunks_of_different_operand_dtypes_merge_to_the_widest():
    parts, tapes = [], []
    for terms in ([[(0, 1.0), (2, -2.0)]], [[(1, 300.0)]], [[(2, 0.5), (0, 1.0)]]):
        t, outs = lincomb_positions(3, terms)
        parts.append(extract(t.rec, np.array([outs])))
        tapes.append((t, outs))
    assert [p.coef.dtype for p in parts] == [np.int8, np.int16, np.float64]
    store = build_store(parts[:2], 0, 3)  # integers: packed with the slots
    assert store.coef_bits[0] == coef_bits_needed(-2, 300)
    assert operands(store)[1].tolist() == [1, -2, 300]
    store = build_store(parts, 0, 3)
    assert store.coef.dtype == np.float64 and store.coef.tolist() == [1, -2, 300, 0.5, 1]
    arena = fresh_arena(store, np.zeros(0), tapes[0][0].arena.pair_val[:3])
    got = run(store, arena, np.arange(3), with_grad=False)[:, 0]
    assert_same_bits(got, [t.arena.val[o[0]] for t, o in tapes], "merged chunks")


# ------------------------------------------------------------------------------------------------
# Validation: FreezeError names the position and record.
# ------------------------------------------------------------------------------------------------

def three_positions():
    """Three positions of (exp, mul_scalar, lincomb_value) records; the recording, outputs and
    each position's first record."""
    t = new_tape(2, 1, records=64)
    t.arena.val[:2] = (0.5, -1.0)
    outs, firsts = [], []
    for i in range(3):
        firsts.append(int(t.rec.counts[C_RECORDS]))
        a = ops.record_exp(t, 0)
        b = ops.record_mul_scalar(t, a, 1.0 + i)
        first = ops.operand_mark(t)
        for x in (a, b, 1):
            ops.push_operand(t, x, 2.0)
        outs.append(ops.record_lincomb_value(t, first))
    return t, np.array([outs]), firsts


def freeze_error(rec, outputs, **kw):
    """The message of the FreezeError of freezing (with `kw`: extracting) the recording."""
    with pytest.raises(FreezeError) as e:
        if kw:
            extract(rec, outputs, **kw)
        else:
            freeze(rec, outputs)
    return str(e.value)


def test_three_positions_freeze():
    t, outputs, _ = three_positions()
    store = freeze(t.rec, outputs)
    assert n_templates(store) == 1 and store.t_temps.tolist() == [[3, 0]]


def test_freeze_refuses_an_unknown_tag():
    for bad in (0xFFFF, ops.tag(ops.F_VV, ops.K_EXP), ops.tag(ops.N_FORMS)):
        t, outputs, firsts = three_positions()
        r = firsts[1] + 1
        t.rec.op[r] = bad
        msg = freeze_error(t.rec, outputs)
        assert msg == f"position 1, record {r} (tag {bad}, ?): unknown record tag", msg


def test_freeze_refuses_reading_another_positions_temporary():
    t, outputs, firsts = three_positions()
    r = firsts[1] + 1                          # position 1's mul_scalar ...
    t.rec.lhs[r] = t.rec.out[firsts[0]]        # ... reads position 0's exp
    msg = freeze_error(t.rec, outputs)
    assert re.fullmatch(rf"position 1, record {r} \(tag \d+, vs:mul\): reads a slot that is "
                        r"neither a parameter nor the output of an earlier record of the same "
                        r"position .*", msg), msg
    # Through an n-ary operand, and reading a later record of its own position.
    t, outputs, firsts = three_positions()
    r = firsts[2] + 2
    t.rec.opnd_index[t.rec.lhs[r]] = t.rec.out[firsts[1] + 1]
    msg = freeze_error(t.rec, outputs)
    assert msg.startswith(f"position 2, record {r} (tag {ops.tag(ops.F_LINCOMB_VALUE)}, "
                          f"lincomb_value): reads a slot"), msg
    t, outputs, firsts = three_positions()
    t.rec.lhs[firsts[0]] = t.rec.out[firsts[0] + 1]  # exp reads the mul_scalar after it
    assert freeze_error(t.rec, outputs).startswith(f"position 0, record {firsts[0]} ")
    # A slot beyond any in use.
    t, outputs, firsts = three_positions()
    t.rec.lhs[firsts[2]] = 10 ** 6
    assert freeze_error(t.rec, outputs).startswith(f"position 2, record {firsts[2]} ")


@pytest.mark.parametrize("first, count", [(1000, 2), (-1, 3), (0, 1000), (2, -1)])
def test_freeze_refuses_an_operand_list_out_of_range(first, count):
    t, outputs, firsts = three_positions()
    r = firsts[1] + 2
    t.rec.lhs[r], t.rec.rhs[r] = first, count
    msg = freeze_error(t.rec, outputs)
    assert msg == (f"position 1, record {r} (tag {ops.tag(ops.F_LINCOMB_VALUE)}, lincomb_value): "
                   "has an operand list outside the recording's operand buffer"), msg


def test_freeze_refuses_an_output_no_record_writes():
    t, outputs, _ = three_positions()
    outputs[0, 1] = 999
    msg = freeze_error(t.rec, outputs)
    assert msg == "position 1: no record writes its output slot 999 (segment 0)", msg
    # In a second segment, with positions numbered from `base`.
    t, outputs, _ = three_positions()
    outputs = np.vstack([outputs, outputs])
    msg = freeze_error(t.rec, outputs, base=10)
    assert msg == f"position 10: no record writes its output slot {outputs[1, 0]} (segment 1)"
    # A whole tape whose output slot is not written by any record: no record to name.
    t, _, _ = three_positions()
    with pytest.raises(FreezeError, match=r"^position 0: no record of the position writes "
                                          "its output slot$"):
        freeze_tape(t, int(t.rec.counts[C_VALUES]) + 3)


def test_freeze_refuses_writing_a_parameter():
    t, outputs, firsts = three_positions()
    r = firsts[2]
    t.rec.out[r] = 1
    msg = freeze_error(t.rec, outputs)
    assert msg == (f"position 2, record {r} (tag {ops.tag(ops.F_V, ops.K_EXP)}, v:exp): writes a "
                   "parameter slot or a slot written before"), msg


def test_errors_number_positions_from_base():
    t, outputs, firsts = three_positions()
    t.rec.op[firsts[2]] = 0xFFFF
    msg = freeze_error(t.rec, outputs, base=100)
    assert msg.startswith(f"position 102, record {firsts[2]} (tag 65535, ?)"), msg


def test_freeze_tape_refuses_slots_no_record_writes():
    t, _, _ = three_positions()
    t.rec.counts[C_VALUES] += 1
    with pytest.raises(FreezeError, match="slots that no record writes"):
        freeze_tape(t)
    with pytest.raises(FreezeError, match="slots that no record writes"):
        backward(t, int(t.rec.out[0]))


# ------------------------------------------------------------------------------------------------
# Play: order, shuffled rows, unknown tags.
# ------------------------------------------------------------------------------------------------

def scaled_positions(scales):
    """Position i: value parameter 0 times scales[i] (its gradient), through a phase of a pair
    (so pair gradients flow too)."""
    t = new_tape(1, 1, records=8 * len(scales))
    t.arena.val[0] = 1.0
    t.arena.pair_val[0] = (0.5, 0.25)
    outs = []
    for s in scales:
        a = ops.record_mul_scalar(t, 0, s)
        b = ops.record_phase(t, ops.record_pair_mul_scalar(t, 0, s), 0.5)
        outs.append(ops.record_add(t, a, b))
    return t, outs


def test_play_goes_last_to_first():
    """Gradients 1, 1e16, -1e16 (positions 0, 1, 2): last to first sums ((-1e16 + 1e16) + 1) = 1;
    first to last would give ((1 + 1e16) - 1e16) = 0."""
    t, outs = scaled_positions([1.0, 1e16, -1e16])
    store = freeze(t.rec, np.array([outs]))
    arena = fresh_arena(store, np.array([1.0]), np.array([(0.5, 0.25)]))
    run(store, arena, [0, 1, 2])
    assert arena.val_grad[0] == 1.0
    np.testing.assert_array_equal(arena.pair_grad[0], [0.5, 0.5])
    arena = fresh_arena(store, np.array([1.0]), np.array([(0.5, 0.25)]))
    run(store, arena, [2, 1, 0])
    assert arena.val_grad[0] == 0.0
    # The arena is left holding the temporaries of the last position played: rows[0].
    for first in range(3):
        arena = fresh_arena(store, np.array([1.0]), np.array([(0.5, 0.25)]))
        rows = [first] + [r for r in range(3) if r != first]
        got = run(store, arena, rows)
        assert arena.val[1] == [1.0, 1e16, -1e16][first]
        np.testing.assert_array_equal(got[:, 0], t.arena.val[np.array(outs)[rows]])


def test_play_many_shuffled_rows_equals_eager_backward_in_that_order():
    """Enough rows for the prefetches ahead of the sweep (16 and 8 positions), in a shuffled
    order with repeats; the seed scales every gradient."""
    rng = np.random.default_rng(3)
    t = simple_tape()
    n = 12
    specs = [(float(rng.uniform(-2, 2)), float(rng.uniform(0, 1)), int(rng.integers(1, 6)))
             for _ in range(n)]
    outs = [simple_position(t, *spec) if i % 3 else other_position(t, spec[0])
            for i, spec in enumerate(specs)]
    store = freeze(t.rec, np.array([outs]))
    vparams, pparams = np.array([0.6]), rng.uniform(-2, 2, (4, 2))
    rows = np.concatenate([rng.permutation(n), rng.integers(0, n, 30)])
    seed = 1.0 / len(rows)
    arena = fresh_arena(store, vparams, pparams)
    got = run(store, arena, rows, seed=seed)
    run_v, run_p = np.zeros(1), np.zeros((4, 2))
    for k in reversed(range(len(rows))):
        e = simple_tape()
        e.arena.val[0], e.arena.pair_val[:4] = vparams[0], pparams
        i = rows[k]
        o = simple_position(e, *specs[i]) if i % 3 else other_position(e, specs[i][0])
        assert_same_bits(got[k, 0], e.arena.val[o], f"row {k}")
        # The seed: backward seeds 1, so seed the eager sweep through a mul_scalar.
        y = ops.record_mul_scalar(e, o, seed)
        e.arena.val_grad[0], e.arena.pair_grad[:4] = run_v[0], run_p
        backward(e, y)
        run_v, run_p = e.arena.val_grad[:1].copy(), e.arena.pair_grad[:4].copy()
    assert np.any(run_v != 0) and np.any(run_p != 0)
    assert_same_bits(arena.val_grad[:1], run_v, "value gradients")
    assert_same_bits(arena.pair_grad[:4], run_p, "pair gradients")


def test_play_returns_an_unknown_tag_and_stops():
    t, outs = scaled_positions([2.0, 3.0])
    store = freeze(t.rec, np.array([outs]))
    bad = 0xFFFF
    store.t_op[1] = bad  # corrupt the (only) template after freezing
    arena = fresh_arena(store, np.array([1.0]), np.array([(0.5, 0.25)]))
    outputs = np.zeros((2, 1))
    assert play(store, arena, np.arange(2, dtype=np.int64), 1.0, True, outputs) == bad
    assert arena.val_grad[0] == 0.0  # it stopped before any backward sweep
    with pytest.raises(FreezeError, match=f"unknown record tag {bad}"):
        check_played(bad)
    check_played(-1)


# ------------------------------------------------------------------------------------------------
# Whole-tape sweeps and edge cases.
# ------------------------------------------------------------------------------------------------

def test_forward_of_a_tape_without_value_records():
    """`forward` recomputes every record; a tape whose records all write pairs (e.g. a batch of
    linear combinations not yet blended) has records to recompute, and no output is needed for
    a forward sweep. (Fails: freeze_tape looks for the last value written to use as the output
    and raises FreezeError "the tape has no record writing a value".)"""
    t = new_tape(0, 2, records=8)
    t.arena.pair_val[:2] = ((1.0, 2.0), (3.0, -1.0))
    p = ops.record_pair_add(t, 0, 1)
    q = ops.record_eg_scale(t, p, 0.5)
    t.arena.pair_val[0] = (2.0, 2.0)
    forward(t)
    np.testing.assert_array_equal(t.arena.pair_val[p], [5.0, 1.0])
    np.testing.assert_array_equal(t.arena.pair_val[q], [5.0, 0.5])


def test_freezing_no_positions_gives_an_empty_store():
    """An empty chunk (e.g. an empty data split) freezes to a store of 0 positions that plays
    nothing. (Fails: build_store reshapes an empty template list with -1 and raises numpy's
    ValueError "cannot reshape array of size 0 into shape (0,newaxis)".)"""
    t, _, _ = three_positions()
    for store in (freeze(t.rec, np.zeros((2, 0), np.int64)), build_store([], 2, 1)):
        assert store_len(store) == 0
        arena = fresh_arena(store, np.array([0.5, -1.0]), np.zeros((1, 2)))
        outputs = np.zeros((0, store.t_out_slots.shape[1]))
        assert play(store, arena, np.zeros(0, np.int64), 1.0, True, outputs) == -1


def test_empty_tape_output_error_names_no_phantom_record():
    """freeze_tape of a tape without records, at an output slot nothing writes: FreezeError
    naming position 0 -- but not a record -1 with the tag found in the last capacity slot of
    ``rec.op`` (a stale or zero entry, printed as "tag 0, vv:add"). (Fails: the E_NO_OUTPUT
    path reports record ``ranges[s, i, 1] - 1`` = -1 and reads ``rec.op[-1]``.)"""
    t = new_tape(1, 0, records=4)
    with pytest.raises(FreezeError) as e:
        freeze_tape(t, 3)
    msg = str(e.value)
    assert msg.startswith("position 0") and "no record" in msg
    assert "record -1" not in msg and "vv:add" not in msg, msg


def test_backward_at_a_parameter_of_an_empty_tape():
    t = new_tape(2, 0, records=4)
    backward(t, 1)
    np.testing.assert_array_equal(t.arena.val_grad[:2], [0.0, 1.0])
    forward(t)  # nothing to do


def test_max_nary_is_the_u16_limit():
    assert MAX_NARY == np.iinfo(np.uint16).max
    t = new_tape(0, 1, records=4, operands=MAX_NARY + 1)
    first = ops.operand_mark(t)
    t.rec.opnd_index[: MAX_NARY + 1] = 0
    t.rec.opnd_coef[: MAX_NARY + 1] = 1.0
    t.rec.counts[C_OPERANDS] = MAX_NARY + 1
    o = ops.record_phase(t, ops.record_lincomb_pair(t, first), 0.5)
    with pytest.raises(FreezeError, match=rf"position 0, record 0 \(tag \d+, lincomb_pair\): has "
                                          rf"more than {MAX_NARY} operands"):
        freeze(t.rec, np.array([[o]]))


def test_the_interpreter_dispatch_is_generated_from_the_form_table():
    from tuner.tape.player import interpreter_source

    source = interpreter_source()
    for f, row in enumerate(ops.FORM_TABLE):
        # One branch each way (a loss form once more, in the linear fast case).
        branches = source.count(f"form == {f}:  # {row.name}\n")
        assert branches == (3 if row.loss else 2), row.name
        assert ops.call(f, False) in source
        if row.bwd is not None:
            assert ops.call(f, True) in source
    # A tag of no form stops the sweep in every dispatch, never running the last branch.
    assert source.count("else:\n                return op") == 3


@pytest.mark.parametrize("coef_range", [15, 300])  # coefficients from the kernels' table, or not
def test_a_specialised_linear_combination_gives_the_interpreters_bits(coef_range):
    """A store of one template whose first record is a linear combination of packed pairs:
    outputs and gradients of the specialised player are the interpreter's, for rows in any order
    (repeated, and positions without operands among them)."""
    from tuner.tape.pairs import TABLE_BITS
    from tuner.tape.specialise import specialise

    rng = np.random.default_rng(coef_range)
    n_pp, n = 40, 64
    terms = [[(int(j), float(rng.integers(-coef_range, coef_range + 1)))
              for j in rng.choice(n_pp, size=int(rng.integers(0, 30)), replace=False)]
             for _ in range(n)]
    t, outs = lincomb_positions(n_pp, terms)
    store = freeze(t.rec, np.array([outs]))
    bits = int(store.coef_bits[0])
    assert bits > 0 and (bits <= TABLE_BITS) == (coef_range < 128)
    rows = np.concatenate([rng.permutation(n), rng.integers(0, n, 16)])
    for with_grad in (True, False):
        got = []
        for player in (play, specialise(store).play):
            arena = fresh_arena(store, np.zeros(0), t.arena.pair_val[:n_pp] * 1.5)
            outputs = np.zeros((len(rows), 1))
            assert player(store, arena, rows, 0.25, with_grad, outputs) == -1
            got.append((outputs, arena.pair_grad[:n_pp].copy()))
        assert_same_bits(got[0][0], got[1][0], "outputs")
        assert_same_bits(got[0][1], got[1][1], "gradients")
        assert (got[0][1] != 0.0).any() == with_grad
