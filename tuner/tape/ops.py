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

Recording (`record_*`) appends a record and runs that record's forward (`forward_record`), the same
function a replay sweep (`forward`) calls; `backward` walks the records from last to first. Every
function is ``@njit`` so that evaluations written in Numba call them directly.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .arena import (C_OPERANDS, C_PAIR_PARAMS, C_PAIRS, C_RECORDS, C_VALUE_PARAMS, C_VALUES,
                    Tape, TapeFullError, alloc_pair, alloc_value)

JIT = dict(cache=True, nogil=True, error_model="numpy")
INLINE = JIT  # numba-level inlining multiplies compile time; LLVM inlines these anyway

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

@njit(**INLINE)
def sigmoid(x: float) -> float:
    """Logistic function, without overflow for large |x|."""
    if x >= 0.0:
        return 1.0 / (1.0 + np.exp(-x))
    e = np.exp(x)
    return e / (1.0 + e)


@njit(**INLINE)
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
# Special forms: forward and backward side by side. `g` is the output gradient.
# ------------------------------------------------------------------------------------------------

@njit(**INLINE)
def _eg_scale_fwd(t: Tape, r: int) -> None:
    p, o = t.lhs[r], t.out[r]
    t.pair_val[o, 0] = t.pair_val[p, 0]
    t.pair_val[o, 1] = t.pair_val[p, 1] * t.scalar[r]


@njit(**INLINE)
def _eg_scale_bwd(t: Tape, r: int) -> None:
    p, o = t.lhs[r], t.out[r]
    t.pair_grad[p, 0] += t.pair_grad[o, 0]
    t.pair_grad[p, 1] += t.pair_grad[o, 1] * t.scalar[r]


@njit(**INLINE)
def _clamp_passes(eg: float, v: float) -> bool:
    """Whether eg + v keeps the sign of eg (the unclamped branch of add_clamped_eg)."""
    return (eg > 0.0 and eg + v > 0.0) or (eg < 0.0 and eg + v < 0.0)


@njit(**INLINE)
def _add_clamped_eg_fwd(t: Tape, r: int) -> None:
    p, v, o = t.lhs[r], t.rhs[r], t.out[r]
    eg, x = t.pair_val[p, 1], t.val[v]
    t.pair_val[o, 0] = t.pair_val[p, 0]
    if eg == 0.0:
        t.pair_val[o, 1] = eg
    elif _clamp_passes(eg, x):
        t.pair_val[o, 1] = eg + x
    else:
        t.pair_val[o, 1] = 0.0


@njit(**INLINE)
def _add_clamped_eg_bwd(t: Tape, r: int) -> None:
    p, v, o = t.lhs[r], t.rhs[r], t.out[r]
    eg = t.pair_val[p, 1]
    t.pair_grad[p, 0] += t.pair_grad[o, 0]
    if eg == 0.0:
        t.pair_grad[p, 1] += t.pair_grad[o, 1]
    elif _clamp_passes(eg, t.val[v]):
        t.pair_grad[p, 1] += t.pair_grad[o, 1]
        t.val_grad[v] += t.pair_grad[o, 1]


@njit(**INLINE)
def _phase_fwd(t: Tape, r: int) -> None:
    p, alpha = t.lhs[r], t.scalar[r]
    t.val[t.out[r]] = alpha * t.pair_val[p, 0] + (1.0 - alpha) * t.pair_val[p, 1]


@njit(**INLINE)
def _phase_bwd(t: Tape, r: int) -> None:
    p, alpha, g = t.lhs[r], t.scalar[r], t.val_grad[t.out[r]]
    t.pair_grad[p, 0] += alpha * g
    t.pair_grad[p, 1] += (1.0 - alpha) * g


@njit(**INLINE)
def neumaier_add(s: float, c: float, x: float):
    """One step of Neumaier's compensated sum: the new (sum, compensation)."""
    u = s + x
    if abs(s) >= abs(x):
        c += (s - u) + x
    else:
        c += (x - u) + s
    return u, c


@njit(**INLINE)
def _sum_fwd(t: Tape, r: int) -> None:
    s = 0.0
    c = 0.0
    for i in range(t.lhs[r], t.lhs[r] + t.rhs[r]):
        s, c = neumaier_add(s, c, t.val[t.opnd_index[i]])
    t.val[t.out[r]] = s + c


@njit(**INLINE)
def _sum_bwd(t: Tape, r: int) -> None:
    g = t.val_grad[t.out[r]]
    for i in range(t.lhs[r], t.lhs[r] + t.rhs[r]):
        t.val_grad[t.opnd_index[i]] += g


@njit(**INLINE)
def _lincomb_pair_fwd(t: Tape, r: int) -> None:
    mg = 0.0
    eg = 0.0
    for i in range(t.lhs[r], t.lhs[r] + t.rhs[r]):
        j, c = t.opnd_index[i], t.opnd_coef[i]
        mg += c * t.pair_val[j, 0]
        eg += c * t.pair_val[j, 1]
    o = t.out[r]
    t.pair_val[o, 0] = mg
    t.pair_val[o, 1] = eg


@njit(**INLINE)
def _lincomb_pair_bwd(t: Tape, r: int) -> None:
    o = t.out[r]
    g0, g1 = t.pair_grad[o, 0], t.pair_grad[o, 1]
    for i in range(t.lhs[r], t.lhs[r] + t.rhs[r]):
        j, c = t.opnd_index[i], t.opnd_coef[i]
        t.pair_grad[j, 0] += c * g0
        t.pair_grad[j, 1] += c * g1


@njit(**INLINE)
def _lincomb_value_fwd(t: Tape, r: int) -> None:
    s = 0.0
    for i in range(t.lhs[r], t.lhs[r] + t.rhs[r]):
        s += t.opnd_coef[i] * t.val[t.opnd_index[i]]
    t.val[t.out[r]] = s


@njit(**INLINE)
def _lincomb_value_bwd(t: Tape, r: int) -> None:
    g = t.val_grad[t.out[r]]
    for i in range(t.lhs[r], t.lhs[r] + t.rhs[r]):
        t.val_grad[t.opnd_index[i]] += t.opnd_coef[i] * g


# ------------------------------------------------------------------------------------------------
# Dispatch: one record forward, one record backward.
# ------------------------------------------------------------------------------------------------

@njit(**INLINE)
def forward_record(t: Tape, r: int) -> None:
    """Compute record `r`'s output from its inputs (used by recording and by replay)."""
    form, k = t.op[r] >> 4, t.op[r] & 15
    o, a, b, s = t.out[r], t.lhs[r], t.rhs[r], t.scalar[r]
    if form == F_LINCOMB_PAIR:
        _lincomb_pair_fwd(t, r)
    elif form == F_PHASE:
        _phase_fwd(t, r)
    elif form == F_VV:
        t.val[o] = kernel(k, t.val[a], t.val[b])[0]
    elif form == F_VS:
        t.val[o] = kernel(k, t.val[a], s)[0]
    elif form == F_SV:
        t.val[o] = kernel(k, s, t.val[a])[0]
    elif form == F_V:
        t.val[o] = kernel(k, t.val[a], 0.0)[0]
    elif form == F_SUM:
        _sum_fwd(t, r)
    elif form == F_LINCOMB_VALUE:
        _lincomb_value_fwd(t, r)
    elif form == F_EG_SCALE:
        _eg_scale_fwd(t, r)
    elif form == F_ADD_CLAMPED_EG:
        _add_clamped_eg_fwd(t, r)
    else:
        for j in range(2):
            if form == F_PP:
                t.pair_val[o, j] = kernel(k, t.pair_val[a, j], t.pair_val[b, j])[0]
            elif form == F_PS:
                t.pair_val[o, j] = kernel(k, t.pair_val[a, j], s)[0]
            elif form == F_SP:
                t.pair_val[o, j] = kernel(k, s, t.pair_val[a, j])[0]
            elif form == F_PV:
                t.pair_val[o, j] = kernel(k, t.pair_val[a, j], t.val[b])[0]
            elif form == F_VP:
                t.pair_val[o, j] = kernel(k, t.val[b], t.pair_val[a, j])[0]
            else:  # F_P
                t.pair_val[o, j] = kernel(k, t.pair_val[a, j], 0.0)[0]


@njit(**INLINE)
def backward_record(t: Tape, r: int) -> None:
    """Add record `r`'s contribution to its inputs' gradients (chain rule, ``+=``)."""
    form, k = t.op[r] >> 4, t.op[r] & 15
    o, a, b, s = t.out[r], t.lhs[r], t.rhs[r], t.scalar[r]
    if form == F_LINCOMB_PAIR:
        _lincomb_pair_bwd(t, r)
    elif form == F_PHASE:
        _phase_bwd(t, r)
    elif form == F_VV:
        g = t.val_grad[o]
        _, da, db = kernel(k, t.val[a], t.val[b])
        t.val_grad[a] += da * g
        t.val_grad[b] += db * g
    elif form == F_VS:
        t.val_grad[a] += kernel(k, t.val[a], s)[1] * t.val_grad[o]
    elif form == F_SV:
        t.val_grad[a] += kernel(k, s, t.val[a])[2] * t.val_grad[o]
    elif form == F_V:
        t.val_grad[a] += kernel(k, t.val[a], 0.0)[1] * t.val_grad[o]
    elif form == F_SUM:
        _sum_bwd(t, r)
    elif form == F_LINCOMB_VALUE:
        _lincomb_value_bwd(t, r)
    elif form == F_EG_SCALE:
        _eg_scale_bwd(t, r)
    elif form == F_ADD_CLAMPED_EG:
        _add_clamped_eg_bwd(t, r)
    else:
        for j in range(2):
            g = t.pair_grad[o, j]
            if form == F_PP:
                _, da, db = kernel(k, t.pair_val[a, j], t.pair_val[b, j])
                t.pair_grad[a, j] += da * g
                t.pair_grad[b, j] += db * g
            elif form == F_PS:
                t.pair_grad[a, j] += kernel(k, t.pair_val[a, j], s)[1] * g
            elif form == F_SP:
                t.pair_grad[a, j] += kernel(k, s, t.pair_val[a, j])[2] * g
            elif form == F_PV:
                _, da, db = kernel(k, t.pair_val[a, j], t.val[b])
                t.pair_grad[a, j] += da * g
                t.val_grad[b] += db * g
            elif form == F_VP:
                _, dv, dp = kernel(k, t.val[b], t.pair_val[a, j])
                t.pair_grad[a, j] += dp * g
                t.val_grad[b] += dv * g
            else:  # F_P
                t.pair_grad[a, j] += kernel(k, t.pair_val[a, j], 0.0)[1] * g


# ------------------------------------------------------------------------------------------------
# Sweeps.
# ------------------------------------------------------------------------------------------------

@njit(**JIT)
def forward(t: Tape) -> None:
    """Replay: recompute every record's output from the current parameter values, in order."""
    for r in range(t.counts[C_RECORDS]):
        forward_record(t, r)


@njit(**JIT)
def backward(t: Tape, output: int) -> None:
    """Gradients of value `output` with respect to every slot.

    Temporary gradients are cleared first; parameter gradients accumulate (``+=``) across calls
    until `zero_grad` or `zero_param_grad`.
    """
    c = t.counts
    t.val_grad[c[C_VALUE_PARAMS]: c[C_VALUES]] = 0.0
    t.pair_grad[c[C_PAIR_PARAMS]: c[C_PAIRS]] = 0.0
    t.val_grad[output] += 1.0
    for r in range(c[C_RECORDS] - 1, -1, -1):
        backward_record(t, r)


# ------------------------------------------------------------------------------------------------
# Recording.
# ------------------------------------------------------------------------------------------------

@njit(**INLINE)
def _record(t: Tape, op: int, lhs: int, rhs: int, scalar: float) -> int:
    """Append one record, allocate its output, run its forward; the output index."""
    r = t.counts[C_RECORDS]
    if r >= t.op.shape[0]:
        raise TapeFullError("tape record capacity is full; grow the tape or record fewer positions")
    form = op >> 4
    if (form == F_VV or form == F_VS or form == F_SV or form == F_V or form == F_PHASE
            or form == F_SUM or form == F_LINCOMB_VALUE):
        o = alloc_value(t)
    else:
        o = alloc_pair(t)
    t.op[r] = op
    t.out[r] = o
    t.lhs[r] = lhs
    t.rhs[r] = rhs
    t.scalar[r] = scalar
    t.counts[C_RECORDS] = r + 1
    forward_record(t, r)
    return o


# Value ops.
@njit(**JIT)
def record_add(t: Tape, a: int, b: int) -> int:
    """value a + value b"""
    return _record(t, F_VV << 4 | K_ADD, a, b, 0.0)


@njit(**JIT)
def record_sub(t: Tape, a: int, b: int) -> int:
    """value a - value b"""
    return _record(t, F_VV << 4 | K_SUB, a, b, 0.0)


@njit(**JIT)
def record_mul(t: Tape, a: int, b: int) -> int:
    """value a * value b (a may equal b: squaring)"""
    return _record(t, F_VV << 4 | K_MUL, a, b, 0.0)


@njit(**JIT)
def record_div(t: Tape, a: int, b: int) -> int:
    """value a / value b"""
    return _record(t, F_VV << 4 | K_DIV, a, b, 0.0)


@njit(**JIT)
def record_pow(t: Tape, a: int, b: int) -> int:
    """value a ** value b (a > 0 for a finite gradient in b)"""
    return _record(t, F_VV << 4 | K_POW, a, b, 0.0)


@njit(**JIT)
def record_exp(t: Tape, a: int) -> int:
    """exp(value a)"""
    return _record(t, F_V << 4 | K_EXP, a, 0, 0.0)


@njit(**JIT)
def record_log(t: Tape, a: int) -> int:
    """ln(value a)"""
    return _record(t, F_V << 4 | K_LOG, a, 0, 0.0)


@njit(**JIT)
def record_sigmoid(t: Tape, a: int) -> int:
    """1 / (1 + exp(-value a))"""
    return _record(t, F_V << 4 | K_SIGMOID, a, 0, 0.0)


@njit(**JIT)
def record_neg(t: Tape, a: int) -> int:
    """-value a"""
    return _record(t, F_V << 4 | K_NEG, a, 0, 0.0)


@njit(**JIT)
def record_pow_const(t: Tape, a: int, s: float) -> int:
    """value a ** constant s"""
    return _record(t, F_VS << 4 | K_POW, a, 0, s)


@njit(**JIT)
def record_add_scalar(t: Tape, a: int, s: float) -> int:
    """value a + s"""
    return _record(t, F_VS << 4 | K_ADD, a, 0, s)


@njit(**JIT)
def record_sub_scalar(t: Tape, a: int, s: float) -> int:
    """value a - s"""
    return _record(t, F_VS << 4 | K_SUB, a, 0, s)


@njit(**JIT)
def record_scalar_sub(t: Tape, s: float, a: int) -> int:
    """s - value a"""
    return _record(t, F_SV << 4 | K_SUB, a, 0, s)


@njit(**JIT)
def record_mul_scalar(t: Tape, a: int, s: float) -> int:
    """value a * s"""
    return _record(t, F_VS << 4 | K_MUL, a, 0, s)


@njit(**JIT)
def record_div_scalar(t: Tape, a: int, s: float) -> int:
    """value a / s"""
    return _record(t, F_VS << 4 | K_DIV, a, 0, s)


@njit(**JIT)
def record_scalar_div(t: Tape, s: float, a: int) -> int:
    """s / value a"""
    return _record(t, F_SV << 4 | K_DIV, a, 0, s)


# Pair ops.
@njit(**JIT)
def record_pair_add(t: Tape, p: int, q: int) -> int:
    """pair p + pair q"""
    return _record(t, F_PP << 4 | K_ADD, p, q, 0.0)


@njit(**JIT)
def record_pair_sub(t: Tape, p: int, q: int) -> int:
    """pair p - pair q"""
    return _record(t, F_PP << 4 | K_SUB, p, q, 0.0)


@njit(**JIT)
def record_pair_mul(t: Tape, p: int, q: int) -> int:
    """pair p * pair q, elementwise"""
    return _record(t, F_PP << 4 | K_MUL, p, q, 0.0)


@njit(**JIT)
def record_pair_neg(t: Tape, p: int) -> int:
    """-pair p"""
    return _record(t, F_P << 4 | K_NEG, p, 0, 0.0)


@njit(**JIT)
def record_pair_sigmoid(t: Tape, p: int) -> int:
    """(sigmoid(mg), sigmoid(eg))"""
    return _record(t, F_P << 4 | K_SIGMOID, p, 0, 0.0)


@njit(**JIT)
def record_pair_mul_scalar(t: Tape, p: int, s: float) -> int:
    """pair p * s"""
    return _record(t, F_PS << 4 | K_MUL, p, 0, s)


@njit(**JIT)
def record_pair_div_scalar(t: Tape, p: int, s: float) -> int:
    """pair p / s"""
    return _record(t, F_PS << 4 | K_DIV, p, 0, s)


@njit(**JIT)
def record_scalar_div_pair(t: Tape, s: float, p: int) -> int:
    """(s / mg, s / eg)"""
    return _record(t, F_SP << 4 | K_DIV, p, 0, s)


@njit(**JIT)
def record_pair_mul_value(t: Tape, p: int, v: int) -> int:
    """pair p * value v"""
    return _record(t, F_PV << 4 | K_MUL, p, v, 0.0)


@njit(**JIT)
def record_value_mul_pair(t: Tape, v: int, p: int) -> int:
    """value v * pair p"""
    return _record(t, F_VP << 4 | K_MUL, p, v, 0.0)


@njit(**JIT)
def record_pair_div_value(t: Tape, p: int, v: int) -> int:
    """pair p / value v"""
    return _record(t, F_PV << 4 | K_DIV, p, v, 0.0)


@njit(**JIT)
def record_value_div_pair(t: Tape, v: int, p: int) -> int:
    """(v / mg, v / eg)"""
    return _record(t, F_VP << 4 | K_DIV, p, v, 0.0)


@njit(**JIT)
def record_eg_scale(t: Tape, p: int, s: float) -> int:
    """(mg, eg * s): endgame scaling"""
    return _record(t, F_EG_SCALE << 4, p, 0, s)


@njit(**JIT)
def record_add_clamped_eg(t: Tape, p: int, v: int) -> int:
    """(mg, eg + v) with the eg half clamped so that it cannot change sign (0 stays 0)"""
    return _record(t, F_ADD_CLAMPED_EG << 4, p, v, 0.0)


@njit(**JIT)
def record_phase(t: Tape, p: int, alpha: float) -> int:
    """value alpha * mg + (1 - alpha) * eg"""
    return _record(t, F_PHASE << 4, p, 0, alpha)


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
    return _record(t, F_SUM << 4, first, t.counts[C_OPERANDS] - first, 0.0)


@njit(**JIT)
def record_lincomb_pair(t: Tape, first: int) -> int:
    """sum_i c_i * pair_i over the (pair, c) operands pushed since `first`."""
    return _record(t, F_LINCOMB_PAIR << 4, first, t.counts[C_OPERANDS] - first, 0.0)


@njit(**JIT)
def record_lincomb_value(t: Tape, first: int) -> int:
    """sum_i c_i * value_i over the (value, c) operands pushed since `first`."""
    return _record(t, F_LINCOMB_VALUE << 4, first, t.counts[C_OPERANDS] - first, 0.0)
