"""Following a template: recording positions of a known structure without writing their records.

Freezing copies each position's records out, rebased, and matches them to a template
(`tuner.tape.player`); for an evaluation whose every position has the same records (both of
Clockwork's do), that is the same template every time, written and read again per position.
A tape that *follows* the template (`tuner.tape.recording.Follow`) writes no record: each
recorder checks its record against the template's next one (tag, and each operand the slot the
template names for this position) and writes only what differs between positions, the scalars
and operand list lengths, where the position's go in the chunk freezing would make; the operands
are pushed as always. `followed_chunk` then makes that chunk: the template once, the positions'
scalars, list lengths and operands (narrowed as `tuner.tape.player.extract` narrows them),
bitwise what extracting the same recording would have given.

Anything else is not followed, never guessed at: a record that is not the template's next, a
position with more or fewer records, an operand list that is not right after the one before or
holds anything but parameters, an operand that does not fit a narrow chunk, an index error noted
by a recorder, an output slot other than the template's. `followed_chunk` then returns None and
the caller records the positions again, in full (`tuner.train.record`), which also reports a
bad index as it always does.

Recording follows the segments of a training micro-batch (`tuner.train.record`): every
position's evaluation, then every position's loss; `follow_segment` starts each, and a segment
holds all the positions in order, so the j-th temporary of a kind that segment s writes for
position i is slot ``start[s] + i * per_position[s] + j``.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from tuner.jit import JIT

from .ops import (FORM_LHS, FORM_NARY, FORM_OUT, FORM_RHS, FORM_SCALARS, KERNEL_BITS, S_NONE,
                  S_PAIR, S_VALUE, index_error)
from .player import (CH_NARY, CH_OPERANDS, CH_RECORDS, CH_SCALARS, CH_TEMPLATES, MAX_NARY,
                     N_COUNTS, NARROW_ABOVE, NARROW_BELOW, NARROW_SLOT_MAX, TI_OUTPUTS, TI_SCALARS,
                     Chunk)
from .recording import (C_EVALUATE, C_OPERANDS, C_PAIR_PARAMS, C_PAIRS, C_VALUE_PARAMS, C_VALUES,
                        FS_CUR, FS_DIVERGED, FS_HI, FS_LIST_END, FS_LISTS, FS_LO, FS_ON,
                        FS_POSITION, FS_POSITIONS, FS_ROOM, FS_SCALARS, FS_SIZE, P_LHS_AT,
                        P_LHS_SEG, P_LIST, P_RHS_AT, P_RHS_SEG, P_SCALARS, P_TAG, PLAN_FIELDS,
                        SEG_FIELDS,
                        SG_FIRST, SG_PAIR_START, SG_PAIRS, SG_STOP, SG_VALUE_START, SG_VALUES,
                        Follow, Tape)


class Template(NamedTuple):
    """A template to follow, made from a chunk whose positions all have it (`template_of`):
    its records and header as that chunk holds them, each segment's output (its place among
    the values the segment writes per position), each operand list's slot kind, and the
    `Follow` a tape checks its records against (per tape: it holds the positions' scalars)."""

    t_rec: np.ndarray     # int32[T, T_REC_FIELDS]
    t_info: np.ndarray    # int64[1, TI_OUTPUTS + segments]
    output_at: np.ndarray  # int64[segments]
    list_kind: np.ndarray  # int8[lists]
    follow: Follow


def template_of(ch: Chunk, n_value_params: int, n_pair_params: int,
                micro: int) -> Template | None:
    """The template of `ch`'s positions (extracted from a recording over that many parameters)
    if they all have one, to follow over at most `micro` positions at a time; None if they do
    not, or if it could not be followed (a segment without an output; an operand list after
    the first segment, whose operands would not lie next to the position's others)."""
    if ch.counts[CH_TEMPLATES] != 1:
        return None
    t_rec, info = ch.t_rec[: int(ch.t_first[1])], ch.t_info[0]
    n_seg = info.shape[0] - TI_OUTPUTS
    n_par = {S_VALUE: n_value_params, S_PAIR: n_pair_params}
    plan = np.zeros((len(t_rec), PLAN_FIELDS), np.int64)
    segs = np.zeros((n_seg, SEG_FIELDS), np.int64)
    where: dict = {}        # (kind, rebased slot) -> (segment, place)
    output_at = np.zeros(n_seg, np.int64)
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
            segs[s, col] += 1
            r += 1
            if kind == S_VALUE and o == out:
                output_at[s] = where[(kind, o)][1]
                break
        segs[s, SG_STOP] = r
    if r != len(t_rec) or scalars != info[TI_SCALARS]:
        return None
    state = np.zeros(FS_SIZE, np.int64)
    state[FS_SCALARS], state[FS_LISTS], state[FS_ROOM] = scalars, len(lists), micro
    follow = Follow(plan, segs, state, np.zeros(micro * scalars), np.zeros(micro * len(lists),
                                                                           np.int64))
    return Template(t_rec.copy(), ch.t_info[:1].copy(), output_at, np.array(lists, np.int8),
                    follow)


def following(tape: Tape, template: Template) -> Tape:
    """`tape` with `template`'s `Follow`, to follow it from the next `follow_segment` of segment
    0 on (and record in full until then, and after `followed_chunk`)."""
    return tape._replace(follow=template.follow)


def _close_segment(st: np.ndarray) -> None:
    """Note the segment being followed as diverged unless each of its positions wrote every
    record of it."""
    if (st[FS_CUR] != st[FS_LO] or st[FS_POSITION] != st[FS_POSITIONS]) and st[FS_DIVERGED] < 0:
        st[FS_DIVERGED] = min(st[FS_POSITION], st[FS_POSITIONS] - 1)


def follow_segment(tape: Tape, s: int, n: int) -> None:
    """Follow the template of `tape` (`following`) through segment `s` of `n` positions: from
    segment 0, on a tape just reset that does not evaluate its records (`C_EVALUATE`), then
    each segment in turn."""
    fw, c = tape.follow, tape.rec.counts
    st, segs = fw.state, fw.segs
    if s == 0:
        if c[C_EVALUATE] or not 0 < n <= st[FS_ROOM]:
            raise ValueError(f"cannot follow a template over {n} positions on this tape "
                             f"(room for {st[FS_ROOM]}, evaluating: {bool(c[C_EVALUATE])})")
        st[FS_POSITIONS], st[FS_LIST_END], st[FS_DIVERGED] = n, c[C_OPERANDS], -1
    else:
        _close_segment(st)
    segs[s, SG_VALUE_START], segs[s, SG_PAIR_START] = c[C_VALUES], c[C_PAIRS]
    st[FS_CUR] = st[FS_LO] = segs[s, SG_FIRST]
    st[FS_HI] = segs[s, SG_STOP]
    st[FS_POSITION] = 0
    st[FS_ON] = 1


def stop_following(tape: Tape) -> None:
    """Record in full again (what `followed_chunk` does too)."""
    tape.follow.state[FS_ON] = 0


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
        fits = (c > NARROW_BELOW) & (c < NARROW_ABOVE) & (np.floor(c) == c)
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


def followed_chunk(tape: Tape, template: Template, outputs: np.ndarray) -> Chunk | None:
    """The chunk `tuner.tape.player.extract` would copy out of the positions `tape` recorded
    following `template` (`follow_segment`), whose segments end at ``outputs`` (int64[segments,
    n]); or None if they did not all follow it (see the module docstring). Stops following."""
    fw, rec = tape.follow, tape.rec
    st, segs, c = fw.state, fw.segs, rec.counts
    _close_segment(st)
    stop_following(tape)
    n, n_scal, n_lists = (int(st[f]) for f in (FS_POSITIONS, FS_SCALARS, FS_LISTS))
    if (st[FS_DIVERGED] >= 0 or index_error(rec) is not None or st[FS_LIST_END] != c[C_OPERANDS]
            or outputs.shape != (len(segs), n)):
        return None
    for s in range(len(segs)):
        if not np.array_equal(outputs[s], segs[s, SG_VALUE_START] + template.output_at[s]
                              + segs[s, SG_VALUES] * np.arange(n)):
            return None
    lists = fw.lists[: n * n_lists].reshape(n, n_lists)
    if lists.size and not 0 <= lists.min() <= lists.max() <= MAX_NARY:
        return None
    m = int(c[C_OPERANDS])
    bound = np.minimum(np.where(template.list_kind == S_PAIR, c[C_PAIR_PARAMS],
                                c[C_VALUE_PARAMS]), NARROW_SLOT_MAX + 1)
    index, coef, n_opnd = np.empty(m, np.uint16), np.empty(m, np.int8), np.empty(n, np.int64)
    if not _narrowed(rec.opnd_index, rec.opnd_coef, lists, bound, index, coef, n_opnd):
        return None
    t = len(template.t_rec)
    counts = np.zeros(N_COUNTS, np.int64)
    counts[CH_TEMPLATES], counts[CH_RECORDS], counts[CH_OPERANDS] = 1, t, m
    counts[CH_SCALARS], counts[CH_NARY] = n * n_scal, n * n_lists
    return Chunk(np.array([0, t], np.int64), template.t_rec, template.t_info,
                 np.zeros(n, np.int32), n_opnd, np.full(n, n_scal, np.int64),
                 np.full(n, n_lists, np.int64), fw.scalars[: n * n_scal].copy(),
                 lists.astype(np.uint16).reshape(-1), index, coef, counts)
