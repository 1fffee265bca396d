"""Every op of the tape's op table (tuner/tape/ops.py): forward against a NumPy reference, gradient
(with respect to every value and pair input, mg and eg separately) against central finite
differences of the recorded function, at 50 seeded random points per op.

The function under test is recorded through the `Graph` front end; its inputs are parameters (the
first value / pair slots), and in a second, lighter pass leaves. A pair output is differentiated one
component at a time through `phase(1.0)` (= mg) and `phase(0.0)` (= eg), so each test sees the full
Jacobian. The recorded tags are checked too, so the front end is known to route each case to the op
it names.
"""
from __future__ import annotations

import math
import zlib
from decimal import Decimal, localcontext
from typing import Callable, NamedTuple

import numpy as np
import pytest

from tuner.tape import Graph, Pair, Value, backward, forward, new_tape
from tuner.tape import ops
from tuner.tape.recording import C_RECORDS

POINTS = 50          # random points per op (parameter inputs)
LEAF_POINTS = 10     # random points per op (leaf inputs)
FD_REL_STEP = 1e-6   # central-difference step, relative to max(1, |x|)
GRAD_RTOL = 1e-6
GRAD_ATOL = 1e-9     # times max(1, |output|): the rounding noise of the difference quotient


def U(rng, lo, hi):
    return float(rng.uniform(lo, hi))


def away(rng, lo, hi):
    """Uniform in [lo, hi] with a random sign (keeps a divisor away from 0)."""
    return float(rng.choice([-1.0, 1.0]) * rng.uniform(lo, hi))


class Case(NamedTuple):
    name: str
    tags: tuple                       # expected record tags, in order
    sample: Callable                  # rng -> (values, pairs, consts)
    build: Callable                   # (graph, [Value], [Pair], consts) -> Value | Pair
    ref: Callable                     # (values, pairs (n, 2), consts) -> float | (mg, eg)
    jac: Callable | None = None       # optional exact Jacobian (n_out, n_in), checked besides FD


def vals(*gens):
    """A sampler of value inputs only."""
    return lambda rng: ([g(rng) for g in gens], [], {})


def std(rng):
    return U(rng, -3, 3)


def pos(rng):
    return U(rng, 0.2, 3)


def nz(rng):
    return away(rng, 0.5, 3)


def pair_std(rng):
    return (U(rng, -3, 3), U(rng, -3, 3))


def pair_nz(rng):
    return (away(rng, 0.5, 3), away(rng, 0.5, 3))


def with_const(sampler, **consts):
    """Add constants drawn by `consts[name](rng)` to a sampler."""
    def sample(rng):
        v, p, c = sampler(rng)
        return v, p, dict(c, **{k: g(rng) for k, g in consts.items()})
    return sample


def io(nv=0, npairs=0, pair_gen=pair_std, val_gen=std):
    return lambda rng: ([val_gen(rng) for _ in range(nv)],
                        [pair_gen(rng) for _ in range(npairs)], {})


def sig(x):
    return 1.0 / (1.0 + np.exp(-x))


# add_clamped_eg: the four sign cases, 0.05 away from every kink.
def clamped_sample(eg_sign, crosses):
    def sample(rng):
        mg = U(rng, -3, 3)
        eg = eg_sign * U(rng, 0.05, 3)
        target = (-eg_sign if crosses else eg_sign) * U(rng, 0.05, 3)  # eg + v
        return [target - eg], [(mg, eg)], {}
    return sample


def clamped_ref(v, p, c):
    eg, x = p[0, 1], v[0]
    keeps = (eg > 0 and eg + x > 0) or (eg < 0 and eg + x < 0)
    return (p[0, 0], eg + x if keeps else 0.0)


def clamped_jac(v, p, c):
    """Rows (mg, eg), columns (v, mg, eg)."""
    eg, x = p[0, 1], v[0]
    keeps = (eg > 0 and eg + x > 0) or (eg < 0 and eg + x < 0)
    return np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0] if keeps else [0.0, 0.0, 0.0]])


# add_winnable_eg: w = v if eg > 0 else -v, then the clamped add of eg + w; the same four cases.
def winnable_sample(eg_sign, crosses):
    def sample(rng):
        mg = U(rng, -3, 3)
        eg = eg_sign * U(rng, 0.05, 3)
        target = (-eg_sign if crosses else eg_sign) * U(rng, 0.05, 3)  # eg + w
        return [eg_sign * (target - eg)], [(mg, eg)], {}
    return sample


def winnable_ref(v, p, c):
    eg, x = p[0, 1], v[0]
    if eg == 0.0:
        return (p[0, 0], eg)
    w = x if eg > 0 else -x
    keeps = (eg > 0 and eg + w > 0) or (eg < 0 and eg + w < 0)
    return (p[0, 0], eg + w if keeps else 0.0)


def winnable_jac(v, p, c):
    """Rows (mg, eg), columns (v, mg, eg): v gets the sign of eg, and only when unclamped."""
    eg, x = p[0, 1], v[0]
    if eg == 0.0:
        return np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    w = x if eg > 0 else -x
    keeps = (eg > 0 and eg + w > 0) or (eg < 0 and eg + w < 0)
    return np.array([[0.0, 1.0, 0.0], [np.sign(eg), 0.0, 1.0] if keeps else [0.0, 0.0, 0.0]])


def record_winnable(g, V, P, c):
    return Pair(g, ops.record_add_winnable_eg(g.tape, P[0].index, V[0].index))


# eg_scale_by_sign: (mg, eg * (s_pos if eg > 0 else s_nonpos)); eg 0.05 away from the kink.
def by_sign_sample(eg_sign):
    def sample(rng):
        return [], [(U(rng, -3, 3), eg_sign * U(rng, 0.05, 3))], {
            "s_pos": U(rng, 0, 2), "s_nonpos": U(rng, 0, 2)}
    return sample


def by_sign_factor(eg, c):
    return c["s_pos"] if eg > 0 else c["s_nonpos"]


def by_sign_ref(v, p, c):
    return np.array([p[0, 0], p[0, 1] * by_sign_factor(p[0, 1], c)])


def by_sign_jac(v, p, c):
    return np.array([[1.0, 0.0], [0.0, by_sign_factor(p[0, 1], c)]])


def record_by_sign(g, V, P, c):
    return Pair(g, ops.record_eg_scale_by_sign(g.tape, P[0].index, c["s_pos"], c["s_nonpos"]))


def sq_err_ref(v, p, c):
    return (sig(c["k"] * v[0]) - c["y"]) ** 2


def sq_err_jac(v, p, c):
    s = sig(c["k"] * v[0])
    return np.array([[2.0 * (s - c["y"]) * s * (1.0 - s) * c["k"]]])


def xent_ref(v, p, c):
    q = sig(c["k"] * v[0])
    return -(c["y"] * math.log(q) + (1.0 - c["y"]) * math.log(1.0 - q))


def xent_jac(v, p, c):
    return np.array([[(sig(c["k"] * v[0]) - c["y"]) * c["k"]]])


def nary_indices(rng, n):
    """2..8 operand indices into n inputs, at least one of them repeated."""
    idx = list(rng.integers(0, n, size=int(rng.integers(1, 8))))
    return idx + [idx[int(rng.integers(0, len(idx)))]]


def nary_sample(nv, npairs):
    def sample(rng):
        v = [std(rng) for _ in range(nv)]
        p = [pair_std(rng) for _ in range(npairs)]
        idx = nary_indices(rng, nv or npairs)
        return v, p, {"idx": idx, "coef": [U(rng, -3, 3) for _ in idx]}
    return sample


CASES = [
    # Value ops, value x value.
    Case("add", ("vv:add",), io(2), lambda g, V, P, c: V[0] + V[1], lambda v, p, c: v[0] + v[1]),
    Case("sub", ("vv:sub",), io(2), lambda g, V, P, c: V[0] - V[1], lambda v, p, c: v[0] - v[1]),
    Case("mul", ("vv:mul",), io(2), lambda g, V, P, c: V[0] * V[1], lambda v, p, c: v[0] * v[1]),
    Case("mul_self", ("vv:mul",), io(1), lambda g, V, P, c: V[0] * V[0],
         lambda v, p, c: v[0] * v[0], lambda v, p, c: np.array([[2.0 * v[0]]])),
    Case("div", ("vv:div",), vals(std, nz), lambda g, V, P, c: V[0] / V[1],
         lambda v, p, c: v[0] / v[1]),
    Case("pow", ("vv:pow",), vals(pos, lambda r: U(r, -2, 2.5)), lambda g, V, P, c: V[0] ** V[1],
         lambda v, p, c: np.power(v[0], v[1])),
    # Value ops, unary.
    Case("exp", ("v:exp",), vals(lambda r: U(r, -5, 5)), lambda g, V, P, c: V[0].exp(),
         lambda v, p, c: np.exp(v[0])),
    Case("log", ("v:log",), vals(lambda r: math.exp(U(r, -3, 3))), lambda g, V, P, c: V[0].log(),
         lambda v, p, c: np.log(v[0])),
    Case("sigmoid", ("v:sigmoid",), vals(lambda r: U(r, -10, 10)),
         lambda g, V, P, c: V[0].sigmoid(), lambda v, p, c: sig(v[0])),
    Case("neg", ("v:neg",), io(1), lambda g, V, P, c: -V[0], lambda v, p, c: -v[0]),
    # Value ops with a constant.
    Case("pow_const", ("vs:pow",), with_const(vals(pos), s=lambda r: U(r, -2, 3)),
         lambda g, V, P, c: V[0] ** c["s"], lambda v, p, c: np.power(v[0], c["s"])),
    Case("pow_const_negative_base", ("vs:pow",),
         with_const(vals(lambda r: -pos(r)), s=lambda r: float(r.choice([2.0, 3.0, -1.0, -2.0]))),
         lambda g, V, P, c: V[0] ** c["s"], lambda v, p, c: np.power(v[0], c["s"])),
    Case("add_scalar", ("vs:add",), with_const(io(1), s=std), lambda g, V, P, c: V[0] + c["s"],
         lambda v, p, c: v[0] + c["s"]),
    Case("radd_scalar", ("vs:add",), with_const(io(1), s=std), lambda g, V, P, c: c["s"] + V[0],
         lambda v, p, c: v[0] + c["s"]),
    Case("sub_scalar", ("vs:sub",), with_const(io(1), s=std), lambda g, V, P, c: V[0] - c["s"],
         lambda v, p, c: v[0] - c["s"]),
    Case("scalar_sub", ("sv:sub",), with_const(io(1), s=std), lambda g, V, P, c: c["s"] - V[0],
         lambda v, p, c: c["s"] - v[0]),
    Case("mul_scalar", ("vs:mul",), with_const(io(1), s=std), lambda g, V, P, c: V[0] * c["s"],
         lambda v, p, c: v[0] * c["s"]),
    Case("rmul_scalar", ("vs:mul",), with_const(io(1), s=std), lambda g, V, P, c: c["s"] * V[0],
         lambda v, p, c: v[0] * c["s"]),
    Case("div_scalar", ("vs:div",), with_const(io(1), s=nz), lambda g, V, P, c: V[0] / c["s"],
         lambda v, p, c: v[0] / c["s"]),
    Case("scalar_div", ("sv:div",), with_const(vals(nz), s=std), lambda g, V, P, c: c["s"] / V[0],
         lambda v, p, c: c["s"] / v[0]),
    # Pair ops.
    Case("pair_add", ("pp:add",), io(0, 2), lambda g, V, P, c: P[0] + P[1],
         lambda v, p, c: p[0] + p[1]),
    Case("pair_sub", ("pp:sub",), io(0, 2), lambda g, V, P, c: P[0] - P[1],
         lambda v, p, c: p[0] - p[1]),
    Case("pair_mul", ("pp:mul",), io(0, 2), lambda g, V, P, c: P[0] * P[1],
         lambda v, p, c: p[0] * p[1]),
    Case("pair_mul_self", ("pp:mul",), io(0, 1), lambda g, V, P, c: P[0] * P[0],
         lambda v, p, c: p[0] * p[0]),
    Case("pair_neg", ("p:neg",), io(0, 1), lambda g, V, P, c: -P[0], lambda v, p, c: -p[0]),
    Case("pair_sigmoid", ("p:sigmoid",),
         io(0, 1, pair_gen=lambda r: (U(r, -10, 10), U(r, -10, 10))),
         lambda g, V, P, c: P[0].sigmoid(), lambda v, p, c: sig(p[0])),
    Case("pair_sigmoid_sum", ("sigmoid_sum",),
         with_const(io(0, 2, pair_gen=lambda r: (U(r, -10, 10), U(r, -10, 10))), s=nz),
         lambda g, V, P, c: Pair(g, ops.record_pair_sigmoid_sum(g.tape, P[0].index, P[1].index,
                                                                c["s"])),
         lambda v, p, c: sig(p[0] / c["s"] + p[1] / c["s"])),
    Case("pair_mul_scalar", ("ps:mul",), with_const(io(0, 1), s=std),
         lambda g, V, P, c: P[0] * c["s"], lambda v, p, c: p[0] * c["s"]),
    Case("pair_rmul_scalar", ("ps:mul",), with_const(io(0, 1), s=std),
         lambda g, V, P, c: c["s"] * P[0], lambda v, p, c: p[0] * c["s"]),
    Case("pair_div_scalar", ("ps:div",), with_const(io(0, 1), s=nz),
         lambda g, V, P, c: P[0] / c["s"], lambda v, p, c: p[0] / c["s"]),
    Case("scalar_div_pair", ("sp:div",), with_const(io(0, 1, pair_gen=pair_nz), s=std),
         lambda g, V, P, c: c["s"] / P[0], lambda v, p, c: c["s"] / p[0]),
    Case("pair_mul_value", ("pv:mul",), io(1, 1), lambda g, V, P, c: P[0] * V[0],
         lambda v, p, c: p[0] * v[0]),
    Case("value_mul_pair", ("vp:mul",), io(1, 1), lambda g, V, P, c: V[0] * P[0],
         lambda v, p, c: v[0] * p[0]),
    Case("pair_div_value", ("pv:div",), io(1, 1, val_gen=nz), lambda g, V, P, c: P[0] / V[0],
         lambda v, p, c: p[0] / v[0]),
    Case("value_div_pair", ("vp:div",), io(1, 1, pair_gen=pair_nz),
         lambda g, V, P, c: V[0] / P[0], lambda v, p, c: v[0] / p[0]),
    Case("eg_scale", ("eg_scale",), with_const(io(0, 1), s=lambda r: U(r, 0, 2)),
         lambda g, V, P, c: P[0].eg_scale(c["s"]),
         lambda v, p, c: np.array([p[0, 0], p[0, 1] * c["s"]])),
    Case("add_clamped_eg_pos_keeps", ("add_clamped_eg",), clamped_sample(+1, False),
         lambda g, V, P, c: P[0].add_clamped_eg(V[0]), clamped_ref, clamped_jac),
    Case("add_clamped_eg_pos_clamped", ("add_clamped_eg",), clamped_sample(+1, True),
         lambda g, V, P, c: P[0].add_clamped_eg(V[0]), clamped_ref, clamped_jac),
    Case("add_clamped_eg_neg_keeps", ("add_clamped_eg",), clamped_sample(-1, False),
         lambda g, V, P, c: P[0].add_clamped_eg(V[0]), clamped_ref, clamped_jac),
    Case("add_clamped_eg_neg_clamped", ("add_clamped_eg",), clamped_sample(-1, True),
         lambda g, V, P, c: P[0].add_clamped_eg(V[0]), clamped_ref, clamped_jac),
    Case("add_winnable_eg_pos_keeps", ("add_winnable_eg",), winnable_sample(+1, False),
         record_winnable, winnable_ref, winnable_jac),
    Case("add_winnable_eg_pos_clamped", ("add_winnable_eg",), winnable_sample(+1, True),
         record_winnable, winnable_ref, winnable_jac),
    Case("add_winnable_eg_neg_keeps", ("add_winnable_eg",), winnable_sample(-1, False),
         record_winnable, winnable_ref, winnable_jac),
    Case("add_winnable_eg_neg_clamped", ("add_winnable_eg",), winnable_sample(-1, True),
         record_winnable, winnable_ref, winnable_jac),
    Case("eg_scale_by_sign_pos", ("eg_scale_by_sign",), by_sign_sample(+1), record_by_sign,
         by_sign_ref, by_sign_jac),
    Case("eg_scale_by_sign_neg", ("eg_scale_by_sign",), by_sign_sample(-1), record_by_sign,
         by_sign_ref, by_sign_jac),
    Case("phase", ("phase",), with_const(io(0, 1), alpha=lambda r: U(r, 0, 1)),
         lambda g, V, P, c: P[0].phase(c["alpha"]),
         lambda v, p, c: c["alpha"] * p[0, 0] + (1 - c["alpha"]) * p[0, 1]),
    Case("sigmoid_sq_err", ("sigmoid_sq_err",),
         with_const(vals(lambda r: U(r, -6, 6)), k=lambda r: away(r, 0.2, 2),
                    y=lambda r: float(r.choice([0.0, 0.5, 1.0, U(r, 0, 1)]))),
         lambda g, V, P, c: Value(g, ops.record_sigmoid_sq_err(g.tape, V[0].index, c["k"], c["y"])),
         sq_err_ref, sq_err_jac),
    Case("sigmoid_xent", ("sigmoid_xent",),
         with_const(vals(lambda r: U(r, -6, 6)), k=lambda r: away(r, 0.2, 2),
                    y=lambda r: float(r.choice([0.0, 0.5, 1.0, U(r, 0, 1)]))),
         lambda g, V, P, c: Value(g, ops.record_sigmoid_xent(g.tape, V[0].index, c["k"], c["y"])),
         xent_ref, xent_jac),
    # Constant leaves (a record each): their value enters the product, they take no input.
    Case("const", ("const", "vv:mul"), with_const(io(1), x=std),
         lambda g, V, P, c: V[0] * g.value(c["x"]), lambda v, p, c: v[0] * c["x"],
         lambda v, p, c: np.array([[c["x"]]])),
    Case("const_pair", ("const_pair", "pp:mul"), with_const(io(0, 1), mg=std, eg=std),
         lambda g, V, P, c: P[0] * g.pair(c["mg"], c["eg"]),
         lambda v, p, c: p[0] * np.array([c["mg"], c["eg"]]),
         lambda v, p, c: np.diag([c["mg"], c["eg"]])),
    # N-ary ops (repeated operands included).
    Case("sum", ("sum",), nary_sample(4, 0), lambda g, V, P, c: g.sum([V[i] for i in c["idx"]]),
         lambda v, p, c: math.fsum(v[i] for i in c["idx"]),
         lambda v, p, c: np.bincount(c["idx"], minlength=4)[None, :].astype(float)),
    Case("lincomb_value", ("lincomb_value",), nary_sample(4, 0),
         lambda g, V, P, c: g.lincomb_value([V[i] for i in c["idx"]], c["coef"]),
         lambda v, p, c: math.fsum(k * v[i] for i, k in zip(c["idx"], c["coef"]))),
    Case("lincomb_pair", ("lincomb_pair",), nary_sample(0, 3),
         lambda g, V, P, c: g.lincomb_pair([P[i] for i in c["idx"]], c["coef"]),
         lambda v, p, c: np.array([math.fsum(k * p[i, j] for i, k in zip(c["idx"], c["coef"]))
                                   for j in range(2)])),
]

#: Every public recorder of the op table (`record_loss` records the loss forms' recorders' records,
#: `test_record_loss_is_the_loss_forms_recorder`).
TABLE_OPS = {n[len("record_"):] for n in dir(ops) if n.startswith("record_")} - {"loss"}


def test_every_form_and_every_recorder_is_covered():
    # Derived from the table: every form has a case recording it.
    recorded = {tag.split(":")[0] for c in CASES for tag in c.tags}
    assert recorded >= set(ops.FORM_NAMES), set(ops.FORM_NAMES) - recorded
    # A case is named after its op, possibly with a suffix (add_clamped_eg_pos_keeps, ...).
    covered = {max((op for op in TABLE_OPS if c.name == op or c.name.startswith(op + "_")),
                   key=len, default=None) for c in CASES}
    assert TABLE_OPS <= covered and len(TABLE_OPS) >= ops.N_FORMS


@pytest.mark.parametrize("loss", ops.LOSS_FORMS, ids=[ops.FORM_NAMES[f] for f in ops.LOSS_FORMS])
def test_record_loss_is_the_loss_forms_recorder(loss):
    own = getattr(ops, "record_" + ops.FORM_NAMES[loss])
    tapes = []
    for record in (lambda t: own(t, 0, 0.7, 0.25), lambda t: ops.record_loss(t, 0, 0.7, 0.25, loss)):
        t = new_tape(1, 0, records=2)
        t.arena.val[0] = 1.3
        record(t)
        tapes.append(t)
    assert tapes[0].rec.op[0] == tapes[1].rec.op[0] == ops.tag(loss)
    assert tapes[0].arena.val[1] == tapes[1].arena.val[1] and np.isfinite(tapes[0].arena.val[1])
    assert ops.LOSS_BY_NAME[ops.FORM_TABLE[loss].loss] == loss


def test_record_loss_refuses_a_form_that_is_not_a_loss():
    with pytest.raises(ValueError, match="not a loss form"):
        ops.record_loss(new_tape(1, 0, records=2), 0, 0.7, 0.25, ops.F_VV)


def test_the_loss_names_are_the_training_settings():
    assert set(ops.LOSS_BY_NAME) == {"mse", "cross_entropy"}


# ------------------------------------------------------------------------------------------------
# Helpers: record, Jacobian by backward, Jacobian by central differences.
# ------------------------------------------------------------------------------------------------

def record(case, v, p, c, leaves=False):
    """Record `case` on a fresh graph; the graph, input handles and output handle."""
    v = np.asarray(v, dtype=float)
    p = np.asarray(p, dtype=float).reshape(-1, 2)
    if leaves:
        g = Graph(0, 0, records=256)
        V = [g.value(x) for x in v]
        P = [g.pair(mg, eg) for mg, eg in p]
    else:
        g = Graph(len(v), len(p), records=256)
        g.tape.arena.val[: len(v)] = v
        g.tape.arena.pair_val[: len(p)] = p
        V = [g.value_param(i) for i in range(len(v))]
        P = [g.pair_param(i) for i in range(len(p))]
    out = case.build(g, V, P, c)
    return g, V, P, out


def outputs(out):
    return np.array([out.value]) if isinstance(out, Value) else out.value


def tags_of(g):
    rec = g.tape.rec
    return tuple(ops.tag_name(int(rec.op[r])) for r in range(int(rec.counts[C_RECORDS])))


def tape_jacobian(case, v, p, c, leaves=False):
    """Output and Jacobian (n_out, n_in) by backward; inputs ordered values, then (mg, eg) pairs."""
    g, V, P, out = record(case, v, p, c, leaves)
    leaf_tags = ("const",) * len(V) + ("const_pair",) * len(P) if leaves else ()
    assert tags_of(g) == leaf_tags + case.tags  # leaves are records too
    heads = [out] if isinstance(out, Value) else [out.phase(1.0), out.phase(0.0)]
    rows = []
    for head in heads:
        g.zero_grad()
        g.backward(head)
        rows.append(np.concatenate([np.array([x.grad for x in V]),
                                    np.array([q.grad for q in P]).reshape(-1)]))
    return outputs(out), np.array(rows)


def fd_jacobian(case, v, p, c, skip=()):
    """Central differences of the recorded function (re-recorded at each point)."""
    nv = len(v)
    x0 = np.concatenate([np.asarray(v, float), np.asarray(p, float).reshape(-1)])

    def f(x):
        return outputs(record(case, x[:nv], x[nv:], c)[3])

    cols = []
    for i in range(len(x0)):
        if i in skip:
            cols.append(np.full(len(f(x0)), np.nan))
            continue
        h = FD_REL_STEP * max(1.0, abs(x0[i]))
        xp, xm = x0.copy(), x0.copy()
        xp[i] += h
        xm[i] -= h
        cols.append((f(xp) - f(xm)) / (xp[i] - xm[i]))
    return np.array(cols).T


def assert_grad_close(actual, fd, out, what=""):
    mask = ~np.isnan(fd)
    np.testing.assert_allclose(actual[mask], fd[mask], rtol=GRAD_RTOL,
                               atol=GRAD_ATOL * max(1.0, float(np.max(np.abs(out)))),
                               err_msg=what)


def case_rng(case, salt=""):
    return np.random.default_rng(zlib.crc32((case.name + salt).encode()))


# ------------------------------------------------------------------------------------------------
# The op table.
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_forward_and_gradient(case):
    rng = case_rng(case)
    for k in range(POINTS):
        v, p, c = case.sample(rng)
        what = f"{case.name} point {k}: values={v} pairs={p} consts={c}"
        out, jac = tape_jacobian(case, v, p, c)
        ref = np.atleast_1d(np.asarray(case.ref(np.array(v, float),
                                                 np.array(p, float).reshape(-1, 2), c), float))
        np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-13, err_msg=what)
        assert_grad_close(jac, fd_jacobian(case, v, p, c), out, what)
        if case.jac is not None:
            np.testing.assert_allclose(jac, case.jac(np.array(v, float),
                                                     np.array(p, float).reshape(-1, 2), c),
                                       rtol=1e-12, atol=0, err_msg=what)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_with_leaf_inputs(case):
    """Leaves (constants, not parameters) get the same values and gradients as parameters."""
    rng = case_rng(case, "leaf")
    for _ in range(LEAF_POINTS):
        v, p, c = case.sample(rng)
        out_p, jac_p = tape_jacobian(case, v, p, c)
        out_l, jac_l = tape_jacobian(case, v, p, c, leaves=True)
        np.testing.assert_array_equal(out_l, out_p)
        np.testing.assert_array_equal(jac_l, jac_p)


# ------------------------------------------------------------------------------------------------
# add_clamped_eg and add_winnable_eg with a zero eg; add_clamped_eg at and next to its kinks.
# ------------------------------------------------------------------------------------------------

CLAMPED = next(c for c in CASES if c.name == "add_clamped_eg_pos_keeps")
WINNABLE = next(c for c in CASES if c.name == "add_winnable_eg_pos_keeps")


@pytest.mark.parametrize("case, seed", [(CLAMPED, 7), (WINNABLE, 13)], ids=["clamped", "winnable"])
def test_a_clamped_add_leaves_a_zero_eg_unchanged(case, seed):
    """eg == 0 stays 0 (its sign too) whatever v is; its gradient passes to eg (not to v), mg
    passes through."""
    rng = np.random.default_rng(seed)
    for _ in range(POINTS):
        mg, x = U(rng, -3, 3), away(rng, 0.01, 3)
        for eg in (0.0, -0.0):
            what = f"mg={mg} eg={eg} v={x}"
            out, jac = tape_jacobian(case, [x], [(mg, eg)], {})
            assert out[0] == mg and out[1] == 0.0, what
            assert math.copysign(1.0, out[1]) == math.copysign(1.0, eg), what
            np.testing.assert_array_equal(jac, [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], err_msg=what)
            # v and mg can be perturbed without leaving the branch; eg cannot (it is the kink).
            fd = fd_jacobian(case, [x], [(mg, eg)], {}, skip=(2,))
            assert_grad_close(jac, fd, out, what)


@pytest.mark.parametrize("eg", [1.5, -1.5, 2.0 ** -30, -(2.0 ** -30)])
def test_add_clamped_eg_exactly_reaching_zero(eg):
    """eg + v == 0 is clamped (value 0), and both branches agree there (continuity)."""
    out, _ = tape_jacobian(CLAMPED, [-eg], [(0.25, eg)], {})
    assert out[0] == 0.25 and out[1] == 0.0
    for side in (1e-9, -1e-9):  # just inside each branch: the value tends to 0 from both
        x = -eg + side * abs(eg)
        out_s, _ = tape_jacobian(CLAMPED, [x], [(0.25, eg)], {})
        assert abs(out_s[1]) <= 1e-9 * abs(eg) * 1.0001


def test_add_clamped_eg_sign_is_never_flipped():
    rng = np.random.default_rng(11)
    for _ in range(200):
        eg, x = U(rng, -3, 3), U(rng, -6, 6)
        out, _ = tape_jacobian(CLAMPED, [x], [(0.0, eg)], {})
        assert out[1] * eg >= 0.0 and abs(out[1]) <= max(abs(eg), abs(eg + x))


# ------------------------------------------------------------------------------------------------
# add_winnable_eg and eg_scale_by_sign at and next to their kinks.
# ------------------------------------------------------------------------------------------------

BY_SIGN = next(c for c in CASES if c.name == "eg_scale_by_sign_pos")


@pytest.mark.parametrize("eg", [1.5, -1.5, 2.0 ** -30, -(2.0 ** -30)])
def test_add_winnable_eg_exactly_reaching_zero(eg):
    """eg + w == 0 (v = -|eg|) is clamped, and both branches agree there (continuity)."""
    x = -abs(eg)
    out, jac = tape_jacobian(WINNABLE, [x], [(0.25, eg)], {})
    assert out[0] == 0.25 and out[1] == 0.0
    np.testing.assert_array_equal(jac, [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    for side in (1e-9, -1e-9):
        out_s, _ = tape_jacobian(WINNABLE, [x + side * abs(eg)], [(0.25, eg)], {})
        assert abs(out_s[1]) <= 1e-9 * abs(eg) * 1.0001


def test_add_winnable_eg_moves_away_from_zero_for_either_side():
    """A positive v pulls eg away from 0 for the side ahead (either sign), a negative one towards
    0, never across it."""
    rng = np.random.default_rng(17)
    for _ in range(200):
        eg, x = away(rng, 0.01, 3), U(rng, -6, 6)
        out, _ = tape_jacobian(WINNABLE, [x], [(0.0, eg)], {})
        assert out[1] * eg >= 0.0, (eg, x, out)
        if x > 0:
            assert abs(out[1]) == pytest.approx(abs(eg) + x, rel=1e-15), (eg, x, out)
        else:
            assert abs(out[1]) == pytest.approx(max(0.0, abs(eg) + x), rel=1e-15, abs=1e-15)


def test_eg_scale_by_sign_zero_eg_takes_the_nonpositive_scale():
    """eg == 0 (or -0.0) is not > 0: it is scaled (and its gradient too) by s_nonpos."""
    rng = np.random.default_rng(19)
    for _ in range(POINTS):
        mg = U(rng, -3, 3)
        c = {"s_pos": U(rng, 0.1, 2), "s_nonpos": U(rng, 0.1, 2)}
        for eg in (0.0, -0.0):
            what = f"mg={mg} eg={eg} c={c}"
            out, jac = tape_jacobian(BY_SIGN, [], [(mg, eg)], c)
            assert out[0] == mg and out[1] == 0.0, what
            assert math.copysign(1.0, out[1]) == math.copysign(1.0, eg), what
            np.testing.assert_array_equal(jac, [[1.0, 0.0], [0.0, c["s_nonpos"]]], err_msg=what)
            fd = fd_jacobian(BY_SIGN, [], [(mg, eg)], c, skip=(1,))
            assert_grad_close(jac, fd, out, what)
    # Scales of opposite signs: the sign of the zero shows which one the forward sweep took.
    for s_pos, s_nonpos in ((0.5, -0.5), (-0.5, 0.5)):
        c = {"s_pos": s_pos, "s_nonpos": s_nonpos}
        for eg in (0.0, -0.0):
            out, _ = tape_jacobian(BY_SIGN, [], [(1.0, eg)], c)
            assert math.copysign(1.0, out[1]) == math.copysign(1.0, eg * s_nonpos), (c, eg)


def test_eg_scale_by_sign_uses_both_scalars_of_the_record():
    g = Graph(0, 1)
    t = g.tape
    o = ops.record_eg_scale_by_sign(t, 0, 0.75, 0.25)
    np.testing.assert_array_equal(t.rec.scalar[0], [0.75, 0.25])
    y = g.pair_param(0).phase(0.0)  # (a value to sweep to)
    for eg, factor in ((2.0, 0.75), (-2.0, 0.25), (1e-300, 0.75), (-1e-300, 0.25)):
        t.arena.pair_val[0] = (1.0, eg)
        forward(t)  # the branch is decided again at every sweep
        np.testing.assert_array_equal(t.arena.pair_val[o], [1.0, eg * factor])
        assert y.value == eg


# ------------------------------------------------------------------------------------------------
# Constant leaves: records with a value and no gradient path.
# ------------------------------------------------------------------------------------------------

def test_constants_hold_their_value_and_pass_no_gradient():
    rng = np.random.default_rng(23)
    for _ in range(LEAF_POINTS):
        x, mg, eg = U(rng, -3, 3), U(rng, -3, 3), U(rng, -3, 3)
        g = Graph(1, 1)
        g.tape.arena.val[0] = U(rng, -3, 3)
        g.tape.arena.pair_val[0] = (U(rng, -3, 3), U(rng, -3, 3))
        k, q = g.value(x), g.pair(mg, eg)
        assert tags_of(g) == ("const", "const_pair")
        np.testing.assert_array_equal(g.tape.rec.scalar[:2], [[x, 0.0], [mg, eg]])
        assert k.value == x
        np.testing.assert_array_equal(q.value, [mg, eg])
        y = q.phase(0.3) + k * k
        g.backward(y)
        assert k.grad == 2.0 * x  # the leaf's own slot gets its gradient ...
        np.testing.assert_array_equal(q.grad, [0.3, 0.7])
        assert g.tape.arena.val_grad[0] == 0.0  # ... and passes none on
        np.testing.assert_array_equal(g.tape.arena.pair_grad[0], [0.0, 0.0])
        # A sweep recomputes the leaves (a clobbered slot is rewritten), whatever the parameters.
        before = y.value
        g.tape.arena.val[k.index] = np.nan
        g.tape.arena.pair_val[q.index] = np.nan
        g.tape.arena.val[0] += 1.0
        g.tape.arena.pair_val[0] -= 1.0
        g.forward()
        assert k.value == x and y.value == before
        np.testing.assert_array_equal(q.value, [mg, eg])


# ------------------------------------------------------------------------------------------------
# Tags.
# ------------------------------------------------------------------------------------------------

def test_every_valid_tag_round_trips():
    valid = np.flatnonzero(ops.VALID_TAG)
    kernels = {ops.KS_NONE: (0,), ops.KS_BINARY: ops.BINARY_KERNELS,
               ops.KS_UNARY: ops.UNARY_KERNELS}
    assert len(valid) == sum(len(kernels[row[6]]) for row in ops.FORM_TABLE)
    names = set()
    for t in valid:
        form, k = int(t) >> ops.KERNEL_BITS, int(t) & ((1 << ops.KERNEL_BITS) - 1)
        row = ops.FORM_TABLE[form]
        assert k in kernels[row[6]]
        assert ops.tag(form, k) == t
        name = ops.tag_name(int(t))
        assert name == row[0] + (":" + ops.KERNEL_NAMES[k] if row[6] != ops.KS_NONE else "")
        names.add(name)
    assert len(names) == len(valid)
    # Every form is reachable.
    assert {int(t) >> ops.KERNEL_BITS for t in valid} == set(range(ops.N_FORMS))


def test_forms_beyond_sixteen_are_representable():
    """The old u8 tag (form << 4 | kernel) wrapped the 17th form to form 0; u16 tags do not."""
    assert ops.N_FORMS > 16 and ops.F_EG_SCALE_BY_SIGN >= 16 and ops.F_CONST_PAIR >= 16
    t = ops.tag(ops.F_EG_SCALE_BY_SIGN)
    assert t >> ops.KERNEL_BITS == ops.F_EG_SCALE_BY_SIGN
    assert ops.tag_name(t) == "eg_scale_by_sign"
    largest = ops.tag(ops.N_FORMS - 1, (1 << ops.KERNEL_BITS) - 1)
    tape = new_tape(0, 1, records=4)
    assert tape.rec.op.dtype == np.uint16 and largest <= np.iinfo(tape.rec.op.dtype).max
    ops.record_eg_scale_by_sign(tape, 0, 0.5, 2.0)
    ops.record_const_pair(tape, 1.0, 2.0)
    stored = [int(x) for x in tape.rec.op[:2]]
    assert stored == [t, ops.tag(ops.F_CONST_PAIR)]
    assert [x >> ops.KERNEL_BITS for x in stored] == [ops.F_EG_SCALE_BY_SIGN, ops.F_CONST_PAIR]
    assert [ops.tag_name(x) for x in stored] == ["eg_scale_by_sign", "const_pair"]


@pytest.mark.parametrize("t", [
    ops.tag(ops.F_VV, ops.K_EXP),        # a binary form with a unary kernel
    ops.tag(ops.F_V, ops.K_ADD),         # a unary form with a binary kernel
    ops.tag(ops.F_PHASE, 1),             # a kernel-less form with a kernel
    ops.tag(ops.F_VV, 15),               # no such kernel
    ops.tag(ops.N_FORMS),                # no such form
    ops.tag(ops.N_FORMS - 1, 1),
    0xFFFF, -1,
])
def test_tag_name_of_an_invalid_tag_raises(t):
    assert not (0 <= t < len(ops.VALID_TAG) and ops.VALID_TAG[t])
    with pytest.raises(ValueError, match=f"unknown record tag {t}"):
        ops.tag_name(t)


def test_invalid_tags_are_exactly_the_unmarked_ones():
    for t in range(len(ops.VALID_TAG)):
        if ops.VALID_TAG[t]:
            ops.tag_name(t)
        else:
            with pytest.raises(ValueError):
                ops.tag_name(t)


# ------------------------------------------------------------------------------------------------
# Sigmoid at large |x|.
# ------------------------------------------------------------------------------------------------

def _sigmoid_decimal(x):
    """(sigmoid(x), sigmoid'(x)) to ~50 digits, rounded to float."""
    if abs(x) > 1000.0:  # e^-1000 is far below the smallest subnormal
        return (1.0 if x > 0 else 0.0), 0.0
    with localcontext() as ctx:
        ctx.prec = 60
        e = (-Decimal(x)).exp()
        return float(1 / (1 + e)), float(e / ((1 + e) * (1 + e)))


LARGE = [0.0, 5.0, 20.0, 30.0, 36.0, 37.0, 40.0, 50.0, 100.0, 500.0, 700.0, 709.0, 710.0, 745.0,
         746.0, 800.0, 1e4, 1e300, 1.7e308, math.inf]


@pytest.mark.parametrize("x", LARGE + [-x for x in LARGE[1:]])
def test_sigmoid_large_arguments(x):
    """No overflow or NaN anywhere; the value is accurate to a few ulp (also subnormal results);
    the gradient is accurate relative to itself for x <= 0 and to 2^-52 absolutely for x > 0
    (out * (1 - out) cannot resolve 1 - out below the spacing of floats near 1)."""
    ref, dref = _sigmoid_decimal(x)
    for form in ("value", "pair"):
        g = Graph(1, 1)
        if form == "value":
            g.tape.arena.val[0] = x
            h = g.value_param(0).sigmoid()
            val = h.value
        else:
            g.tape.arena.pair_val[0] = (x, -x)
            h = g.pair_param(0).sigmoid()
            val = h.value[0]
            ref_eg = _sigmoid_decimal(-x)[0]
            assert abs(h.value[1] - ref_eg) <= 4 * math.ulp(ref_eg)
            h = h.phase(1.0)
        g.backward(h)
        grad = g.tape.arena.val_grad[0] if form == "value" else g.tape.arena.pair_grad[0, 0]
        assert math.isfinite(val) and 0.0 <= val <= 1.0
        assert abs(val - ref) <= 4 * math.ulp(ref), (form, val, ref)
        assert math.isfinite(grad) and 0.0 <= grad <= 0.25
        if x <= 0:
            assert abs(grad - dref) <= 1e-12 * dref + 4 * math.ulp(dref), (form, grad, dref)
        else:
            assert abs(grad - dref) <= 2.0 ** -52, (form, grad, dref)


def test_sigmoid_is_the_two_branch_formula_bit_for_bit():
    """`ops.sigmoid` (one division with a selected numerator, no branch) is ``1 / (1 + exp(-x))``
    for x >= 0 and ``exp(x) / (1 + exp(x))`` below, to the bit, signed zeros, infinities and NaN
    included."""
    rng = np.random.default_rng(5)
    xs = np.concatenate([rng.normal(size=2000) * 10.0 ** rng.integers(-6, 3, 2000),
                         [0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, -5e-324]])
    for x in map(float, xs):
        want = 1.0 / (1.0 + math.exp(-x)) if x >= 0.0 else math.exp(x) / (1.0 + math.exp(x))
        got = ops.sigmoid(x)
        if math.isnan(x):
            assert math.isnan(got)
        else:
            assert np.array(got).tobytes() == np.array(want).tobytes(), x


# ------------------------------------------------------------------------------------------------
# Small semantic details of the table.
# ------------------------------------------------------------------------------------------------

def test_sum_ignores_coefficients_and_empty_nary_records_are_zero():
    g = Graph(2, 1)
    g.tape.arena.val[:2] = (1.5, -4.0)
    g.tape.arena.pair_val[0] = (2.0, 3.0)
    t = g.tape
    first = ops.operand_mark(t)
    ops.push_operand(t, 0, 7.0)
    ops.push_operand(t, 1, -3.0)
    s = ops.record_sum(t, first)
    assert t.arena.val[s] == -2.5
    backward(t, s)
    np.testing.assert_array_equal(t.arena.val_grad[:2], [1.0, 1.0])
    empty = []
    for rec in (ops.record_sum, ops.record_lincomb_value):
        empty.append(rec(t, ops.operand_mark(t)))
        assert t.arena.val[empty[-1]] == 0.0
    o = ops.record_lincomb_pair(t, ops.operand_mark(t))
    np.testing.assert_array_equal(t.arena.pair_val[o], [0.0, 0.0])
    # ... and are zero again when the tape is swept (the sweeps go through the player).
    t.arena.val[empty] = np.nan
    t.arena.pair_val[o] = np.nan
    forward(t)
    assert t.arena.val[s] == -2.5
    np.testing.assert_array_equal(t.arena.val[empty], [0.0, 0.0])
    np.testing.assert_array_equal(t.arena.pair_val[o], [0.0, 0.0])


def test_pow_of_integer_exponent_and_zero_base_forward():
    """pow_const with integer exponents works on any base (the b-partial is not used)."""
    g = Graph(1, 0)
    for a in (0.0, -2.0, 3.0):
        g.reset()
        g.zero_grad()
        g.tape.arena.val[0] = a
        y = g.value_param(0) ** 2.0
        g.backward(y)
        assert y.value == a * a
        assert g.tape.arena.val_grad[0] == 2.0 * a


def test_output_seed_on_a_parameter():
    """backward on a parameter itself seeds its gradient with 1 (and records nothing)."""
    g = Graph(2, 0)
    x = g.value_param(1)
    g.backward(x)
    np.testing.assert_array_equal(g.tape.arena.val_grad[:2], [0.0, 1.0])


# ------------------------------------------------------------------------------------------------
# The fused activation: one record with the bits of the three it replaces.

def _activation_bits(fused: bool, p, q, s, w):
    """Forward value and the two pair parameters' gradients of ``phase(sigmoid(p / s + q / s), w)``
    recorded as one `record_pair_sigmoid_sum` record or as the records it fuses."""
    g = Graph(0, 2)
    t = g.tape
    t.arena.pair_val[:2] = (p, q)
    if fused:
        z = ops.record_pair_sigmoid_sum(t, 0, 1, s)
    else:
        z = ops.record_pair_sigmoid(t, ops.record_pair_add(
            t, ops.record_pair_div_scalar(t, 0, s), ops.record_pair_div_scalar(t, 1, s)))
    y = Pair(g, z).phase(w)
    backward(t, y.index)
    return y.value, t.arena.pair_grad[:2].copy()


def test_pair_sigmoid_sum_has_the_bits_of_the_records_it_fuses():
    rng = np.random.default_rng(23)
    for _ in range(POINTS):
        p, q = (U(rng, -300, 300), U(rng, -300, 300)), (U(rng, -300, 300), U(rng, -300, 300))
        s, w = float(rng.choice([32.0, 3.0, -0.7, U(rng, 0.1, 64)])), U(rng, 0, 1)
        value, grads = _activation_bits(True, p, q, s, w)
        chained_value, chained_grads = _activation_bits(False, p, q, s, w)
        assert value == chained_value, (p, q, s)
        np.testing.assert_array_equal(grads, chained_grads, err_msg=str((p, q, s)))
