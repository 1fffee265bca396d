"""Following a template: copying out positions of a known structure without matching them.

Freezing copies each position's records out of a recording, rebases its temporaries through slot
maps, and finds its template by comparing the rebased records with those of the templates so
far (`tuner.tape.player.extract`). For an evaluation whose every position has the same records
(both of Clockwork's do), that is the same template every time. `followed_chunk` reads a
recording that is expected to follow a known template (`template_of`, made from a chunk
`extract` copied out before) in one pass: each record is compared with the template's record
for its place, its operands with the slots the template names for its position, found by
arithmetic (a micro-batch records every position's evaluation, then every position's loss: the
segments of `tuner.tape.player`; within a segment every position writes as many temporaries of
each kind, so the j-th of a kind that segment s writes for position i is slot ``start[s] + i *
per_position[s] + j``); only what differs between positions is copied, the scalars, the operand
list lengths and the operands (narrowed as `extract` narrows them). The chunk is bitwise the one
`extract` would make of the same recording.

Anything else is not followed, never guessed at: a record other than the template's, more or
fewer records, an operand or output slot other than the template's, an operand list that does
not start right after the one before or holds anything but parameters, an operand that does not
fit a narrow chunk, an index error noted by a recorder, a segment that does not end at the slot
the template's does. `followed_chunk` then returns None and the caller copies the recording out
with `extract`, which reports what is wrong with it as it always does.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from tuner.jit import JIT

from .ops import (FORM_LHS, FORM_NARY, FORM_OUT, FORM_RHS, FORM_SCALARS, KERNEL_BITS, S_NONE,
                  S_PAIR, S_VALUE, index_error)
from .player import (CH_NARY, CH_OPERANDS, CH_RECORDS, CH_SCALARS, CH_TEMPLATES, MAX_NARY,
                     N_COUNTS, NARROW_SLOT_MAX, TI_OUTPUTS, TI_SCALARS, Chunk, narrow_coef)
from .recording import C_OPERANDS, C_PAIR_PARAMS, C_RECORDS, C_VALUE_PARAMS, Recording

#: `Template.plan` columns, one row per template record: its tag; each operand slot's source
#: (the segment whose records write it, -1 for a parameter) and place (the parameter, or the
#: temporary's index among those of its kind its segment writes per position); its output's
#: place (among the temporaries of its kind its own segment writes per position); its operand
#: list's ordinal (n-ary forms, else -1) and its scalars' offset among the position's.
P_TAG, P_LHS_SEG, P_LHS_AT, P_RHS_SEG, P_RHS_AT, P_OUT_AT, P_LIST, P_SCALARS = range(8)
PLAN_FIELDS = 8
#: `Template.segs` columns, one row per segment: its template records (first, stop) and the
#: value and pair temporaries it writes per position.
SG_FIRST, SG_STOP, SG_VALUES, SG_PAIRS = range(4)
SEG_FIELDS = 4


class Template(NamedTuple):
    """A template to follow, made from a chunk whose positions all have it (`template_of`):
    its records and header as that chunk holds them, the `plan` and `segs` that `followed_chunk`
    checks a recording against (a segment ends with the record of its output), each operand
    list's slot kind and a position's scalars."""

    t_rec: np.ndarray      # int32[T, T_REC_FIELDS]
    t_info: np.ndarray     # int64[1, TI_OUTPUTS + segments]
    plan: np.ndarray       # int64[T, PLAN_FIELDS]
    segs: np.ndarray       # int64[segments, SEG_FIELDS]
    list_kind: np.ndarray  # int8[lists]
    scalars: int


def template_of(ch: Chunk, n_value_params: int, n_pair_params: int) -> Template | None:
    """The template of `ch`'s positions (extracted from a recording over that many parameters)
    if they all have one; None if they do not, or if it could not be followed (a segment
    without an output; an operand list after the first segment, whose operands would not lie
    next to the position's others)."""
    if ch.counts[CH_TEMPLATES] != 1:
        return None
    t_rec, info = ch.t_rec[: int(ch.t_first[1])], ch.t_info[0]
    n_seg = info.shape[0] - TI_OUTPUTS
    n_par = {S_VALUE: n_value_params, S_PAIR: n_pair_params}
    plan = np.zeros((len(t_rec), PLAN_FIELDS), np.int64)
    segs = np.zeros((n_seg, SEG_FIELDS), np.int64)
    where: dict = {}        # (kind, rebased slot) -> (segment, place)
    lists, scalars, r = [], 0, 0
    for s in range(n_seg):
        out = int(info[TI_OUTPUTS + s])
        if out < 0:
            return None
        segs[s, SG_FIRST] = r
        while True:  # the segment's records: up to the one writing its output (`position_ranges`)
            if r == len(t_rec):
                return None
            op, o, a, b = (int(x) for x in t_rec[r])
            form = op >> KERNEL_BITS
            plan[r, P_TAG], plan[r, P_SCALARS], plan[r, P_LIST] = op, scalars, -1
            scalars += int(FORM_SCALARS[form])
            if FORM_NARY[form] != S_NONE:
                if s:
                    return None
                plan[r, P_LIST] = len(lists)
                lists.append(FORM_NARY[form])
            for kind, x, seg_col, at_col in ((FORM_LHS[form], a, P_LHS_SEG, P_LHS_AT),
                                             (FORM_RHS[form], b, P_RHS_SEG, P_RHS_AT)):
                if kind != S_NONE:
                    plan[r, seg_col], plan[r, at_col] = (
                        (-1, x) if x < n_par[kind] else where[(int(kind), x)])
            kind = int(FORM_OUT[form])
            col = SG_PAIRS if kind == S_PAIR else SG_VALUES
            where[(kind, o)] = (s, int(segs[s, col]))
            plan[r, P_OUT_AT] = segs[s, col]
            segs[s, col] += 1
            r += 1
            if kind == S_VALUE and o == out:
                break
        segs[s, SG_STOP] = r
    if r != len(t_rec) or scalars != info[TI_SCALARS]:
        return None
    return Template(t_rec.copy(), ch.t_info[:1].copy(), plan, segs, np.array(lists, np.int8),
                    scalars)


#: `_expected` columns, one row per template record: the base and the per-position step of its
#: output slot, of its lhs and of its rhs (a parameter: step 0), and whether it has an lhs / rhs
#: slot (not an n-ary record's list, nor an unused field).
E_OUT, E_OUT_STEP, E_LHS, E_LHS_STEP, E_RHS, E_RHS_STEP, E_HAS_LHS, E_HAS_RHS = range(8)
E_FIELDS = 8


@njit(**JIT)
def _expected(plan, segs, n, n_vp, n_pp):
    """Where position i's slots are in a recording of `n` positions that follows the template of
    `plan` / `segs` (see the module docstring): ``base + i * step`` for each record's output and
    operand slots (`E_*` columns)."""
    n_seg = segs.shape[0]
    first = np.empty((n_seg, 2), np.int64)   # each segment's first value / pair temporary
    step = np.empty((n_seg, 2), np.int64)    # and the temporaries it writes per position
    v, p = n_vp, n_pp
    for s in range(n_seg):
        first[s, 0], first[s, 1] = v, p
        step[s, 0], step[s, 1] = segs[s, SG_VALUES], segs[s, SG_PAIRS]
        v += n * step[s, 0]
        p += n * step[s, 1]
    e = np.zeros((plan.shape[0], E_FIELDS), np.int64)
    for s in range(n_seg):
        for t in range(segs[s, SG_FIRST], segs[s, SG_STOP]):
            form = plan[t, P_TAG] >> KERNEL_BITS
            k = 1 if FORM_OUT[form] == S_PAIR else 0
            e[t, E_OUT], e[t, E_OUT_STEP] = first[s, k] + plan[t, P_OUT_AT], step[s, k]
            for kind, seg, at, col, has in ((FORM_LHS[form], plan[t, P_LHS_SEG],
                                             plan[t, P_LHS_AT], E_LHS, E_HAS_LHS),
                                            (FORM_RHS[form], plan[t, P_RHS_SEG],
                                             plan[t, P_RHS_AT], E_RHS, E_HAS_RHS)):
                if kind != S_NONE:
                    k = 1 if kind == S_PAIR else 0
                    e[t, has] = 1
                    e[t, col] = at if seg < 0 else first[seg, k] + at
                    e[t, col + 1] = 0 if seg < 0 else step[seg, k]
    return e


@njit(**JIT)
def _followed(rec: Recording, plan, segs, e, n, scalars, lists) -> bool:
    """Whether the `n` positions of `rec` follow the template of `plan` / `segs` (`e` its
    `_expected` slots), their operand lists one after the other from the first operand to the
    last; their scalars (``scalars[i * S + k]``) and operand list lengths (``lists[i * L + j]``)
    written as it goes. (Template record by template record, each over every position: the
    checks of one loop use the same constants and fold into one flag, no branch.)"""
    n_t = plan.shape[0]
    if rec.counts[C_RECORDS] != n * n_t:
        return False
    n_scal = scalars.shape[0] // max(n, 1)
    n_lists = lists.shape[0] // max(n, 1)
    op, out, lhs, rhs, sc = rec.op, rec.out, rec.lhs, rec.rhs, rec.scalar
    ok = True
    base = 0  # the segment's first record
    for s in range(segs.shape[0]):
        first, width = segs[s, SG_FIRST], segs[s, SG_STOP] - segs[s, SG_FIRST]
        for t in range(first, first + width):
            r0 = base + t - first  # (position i's is r0 + i * width)
            tag, o, o_step = plan[t, P_TAG], e[t, E_OUT], e[t, E_OUT_STEP]
            j = plan[t, P_LIST]
            if j >= 0:  # an operand list: its start is checked below, its length kept
                for i in range(n):
                    r = r0 + i * width
                    count = rhs[r]
                    ok &= (op[r] == tag) & (out[r] == o + i * o_step) & (count >= 0) & (
                        count <= MAX_NARY)
                    lists[i * n_lists + j] = count
            else:
                a, a_step, no_a = e[t, E_LHS], e[t, E_LHS_STEP], e[t, E_HAS_LHS] == 0
                b, b_step, no_b = e[t, E_RHS], e[t, E_RHS_STEP], e[t, E_HAS_RHS] == 0
                for i in range(n):
                    r = r0 + i * width
                    ok &= ((op[r] == tag) & (out[r] == o + i * o_step)
                           & ((lhs[r] == a + i * a_step) | no_a)
                           & ((rhs[r] == b + i * b_step) | no_b))
            at = plan[t, P_SCALARS]
            for k in range(FORM_SCALARS[tag >> KERNEL_BITS]):
                for i in range(n):
                    scalars[i * n_scal + at + k] = sc[r0 + i * width, k]
        base += n * width
    # The lists (all in the first segment: `template_of`) one after the other, position after
    # position, from the first operand to the last.
    first, width = segs[0, SG_FIRST], segs[0, SG_STOP] - segs[0, SG_FIRST]
    list_end = 0
    for i in range(n):
        for t in range(first, first + width):
            j = plan[t, P_LIST]
            if j >= 0:
                ok &= lhs[i * width + t - first] == list_end
                list_end += lists[i * n_lists + j]
    return ok and list_end == rec.counts[C_OPERANDS]


@njit(**JIT)
def _narrowed(r_index, r_coef, lists, bound, index, coef, n_opnd) -> bool:
    """Copy the positions' operand lists (``lists[i, j]`` operands in list j of position i, all
    in a row from the first) into `index` / `coef` as a narrow chunk holds them, and each
    position's count into `n_opnd`: whether every slot is below its list's `bound` (the
    parameters of its kind, a narrow chunk's slots) and every coefficient an integer of i8.
    (One pass over every operand against the largest bound, which LLVM vectorises, and one
    over the lists of a smaller bound only.)"""
    top = np.uint32(bound.max()) if bound.shape[0] else np.uint32(0)
    ok = True
    for q in range(index.shape[0]):
        x = r_index[q]
        c = r_coef[q]
        fits = narrow_coef(c)
        ok &= fits & (np.uint32(x) < top)  # (a negative slot wraps to a huge one)
        index[q] = x
        coef[q] = c if fits else 0.0
    q = 0
    for i in range(lists.shape[0]):
        first = q
        for j in range(lists.shape[1]):
            count = lists[i, j]
            if bound[j] < top:
                for p in range(q, q + count):
                    ok &= np.uint32(r_index[p]) < np.uint32(bound[j])
            q += count
        n_opnd[i] = q - first
    return ok


def followed_chunk(rec: Recording, template: Template, outputs: np.ndarray) -> Chunk | None:
    """The chunk `tuner.tape.player.extract` would copy out of the positions of `rec`, whose
    segments end at ``outputs`` (int64[segments, n]), if they all follow `template`; None if
    they do not (see the module docstring)."""
    n_seg, n = outputs.shape
    segs, n_lists = template.segs, len(template.list_kind)
    if n_seg != len(segs) or index_error(rec) is not None:
        return None
    c = rec.counts
    scalars, lists = np.empty(n * template.scalars), np.empty(n * n_lists, np.int64)
    e = _expected(template.plan, segs, n, c[C_VALUE_PARAMS], c[C_PAIR_PARAMS])
    if not _followed(rec, template.plan, segs, e, n, scalars, lists):
        return None
    for s in range(n_seg):  # (each segment ends at its last record's output: `template_of`)
        last = e[segs[s, SG_STOP] - 1]
        if not np.array_equal(outputs[s], last[E_OUT] + last[E_OUT_STEP] * np.arange(n)):
            return None
    m = int(c[C_OPERANDS])
    bound = np.minimum(np.where(template.list_kind == S_PAIR, c[C_PAIR_PARAMS],
                                c[C_VALUE_PARAMS]), NARROW_SLOT_MAX + 1)
    index, coef, n_opnd = np.empty(m, np.uint16), np.empty(m, np.int8), np.empty(n, np.int64)
    lists = lists.reshape(n, n_lists)
    if not _narrowed(rec.opnd_index, rec.opnd_coef, lists, bound, index, coef, n_opnd):
        return None
    t = len(template.t_rec)
    counts = np.zeros(N_COUNTS, np.int64)
    counts[CH_TEMPLATES], counts[CH_RECORDS], counts[CH_OPERANDS] = 1, t, m
    counts[CH_SCALARS], counts[CH_NARY] = n * template.scalars, n * n_lists
    return Chunk(np.array([0, t], np.int64), template.t_rec, template.t_info,
                 np.zeros(n, np.int32), n_opnd, np.full(n, template.scalars, np.int64),
                 np.full(n, n_lists, np.int64), scalars, lists.astype(np.uint16).reshape(-1),
                 index, coef, counts)
