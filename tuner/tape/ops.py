"""The op table: what the tape can do, each op's forward and backward side by side.

A record's tag is ``form << 4 | kernel`` (a u16, built only by `tag`). The *kernel* is the
arithmetic (its value and both local partials, defined together in `kernel`); the *form* says where
the operands live (value slots, pair slots, the record's f64 scalars, an operand list) and what
the output is. Elementwise pair ops reuse the value kernels component by component, so every
formula is written once.

Kernels (``out`` from `kernel`; ``d out/d a, d out/d b`` from `partials`, which reuses the
forward's ``out``):

=========  ===================  ===================  =================
kernel     out                  d/da                 d/db
=========  ===================  ===================  =================
ADD        a + b                1                    1
SUB        a - b                1                    -1
MUL        a * b                b                    a
DIV        a / b                1 / b                -out / b
POW        a ^ b                b a^(b-1)            a^b ln a
EXP        exp a                exp a                .
LOG        ln a                 1 / a                .
SIGMOID    1 / (1 + exp -a)     out (1 - out)        .
NEG        -a                   -1                   .
=========  ===================  ===================  =================

Forms: `FORM_TABLE`, one `Form` row each (built by `form`, right after the form's forward and
backward functions): its name, the kinds of its output and operands, how many of the record's
f64 scalars ``s0``/``s1`` it reads, the kernels it takes, its forward and backward functions and
the arguments they are called with. Everything else is derived from the rows: the validation
tables (`FORM_OUT` ...), the players' dispatch (`tuner.tape.player.play` and the specialised
players of `tuner.tape.specialise` are generated from the rows' calls), the loss forms (rows with
a `Form.loss` name, recorded by `record_loss`) and the tests, which iterate the table. ``python
-c "from tuner.tape.ops import describe_forms; print(describe_forms())"`` prints it.

The clamped adds keep the sign of eg: if ``eg + w`` would cross zero the result is 0 and neither eg
nor the value gets a gradient; an eg of exactly 0 stays 0 and passes its gradient. They and
EG_SCALE_BY_SIGN decide from the operand values at every forward sweep, so a recorded tape stays
exact when the parameters move.

An n-ary record stores its operand offset in ``lhs`` and the operand count in ``rhs``.

Recording (`record_*`) appends a record to a `Tape` and runs its form's forward function on the
tape's arena: the same function the sweeps run (`RECORD_FORM`, one recorder per form generated
from the table, so that a recorder compiles its own form's forward only). Every operand slot is
checked first against the slots in use; a bad one is noted in the tape's error word and replaced
by slot 0, never read (`tuner.tape.recording`, "Index checks"; `index_error` reads the word). The
sweeps live in `tuner.tape.player`: a recording is frozen (validated, temporaries rebased) and played; the
players' dispatch by form is generated from the table's calls, written out in the loop bodies (a
dispatch function called per record would cost more than the arithmetic: Numba updates the
reference counts of its array arguments on every call). Every function is ``@njit`` so that
evaluations written in Numba call them directly.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from tuner.jit import JIT, INLINE, RECORDER

from .pairs import ACCUMULATORS, pair_axpy, pair_dot

if ACCUMULATORS != 4:  # _lincomb_pair_fwd's unpacked loop spells out the four partial sums
    raise ImportError(f"tuner.tape.pairs.ACCUMULATORS is {ACCUMULATORS}; ops.py expects 4")

from .recording import (C_ERROR, C_ERROR_INDEX, C_ERROR_LIMIT, C_ERROR_OPERAND, C_ERROR_RECORD,
                        C_ERROR_TAG, C_EVALUATE, C_OPERANDS, C_PAIRS, C_RECORDS, C_VALUES, E_NONE,
                        E_OPERAND_LIST, E_PAIR_SLOT, E_PARAM_INDEX, E_VALUE_SLOT, OPERAND_LHS,
                        OPERAND_LIST, OPERAND_RHS, Recording, Tape, TapeFullError, alloc_pair,
                        alloc_value, note_index_error)


# Kernels.
K_ADD, K_SUB, K_MUL, K_DIV, K_POW, K_EXP, K_LOG, K_SIGMOID, K_NEG = range(9)
KERNEL_NAMES = ("add", "sub", "mul", "div", "pow", "exp", "log", "sigmoid", "neg")
N_KERNELS = len(KERNEL_NAMES)
BINARY_KERNELS = (K_ADD, K_SUB, K_MUL, K_DIV, K_POW)
UNARY_KERNELS = (K_EXP, K_LOG, K_SIGMOID, K_NEG)

# Slot kinds of a form's output and operands.
S_NONE, S_VALUE, S_PAIR = 0, 1, 2
# Which kernels a form takes.
KS_NONE, KS_BINARY, KS_UNARY = 0, 1, 2

KERNEL_BITS = 4
#: The kernel field of a record tag (``tag & KERNEL_MASK``; the form is ``tag >> KERNEL_BITS``).
KERNEL_MASK = (1 << KERNEL_BITS) - 1
MAX_FORMS = (np.iinfo(np.uint16).max + 1) >> KERNEL_BITS
assert N_KERNELS <= 1 << KERNEL_BITS


@njit(**INLINE)
def tag(form: int, kernel: int = 0) -> int:
    """The record tag of a form and kernel: the one place tags are built."""
    return form << KERNEL_BITS | kernel


def tag_name(t: int) -> str:
    """A readable name for a record tag, e.g. ``pv:mul``; ValueError for an unknown tag."""
    if not (0 <= t < len(VALID_TAG) and VALID_TAG[t]):
        raise ValueError(f"unknown record tag {t} (form {t >> KERNEL_BITS}, kernel "
                         f"{t & KERNEL_MASK})")
    form, k = t >> KERNEL_BITS, t & KERNEL_MASK
    return FORM_NAMES[form] + (":" + KERNEL_NAMES[k] if FORM_TABLE[form].kernels != KS_NONE
                               else "")


class IndexViolation(NamedTuple):
    """The first out-of-range index of a recording (its error word, `tuner.tape.recording`)."""

    code: int       # E_PARAM_INDEX, E_VALUE_SLOT, E_PAIR_SLOT or E_OPERAND_LIST
    index: int      # the index given
    limit: int      # the valid ones are 0 .. limit - 1
    record: int     # the record it concerns
    operand: int    # OPERAND_LHS, OPERAND_RHS or OPERAND_LIST + i
    tag: int        # that record's tag

    @property
    def kind(self) -> str:
        """"pair" or "value": the kind of parameter or slot the index is of."""
        return "value" if self.code == E_VALUE_SLOT else "pair"

    def describe(self) -> str:
        """What was wrong, in the tape's terms (slots, records, ops), without the position."""
        op = f"record {self.record} (op {tag_name(self.tag)})"
        if self.code == E_PARAM_INDEX:
            return (f"lin_add index {self.index} is not a pair parameter (0..{self.limit - 1}), "
                    f"{op}")
        if self.code == E_OPERAND_LIST:
            return (f"{op} starts its operand list at {self.index}, but only "
                    f"{self.limit - 1} operands are pushed (take the start from operand_mark)")
        form = self.tag >> KERNEL_BITS
        if self.operand >= OPERAND_LIST:
            which = f"operand {self.operand - OPERAND_LIST} of its list"
        elif FORM_LHS[form] == FORM_RHS[form]:
            which = "its first operand" if self.operand == OPERAND_LHS else "its second operand"
        else:
            which = f"its {self.kind} operand"
        used = (f"only {self.kind} slots 0..{self.limit - 1} are in use (parameters, then "
                f"the outputs of earlier records)" if self.limit else
                f"no {self.kind} slot is in use")
        return f"{op} reads {self.kind} slot {self.index} as {which}, but {used}"


def index_error(rec: Recording) -> IndexViolation | None:
    """The first out-of-range index a recorder of `rec` was handed, or None."""
    c = rec.counts
    if c[C_ERROR] == E_NONE:
        return None
    return IndexViolation(*(int(c[f]) for f in (C_ERROR, C_ERROR_INDEX, C_ERROR_LIMIT,
                                                 C_ERROR_RECORD, C_ERROR_OPERAND, C_ERROR_TAG)))


# ------------------------------------------------------------------------------------------------
# Kernels: value and local partials, side by side.
# ------------------------------------------------------------------------------------------------

@njit(**INLINE)
def logistic(e: float, nonnegative: bool) -> float:
    """The logistic function at x from ``e = exp(-|x|)`` and whether x >= 0: ``1 / (1 + e)``,
    or ``e / (1 + e)``. One division whose numerator is a select, not a branch: the sign of an
    evaluation is as often one as the other, and a mispredicted branch costs more than the
    select (measured: docs/performance.md, "Branches")."""
    return (1.0 if nonnegative else e) / (1.0 + e)


@njit(**INLINE)
def sigmoid(x: float) -> float:
    """Logistic function, without overflow for large |x|."""
    return logistic(np.exp(-abs(x)), x >= 0.0)


@njit(**INLINE)
def kernel(k: int, a: float, b: float) -> float:
    """The output of kernel `k` (unary kernels ignore `b`)."""
    if k == K_ADD:
        return a + b
    if k == K_SUB:
        return a - b
    if k == K_MUL:
        return a * b
    if k == K_DIV:
        return a / b
    if k == K_POW:
        return a ** b
    if k == K_EXP:
        return np.exp(a)
    if k == K_LOG:
        return np.log(a)
    if k == K_SIGMOID:
        return sigmoid(a)
    if k == K_NEG:
        return -a
    return np.nan  # no such kernel (freezing refuses its tag): poison, loudly


@njit(**INLINE)
def partials(k: int, a: float, b: float, out: float):
    """``(d out/d a, d out/d b)`` of kernel `k` at (a, b), reusing the forward's `out`."""
    if k == K_ADD:
        return 1.0, 1.0
    if k == K_SUB:
        return 1.0, -1.0
    if k == K_MUL:
        return b, a
    if k == K_DIV:
        return 1.0 / b, -out / b
    if k == K_POW:
        return b * a ** (b - 1.0), out * np.log(a)
    if k == K_EXP:
        return out, 0.0
    if k == K_LOG:
        return 1.0 / a, 0.0
    if k == K_SIGMOID:
        return out * (1.0 - out), 0.0
    if k == K_NEG:
        return -1.0, 0.0
    return np.nan, np.nan


# ------------------------------------------------------------------------------------------------
# Forms: forward and backward side by side. `o` is the output slot, `a` / `b` the record's lhs /
# rhs fields, `s` its scalar, `k` its kernel; `val` / `vg` are value values / gradients and `pv` /
# `pg` pair ones. They take arrays, not the Tape, so that the sweeps hoist the arrays out of their
# loops and recording compiles to a few stores.
# ------------------------------------------------------------------------------------------------

@njit(**JIT)
def _vv_fwd(val, o, a, b, k):
    val[o] = kernel(k, val[a], val[b])


@njit(**JIT)
def _vv_bwd(val, vg, o, a, b, k):
    da, db = partials(k, val[a], val[b], val[o])
    g = vg[o]
    vg[a] += da * g
    vg[b] += db * g


@njit(**JIT)
def _vs_fwd(val, o, a, s, k):
    val[o] = kernel(k, val[a], s)


@njit(**JIT)
def _vs_bwd(val, vg, o, a, s, k):
    vg[a] += partials(k, val[a], s, val[o])[0] * vg[o]


@njit(**JIT)
def _sv_fwd(val, o, a, s, k):
    val[o] = kernel(k, s, val[a])


@njit(**JIT)
def _sv_bwd(val, vg, o, a, s, k):
    vg[a] += partials(k, s, val[a], val[o])[1] * vg[o]


@njit(**JIT)
def _pp_fwd(pv, o, a, b, k):
    for j in range(2):
        pv[o, j] = kernel(k, pv[a, j], pv[b, j])


@njit(**JIT)
def _pp_bwd(pv, pg, o, a, b, k):
    for j in range(2):
        da, db = partials(k, pv[a, j], pv[b, j], pv[o, j])
        pg[a, j] += da * pg[o, j]
        pg[b, j] += db * pg[o, j]


@njit(**JIT)
def _ps_fwd(pv, o, a, s, k):
    for j in range(2):
        pv[o, j] = kernel(k, pv[a, j], s)


@njit(**JIT)
def _ps_bwd(pv, pg, o, a, s, k):
    for j in range(2):
        pg[a, j] += partials(k, pv[a, j], s, pv[o, j])[0] * pg[o, j]


@njit(**JIT)
def _sp_fwd(pv, o, a, s, k):
    for j in range(2):
        pv[o, j] = kernel(k, s, pv[a, j])


@njit(**JIT)
def _sp_bwd(pv, pg, o, a, s, k):
    for j in range(2):
        pg[a, j] += partials(k, s, pv[a, j], pv[o, j])[1] * pg[o, j]


@njit(**JIT)
def _pv_fwd(val, pv, o, a, b, k):
    for j in range(2):
        pv[o, j] = kernel(k, pv[a, j], val[b])


@njit(**JIT)
def _pv_bwd(val, vg, pv, pg, o, a, b, k):
    for j in range(2):
        dp, dv = partials(k, pv[a, j], val[b], pv[o, j])
        pg[a, j] += dp * pg[o, j]
        vg[b] += dv * pg[o, j]


@njit(**JIT)
def _vp_fwd(val, pv, o, a, b, k):
    for j in range(2):
        pv[o, j] = kernel(k, val[b], pv[a, j])


@njit(**JIT)
def _vp_bwd(val, vg, pv, pg, o, a, b, k):
    for j in range(2):
        dv, dp = partials(k, val[b], pv[a, j], pv[o, j])
        pg[a, j] += dp * pg[o, j]
        vg[b] += dv * pg[o, j]


@njit(**JIT)
def _sigmoid_sum_fwd(pv, o, a, b, s):
    for j in range(2):
        pv[o, j] = sigmoid(pv[a, j] / s + pv[b, j] / s)


@njit(**JIT)
def _sigmoid_sum_bwd(pv, pg, o, a, b, s):
    for j in range(2):
        # the sigmoid's partial, then the division's (as `partials` gives them)
        d = partials(K_DIV, 1.0, s, 0.0)[0] * (partials(K_SIGMOID, 0.0, 0.0, pv[o, j])[0]
                                              * pg[o, j])
        pg[a, j] += d
        pg[b, j] += d


@njit(**JIT)
def _eg_scale_fwd(pv, o, a, s):
    pv[o, 0] = pv[a, 0]
    pv[o, 1] = pv[a, 1] * s


@njit(**JIT)
def _eg_scale_bwd(pg, o, a, s):
    pg[a, 0] += pg[o, 0]
    pg[a, 1] += pg[o, 1] * s


# The clamped adds decide by the sign of eg, which is as often one as the other: they are written
# without branches (``&``, ``|`` and selects), which a mispredicted branch on that sign costs more
# than. Where the clamp passes no gradient, the backward adds +0.0, which leaves every gradient a
# sweep can hold as it was: x + 0.0 is x except for x = -0.0, and a gradient is a sum started at
# +0.0 (cleared or zeroed), which is never -0.0 in round-to-nearest.

@njit(**JIT)
def _clamp_passes(eg, v):
    """Whether eg + v keeps the sign of eg (the unclamped branch of add_clamped_eg)."""
    s = eg + v
    return ((eg > 0.0) & (s > 0.0)) | ((eg < 0.0) & (s < 0.0))


@njit(**JIT)
def _clamped_add_eg_fwd(val, pv, o, a, b, signed):
    """(mg, eg + w), the sum clamped so that it keeps the sign of eg (0 stays 0), where w is
    value b or, `signed` (the winnable add), value b with the sign of eg."""
    eg = pv[a, 1]
    w = -val[b] if signed & (eg < 0.0) else val[b]
    pv[o, 0] = pv[a, 0]
    pv[o, 1] = eg if eg == 0.0 else (eg + w if _clamp_passes(eg, w) else 0.0)


@njit(**JIT)
def _clamped_add_eg_bwd(val, vg, pv, pg, o, a, b, signed):
    eg = pv[a, 1]
    flip = signed & (eg < 0.0)
    passes = _clamp_passes(eg, -val[b] if flip else val[b])  # (False for eg = 0)
    g = pg[o, 1]
    pg[a, 0] += pg[o, 0]
    pg[a, 1] += g if (eg == 0.0) | passes else 0.0
    vg[b] += (-g if flip else g) if passes else 0.0  # (x - g is x + -g, to the bit)


@njit(**JIT)
def _eg_scale_by_sign_fwd(pv, o, a, s_pos, s_nonpos):
    pv[o, 0] = pv[a, 0]
    pv[o, 1] = pv[a, 1] * (s_pos if pv[a, 1] > 0.0 else s_nonpos)


@njit(**JIT)
def _eg_scale_by_sign_bwd(pv, pg, o, a, s_pos, s_nonpos):
    pg[a, 0] += pg[o, 0]
    pg[a, 1] += pg[o, 1] * (s_pos if pv[a, 1] > 0.0 else s_nonpos)


@njit(**JIT)
def _phase_fwd(val, pv, o, a, alpha):
    val[o] = alpha * pv[a, 0] + (1.0 - alpha) * pv[a, 1]


@njit(**JIT)
def _phase_bwd(vg, pg, o, a, alpha):
    g = vg[o]
    pg[a, 0] += alpha * g
    pg[a, 1] += (1.0 - alpha) * g


# The losses: each forward returns its local partial d out / d a, which a player that runs the
# position's backward right after keeps for `_loss_bwd` (the backward reuses the forward's
# sigmoid); the `_bwd` forms recompute it, to the same bits, for sweeps that did not keep it.

@njit(**INLINE)
def sigmoid_sq_err(x, k, target):
    """``(sigmoid(k x) - target)^2`` and its derivative in x."""
    s = sigmoid(k * x)
    d = s - target
    return d * d, 2.0 * d * s * (1.0 - s) * k


@njit(**INLINE)
def sigmoid_xent(x, k, target):
    """The cross-entropy ``-(t log p + (1 - t) log(1 - p))``, p = sigmoid(k x), and its derivative
    in x. It is softplus(z) - t z (z = k x), computed without overflow: softplus(z) = max(z, 0) +
    log1p(exp(-|z|)), and p from the same exponential (the bits of `sigmoid`)."""
    z = k * x
    e = np.exp(-abs(z))
    p = logistic(e, z >= 0.0)
    return max(z, 0.0) + np.log1p(e) - target * z, (p - target) * k


@njit(**JIT)
def _loss_bwd(vg, o, a, partial):
    vg[a] += partial * vg[o]


@njit(**JIT)
def _sigmoid_sq_err_fwd(val, o, a, k, target):
    val[o], partial = sigmoid_sq_err(val[a], k, target)
    return partial


@njit(**JIT)
def _sigmoid_sq_err_bwd(val, vg, o, a, k, target):
    _loss_bwd(vg, o, a, sigmoid_sq_err(val[a], k, target)[1])


@njit(**JIT)
def _sigmoid_xent_fwd(val, o, a, k, target):
    val[o], partial = sigmoid_xent(val[a], k, target)
    return partial


@njit(**JIT)
def _sigmoid_xent_bwd(val, vg, o, a, k, target):
    _loss_bwd(vg, o, a, sigmoid_xent(val[a], k, target)[1])


@njit(**JIT)
def _const_fwd(val, o, x):
    val[o] = x


@njit(**JIT)
def _const_pair_fwd(pv, o, mg, eg):
    pv[o, 0] = mg
    pv[o, 1] = eg


@njit(**JIT)
def neumaier_add(s, c, x):
    """One step of Neumaier's compensated sum: the new (sum, compensation)."""
    u = s + x
    if abs(s) >= abs(x):
        c += (s - u) + x
    else:
        c += (x - u) + s
    return u, c


# Operand lists. A stored list may pack each operand into one index word (`tuner.tape.player`
# does when they fit): slot << coef_bits | (coefficient + 2^(coef_bits - 1)), and `coef` is then
# not read; with coef_bits = 0 (every recording, most stores) slot and coefficient are apart.

@njit(**INLINE)
def operand(idx, coef, i, coef_bits):
    """Operand i of a list: its slot and its coefficient (as f64, which is what the products
    convert it to anyway)."""
    if coef_bits:
        w = np.int64(idx[i])
        return w >> coef_bits, np.float64((w & ((1 << coef_bits) - 1)) - (1 << (coef_bits - 1)))
    return np.int64(idx[i]), np.float64(coef[i])


@njit(**JIT)
def _sum_fwd(val, idx, o, first, n, coef_bits):
    s = 0.0
    c = 0.0
    for i in range(first, first + n):
        s, c = neumaier_add(s, c, val[np.int64(idx[i]) >> coef_bits])
    val[o] = s + c


@njit(**JIT)
def _sum_bwd(vg, idx, o, first, n, coef_bits):
    g = vg[o]
    for i in range(first, first + n):
        vg[np.int64(idx[i]) >> coef_bits] += g


@njit(**INLINE)
def _lincomb_pair_fwd(pv, idx, coef, o, first, n, coef_bits):
    if coef_bits:  # packed: both halves at once (`tuner.tape.pairs`, the same bits)
        mg, eg = pair_dot(pv, idx, first, n, coef_bits)
    else:  # operand first + k into partial sum k % 4, then (s0 + s1) + (s2 + s3)
        m0 = m1 = m2 = m3 = e0 = e1 = e2 = e3 = 0.0
        for i in range(first, first + n):
            j, c = operand(idx, coef, i, coef_bits)
            k = (i - first) & 3
            if k == 0:
                m0 += c * pv[j, 0]
                e0 += c * pv[j, 1]
            elif k == 1:
                m1 += c * pv[j, 0]
                e1 += c * pv[j, 1]
            elif k == 2:
                m2 += c * pv[j, 0]
                e2 += c * pv[j, 1]
            else:
                m3 += c * pv[j, 0]
                e3 += c * pv[j, 1]
        mg = (m0 + m1) + (m2 + m3)
        eg = (e0 + e1) + (e2 + e3)
    pv[o, 0] = mg
    pv[o, 1] = eg


@njit(**INLINE)
def _lincomb_pair_bwd(pg, idx, coef, o, first, n, coef_bits):
    g0, g1 = pg[o, 0], pg[o, 1]
    if coef_bits:
        pair_axpy(pg, idx, first, n, coef_bits, g0, g1)
    else:
        for i in range(first, first + n):
            j, c = operand(idx, coef, i, coef_bits)
            pg[j, 0] += c * g0
            pg[j, 1] += c * g1


@njit(**INLINE)
def _lincomb_value_fwd(val, idx, coef, o, first, n, coef_bits):
    s = 0.0
    for i in range(first, first + n):
        j, c = operand(idx, coef, i, coef_bits)
        s += c * val[j]
    val[o] = s


@njit(**INLINE)
def _lincomb_value_bwd(vg, idx, coef, o, first, n, coef_bits):
    g = vg[o]
    for i in range(first, first + n):
        j, c = operand(idx, coef, i, coef_bits)
        vg[j] += c * g


# ------------------------------------------------------------------------------------------------
# The form table: one row per form, naming the functions above. A row's argument lists are in the
# players' names: arrays ``val vg pv pg idx coef`` (values, their gradients, pairs, theirs, the
# operand list), the record's ``o a b`` (output, lhs, rhs; n-ary: first operand, count), ``k``
# (kernel), ``s0 s1`` (scalars), ``bits`` (the operand packing, `operand`); anything else is
# written as is. A loss form's forward returns its partial, which a player that runs the
# backward right after hands to `_loss_bwd` instead of calling the row's backward.
# ------------------------------------------------------------------------------------------------

class Form(NamedTuple):
    """One row of `FORM_TABLE`."""

    name: str
    out: int            # S_VALUE or S_PAIR: the output slot's kind
    lhs: int            # the kinds of the lhs and rhs operand slots (S_NONE: not a slot)
    rhs: int
    nary: int           # the kind of the operand list's slots (S_NONE: no list)
    scalars: int        # how many of s0, s1 it reads
    kernels: int        # KS_NONE, KS_BINARY or KS_UNARY
    fwd: object         # the forward function
    fwd_args: str       # its arguments
    bwd: object         # the backward function (None: a leaf)
    bwd_args: str
    loss: str = ""      # a loss form: its name in the training settings


#: The form table (index = form number, in `tag`); rows are added by `form` only.
FORM_TABLE: tuple[Form, ...] = ()


def form(*row, **named) -> int:
    """Add a `Form` row to `FORM_TABLE`; its form number."""
    global FORM_TABLE
    FORM_TABLE = FORM_TABLE + (Form(*row, **named),)
    return len(FORM_TABLE) - 1


V, P, N = S_VALUE, S_PAIR, S_NONE
F_VV = form("vv", V, V, V, N, 0, KS_BINARY, _vv_fwd, "val, o, a, b, k", _vv_bwd, "val, vg, o, a, b, k")
F_VS = form("vs", V, V, N, N, 1, KS_BINARY, _vs_fwd, "val, o, a, s0, k",
            _vs_bwd, "val, vg, o, a, s0, k")
F_SV = form("sv", V, V, N, N, 1, KS_BINARY, _sv_fwd, "val, o, a, s0, k",
            _sv_bwd, "val, vg, o, a, s0, k")
F_V = form("v", V, V, N, N, 0, KS_UNARY, _vs_fwd, "val, o, a, 0.0, k",
           _vs_bwd, "val, vg, o, a, 0.0, k")
F_PP = form("pp", P, P, P, N, 0, KS_BINARY, _pp_fwd, "pv, o, a, b, k", _pp_bwd, "pv, pg, o, a, b, k")
F_PS = form("ps", P, P, N, N, 1, KS_BINARY, _ps_fwd, "pv, o, a, s0, k",
            _ps_bwd, "pv, pg, o, a, s0, k")
F_SP = form("sp", P, P, N, N, 1, KS_BINARY, _sp_fwd, "pv, o, a, s0, k",
            _sp_bwd, "pv, pg, o, a, s0, k")
F_PV = form("pv", P, P, V, N, 0, KS_BINARY, _pv_fwd, "val, pv, o, a, b, k",
            _pv_bwd, "val, vg, pv, pg, o, a, b, k")
F_VP = form("vp", P, P, V, N, 0, KS_BINARY, _vp_fwd, "val, pv, o, a, b, k",
            _vp_bwd, "val, vg, pv, pg, o, a, b, k")
F_P = form("p", P, P, N, N, 0, KS_UNARY, _ps_fwd, "pv, o, a, 0.0, k", _ps_bwd, "pv, pg, o, a, 0.0, k")
F_EG_SCALE = form("eg_scale", P, P, N, N, 1, KS_NONE, _eg_scale_fwd, "pv, o, a, s0",
                  _eg_scale_bwd, "pg, o, a, s0")
F_ADD_CLAMPED_EG = form("add_clamped_eg", P, P, V, N, 0, KS_NONE,
                        _clamped_add_eg_fwd, "val, pv, o, a, b, False",
                        _clamped_add_eg_bwd, "val, vg, pv, pg, o, a, b, False")
F_PHASE = form("phase", V, P, N, N, 1, KS_NONE, _phase_fwd, "val, pv, o, a, s0",
               _phase_bwd, "vg, pg, o, a, s0")
F_SUM = form("sum", V, N, N, V, 0, KS_NONE, _sum_fwd, "val, idx, o, a, b, bits",
             _sum_bwd, "vg, idx, o, a, b, bits")
F_LINCOMB_PAIR = form("lincomb_pair", P, N, N, P, 0, KS_NONE,
                      _lincomb_pair_fwd, "pv, idx, coef, o, a, b, bits",
                      _lincomb_pair_bwd, "pg, idx, coef, o, a, b, bits")
F_LINCOMB_VALUE = form("lincomb_value", V, N, N, V, 0, KS_NONE,
                       _lincomb_value_fwd, "val, idx, coef, o, a, b, bits",
                       _lincomb_value_bwd, "vg, idx, coef, o, a, b, bits")
F_ADD_WINNABLE_EG = form("add_winnable_eg", P, P, V, N, 0, KS_NONE,
                         _clamped_add_eg_fwd, "val, pv, o, a, b, True",
                         _clamped_add_eg_bwd, "val, vg, pv, pg, o, a, b, True")
F_EG_SCALE_BY_SIGN = form("eg_scale_by_sign", P, P, N, N, 2, KS_NONE,
                          _eg_scale_by_sign_fwd, "pv, o, a, s0, s1",
                          _eg_scale_by_sign_bwd, "pv, pg, o, a, s0, s1")
F_CONST = form("const", V, N, N, N, 1, KS_NONE, _const_fwd, "val, o, s0", None, "")
F_CONST_PAIR = form("const_pair", P, N, N, N, 2, KS_NONE, _const_pair_fwd, "pv, o, s0, s1", None, "")
F_SIGMOID_SQ_ERR = form("sigmoid_sq_err", V, V, N, N, 2, KS_NONE,
                        _sigmoid_sq_err_fwd, "val, o, a, s0, s1",
                        _sigmoid_sq_err_bwd, "val, vg, o, a, s0, s1", loss="mse")
F_SIGMOID_XENT = form("sigmoid_xent", V, V, N, N, 2, KS_NONE,
                      _sigmoid_xent_fwd, "val, o, a, s0, s1",
                      _sigmoid_xent_bwd, "val, vg, o, a, s0, s1", loss="cross_entropy")
F_SIGMOID_SUM = form("sigmoid_sum", P, P, P, N, 1, KS_NONE, _sigmoid_sum_fwd, "pv, o, a, b, s0",
                     _sigmoid_sum_bwd, "pv, pg, o, a, b, s0")
del V, P, N

#: The loss forms: a position's last record, the loss of its evaluation against its target.
LOSS_FORMS = tuple(f for f, row in enumerate(FORM_TABLE) if row.loss)
#: The loss form of each loss name of the training settings.
LOSS_BY_NAME = {FORM_TABLE[f].loss: f for f in LOSS_FORMS}
FORM_NAMES = tuple(row.name for row in FORM_TABLE)
N_FORMS = len(FORM_TABLE)
#: Per form (index = form): output, lhs, rhs and n-ary operand slot kinds, scalars used.
FORM_OUT = np.array([row.out for row in FORM_TABLE], dtype=np.int8)
FORM_LHS = np.array([row.lhs for row in FORM_TABLE], dtype=np.int8)
FORM_RHS = np.array([row.rhs for row in FORM_TABLE], dtype=np.int8)
FORM_NARY = np.array([row.nary for row in FORM_TABLE], dtype=np.int8)
FORM_SCALARS = np.array([row.scalars for row in FORM_TABLE], dtype=np.int8)
#: The kernels a form of each `Form.kernels` takes.
KERNELS_TAKEN = {KS_NONE: (0,), KS_BINARY: BINARY_KERNELS, KS_UNARY: UNARY_KERNELS}


def _valid_tags() -> np.ndarray:
    valid = np.zeros(N_FORMS << KERNEL_BITS, dtype=np.bool_)
    for f, row in enumerate(FORM_TABLE):
        for k in KERNELS_TAKEN[row.kernels]:
            valid[f << KERNEL_BITS | k] = True
    return valid


#: VALID_TAG[t]: whether t is the tag of a known form with a kernel it takes.
VALID_TAG = _valid_tags()
assert N_FORMS <= MAX_FORMS


def call(f: int, backward: bool, names: dict | None = None) -> str:
    """Python source of form `f`'s forward (or backward) call, its argument names replaced by
    ``names[name]`` where given (what the players generated from the table write)."""
    row = FORM_TABLE[f]
    fn, args = (row.bwd, row.bwd_args) if backward else (row.fwd, row.fwd_args)
    names = names or {}
    return f"{fn.__name__}({', '.join(str(names.get(x, x)) for x in args.split(', '))})"


def form_functions() -> list[str]:
    """The names (in this module) of every function the rows call, and `_loss_bwd`."""
    return sorted({row.fwd.__name__ for row in FORM_TABLE}
                  | {row.bwd.__name__ for row in FORM_TABLE if row.bwd is not None}
                  | {_loss_bwd.__name__})


def describe_forms() -> str:
    """The form table as text: name, output, operands, scalars, kernels, loss name."""
    kind = {S_NONE: "-", S_VALUE: "value", S_PAIR: "pair"}
    taken = {KS_NONE: "-", KS_BINARY: "binary", KS_UNARY: "unary"}
    return "\n".join(f"{r.name:17} out {kind[r.out]:5}  lhs {kind[r.lhs]:5}  rhs {kind[r.rhs]:5}  "
                     f"list {kind[r.nary]:5}  scalars {r.scalars}  kernels {taken[r.kernels]:6}"
                     + (f"  loss {r.loss}" if r.loss else "") for r in FORM_TABLE)


#: The arena and operand-list arrays a form's forward may read, as a recorder loads them.
_TAPE_ARRAYS = dict(val="t.arena.val", pv="t.arena.pair_val", idx="t.rec.opnd_index",
                    coef="t.rec.opnd_coef")


def _recorder_source(f: int) -> str:
    """``_record_NAME(t, k, a, b, s0, s1)``, what every recorder of form `f` calls: append the
    record (`_append`), run the form's forward (and no other form's: each recorder compiles only
    its own form) unless the tape does not evaluate (``C_EVALUATE``), return the output slot."""
    row = FORM_TABLE[f]
    used = [x for x in row.fwd_args.split(", ") if x in _TAPE_ARRAYS]
    return "\n".join([f"def _record_{row.name}(t, k, a, b, s0, s1):",
                      f"    o, a, b = _append(t, {f}, k, a, b, s0, s1)",
                      f"    if t.rec.counts[{C_EVALUATE}]:  # C_EVALUATE"]
                     + [f"        {x} = {_TAPE_ARRAYS[x]}" for x in used]
                     + [f"        {call(f, False, dict(bits='0'))}", "    return o"]) + "\n"


def _loss_source() -> str:
    """``_record_loss_form(t, f, a, k, target)``: the recorder of loss form `f` (`LOSS_FORMS`;
    -1 for another form), dispatched over the loss forms only."""
    lines = ["def _record_loss_form(t, f, a, k, target):"]
    for f in LOSS_FORMS:
        lines += [f"    if f == {f}:  # {FORM_NAMES[f]}",
                  f"        return _record_{FORM_NAMES[f]}(t, 0, a, 0, k, target)"]
    return "\n".join(lines + ["    return -1"]) + "\n"


def _compile_recorders() -> tuple:
    """The per-form recorders (`_recorder_source`, index = form) and `_record_loss_form`, built
    from the table in this module's globals."""
    for f in range(N_FORMS):
        exec(compile(_recorder_source(f), __file__, "exec"), globals())
        globals()[f"_record_{FORM_NAMES[f]}"] = njit(**INLINE)(globals()[f"_record_{FORM_NAMES[f]}"])
    exec(compile(_loss_source(), __file__, "exec"), globals())
    return (tuple(globals()[f"_record_{name}"] for name in FORM_NAMES),
            njit(**INLINE)(globals()["_record_loss_form"]))


# ------------------------------------------------------------------------------------------------
# Recording: append the record, then run its form's forward function (the one every sweep runs:
# `tuner.tape.player.play` dispatches to the same functions). Sweeps over a recording live in the
# player: a recording is frozen, then played.
# ------------------------------------------------------------------------------------------------

# The checks are calls of their own taking only the counts (and the operand list): written
# inline in the recorders, or passed the Tape, their branches keep Numba from pruning the
# reference counting of the Tape's arrays, which costs every record far more than the check.
# The public recorders below are compiled without reference counting at all and inlined into
# their callers (`tuner.jit.RECORDER`), so that the Tape's arrays cost them nothing wherever
# they are read and no call passes the Tape.

@njit(**JIT)
def _checked_slot(c, kind: int, x: int, operand: int, tg: int) -> int:
    """Slot `x` if it is a slot of `kind` in use by the recording of counts `c` (any if `kind`
    is S_NONE: the field is unused); otherwise 0, the violation noted in the error word."""
    if kind == S_NONE:
        return x
    top = c[C_PAIRS] if kind == S_PAIR else c[C_VALUES]
    if 0 <= x < top:
        return x
    note_index_error(c, E_PAIR_SLOT if kind == S_PAIR else E_VALUE_SLOT, x, top, operand, tg)
    return 0


@njit(**JIT)
def _list_ok(c, idx, kind: int, first: int, n: int) -> bool:
    """Whether ``idx[first:first + n]`` is a list of slots of `kind` in use, starting within the
    operands pushed (one branch-free pass: small enough for LLVM to inline)."""
    if not 0 <= first <= c[C_OPERANDS]:
        return False
    top = np.uint32(c[C_PAIRS] if kind == S_PAIR else c[C_VALUES])
    bad = False
    for i in range(first, first + n):
        bad |= np.uint32(idx[i]) >= top  # a negative slot wraps to a huge one
    return not bad


@njit(**JIT)
def _checked_list(c, idx, kind: int, first: int, n: int, tg: int):
    """``(first, n)`` of an n-ary record's operand list ``idx[first:first + n]`` that is not
    `_list_ok`: a list that does not start within the operands pushed is noted and made empty,
    otherwise the first operand that is not a slot of `kind` in use is noted and every such
    operand replaced by slot 0."""
    if not 0 <= first <= c[C_OPERANDS]:
        note_index_error(c, E_OPERAND_LIST, first, c[C_OPERANDS] + 1, OPERAND_LIST, tg)
        return c[C_OPERANDS], 0
    top = c[C_PAIRS] if kind == S_PAIR else c[C_VALUES]
    for i in range(first, first + n):
        if not 0 <= idx[i] < top:
            note_index_error(c, E_PAIR_SLOT if kind == S_PAIR else E_VALUE_SLOT, idx[i], top,
                             OPERAND_LIST + i - first, tg)
            idx[i] = 0
    return first, n


@njit(**INLINE)
def _append(t: Tape, form: int, k: int, lhs: int, rhs: int, s0: float, s1: float):
    """Check the operand slots (see `tuner.tape.recording`: an out-of-range one becomes slot 0
    and is noted), append the record and allocate its output slot; ``(output, lhs, rhs)``, the
    operands as recorded. No record is appended on overflow."""
    rec = t.rec
    c = rec.counts
    tg = tag(form, k)
    if FORM_NARY[form] == S_NONE:  # (an n-ary recorder checks its list itself)
        lhs = _checked_slot(c, FORM_LHS[form], lhs, OPERAND_LHS, tg)
        rhs = _checked_slot(c, FORM_RHS[form], rhs, OPERAND_RHS, tg)
    r = rec.counts[C_RECORDS]
    if r >= rec.op.shape[0]:
        raise TapeFullError("tape record capacity is full; grow the tape or record fewer positions")
    o = alloc_pair(t) if FORM_OUT[form] == S_PAIR else alloc_value(t)
    rec.op[r] = tg
    rec.out[r] = o
    rec.lhs[r] = lhs
    rec.rhs[r] = rhs
    rec.scalar[r, 0] = s0
    rec.scalar[r, 1] = s1
    rec.counts[C_RECORDS] = r + 1
    return o, lhs, rhs


#: RECORD_FORM[f]: the recorder of form f (`_recorder_source`), inlined into the public
#: recorders below; `_record_loss_form` records a loss form given at run time. Each is bound in
#: this module as ``_record_<form name>`` by `_compile_recorders`, from its row: adding a form
#: adds its recorder, with no line here. A linter cannot see such names, hence the one exemption
#: below (tests/test_layers.py checks that the names it covers are exactly those recorders):
# ruff: noqa: F821
RECORD_FORM, _record_loss_form = _compile_recorders()


@njit(**RECORDER)
def record_sigmoid_sq_err(t: Tape, a: int, k: float, target: float) -> int:
    """(sigmoid(k * value a) - target)^2: the Texel loss of an evaluation against a result"""
    return _record_sigmoid_sq_err(t, 0, a, 0, k, target)


@njit(**RECORDER)
def record_sigmoid_xent(t: Tape, a: int, k: float, target: float) -> int:
    """-(target log p + (1 - target) log(1 - p)), p = sigmoid(k * value a): the cross-entropy
    of an evaluation against a target in [0, 1]"""
    return _record_sigmoid_xent(t, 0, a, 0, k, target)


#: IS_LOSS[f]: whether form f is one of `LOSS_FORMS`.
IS_LOSS = np.array([bool(row.loss) for row in FORM_TABLE])


@njit(**RECORDER)
def record_loss(t: Tape, a: int, k: float, target: float, loss: int) -> int:
    """The loss of form `loss` (one of `LOSS_FORMS`, K = `k`) of value a against `target`."""
    if not (0 <= loss < IS_LOSS.shape[0] and IS_LOSS[loss]):
        raise ValueError("record_loss: not a loss form")
    return _record_loss_form(t, loss, a, k, target)


# Constants: a leaf is a record too, so that every slot of a recording can be replayed.
@njit(**RECORDER)
def record_const(t: Tape, x: float) -> int:
    """A constant value x"""
    return _record_const(t, 0, 0, 0, x, 0.0)


@njit(**RECORDER)
def record_const_pair(t: Tape, mg: float, eg: float) -> int:
    """A constant pair (mg, eg)"""
    return _record_const_pair(t, 0, 0, 0, mg, eg)


# Value ops.
@njit(**RECORDER)
def record_add(t: Tape, a: int, b: int) -> int:
    """value a + value b"""
    return _record_vv(t, K_ADD, a, b, 0.0, 0.0)


@njit(**RECORDER)
def record_sub(t: Tape, a: int, b: int) -> int:
    """value a - value b"""
    return _record_vv(t, K_SUB, a, b, 0.0, 0.0)


@njit(**RECORDER)
def record_mul(t: Tape, a: int, b: int) -> int:
    """value a * value b (a may equal b: squaring)"""
    return _record_vv(t, K_MUL, a, b, 0.0, 0.0)


@njit(**RECORDER)
def record_div(t: Tape, a: int, b: int) -> int:
    """value a / value b"""
    return _record_vv(t, K_DIV, a, b, 0.0, 0.0)


@njit(**RECORDER)
def record_pow(t: Tape, a: int, b: int) -> int:
    """value a ** value b (a > 0 for a finite gradient in b)"""
    return _record_vv(t, K_POW, a, b, 0.0, 0.0)


@njit(**RECORDER)
def record_exp(t: Tape, a: int) -> int:
    """exp(value a)"""
    return _record_v(t, K_EXP, a, 0, 0.0, 0.0)


@njit(**RECORDER)
def record_log(t: Tape, a: int) -> int:
    """ln(value a)"""
    return _record_v(t, K_LOG, a, 0, 0.0, 0.0)


@njit(**RECORDER)
def record_sigmoid(t: Tape, a: int) -> int:
    """1 / (1 + exp(-value a))"""
    return _record_v(t, K_SIGMOID, a, 0, 0.0, 0.0)


@njit(**RECORDER)
def record_neg(t: Tape, a: int) -> int:
    """-value a"""
    return _record_v(t, K_NEG, a, 0, 0.0, 0.0)


@njit(**RECORDER)
def record_pow_const(t: Tape, a: int, s: float) -> int:
    """value a ** constant s"""
    return _record_vs(t, K_POW, a, 0, s, 0.0)


@njit(**RECORDER)
def record_add_scalar(t: Tape, a: int, s: float) -> int:
    """value a + s"""
    return _record_vs(t, K_ADD, a, 0, s, 0.0)


@njit(**RECORDER)
def record_sub_scalar(t: Tape, a: int, s: float) -> int:
    """value a - s"""
    return _record_vs(t, K_SUB, a, 0, s, 0.0)


@njit(**RECORDER)
def record_scalar_sub(t: Tape, s: float, a: int) -> int:
    """s - value a"""
    return _record_sv(t, K_SUB, a, 0, s, 0.0)


@njit(**RECORDER)
def record_mul_scalar(t: Tape, a: int, s: float) -> int:
    """value a * s"""
    return _record_vs(t, K_MUL, a, 0, s, 0.0)


@njit(**RECORDER)
def record_div_scalar(t: Tape, a: int, s: float) -> int:
    """value a / s"""
    return _record_vs(t, K_DIV, a, 0, s, 0.0)


@njit(**RECORDER)
def record_scalar_div(t: Tape, s: float, a: int) -> int:
    """s / value a"""
    return _record_sv(t, K_DIV, a, 0, s, 0.0)


# Pair ops.
@njit(**RECORDER)
def record_pair_add(t: Tape, p: int, q: int) -> int:
    """pair p + pair q"""
    return _record_pp(t, K_ADD, p, q, 0.0, 0.0)


@njit(**RECORDER)
def record_pair_sub(t: Tape, p: int, q: int) -> int:
    """pair p - pair q"""
    return _record_pp(t, K_SUB, p, q, 0.0, 0.0)


@njit(**RECORDER)
def record_pair_mul(t: Tape, p: int, q: int) -> int:
    """pair p * pair q, elementwise"""
    return _record_pp(t, K_MUL, p, q, 0.0, 0.0)


@njit(**RECORDER)
def record_pair_neg(t: Tape, p: int) -> int:
    """-pair p"""
    return _record_p(t, K_NEG, p, 0, 0.0, 0.0)


@njit(**RECORDER)
def record_pair_sigmoid(t: Tape, p: int) -> int:
    """(sigmoid(mg), sigmoid(eg))"""
    return _record_p(t, K_SIGMOID, p, 0, 0.0, 0.0)


@njit(**RECORDER)
def record_pair_sigmoid_sum(t: Tape, p: int, q: int, s: float) -> int:
    """(sigmoid(p.mg / s + q.mg / s), sigmoid(p.eg / s + q.eg / s)): an activation of two
    pairs in one record, the bits of `record_pair_sigmoid` of `record_pair_add` of two
    `record_pair_div_scalar` records"""
    return _record_sigmoid_sum(t, 0, p, q, s, 0.0)


@njit(**RECORDER)
def record_pair_mul_scalar(t: Tape, p: int, s: float) -> int:
    """pair p * s"""
    return _record_ps(t, K_MUL, p, 0, s, 0.0)


@njit(**RECORDER)
def record_pair_div_scalar(t: Tape, p: int, s: float) -> int:
    """pair p / s"""
    return _record_ps(t, K_DIV, p, 0, s, 0.0)


@njit(**RECORDER)
def record_scalar_div_pair(t: Tape, s: float, p: int) -> int:
    """(s / mg, s / eg)"""
    return _record_sp(t, K_DIV, p, 0, s, 0.0)


@njit(**RECORDER)
def record_pair_mul_value(t: Tape, p: int, v: int) -> int:
    """pair p * value v"""
    return _record_pv(t, K_MUL, p, v, 0.0, 0.0)


@njit(**RECORDER)
def record_value_mul_pair(t: Tape, v: int, p: int) -> int:
    """value v * pair p"""
    return _record_vp(t, K_MUL, p, v, 0.0, 0.0)


@njit(**RECORDER)
def record_pair_div_value(t: Tape, p: int, v: int) -> int:
    """pair p / value v"""
    return _record_pv(t, K_DIV, p, v, 0.0, 0.0)


@njit(**RECORDER)
def record_value_div_pair(t: Tape, v: int, p: int) -> int:
    """(v / mg, v / eg)"""
    return _record_vp(t, K_DIV, p, v, 0.0, 0.0)


@njit(**RECORDER)
def record_eg_scale(t: Tape, p: int, s: float) -> int:
    """(mg, eg * s): endgame scaling"""
    return _record_eg_scale(t, 0, p, 0, s, 0.0)


@njit(**RECORDER)
def record_add_clamped_eg(t: Tape, p: int, v: int) -> int:
    """(mg, eg + v) with the eg half clamped so that it cannot change sign (0 stays 0)"""
    return _record_add_clamped_eg(t, 0, p, v, 0.0, 0.0)


@njit(**RECORDER)
def record_add_winnable_eg(t: Tape, p: int, v: int) -> int:
    """(mg, eg + w) with w = v if eg > 0 else -v, clamped so that eg cannot change sign (0 stays
    0): a "winnable" term that pulls eg towards or away from zero, whichever side is ahead"""
    return _record_add_winnable_eg(t, 0, p, v, 0.0, 0.0)


@njit(**RECORDER)
def record_eg_scale_by_sign(t: Tape, p: int, s_pos: float, s_nonpos: float) -> int:
    """(mg, eg * s_pos) if eg > 0 else (mg, eg * s_nonpos): endgame scaling by the strong side"""
    return _record_eg_scale_by_sign(t, 0, p, 0, s_pos, s_nonpos)


@njit(**RECORDER)
def record_phase(t: Tape, p: int, alpha: float) -> int:
    """value alpha * mg + (1 - alpha) * eg"""
    return _record_phase(t, 0, p, 0, alpha, 0.0)


# N-ary ops: push operands, then record over the operands pushed since `first`. Each checks its
# list with `_checked_list` itself: a helper taking the Tape would cost the reference counting.
@njit(**INLINE)
def operand_mark(t: Tape) -> int:
    """Where the next operand goes: pass it as `first` to an n-ary recorder."""
    return t.rec.counts[C_OPERANDS]


@njit(**INLINE)
def push_operand(t: Tape, index: int, coef: float) -> None:
    """Append one (slot index, coefficient) operand for the next n-ary record."""
    rec = t.rec
    i = rec.counts[C_OPERANDS]
    if i >= rec.opnd_index.shape[0]:
        raise TapeFullError("tape operand buffer is full; grow the tape or record fewer positions")
    rec.opnd_index[i] = index
    rec.opnd_coef[i] = coef
    rec.counts[C_OPERANDS] = i + 1


@njit(**RECORDER)
def record_sum(t: Tape, first: int) -> int:
    """Compensated (Neumaier) sum of the values pushed since `first` (coefficients ignored)."""
    n = t.rec.counts[C_OPERANDS] - first
    if not _list_ok(t.rec.counts, t.rec.opnd_index, S_VALUE, first, n):
        first, n = _checked_list(t.rec.counts, t.rec.opnd_index, S_VALUE, first, n, tag(F_SUM))
    return _record_sum(t, 0, first, n, 0.0, 0.0)


@njit(**RECORDER)
def record_lincomb_pair(t: Tape, first: int) -> int:
    """sum_i c_i * pair_i over the (pair, c) operands pushed since `first`."""
    n = t.rec.counts[C_OPERANDS] - first
    if not _list_ok(t.rec.counts, t.rec.opnd_index, S_PAIR, first, n):
        first, n = _checked_list(t.rec.counts, t.rec.opnd_index, S_PAIR, first, n, tag(F_LINCOMB_PAIR))
    return append_checked_lincomb_pair(t, first, n)


@njit(**RECORDER)
def append_checked_lincomb_pair(t: Tape, first: int, n: int) -> int:
    """`record_lincomb_pair` of the `n` operands from `first`, already known to be pair slots in
    use (what `tuner.tape.linear.lin_record_pair` writes: parameters it checked)."""
    return _record_lincomb_pair(t, 0, first, n, 0.0, 0.0)


@njit(**RECORDER)
def record_lincomb_value(t: Tape, first: int) -> int:
    """sum_i c_i * value_i over the (value, c) operands pushed since `first`."""
    n = t.rec.counts[C_OPERANDS] - first
    if not _list_ok(t.rec.counts, t.rec.opnd_index, S_VALUE, first, n):
        first, n = _checked_list(t.rec.counts, t.rec.opnd_index, S_VALUE, first, n, tag(F_LINCOMB_VALUE))
    return _record_lincomb_value(t, 0, first, n, 0.0, 0.0)
