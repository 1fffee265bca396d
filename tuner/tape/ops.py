"""The op table: what the tape can do, each op's forward and backward side by side.

A record's tag is ``form << 4 | kernel``. The *kernel* is the arithmetic (its value and both local
partials, defined together in `kernel`); the *form* says where the operands live (value arena, pair
arena, the record's f64 scalar) and what the output is. Elementwise pair ops reuse the value kernels
component by component, so every formula is written once.

Kernels (``out, d out/d a, d out/d b``):

=========  ===================  ===================  =================
kernel     out                  d/da                 d/db
=========  ===================  ===================  =================
ADD        a + b                1                    1
SUB        a - b                1                    -1
MUL        a * b                b                    a
DIV        a / b                1 / b                -a / b^2
POW        a ^ b                b a^(b-1)            a^b ln a
EXP        exp a                exp a                .
LOG        ln a                 1 / a                .
SIGMOID    1 / (1 + exp -a)     out (1 - out)        .
NEG        -a                   -1                   .
=========  ===================  ===================  =================

Forms (operands -> output):

==============  =========================================  ==================================
form            operands                                   public recorders
==============  =========================================  ==================================
VV              value lhs, value rhs -> value              add sub mul div pow
VS / SV         value lhs and the scalar -> value          add_scalar sub_scalar mul_scalar
                                                           div_scalar pow_const / scalar_sub
                                                           scalar_div
V               value lhs -> value                         exp log sigmoid neg
PP              pair lhs, pair rhs -> pair (elementwise)   pair_add pair_sub pair_mul
PS / SP         pair lhs and the scalar -> pair            pair_mul_scalar pair_div_scalar /
                                                           scalar_div_pair
PV / VP         pair lhs, value rhs -> pair                pair_mul_value pair_div_value /
                                                           value_mul_pair value_div_pair
P               pair lhs -> pair (elementwise)             pair_neg pair_sigmoid
EG_SCALE        pair lhs, scalar s -> (mg, eg * s)         eg_scale
ADD_CLAMPED_EG  pair lhs, value rhs -> eg + v clamped      add_clamped_eg
PHASE           pair lhs, scalar alpha -> value            phase
SUM             n values -> value (Neumaier)               sum
LINCOMB_PAIR    n (pair, c) -> sum c * pair                lincomb_pair
LINCOMB_VALUE   n (value, c) -> sum c * value              lincomb_value
==============  =========================================  ==================================

An n-ary record stores its operand offset in ``lhs`` and the operand count in ``rhs``.

Recording (`record_*`) appends a record and runs its form's forward function, the same function a
replay sweep (`forward`) calls; `backward` walks the records from last to first. Every
function is ``@njit`` so that evaluations written in Numba call them directly.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .arena import (C_OPERANDS, C_PAIR_PARAMS, C_PAIRS, C_RECORDS, C_VALUE_PARAMS, C_VALUES,
                    Tape, TapeFullError, alloc_pair, alloc_value)

JIT = dict(cache=True, nogil=True, error_model="numpy")
INLINE = dict(JIT, inline="always")  # only for the tiny record-side helpers that take the Tape

# Kernels.
K_ADD, K_SUB, K_MUL, K_DIV, K_POW, K_EXP, K_LOG, K_SIGMOID, K_NEG = range(9)
KERNEL_NAMES = ("add", "sub", "mul", "div", "pow", "exp", "log", "sigmoid", "neg")

# Forms.
(F_VV, F_VS, F_SV, F_V, F_PP, F_PS, F_SP, F_PV, F_VP, F_P,
 F_EG_SCALE, F_ADD_CLAMPED_EG, F_PHASE, F_SUM, F_LINCOMB_PAIR, F_LINCOMB_VALUE) = range(16)
FORM_NAMES = ("vv", "vs", "sv", "v", "pp", "ps", "sp", "pv", "vp", "p",
              "eg_scale", "add_clamped_eg", "phase", "sum", "lincomb_pair", "lincomb_value")


def tag(form: int, kernel: int = 0) -> int:
    """The record tag of a form and kernel."""
    return form << 4 | kernel


def tag_name(t: int) -> str:
    """A readable name for a record tag, e.g. ``pv:mul``."""
    form, kernel = t >> 4, t & 15
    return FORM_NAMES[form] + (":" + KERNEL_NAMES[kernel] if form <= F_P else "")


# ------------------------------------------------------------------------------------------------
# Kernels: value and local partials, side by side.
# ------------------------------------------------------------------------------------------------

@njit(**JIT)
def sigmoid(x: float) -> float:
    """Logistic function, without overflow for large |x|."""
    if x >= 0.0:
        return 1.0 / (1.0 + np.exp(-x))
    e = np.exp(x)
    return e / (1.0 + e)


@njit(**JIT)
def kernel(k: int, a: float, b: float):
    """``(out, d out/d a, d out/d b)`` of kernel `k`; unary kernels ignore `b`."""
    if k == K_ADD:
        return a + b, 1.0, 1.0
    if k == K_SUB:
        return a - b, 1.0, -1.0
    if k == K_MUL:
        return a * b, b, a
    if k == K_DIV:
        return a / b, 1.0 / b, -a / (b * b)
    if k == K_POW:
        out = a ** b
        return out, b * a ** (b - 1.0), out * np.log(a)
    if k == K_EXP:
        out = np.exp(a)
        return out, out, 0.0
    if k == K_LOG:
        return np.log(a), 1.0 / a, 0.0
    if k == K_SIGMOID:
        out = sigmoid(a)
        return out, out * (1.0 - out), 0.0
    return -a, -1.0, 0.0  # K_NEG


# ------------------------------------------------------------------------------------------------
# Forms: forward and backward side by side. `o` is the output slot, `a` / `b` the record's lhs /
# rhs fields, `s` its scalar, `k` its kernel; `val` / `vg` are value values / gradients and `pv` /
# `pg` pair ones. They take arrays, not the Tape, so that the sweeps hoist the arrays out of their
# loops and recording compiles to a few stores.
# ------------------------------------------------------------------------------------------------

@njit(**JIT)
def _vv_fwd(val, o, a, b, k):
    val[o] = kernel(k, val[a], val[b])[0]


@njit(**JIT)
def _vv_bwd(val, vg, o, a, b, k):
    _, da, db = kernel(k, val[a], val[b])
    g = vg[o]
    vg[a] += da * g
    vg[b] += db * g


@njit(**JIT)
def _vs_fwd(val, o, a, s, k):
    val[o] = kernel(k, val[a], s)[0]


@njit(**JIT)
def _vs_bwd(val, vg, o, a, s, k):
    vg[a] += kernel(k, val[a], s)[1] * vg[o]


@njit(**JIT)
def _sv_fwd(val, o, a, s, k):
    val[o] = kernel(k, s, val[a])[0]


@njit(**JIT)
def _sv_bwd(val, vg, o, a, s, k):
    vg[a] += kernel(k, s, val[a])[2] * vg[o]


@njit(**JIT)
def _pp_fwd(pv, o, a, b, k):
    for j in range(2):
        pv[o, j] = kernel(k, pv[a, j], pv[b, j])[0]


@njit(**JIT)
def _pp_bwd(pv, pg, o, a, b, k):
    for j in range(2):
        _, da, db = kernel(k, pv[a, j], pv[b, j])
        pg[a, j] += da * pg[o, j]
        pg[b, j] += db * pg[o, j]


@njit(**JIT)
def _ps_fwd(pv, o, a, s, k):
    for j in range(2):
        pv[o, j] = kernel(k, pv[a, j], s)[0]


@njit(**JIT)
def _ps_bwd(pv, pg, o, a, s, k):
    for j in range(2):
        pg[a, j] += kernel(k, pv[a, j], s)[1] * pg[o, j]


@njit(**JIT)
def _sp_fwd(pv, o, a, s, k):
    for j in range(2):
        pv[o, j] = kernel(k, s, pv[a, j])[0]


@njit(**JIT)
def _sp_bwd(pv, pg, o, a, s, k):
    for j in range(2):
        pg[a, j] += kernel(k, s, pv[a, j])[2] * pg[o, j]


@njit(**JIT)
def _pv_fwd(val, pv, o, a, b, k):
    for j in range(2):
        pv[o, j] = kernel(k, pv[a, j], val[b])[0]


@njit(**JIT)
def _pv_bwd(val, vg, pv, pg, o, a, b, k):
    for j in range(2):
        _, dp, dv = kernel(k, pv[a, j], val[b])
        pg[a, j] += dp * pg[o, j]
        vg[b] += dv * pg[o, j]


@njit(**JIT)
def _vp_fwd(val, pv, o, a, b, k):
    for j in range(2):
        pv[o, j] = kernel(k, val[b], pv[a, j])[0]


@njit(**JIT)
def _vp_bwd(val, vg, pv, pg, o, a, b, k):
    for j in range(2):
        _, dv, dp = kernel(k, val[b], pv[a, j])
        pg[a, j] += dp * pg[o, j]
        vg[b] += dv * pg[o, j]


@njit(**JIT)
def _eg_scale_fwd(pv, o, a, s):
    pv[o, 0] = pv[a, 0]
    pv[o, 1] = pv[a, 1] * s


@njit(**JIT)
def _eg_scale_bwd(pg, o, a, s):
    pg[a, 0] += pg[o, 0]
    pg[a, 1] += pg[o, 1] * s


@njit(**JIT)
def _clamp_passes(eg, v):
    """Whether eg + v keeps the sign of eg (the unclamped branch of add_clamped_eg)."""
    return (eg > 0.0 and eg + v > 0.0) or (eg < 0.0 and eg + v < 0.0)


@njit(**JIT)
def _add_clamped_eg_fwd(val, pv, o, a, b):
    eg, v = pv[a, 1], val[b]
    pv[o, 0] = pv[a, 0]
    if eg == 0.0:
        pv[o, 1] = eg
    elif _clamp_passes(eg, v):
        pv[o, 1] = eg + v
    else:
        pv[o, 1] = 0.0


@njit(**JIT)
def _add_clamped_eg_bwd(val, vg, pv, pg, o, a, b):
    eg = pv[a, 1]
    pg[a, 0] += pg[o, 0]
    if eg == 0.0:
        pg[a, 1] += pg[o, 1]
    elif _clamp_passes(eg, val[b]):
        pg[a, 1] += pg[o, 1]
        vg[b] += pg[o, 1]


@njit(**JIT)
def _phase_fwd(val, pv, o, a, alpha):
    val[o] = alpha * pv[a, 0] + (1.0 - alpha) * pv[a, 1]


@njit(**JIT)
def _phase_bwd(vg, pg, o, a, alpha):
    g = vg[o]
    pg[a, 0] += alpha * g
    pg[a, 1] += (1.0 - alpha) * g


@njit(**JIT)
def neumaier_add(s, c, x):
    """One step of Neumaier's compensated sum: the new (sum, compensation)."""
    u = s + x
    if abs(s) >= abs(x):
        c += (s - u) + x
    else:
        c += (x - u) + s
    return u, c


@njit(**JIT)
def _sum_fwd(val, idx, o, first, n):
    s = 0.0
    c = 0.0
    for i in range(first, first + n):
        s, c = neumaier_add(s, c, val[idx[i]])
    val[o] = s + c


@njit(**JIT)
def _sum_bwd(vg, idx, o, first, n):
    g = vg[o]
    for i in range(first, first + n):
        vg[idx[i]] += g


@njit(**JIT)
def _lincomb_pair_fwd(pv, idx, coef, o, first, n):
    mg = 0.0
    eg = 0.0
    for i in range(first, first + n):
        j, c = idx[i], coef[i]
        mg += c * pv[j, 0]
        eg += c * pv[j, 1]
    pv[o, 0] = mg
    pv[o, 1] = eg


@njit(**JIT)
def _lincomb_pair_bwd(pg, idx, coef, o, first, n):
    g0, g1 = pg[o, 0], pg[o, 1]
    for i in range(first, first + n):
        j, c = idx[i], coef[i]
        pg[j, 0] += c * g0
        pg[j, 1] += c * g1


@njit(**JIT)
def _lincomb_value_fwd(val, idx, coef, o, first, n):
    s = 0.0
    for i in range(first, first + n):
        s += coef[i] * val[idx[i]]
    val[o] = s


@njit(**JIT)
def _lincomb_value_bwd(vg, idx, coef, o, first, n):
    g = vg[o]
    for i in range(first, first + n):
        vg[idx[i]] += coef[i] * g


# ------------------------------------------------------------------------------------------------
# The sweeps: dispatch by form. The dispatch is written in the loop body and the form functions are
# called, not inlined by Numba: inlining them (or passing the Tape down) leaves reference-count
# updates in the loop that cost ten times the arithmetic.
# ------------------------------------------------------------------------------------------------

@njit(**JIT)
def forward(t: Tape) -> None:
    """Replay: recompute every record's output from the current parameter values, in order."""
    ops, out, lhs, rhs, sc = t.op, t.out, t.lhs, t.rhs, t.scalar
    val, pv, idx, coef = t.val, t.pair_val, t.opnd_index, t.opnd_coef
    for r in range(t.counts[C_RECORDS]):
        op, o, a, b, s = ops[r], out[r], lhs[r], rhs[r], sc[r]
        form, k = op >> 4, op & 15
        if form == F_LINCOMB_PAIR:
            _lincomb_pair_fwd(pv, idx, coef, o, a, b)
        elif form == F_PHASE:
            _phase_fwd(val, pv, o, a, s)
        elif form == F_VV:
            _vv_fwd(val, o, a, b, k)
        elif form == F_VS:
            _vs_fwd(val, o, a, s, k)
        elif form == F_SV:
            _sv_fwd(val, o, a, s, k)
        elif form == F_V:
            _vs_fwd(val, o, a, 0.0, k)
        elif form == F_SUM:
            _sum_fwd(val, idx, o, a, b)
        elif form == F_LINCOMB_VALUE:
            _lincomb_value_fwd(val, idx, coef, o, a, b)
        elif form == F_PP:
            _pp_fwd(pv, o, a, b, k)
        elif form == F_PS:
            _ps_fwd(pv, o, a, s, k)
        elif form == F_SP:
            _sp_fwd(pv, o, a, s, k)
        elif form == F_PV:
            _pv_fwd(val, pv, o, a, b, k)
        elif form == F_VP:
            _vp_fwd(val, pv, o, a, b, k)
        elif form == F_P:
            _ps_fwd(pv, o, a, 0.0, k)
        elif form == F_EG_SCALE:
            _eg_scale_fwd(pv, o, a, s)
        else:  # F_ADD_CLAMPED_EG
            _add_clamped_eg_fwd(val, pv, o, a, b)


@njit(**JIT)
def backward(t: Tape, output: int) -> None:
    """Gradients of value `output` with respect to every slot.

    Temporary gradients are cleared first; parameter gradients accumulate (``+=``) across calls
    until `zero_grad` or `zero_param_grad`.
    """
    c = t.counts
    ops, out, lhs, rhs, sc = t.op, t.out, t.lhs, t.rhs, t.scalar
    val, vg, pv, pg = t.val, t.val_grad, t.pair_val, t.pair_grad
    idx, coef = t.opnd_index, t.opnd_coef
    vg[c[C_VALUE_PARAMS]: c[C_VALUES]] = 0.0
    pg[c[C_PAIR_PARAMS]: c[C_PAIRS]] = 0.0
    vg[output] += 1.0
    for r in range(c[C_RECORDS] - 1, -1, -1):
        op, o, a, b, s = ops[r], out[r], lhs[r], rhs[r], sc[r]
        form, k = op >> 4, op & 15
        if form == F_LINCOMB_PAIR:
            _lincomb_pair_bwd(pg, idx, coef, o, a, b)
        elif form == F_PHASE:
            _phase_bwd(vg, pg, o, a, s)
        elif form == F_VV:
            _vv_bwd(val, vg, o, a, b, k)
        elif form == F_VS:
            _vs_bwd(val, vg, o, a, s, k)
        elif form == F_SV:
            _sv_bwd(val, vg, o, a, s, k)
        elif form == F_V:
            _vs_bwd(val, vg, o, a, 0.0, k)
        elif form == F_SUM:
            _sum_bwd(vg, idx, o, a, b)
        elif form == F_LINCOMB_VALUE:
            _lincomb_value_bwd(vg, idx, coef, o, a, b)
        elif form == F_PP:
            _pp_bwd(pv, pg, o, a, b, k)
        elif form == F_PS:
            _ps_bwd(pv, pg, o, a, s, k)
        elif form == F_SP:
            _sp_bwd(pv, pg, o, a, s, k)
        elif form == F_PV:
            _pv_bwd(val, vg, pv, pg, o, a, b, k)
        elif form == F_VP:
            _vp_bwd(val, vg, pv, pg, o, a, b, k)
        elif form == F_P:
            _ps_bwd(pv, pg, o, a, 0.0, k)
        elif form == F_EG_SCALE:
            _eg_scale_bwd(pg, o, a, s)
        else:  # F_ADD_CLAMPED_EG
            _add_clamped_eg_bwd(val, vg, pv, pg, o, a, b)


# ------------------------------------------------------------------------------------------------
# Recording: append the record, then run its form's forward (the same function replay runs).
# ------------------------------------------------------------------------------------------------

@njit(**INLINE)
def _append(t: Tape, op: int, out_is_pair: bool, lhs: int, rhs: int, scalar: float) -> int:
    """Append a record and allocate its output; the output index. Nothing changes on overflow."""
    r = t.counts[C_RECORDS]
    if r >= t.op.shape[0]:
        raise TapeFullError("tape record capacity is full; grow the tape or record fewer positions")
    out = alloc_pair(t) if out_is_pair else alloc_value(t)
    t.op[r] = op
    t.out[r] = out
    t.lhs[r] = lhs
    t.rhs[r] = rhs
    t.scalar[r] = scalar
    t.counts[C_RECORDS] = r + 1
    return out


@njit(**INLINE)
def _value_record(t: Tape, op: int, lhs: int, rhs: int, scalar: float) -> int:
    return _append(t, op, False, lhs, rhs, scalar)


@njit(**INLINE)
def _pair_record(t: Tape, op: int, lhs: int, rhs: int, scalar: float) -> int:
    return _append(t, op, True, lhs, rhs, scalar)


@njit(**INLINE)
def _vv(t: Tape, k: int, a: int, b: int) -> int:
    o = _value_record(t, F_VV << 4 | k, a, b, 0.0)
    _vv_fwd(t.val, o, a, b, k)
    return o


@njit(**INLINE)
def _vs(t: Tape, form: int, k: int, a: int, s: float) -> int:
    o = _value_record(t, form << 4 | k, a, 0, s)
    if form == F_SV:
        _sv_fwd(t.val, o, a, s, k)
    else:
        _vs_fwd(t.val, o, a, s, k)
    return o


@njit(**INLINE)
def _pp(t: Tape, k: int, p: int, q: int) -> int:
    o = _pair_record(t, F_PP << 4 | k, p, q, 0.0)
    _pp_fwd(t.pair_val, o, p, q, k)
    return o


@njit(**INLINE)
def _ps(t: Tape, form: int, k: int, p: int, s: float) -> int:
    o = _pair_record(t, form << 4 | k, p, 0, s)
    if form == F_SP:
        _sp_fwd(t.pair_val, o, p, s, k)
    else:
        _ps_fwd(t.pair_val, o, p, s, k)
    return o


@njit(**INLINE)
def _pv(t: Tape, form: int, k: int, p: int, v: int) -> int:
    o = _pair_record(t, form << 4 | k, p, v, 0.0)
    if form == F_VP:
        _vp_fwd(t.val, t.pair_val, o, p, v, k)
    else:
        _pv_fwd(t.val, t.pair_val, o, p, v, k)
    return o


# Value ops.
@njit(**JIT)
def record_add(t: Tape, a: int, b: int) -> int:
    """value a + value b"""
    return _vv(t, K_ADD, a, b)


@njit(**JIT)
def record_sub(t: Tape, a: int, b: int) -> int:
    """value a - value b"""
    return _vv(t, K_SUB, a, b)


@njit(**JIT)
def record_mul(t: Tape, a: int, b: int) -> int:
    """value a * value b (a may equal b: squaring)"""
    return _vv(t, K_MUL, a, b)


@njit(**JIT)
def record_div(t: Tape, a: int, b: int) -> int:
    """value a / value b"""
    return _vv(t, K_DIV, a, b)


@njit(**JIT)
def record_pow(t: Tape, a: int, b: int) -> int:
    """value a ** value b (a > 0 for a finite gradient in b)"""
    return _vv(t, K_POW, a, b)


@njit(**JIT)
def record_exp(t: Tape, a: int) -> int:
    """exp(value a)"""
    return _vs(t, F_V, K_EXP, a, 0.0)


@njit(**JIT)
def record_log(t: Tape, a: int) -> int:
    """ln(value a)"""
    return _vs(t, F_V, K_LOG, a, 0.0)


@njit(**JIT)
def record_sigmoid(t: Tape, a: int) -> int:
    """1 / (1 + exp(-value a))"""
    return _vs(t, F_V, K_SIGMOID, a, 0.0)


@njit(**JIT)
def record_neg(t: Tape, a: int) -> int:
    """-value a"""
    return _vs(t, F_V, K_NEG, a, 0.0)


@njit(**JIT)
def record_pow_const(t: Tape, a: int, s: float) -> int:
    """value a ** constant s"""
    return _vs(t, F_VS, K_POW, a, s)


@njit(**JIT)
def record_add_scalar(t: Tape, a: int, s: float) -> int:
    """value a + s"""
    return _vs(t, F_VS, K_ADD, a, s)


@njit(**JIT)
def record_sub_scalar(t: Tape, a: int, s: float) -> int:
    """value a - s"""
    return _vs(t, F_VS, K_SUB, a, s)


@njit(**JIT)
def record_scalar_sub(t: Tape, s: float, a: int) -> int:
    """s - value a"""
    return _vs(t, F_SV, K_SUB, a, s)


@njit(**JIT)
def record_mul_scalar(t: Tape, a: int, s: float) -> int:
    """value a * s"""
    return _vs(t, F_VS, K_MUL, a, s)


@njit(**JIT)
def record_div_scalar(t: Tape, a: int, s: float) -> int:
    """value a / s"""
    return _vs(t, F_VS, K_DIV, a, s)


@njit(**JIT)
def record_scalar_div(t: Tape, s: float, a: int) -> int:
    """s / value a"""
    return _vs(t, F_SV, K_DIV, a, s)


# Pair ops.
@njit(**JIT)
def record_pair_add(t: Tape, p: int, q: int) -> int:
    """pair p + pair q"""
    return _pp(t, K_ADD, p, q)


@njit(**JIT)
def record_pair_sub(t: Tape, p: int, q: int) -> int:
    """pair p - pair q"""
    return _pp(t, K_SUB, p, q)


@njit(**JIT)
def record_pair_mul(t: Tape, p: int, q: int) -> int:
    """pair p * pair q, elementwise"""
    return _pp(t, K_MUL, p, q)


@njit(**JIT)
def record_pair_neg(t: Tape, p: int) -> int:
    """-pair p"""
    return _ps(t, F_P, K_NEG, p, 0.0)


@njit(**JIT)
def record_pair_sigmoid(t: Tape, p: int) -> int:
    """(sigmoid(mg), sigmoid(eg))"""
    return _ps(t, F_P, K_SIGMOID, p, 0.0)


@njit(**JIT)
def record_pair_mul_scalar(t: Tape, p: int, s: float) -> int:
    """pair p * s"""
    return _ps(t, F_PS, K_MUL, p, s)


@njit(**JIT)
def record_pair_div_scalar(t: Tape, p: int, s: float) -> int:
    """pair p / s"""
    return _ps(t, F_PS, K_DIV, p, s)


@njit(**JIT)
def record_scalar_div_pair(t: Tape, s: float, p: int) -> int:
    """(s / mg, s / eg)"""
    return _ps(t, F_SP, K_DIV, p, s)


@njit(**JIT)
def record_pair_mul_value(t: Tape, p: int, v: int) -> int:
    """pair p * value v"""
    return _pv(t, F_PV, K_MUL, p, v)


@njit(**JIT)
def record_value_mul_pair(t: Tape, v: int, p: int) -> int:
    """value v * pair p"""
    return _pv(t, F_VP, K_MUL, p, v)


@njit(**JIT)
def record_pair_div_value(t: Tape, p: int, v: int) -> int:
    """pair p / value v"""
    return _pv(t, F_PV, K_DIV, p, v)


@njit(**JIT)
def record_value_div_pair(t: Tape, v: int, p: int) -> int:
    """(v / mg, v / eg)"""
    return _pv(t, F_VP, K_DIV, p, v)


@njit(**JIT)
def record_eg_scale(t: Tape, p: int, s: float) -> int:
    """(mg, eg * s): endgame scaling"""
    o = _pair_record(t, F_EG_SCALE << 4, p, 0, s)
    _eg_scale_fwd(t.pair_val, o, p, s)
    return o


@njit(**JIT)
def record_add_clamped_eg(t: Tape, p: int, v: int) -> int:
    """(mg, eg + v) with the eg half clamped so that it cannot change sign (0 stays 0)"""
    o = _pair_record(t, F_ADD_CLAMPED_EG << 4, p, v, 0.0)
    _add_clamped_eg_fwd(t.val, t.pair_val, o, p, v)
    return o


@njit(**JIT)
def record_phase(t: Tape, p: int, alpha: float) -> int:
    """value alpha * mg + (1 - alpha) * eg"""
    o = _value_record(t, F_PHASE << 4, p, 0, alpha)
    _phase_fwd(t.val, t.pair_val, o, p, alpha)
    return o


# N-ary ops: push operands, then record over the operands pushed since `first`.
@njit(**INLINE)
def operand_mark(t: Tape) -> int:
    """Where the next operand goes: pass it as `first` to an n-ary recorder."""
    return t.counts[C_OPERANDS]


@njit(**INLINE)
def push_operand(t: Tape, index: int, coef: float) -> None:
    """Append one (arena index, coefficient) operand for the next n-ary record."""
    i = t.counts[C_OPERANDS]
    if i >= t.opnd_index.shape[0]:
        raise TapeFullError("tape operand buffer is full; grow the tape or record fewer positions")
    t.opnd_index[i] = index
    t.opnd_coef[i] = coef
    t.counts[C_OPERANDS] = i + 1


@njit(**JIT)
def record_sum(t: Tape, first: int) -> int:
    """Compensated (Neumaier) sum of the values pushed since `first` (coefficients ignored)."""
    n = t.counts[C_OPERANDS] - first
    o = _value_record(t, F_SUM << 4, first, n, 0.0)
    _sum_fwd(t.val, t.opnd_index, o, first, n)
    return o


@njit(**JIT)
def record_lincomb_pair(t: Tape, first: int) -> int:
    """sum_i c_i * pair_i over the (pair, c) operands pushed since `first`."""
    n = t.counts[C_OPERANDS] - first
    o = _pair_record(t, F_LINCOMB_PAIR << 4, first, n, 0.0)
    _lincomb_pair_fwd(t.pair_val, t.opnd_index, t.opnd_coef, o, first, n)
    return o


@njit(**JIT)
def record_lincomb_value(t: Tape, first: int) -> int:
    """sum_i c_i * value_i over the (value, c) operands pushed since `first`."""
    n = t.counts[C_OPERANDS] - first
    o = _value_record(t, F_LINCOMB_VALUE << 4, first, n, 0.0)
    _lincomb_value_fwd(t.val, t.opnd_index, t.opnd_coef, o, first, n)
    return o
