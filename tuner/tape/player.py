"""The player: freeze recorded positions into a compact store, then replay them every epoch.

A position's tape depends only on the position, never on the parameter values, so it is recorded
once. `freeze` turns a recording of many positions into a `Store`; `play` sweeps any stored
positions forward and backward over a small per-thread arena of (parameters + one position's
temporaries), as often as needed, without touching a board again. This is CppAD's split between a
recorder, which writes plain data, and a player, which sweeps a frozen, validated recording.

**Positions in a recording.** The trainer records a micro-batch in *segments*: first every
position's evaluation, then every position's loss chain. ``outputs[s, i]`` is the value slot that
ends position i's part of segment s; position i's records in segment s are the records after the
end of position i-1's part up to the one writing that slot. `position_ranges` finds them; the
eager trainer sweeps the recording itself with them, the freezer copies them out.

**What freezing stores.** Each position's records with its temporaries rebased: a parameter
keeps its slot, the j-th temporary of a kind becomes slot (parameters of that kind + j), so every
position replays in the same small arena. Records of equal structure (tags and rebased slots) are
stored once as a *template*; a position keeps only what differs: its template number, its n-ary
operand counts, its scalars and its operands as (u16 slot, i8 coefficient) where they fit (i32 /
i16 / f64 where they do not). When every slot and integer coefficient of a store fit in 16 bits
together, each operand is one u16 word instead (``slot << coef_bits | coefficient + 2^(coef_bits
- 1)``, see `tuner.tape.ops.operand`): 2 bytes an operand rather than 3. A scalar that is the same
for every position of a template (K, say) moves into the template.

**Validation, once.** Freezing refuses (`FreezeError`, naming the position, record and tag) a
recording whose index error word is set (`tuner.tape.recording`), an unknown tag, an operand
that is neither a parameter nor the output of an earlier record of the same position (a
constant leaf, another position's temporary, a slot out of range) and counts that do not fit.
The sweeps' dispatch raises on an unknown tag rather than running a last branch. A store read
back from disk (`load_store`) has not been through freezing: `validate_store` checks that it is
one freezing could have made (every field: dtypes, shapes, template records against the form
table, offsets, counts, operand slots, finite scalars) before any player sees it.

**Order.** `play` takes positions last to first and runs each position's backward sweep right
after its forward one, adding into the parameter gradients in the order in which the eager
trainer's sweeps over the recording add them: replay equals eager bitwise, by construction, since
both run the same records through the same form functions (`tuner.tape.ops.FORM_TABLE`).
"""
from __future__ import annotations

import ctypes
import functools
import math
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, types
from tuner.jit import BORROWED, INLINE, JIT
from numba.core import cgutils
from numba.extending import intrinsic

from .ops import (F_LINCOMB_PAIR, F_PHASE, FORM_LHS, FORM_NARY, FORM_OUT, FORM_RHS, FORM_SCALARS,
                  FORM_TABLE, KERNEL_BITS, LOSS_FORMS, S_NONE, S_PAIR, S_VALUE,
                  VALID_TAG, call, form_functions, index_error, operand, tag_name)
from .recording import (C_OPERANDS, C_PAIR_PARAMS, C_PAIRS, C_RECORDS, C_VALUE_PARAMS, C_VALUES,
                        Recording)

#: How many positions ahead `play` prefetches a position's header, and its operands.
PREFETCH_ROW, PREFETCH_OPERANDS = 16, 8
#: The cache lines of a position's operands prefetched without a test of the list's end (those
#: past it are lines of neighbouring positions, and a prefetch never faults): a loop to the end
#: of each list would run a number of times the predictor cannot know for a random position.
#: Longer lists prefetch the rest in a loop.
PREFETCH_LINES = 4
#: Largest operand count of one n-ary record in a store (counts are kept as u16).
MAX_NARY = np.iinfo(np.uint16).max


class FreezeError(ValueError):
    """A recording that cannot be frozen for replay; the message names position and record."""


# Freeze status codes (`_extract` returns one with the position and record it concerns).
(OK, E_UNKNOWN_TAG, E_OPERAND, E_OUTPUT, E_NARY, E_NO_OUTPUT, E_OPERAND_INDEX) = range(7)
_REASONS = {
    E_UNKNOWN_TAG: "unknown record tag",
    E_OPERAND: "reads a slot that is neither a parameter nor the output of an earlier record of "
               "the same position (a constant leaf, another position's temporary, or out of "
               "range)",
    E_OUTPUT: "writes a parameter slot or a slot written before",
    E_NARY: f"has more than {MAX_NARY} operands",
    E_NO_OUTPUT: "no record of the position writes its output slot",
    E_OPERAND_INDEX: "has an operand list outside the recording's operand buffer",
}


@intrinsic
def prefetch(typingctx, arr, i):
    """Hint the CPU to fetch ``arr[i]`` into cache (llvm.prefetch; no effect on results)."""
    if not isinstance(arr, types.Array) or not isinstance(i, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
            "llvm.prefetch.p0")
        ptr = builder.bitcast(builder.gep(ary.data, [args[1]]), i8p)
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])  # read, high locality, data cache
        return context.get_dummy_value()

    return types.void(arr, i), codegen


# ------------------------------------------------------------------------------------------------
# Positions in a recording.
# ------------------------------------------------------------------------------------------------

@njit(**JIT)
def position_ranges(rec: Recording, outputs, ranges) -> int:
    """``ranges[s, i] = (first, stop)``: the records of position i in segment s (see the module
    docstring). Returns -1, or the index s * n + i of the first output no record writes."""
    n_seg, n = outputs.shape
    r = 0
    for s in range(n_seg):
        for i in range(n):
            first = r
            o = outputs[s, i]
            while r < rec.counts[C_RECORDS] and not (
                    rec.out[r] == o and FORM_OUT[rec.op[r] >> KERNEL_BITS] == S_VALUE):
                r += 1
            if r == rec.counts[C_RECORDS]:
                return s * n + i
            r += 1
            ranges[s, i, 0] = first
            ranges[s, i, 1] = r
    return -1


# ------------------------------------------------------------------------------------------------
# Freezing.
# ------------------------------------------------------------------------------------------------

class Chunk(NamedTuple):
    """What `_extract` copies out of one recording (local templates, per-position data)."""

    t_first: np.ndarray    # int64[T+1] record range of each local template
    t_rec: np.ndarray      # int32[R, 4]: tag, out, lhs, rhs (n-ary: rhs = n-ary ordinal)
    t_info: np.ndarray     # int64[T, TI_OUTPUTS + S]: TI_* columns (hash, temps, scalars, outputs)
    tmpl: np.ndarray       # int32[N]
    n_opnd: np.ndarray     # int64[N]: operands of each position
    n_scal: np.ndarray     # int64[N]
    n_nary: np.ndarray     # int64[N]
    scal: np.ndarray       # float64[...]
    nary: np.ndarray       # uint16[...]
    index: np.ndarray      # uint16[...] or (wide) int32[...]
    coef: np.ndarray       # int8[...] or (wide) float64[...]
    counts: np.ndarray     # int64[N_COUNTS]: CH_* fields (templates, template records, ...)


#: `Chunk.t_rec` columns: tag, output, lhs, rhs.
T_REC_FIELDS = 4
#: `Chunk.counts` fields: templates, template records, scalars, n-ary counts and operands so far.
CH_TEMPLATES, CH_RECORDS, CH_SCALARS, CH_NARY, CH_OPERANDS = range(5)
N_COUNTS = 5
#: `Chunk.t_info` columns: the structure hash, value and pair temporaries, scalars, then one
#: output slot per segment from TI_OUTPUTS on.
TI_HASH, TI_VALUES, TI_PAIRS, TI_SCALARS, TI_OUTPUTS = range(5)


def _new_chunk(rec: Recording, n: int, n_seg: int, narrow: bool) -> Chunk:
    """A chunk for the `n` positions of `rec`: uninitialised (`_extract` writes every entry it
    or `_trimmed` reads) but its counts and first template start, which are 0. `narrow`: its
    operands as u16 slots and i8 coefficients (see `_extract`), else int32 and float64."""
    r, m = int(rec.counts[C_RECORDS]), int(rec.counts[C_OPERANDS])
    t_first = np.empty(n + 2, np.int64)
    t_first[0] = 0
    return Chunk(t_first, np.empty((r + 1, T_REC_FIELDS), np.int32),
                 np.empty((n + 1, TI_OUTPUTS + n_seg), np.int64), np.empty(n, np.int32),
                 np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64),
                 np.empty(2 * r + 1), np.empty(r + 1, np.uint16),
                 np.empty(m + 1, np.uint16 if narrow else np.int32),
                 np.empty(m + 1, np.int8 if narrow else np.float64), np.zeros(N_COUNTS, np.int64))


@njit(**JIT)
def _remap(x, kind, n_vp, n_pp, vmap, pmap):
    """The rebased slot of a read of slot `x` of `kind`, or -1 if it may not be read
    (`vmap` / `pmap` cover exactly the slots in use)."""
    if kind == S_VALUE:
        if 0 <= x < n_vp:
            return x
        return vmap[x] if n_vp <= x < vmap.shape[0] else -1
    if 0 <= x < n_pp:
        return x
    return pmap[x] if n_pp <= x < pmap.shape[0] else -1


@njit(**JIT)
def _mix(h, x):
    """One step of a 64-bit FNV-style hash."""
    return (h ^ np.uint64(x & 0xFFFFFFFF)) * np.uint64(1099511628211)


@njit(**INLINE)
def _structure_hash(t_rec, info, first, stop, n_cols):
    """The hash of a template: its records ``t_rec[first:stop]`` and its header ``info``
    (columns TI_VALUES .. n_cols - 1)."""
    h = np.uint64(14695981039346656037)
    for r in range(first, stop):
        for f in range(T_REC_FIELDS):
            h = _mix(h, t_rec[r, f])
    for f in range(TI_VALUES, n_cols):
        h = _mix(h, info[f])
    return np.int64(h)


@njit(**INLINE)
def _same_structure(ch: Chunk, t, first, stop, row, n_cols):
    """Whether template `t` of `ch` has the records ``t_rec[first:stop]`` and the header
    ``t_info[row]`` (columns TI_VALUES .. n_cols - 1). (The records compared as one run of
    fields, in unsigned indices: half the time of comparing them row by row, field by field.)"""
    t_first, t_rec, t_info = ch.t_first, ch.t_rec, ch.t_info
    if t_first[t + 1] - t_first[t] != stop - first:
        return False
    same = True
    for f in range(TI_VALUES, n_cols):
        same &= t_info[t, f] == t_info[row, f]
    fields = t_rec.reshape(-1)
    a = np.uint64(t_first[t] * T_REC_FIELDS)
    b = np.uint64(first * T_REC_FIELDS)
    for x in range(np.uint64((stop - first) * T_REC_FIELDS)):
        same &= fields[a + x] == fields[b + x]
    return same


#: `_extract`'s status when an operand does not fit a narrow chunk (u16 slot, i8 coefficient):
#: `extract` copies the recording out again into a wide one.
E_WIDE = 7
#: A narrow chunk's largest slot; its (integer) coefficients lie strictly between the bounds.
NARROW_SLOT_MAX = np.iinfo(np.uint16).max
NARROW_BELOW, NARROW_ABOVE = np.iinfo(np.int8).min - 1.0, np.iinfo(np.int8).max + 1.0
#: The same bound and the largest slot, as the unsigned indices of `_extract` compare them (a
#: slot that may not be read is U_UNREAD, or a negative one, above U_SLOT_MAX), and one step.
U_NARROW_SLOT_MAX = np.uint64(NARROW_SLOT_MAX)
U_SLOT_MAX = np.uint64(np.iinfo(np.int32).max)
U_UNREAD = np.uint64(np.iinfo(np.uint64).max)
U0, U1 = np.uint64(0), np.uint64(1)


@njit(**INLINE)
def narrow_coef(c) -> bool:
    """Whether coefficient `c` is one a narrow chunk holds: an integer of i8 (not a NaN)."""
    return (c > NARROW_BELOW) & (c < NARROW_ABOVE) & (np.floor(c) == c)


@njit(**INLINE)
def _copy_list(rec: Recording, ch: Chunk, q, count, w, remap, narrow, mapped):
    """Copy the `count` operands of `rec`'s list from `q` into `ch`'s from `w`: ``(unread,
    wide, top)``, whether one may not be read, whether one does not fit a narrow chunk (see
    `_extract`) and the largest slot read (unsigned: a negative one is huge). `mapped` (a
    constant at each call, so that each copy compiles to its own loop: with False, one LLVM
    vectorises): rebase the slots from `n_par` on by `slot_map` (``remap = (slot_map,
    n_par)``; `_remap`, written out in unsigned indices: no wraparound); without it every slot
    is kept as it is, what is right if `top` is below `n_par` (parameters only). The checks of
    every operand are folded into the flags, looked at after the list."""
    r_idx, r_coef, c_index, c_coef = rec.opnd_index, rec.opnd_coef, ch.index, ch.coef
    slot_map, n_par = remap
    n_map = np.uint64(slot_map.shape[0])
    unread = False
    wide = False
    top = U0
    for _ in range(count):
        x = np.uint64(np.int64(r_idx[q]))
        top = max(top, x)
        if mapped and x >= n_par:
            x = np.uint64(np.int64(slot_map[x])) if x < n_map else U_UNREAD
        unread |= x > U_SLOT_MAX
        c = r_coef[q]
        fits = (x <= U_NARROW_SLOT_MAX) & narrow_coef(c)
        wide |= not fits
        c_index[w] = x
        c_coef[w] = c if fits | (not narrow) else 0.0  # (in range for i8)
        q += U1
        w += U1
    return unread, wide, top


@njit(**BORROWED)
def _extract(rec: Recording, outputs, ranges, ch: Chunk, err, vmap, pmap, narrow):
    """Copy every position of `rec` out, rebased and validated, into `ch` (see `freeze`).

    `vmap` / `pmap` (int32, one per value / pair slot in use, all -1) map the temporaries of the
    position being copied (left all -1). On failure sets ``err = (code, position, record)`` and
    returns early. A `narrow` chunk holds operands whose slot fits u16 and whose coefficient is
    an integer of i8, what `_trimmed` would narrow a wide chunk's to: the first operand that does
    not is the failure E_WIDE. A position of the same structure as the one before is matched to
    its template without hashing.
    """
    rc = rec.counts
    n_vp, n_pp, n_opnd = rc[C_VALUE_PARAMS], rc[C_PAIR_PARAMS], rc[C_OPERANDS]
    r_op, r_out, r_lhs, r_rhs, r_sc = rec.op, rec.out, rec.lhs, rec.rhs, rec.scalar
    t_first, t_rec, t_info, tmpl = ch.t_first, ch.t_rec, ch.t_info, ch.tmpl
    c_scal, c_nary = ch.scal, ch.nary
    n_seg, n = outputs.shape
    n_cols = TI_OUTPUTS + n_seg
    cnt = ch.counts
    n_t = cnt[CH_TEMPLATES]
    cand = cnt[CH_RECORDS]                        # candidate template records start here
    w_s, w_q, w_o = cnt[CH_SCALARS], cnt[CH_NARY], cnt[CH_OPERANDS]   # where the next go
    last = -1                                     # the template of the position before
    for i in range(n):
        nv = 0
        npr = 0
        s0, q0, o0 = w_s, w_q, w_o
        k = cand
        for s in range(n_seg):
            # (the records in unsigned indices, as `position_ranges` found them: no wraparound)
            for r in range(np.uint64(ranges[s, i, 0]), np.uint64(ranges[s, i, 1])):
                op = r_op[r]
                if op >= VALID_TAG.shape[0] or not VALID_TAG[op]:
                    err[0], err[1], err[2] = E_UNKNOWN_TAG, i, r
                    return
                form = op >> KERNEL_BITS
                a = 0
                b = 0
                if FORM_NARY[form] != S_NONE:
                    first, count = r_lhs[r], r_rhs[r]
                    if count > MAX_NARY:
                        err[0], err[1], err[2] = E_NARY, i, r
                        return
                    if first < 0 or count < 0 or first + count > n_opnd:
                        err[0], err[1], err[2] = E_OPERAND_INDEX, i, r
                        return
                    slot_map = pmap if FORM_NARY[form] == S_PAIR else vmap
                    n_par = np.uint64(n_pp if FORM_NARY[form] == S_PAIR else n_vp)
                    q = np.uint64(first)
                    remap = (slot_map, n_par)
                    # copied as parameters only (the usual list), in one pass with the largest
                    # slot; copied again, rebased, if that was not one
                    unread, wide, top = _copy_list(rec, ch, q, count, np.uint64(w_o), remap,
                                                   narrow, False)
                    if top >= n_par:
                        unread, wide, _ = _copy_list(rec, ch, q, count, np.uint64(w_o), remap,
                                                     narrow, True)
                    if unread:
                        err[0], err[1], err[2] = E_OPERAND, i, r
                        return
                    if narrow and wide:
                        err[0], err[1], err[2] = E_WIDE, i, r
                        return
                    w_o += count
                    c_nary[w_q] = count
                    b = w_q - q0
                    w_q += 1
                else:
                    if FORM_LHS[form] != S_NONE:
                        a = _remap(r_lhs[r], FORM_LHS[form], n_vp, n_pp, vmap, pmap)
                    if FORM_RHS[form] != S_NONE:
                        b = _remap(r_rhs[r], FORM_RHS[form], n_vp, n_pp, vmap, pmap)
                    if a < 0 or b < 0:
                        err[0], err[1], err[2] = E_OPERAND, i, r
                        return
                for j in range(FORM_SCALARS[form]):
                    c_scal[w_s] = r_sc[r, j]
                    w_s += 1
                o = r_out[r]
                if FORM_OUT[form] == S_PAIR:
                    if o < n_pp or o >= pmap.shape[0] or pmap[o] >= 0:
                        err[0], err[1], err[2] = E_OUTPUT, i, r
                        return
                    pmap[o] = n_pp + npr
                    o = n_pp + npr
                    npr += 1
                else:
                    if o < n_vp or o >= vmap.shape[0] or vmap[o] >= 0:
                        err[0], err[1], err[2] = E_OUTPUT, i, r
                        return
                    vmap[o] = n_vp + nv
                    o = n_vp + nv
                    nv += 1
                row = t_rec[np.uint64(k)]
                row[0] = op
                row[1] = o
                row[2] = a
                row[3] = b
                k += 1
        # The template's header: temporaries, scalars, outputs (the hash when it is needed).
        info = t_info[n_t]
        info[TI_VALUES], info[TI_PAIRS], info[TI_SCALARS] = nv, npr, w_s - s0
        for s in range(n_seg):
            x = -1  # -1: no output (a tape frozen only to be swept forward)
            if outputs[s, i] >= 0:
                x = _remap(outputs[s, i], S_VALUE, n_vp, n_pp, vmap, pmap)
                if x < 0:
                    err[0], err[1], err[2] = E_NO_OUTPUT, i, -1
                    return
            info[TI_OUTPUTS + s] = x
        # Forget this position's temporaries.
        for s in range(n_seg):
            for r in range(np.uint64(ranges[s, i, 0]), np.uint64(ranges[s, i, 1])):
                if FORM_OUT[r_op[r] >> KERNEL_BITS] == S_PAIR:
                    pmap[r_out[r]] = -1
                else:
                    vmap[r_out[r]] = -1
        # An existing template of the same structure (templates are distinct: at most one is),
        # the one before first, or this one.
        found = -1
        if last >= 0 and _same_structure(ch, last, cand, k, n_t, n_cols):
            found = last
        else:
            info[TI_HASH] = _structure_hash(t_rec, info, cand, k, n_cols)
            for t in range(n_t):
                if (t != last and t_info[t, TI_HASH] == info[TI_HASH]
                        and _same_structure(ch, t, cand, k, n_t, n_cols)):
                    found = t
                    break
        if found < 0:
            found = n_t
            n_t += 1
            t_first[n_t] = k
            cand = k
        last = found
        tmpl[i] = found
        ch.n_opnd[i] = w_o - o0
        ch.n_scal[i] = w_s - s0
        ch.n_nary[i] = w_q - q0
    cnt[CH_TEMPLATES], cnt[CH_RECORDS] = n_t, cand
    cnt[CH_SCALARS], cnt[CH_NARY], cnt[CH_OPERANDS] = w_s, w_q, w_o
    err[0] = OK


def extract(rec: Recording, outputs: np.ndarray, base: int = 0, ranges=None) -> Chunk:
    """Validate and copy out every position of a recording (see the module docstring); errors
    number the positions from `base`. `ranges` (see `position_ranges`) is found if not given.
    The operands are copied into a narrow chunk (u16 slots, i8 coefficients), or, if one does
    not fit, into a wide one narrowed afterwards: the same chunk either way."""
    bad = index_error(rec)
    if bad is not None:
        raise FreezeError(f"an index out of range was recorded: {bad.describe()}")
    outputs = np.ascontiguousarray(outputs, dtype=np.int64)
    n_seg, n = outputs.shape
    missing = -1
    if ranges is None:
        ranges = np.zeros((n_seg, n, 2), np.int64)
        missing = position_ranges(rec, outputs, ranges)
    if missing >= 0:
        raise FreezeError(f"position {base + missing % n}: no record writes its output slot "
                          f"{outputs[missing // n, missing % n]} (segment {missing // n})")
    err = np.zeros(3, np.int64)
    for narrow in (True, False):
        ch = _new_chunk(rec, n, n_seg, narrow)
        _extract(rec, outputs, ranges, ch, err, np.full(rec.counts[C_VALUES], -1, np.int32),
                 np.full(rec.counts[C_PAIRS], -1, np.int32), narrow)
        if err[0] != E_WIDE:
            break
    if err[0] != OK:
        code, i, r = (int(x) for x in err)
        if r < 0:
            raise FreezeError(f"position {base + i}: {_REASONS[code]}")
        op = int(rec.op[r])
        try:
            name = tag_name(op)
        except ValueError:
            name = "?"
        raise FreezeError(f"position {base + i}, record {r} (tag {op}, {name}): "
                          f"{_REASONS[code]}")
    return _trimmed(ch)


def _narrow_index(index: np.ndarray) -> np.ndarray:
    return index.astype(np.uint16 if index.size == 0 or index.max() <= NARROW_SLOT_MAX
                        else np.int32)


@njit(**JIT)
def _coef_range(coef) -> tuple:
    """``(integral, lo, hi)`` of float64 `coef`: whether every coefficient is an integer (not a
    NaN), and their least and greatest (0 for none), in one pass."""
    integral = True
    lo = hi = 0.0
    if coef.shape[0]:
        lo = hi = coef[0]
    for x in coef:
        integral = integral and x == np.floor(x)
        lo = min(lo, x)
        hi = max(hi, x)
    return integral, lo, hi


def _narrow_coef(coef: np.ndarray) -> np.ndarray:
    integral, lo, hi = _coef_range(coef)
    for dtype in (np.int8, np.int16):
        info = np.iinfo(dtype)
        if integral and lo >= info.min and hi <= info.max:
            return coef.astype(dtype)
    return coef


def _trimmed(ch: Chunk) -> Chunk:
    """`ch` with only the filled parts, in the narrowest dtypes (concatenating chunks then
    promotes to the widest one any chunk needed)."""
    t, r, s, q, m = (int(x) for x in ch.counts)
    narrow = ch.index.dtype == np.uint16  # (a narrow chunk's: only what fits, see `_extract`)
    return ch._replace(t_first=ch.t_first[: t + 1].copy(), t_rec=ch.t_rec[:r].copy(),
                       t_info=ch.t_info[:t].copy(), scal=ch.scal[:s].copy(),
                       nary=ch.nary[:q].copy(),
                       index=ch.index[:m] if narrow else _narrow_index(ch.index[:m]),
                       coef=ch.coef[:m] if narrow else _narrow_coef(ch.coef[:m]))


class Store(NamedTuple):
    """Frozen positions: shared templates and compact per-position data (see the module
    docstring). Position p uses template ``tmpl[p]``, records ``t_first[t]:t_first[t+1]``."""

    t_first: np.ndarray   # int64[T+1]
    t_op: np.ndarray      # uint16[RT]
    t_out: np.ndarray     # int32[RT]
    t_lhs: np.ndarray     # int32[RT] (n-ary: unused)
    t_rhs: np.ndarray     # int32[RT] (n-ary: which of the position's n-ary counts)
    t_scol: np.ndarray    # int32[RT, 2]: column of `scalars`, or -1 for the constant below
    t_sconst: np.ndarray  # float64[RT, 2]
    t_temps: np.ndarray   # int32[T, 2]: value and pair temporaries
    t_out_slots: np.ndarray  # int32[T, S]: value slot of each segment's output
    t_linear: np.ndarray  # bool[T]: the template is the linear Texel case `play` runs directly
    tmpl: np.ndarray      # uint16[N]
    opnd_off: np.ndarray  # int32[N+1] (int64 past 2^31 - 1 operands)
    nary: np.ndarray      # uint16[N, Q]
    scalars: np.ndarray   # float64[N, C]
    index: np.ndarray     # uint16[M] or int32[M]
    coef: np.ndarray      # int8[M], int16[M] or float64[M]; empty when packed into `index`
    params: np.ndarray    # int64[2]: value and pair parameters
    coef_bits: np.ndarray  # int64[1]: 0, or the low bits of `index` that hold the coefficients


STORE_FORMAT = 3  # bump when the layout or meaning of a Store's arrays changes

#: Per field of a `Store`: the dtypes it may have and its number of dimensions (the comments
#: above), what `validate_store` checks first.
STORE_LAYOUT = {
    "t_first": ((np.int64,), 1), "t_op": ((np.uint16,), 1), "t_out": ((np.int32,), 1),
    "t_lhs": ((np.int32,), 1), "t_rhs": ((np.int32,), 1), "t_scol": ((np.int32,), 2),
    "t_sconst": ((np.float64,), 2), "t_temps": ((np.int32,), 2),
    "t_out_slots": ((np.int32,), 2), "t_linear": ((np.bool_,), 1), "tmpl": ((np.uint16,), 1),
    "opnd_off": ((np.int32, np.int64), 1), "nary": ((np.uint16,), 2), "scalars": ((np.float64,), 2),
    "index": ((np.uint16, np.int32), 1), "coef": ((np.int8, np.int16, np.float64), 1),
    "params": ((np.int64,), 1), "coef_bits": ((np.int64,), 1),
}
assert tuple(STORE_LAYOUT) == Store._fields
#: Most low bits of an operand word that may hold its coefficient (`_pack_into`).
MAX_COEF_BITS = 16

# `validate_store`'s codes, with the field each concerns and what is wrong with it.
(V_TAG, V_OUT, V_LHS, V_RHS, V_LIST, V_UNUSED_LHS, V_UNUSED_RHS, V_SCOL, V_SCONST, V_TEMPS,
 V_OUTS, V_NARY_WIDTH, V_TMPL, V_OFFSET, V_COUNTS, V_PADDING, V_SLOT, V_SCALAR) = range(1, 19)
_INVALID = {
    V_TAG: ("t_op", "unknown record tag"),
    V_OUT: ("t_out", "not the next temporary of its kind (records write one each, in order)"),
    V_LHS: ("t_lhs", "reads a slot that is neither a parameter nor written by an earlier record"),
    V_RHS: ("t_rhs", "reads a slot that is neither a parameter nor written by an earlier record"),
    V_LIST: ("t_rhs", "not the number of the template's next operand list"),
    V_UNUSED_LHS: ("t_lhs", "not 0 for a form that has no such operand"),
    V_UNUSED_RHS: ("t_rhs", "not 0 for a form that has no such operand"),
    V_SCOL: ("t_scol", "not the next column of `scalars`, or set for a scalar the form lacks"),
    V_SCONST: ("t_sconst", "not finite, or not 0 where the scalar is a column or unused"),
    V_TEMPS: ("t_temps", "not the temporaries the template's records write"),
    V_OUTS: ("t_out_slots", "not a value the template writes"),
    V_NARY_WIDTH: ("nary", "fewer columns than the template has operand lists"),
    V_TMPL: ("tmpl", "not a template number"),
    V_OFFSET: ("opnd_off", "decreasing"),
    V_COUNTS: ("nary", "the counts do not add up to the position's operands (opnd_off)"),
    V_PADDING: ("nary", "a count for an operand list the template does not have"),
    V_SLOT: ("index", "an operand slot that its list may not read"),
    V_SCALAR: ("scalars", "not finite"),
}


@njit(**JIT)
def _operand_fault(x, kind, values, pairs, out_of_range, unused) -> int:
    """0 if `x` is a slot of `kind` below `values` / `pairs`, or 0 for a form without that
    operand (`kind` S_NONE); else the code given for the fault."""
    if kind == S_NONE:
        return unused if x != 0 else 0
    return out_of_range if x < 0 or x >= (pairs if kind == S_PAIR else values) else 0


@njit(**JIT)
def _check_templates(st: Store, n_cols, err, list_bound, n_lists):
    """The records of every template, in order, against the form table; sets ``err = (code,
    template, record)`` at the first fault. Fills ``list_bound[t, j]``, the slots (parameters and
    the temporaries written before) that template t's operand list j may read, and
    ``n_lists[t]``, its number of lists."""
    n_vp, n_pp = st.params[0], st.params[1]
    width = st.nary.shape[1]
    for t in range(st.t_first.shape[0] - 1):
        nv = 0
        npr = 0
        nq = 0
        col = 0
        for r in range(st.t_first[t], st.t_first[t + 1]):
            err[1], err[2] = t, r
            op = np.int64(st.t_op[r])
            if op >= VALID_TAG.shape[0] or not VALID_TAG[op]:
                err[0] = V_TAG
                return
            form = op >> KERNEL_BITS
            a, b = np.int64(st.t_lhs[r]), np.int64(st.t_rhs[r])
            if FORM_NARY[form] != S_NONE:
                if a != 0:
                    err[0] = V_UNUSED_LHS
                    return
                if b != nq:
                    err[0] = V_LIST
                    return
                if nq >= width:
                    err[0] = V_NARY_WIDTH
                    return
                list_bound[t, nq] = n_pp + npr if FORM_NARY[form] == S_PAIR else n_vp + nv
                nq += 1
            else:
                code = _operand_fault(a, FORM_LHS[form], n_vp + nv, n_pp + npr, V_LHS,
                                      V_UNUSED_LHS)
                if not code:
                    code = _operand_fault(b, FORM_RHS[form], n_vp + nv, n_pp + npr, V_RHS,
                                          V_UNUSED_RHS)
                if code:
                    err[0] = code
                    return
            for j in range(2):
                c = st.t_scol[r, j]
                s = st.t_sconst[r, j]
                if c != -1 and (j >= FORM_SCALARS[form] or c != col or c >= n_cols):
                    err[0] = V_SCOL
                    return
                if c != -1:
                    col += 1
                if not np.isfinite(s) or (s != 0.0 and (c != -1 or j >= FORM_SCALARS[form])):
                    err[0] = V_SCONST
                    return
            o = np.int64(st.t_out[r])
            if FORM_OUT[form] == S_PAIR:
                ok = o == n_pp + npr
                npr += 1
            else:
                ok = o == n_vp + nv
                nv += 1
            if not ok:
                err[0] = V_OUT
                return
        err[2] = -1
        n_lists[t] = nq
        if st.t_temps[t, 0] != nv or st.t_temps[t, 1] != npr:
            err[0] = V_TEMPS
            return
        for s in range(st.t_out_slots.shape[1]):
            o = np.int64(st.t_out_slots[t, s])
            if o < n_vp or o >= n_vp + nv:
                err[0] = V_OUTS
                return
    err[0] = OK


@njit(**JIT)
def _check_positions(st: Store, n_templates, list_bound, n_lists, err):
    """Every position's header, operand counts, operand slots and scalars; sets ``err = (code,
    position)`` at the first fault. The operands are checked list by list through their largest
    (and smallest) word, a reduction the compiler vectorises."""
    bits = st.coef_bits[0]
    tmpl, off, nary, idx, scalars = st.tmpl, st.opnd_off, st.nary, st.index, st.scalars
    for p in range(tmpl.shape[0]):
        err[1] = p
        t = np.int64(tmpl[p])
        if t >= n_templates:
            err[0] = V_TMPL
            return
        q, end = off[p], off[p + 1]
        if end < q:
            err[0] = V_OFFSET
            return
        for j in range(nary.shape[1]):
            n = np.int64(nary[p, j])
            if j >= n_lists[t]:
                if n:
                    err[0] = V_PADDING
                    return
                continue
            if q + n > end:
                err[0] = V_COUNTS
                return
            lo = np.int64(0)
            hi = np.int64(0)
            for x in range(q, q + n):
                w = np.int64(idx[x])
                lo = min(lo, w)
                hi = max(hi, w)
            if n and (lo < 0 or (hi >> bits) >= list_bound[t, j]):
                err[0] = V_SLOT
                return
            q += n
        if q != end:
            err[0] = V_COUNTS
            return
        for c in range(scalars.shape[1]):
            if not np.isfinite(scalars[p, c]):
                err[0] = V_SCALAR
                return
    err[0] = OK


def _refuse(field: str, what: str) -> None:
    raise FreezeError(f"field {field}: {what}")


def validate_store(store: Store, n_value_params: int, n_pair_params: int,
                   n_positions: int | None = None, n_segments: int | None = None) -> None:
    """Check that `store` is one freezing could have made for an evaluation with these parameter
    counts (and, if given, of `n_positions` positions recorded in `n_segments` segments), so that
    no player reads or writes outside its arrays or its arena: every field's dtype and shape and
    their mutual lengths, every template record against the form table (known tag; temporaries
    written in order; operands read from parameters or earlier records; scalar columns; unused
    fields 0), the temporaries and outputs of each template, the fast linear case, and every
    position's template, operand offsets and counts, operand slots and scalars (finite). Raises
    `FreezeError` naming the field (and template, record or position) that fails. Costs one pass
    over the operands: 39 ns a clockwork position, under 2% of recording it
    (benchmarks/store_bench.py)."""
    for name, arr in zip(Store._fields, store):
        dtypes, ndim = STORE_LAYOUT[name]
        if not isinstance(arr, np.ndarray) or arr.dtype not in [np.dtype(d) for d in dtypes] \
                or arr.ndim != ndim or not arr.flags.c_contiguous:
            got = f"{arr.dtype}[{arr.shape}]" if isinstance(arr, np.ndarray) else type(arr).__name__
            _refuse(name, f"{got}, not a C-ordered {ndim}-d array of "
                          f"{'/'.join(np.dtype(d).name for d in dtypes)}")
    st = store
    if st.params.shape != (2,) or tuple(st.params) != (n_value_params, n_pair_params):
        _refuse("params", f"{st.params.tolist()}, not the evaluation's [{n_value_params}, "
                          f"{n_pair_params}] (value, pair parameters)")
    n_t, n_rec, n, m = len(st.t_first) - 1, len(st.t_op), len(st.tmpl), len(st.index)
    if n_t < 0 or st.t_first[0] != 0 or st.t_first[-1] != n_rec \
            or np.any(st.t_first[1:] <= st.t_first[:-1]):
        _refuse("t_first", f"not increasing from 0 to the {n_rec} template records")
    if n_t > np.iinfo(np.uint16).max + 1 or (n and not n_t):
        _refuse("t_first", f"{n_t} templates for {n} positions")
    for name in ("t_out", "t_lhs", "t_rhs", "t_scol", "t_sconst"):
        if len(getattr(st, name)) != n_rec or getattr(st, name).shape[1:] not in ((), (2,)):
            _refuse(name, f"shape {getattr(st, name).shape}, not one row per template record "
                          f"({n_rec})")
    if st.t_scol.shape[1:] != (2,) or st.t_sconst.shape[1:] != (2,):
        _refuse("t_scol", "not two scalars per record")
    n_seg = st.t_out_slots.shape[1]
    for name, shape in (("t_temps", (n_t, 2)), ("t_linear", (n_t,)),
                        ("t_out_slots", (n_t, n_segments or max(1, n_seg))),
                        ("tmpl", (n if n_positions is None else n_positions,)),
                        ("opnd_off", (n + 1,)), ("nary", (n, max(1, st.nary.shape[1]))),
                        ("scalars", (n, max(1, st.scalars.shape[1]))),
                        ("coef_bits", (1,))):
        if getattr(st, name).shape != shape:
            _refuse(name, f"shape {getattr(st, name).shape}, not {shape}")
    bits = int(st.coef_bits[0])
    if not 0 <= bits <= MAX_COEF_BITS or (bits and st.index.dtype != np.uint16):
        _refuse("coef_bits", f"{bits}: not 0, or 1 to {MAX_COEF_BITS} with u16 operand words")
    if st.coef.shape != ((0,) if bits else (m,)):
        _refuse("coef", f"shape {st.coef.shape}, not {(0,) if bits else (m,)} "
                        f"(coef_bits {bits})")
    if st.coef.dtype.kind == "f" and not np.all(np.isfinite(st.coef)):
        _refuse("coef", "not finite")
    if st.opnd_off[0] != 0 or st.opnd_off[-1] != m:
        _refuse("opnd_off", f"runs from {st.opnd_off[0]} to {st.opnd_off[-1]}, not from 0 to "
                            f"the {m} operands")
    err = np.zeros(3, np.int64)
    list_bound = np.zeros((n_t, st.nary.shape[1]), np.int64)
    n_lists = np.zeros(n_t, np.int64)
    _check_templates(st, st.scalars.shape[1], err, list_bound, n_lists)
    if err[0] != OK:
        code, t, r = (int(x) for x in err)
        field, what = _INVALID[code]
        where = f"template {t}" + (f", record {r - int(st.t_first[t])}" if r >= 0 else "")
        _refuse(field, f"{where}: {what}")
    recs = np.stack([st.t_op, st.t_out, st.t_lhs, st.t_rhs], axis=1).astype(np.int64)
    linear = _linear_templates(recs, st.t_first, st.t_out_slots)
    if np.any(linear != st.t_linear):
        _refuse("t_linear", f"template {int(np.argmax(linear != st.t_linear))}: not what its "
                            f"records are")
    _check_positions(st, n_t, list_bound, n_lists, err)
    if err[0] != OK:
        field, what = _INVALID[int(err[0])]
        _refuse(field, f"position {int(err[1])}: {what}")


def save_store(store: Store, path, key: str) -> None:
    """Write `store` to `path` (atomically; an uncompressed .npz whose members carry CRCs) with
    `key` (what it was built from) and a digest of its contents."""
    from tuner.fileio import atomic_open

    with atomic_open(path) as f:
        np.savez(f, **store._asdict(), key=np.array(key), format=np.array(STORE_FORMAT),
                 digest=np.array(store_digest(store)))


def load_store(path, key: str, n_value_params: int, n_pair_params: int,
               n_positions: int | None = None, n_segments: int | None = None) -> Store:
    """The store saved at `path` for `key`, of an evaluation with these parameter counts (and,
    if given, of `n_positions` positions recorded in `n_segments` segments); `FreezeError`
    saying why in one line if it is missing, was made for something else, is truncated or
    corrupted (member CRCs and the content digest), or is not a store freezing could have made
    (`validate_store`: the digest is no proof, anyone can recompute it)."""
    import zipfile

    try:
        with np.load(path) as z:
            if str(z["key"]) != key or int(z["format"]) != STORE_FORMAT:
                raise FreezeError(f"{path}: made for other data, evaluation or settings")
            store = Store(**{f: z[f] for f in Store._fields})
            digest = str(z["digest"])
    except FreezeError:
        raise
    except FileNotFoundError:
        raise FreezeError(f"{path}: not found") from None
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
        raise FreezeError(f"{path}: unreadable ({type(e).__name__}: {e})") from None
    if store_digest(store) != digest:
        raise FreezeError(f"{path}: contents do not match their digest (corrupted)")
    try:
        validate_store(store, n_value_params, n_pair_params, n_positions, n_segments)
    except FreezeError as e:
        raise FreezeError(f"{path}: not a valid store: {e}") from None
    return store


def store_digest(store: Store) -> str:
    """BLAKE2 digest of every array of `store` (dtype, shape and bytes)."""
    import hashlib

    h = hashlib.blake2b(digest_size=16)
    for name, arr in zip(Store._fields, store):
        h.update(f"{name}:{arr.dtype.str}:{arr.shape}".encode())
        h.update(np.ascontiguousarray(arr).data)
    return h.hexdigest()


def store_len(store: Store) -> int:
    return len(store.tmpl)


def store_nbytes(store: Store) -> int:
    """Bytes held by the store (templates included)."""
    return sum(a.nbytes for a in store)


def arena_size(store: Store) -> tuple[int, int]:
    """(value slots, pair slots) of an arena that can replay any position of `store`."""
    temps = store.t_temps.max(axis=0) if len(store.t_temps) else np.zeros(2, np.int64)
    return int(store.params[0] + temps[0]), int(store.params[1] + temps[1])


def _linear_templates(recs: np.ndarray, t_first: np.ndarray, out_slots: np.ndarray) -> np.ndarray:
    """`_is_linear_texel` of every template (records ``recs[t_first[t]:t_first[t + 1]]``,
    outputs ``out_slots[t]``): a store's ``t_linear``."""
    return np.array([_is_linear_texel(recs[t_first[t]: t_first[t + 1]], out_slots[t])
                     for t in range(len(t_first) - 1)], dtype=np.bool_)


def _is_linear_texel(recs: np.ndarray, out_slots: np.ndarray) -> bool:
    """Whether template records are: a linear combination, its phase blend (the first output)
    and a loss of that (the second): the shape of every linear evaluation's position."""
    return (len(recs) == 3 and len(out_slots) == 2
            and [r >> KERNEL_BITS for r in recs[:2, 0]] == [F_LINCOMB_PAIR, F_PHASE]
            and recs[2, 0] >> KERNEL_BITS in LOSS_FORMS
            and recs[1, 2] == recs[0, 1] and recs[2, 2] == recs[1, 1]
            and out_slots[0] == recs[1, 1] and out_slots[1] == recs[2, 1])


class _Growing:
    """An array filled from the front, grown in place (``ndarray.resize``: the allocator remaps
    the pages, nothing is copied) and promoted to a wider dtype or more columns when a block
    needs them. Rows allocated but never written are never touched, so a generous capacity costs
    no memory."""

    def __init__(self, dtype, width: int = 0, capacity: int = 0):
        self.width = width              # 0: one-dimensional
        self.a = np.empty(self._shape(capacity, width), dtype)
        self.n = 0

    @staticmethod
    def _shape(rows: int, width: int):
        return (rows, width) if width else (rows,)

    def widen(self, dtype, width: int = 0) -> None:
        """Room for values of `dtype` (promoted with the array's) in `width` columns (if more
        than it has; the new ones 0): a copy, which is rare."""
        dtype = np.promote_types(self.a.dtype, dtype)
        width = max(self.width, width) if self.width else 0
        if dtype != self.a.dtype or width != self.width:
            wider = np.zeros(self._shape(len(self.a), width), dtype)
            if width:
                wider[: self.n, : self.width] = self.a[: self.n]
            else:
                wider[: self.n] = self.a[: self.n]
            self.a, self.width = wider, width

    def reserve(self, k: int, dtype, width: int = 0, capacity: int = 0) -> np.ndarray:
        """The next `k` rows (a view, uninitialised: the caller writes every entry of it), room
        made for values of `dtype` in `width` columns (`widen`). A full array grows to
        `capacity` rows (the caller's estimate of all it will hold) if that is enough, else by
        half."""
        self.widen(dtype, width)
        if self.n + k > len(self.a):
            rows = capacity if capacity >= self.n + k else max(self.n + k, len(self.a) * 3 // 2)
            self.a.resize(self._shape(rows, self.width), refcheck=False)
        self.n += k
        return self.a[self.n - k: self.n]

    def append(self, block: np.ndarray, capacity: int = 0) -> None:
        rows = self.reserve(len(block), block.dtype, block.shape[1] if self.width else 0,
                            capacity)
        if self.width:
            rows[:, : block.shape[1]] = block
            rows[:, block.shape[1]:] = 0
        else:
            rows[:] = block

    def filled(self) -> np.ndarray:
        """The rows written so far (a view)."""
        return self.a[: self.n]

    def trimmed(self) -> np.ndarray:
        """The filled part (the array itself, shrunk in place: the tail's pages are returned)."""
        self.a.resize(self._shape(self.n, self.width), refcheck=False)
        return self.a


#: Operands repacked or unpacked per block (in place), so that neither needs a second copy.
PACK_BLOCK = 1 << 20


def coef_bits_needed(lo: int, hi: int) -> int:
    """The fewest bits k that hold every integer of [lo, hi] offset by 2^(k-1)."""
    return (max(-lo, hi + 1, 1) - 1).bit_length() + 1


@njit(**JIT)
def _pack_into(index, coef, bits, words):
    """Slots `index` (u16) and integer coefficients `coef` as one u16 word each into `words`,
    the coefficient offset by 2^(bits-1) in the low `bits` bits (see `tuner.tape.ops.operand`;
    they fit: `_Operands._bits_with`)."""
    offset = np.int64(1) << (bits - 1)
    for q in range(index.shape[0]):
        words[q] = np.uint16((np.int64(index[q]) << bits) | (np.int64(coef[q]) + offset))


@njit(**JIT)
def _operand_range(index, coef):
    """``(lo, hi, top)``: the least and greatest of integer coefficients `coef` and the greatest
    of slots `index`, each with 0 (one pass)."""
    lo = hi = top = 0
    for q in range(index.shape[0]):
        c = np.int64(coef[q])
        lo = min(lo, c)
        hi = max(hi, c)
        top = max(top, np.int64(index[q]))
    return lo, hi, top


class _Operands:
    """The operands of a store being built, chunk by chunk, in the layout the whole would have:
    one u16 word each (`_pack_into`) while every slot and integer coefficient so far fits in 16
    bits together (the words written so far repacked in place when the coefficients need more
    bits), else, from the first chunk that does not fit on, slots and coefficients apart (the
    words unpacked in place, the coefficients into their own array). Packing or not depends
    only on the ranges of slots and coefficients, which only widen, so the store is the one
    packing every operand at the end would give, without the coefficients ever held apart from
    slots they fit with."""

    def __init__(self):
        self.index: _Growing | None = None  # words, or slots when apart
        self.coef: _Growing | None = None   # the coefficients once apart
        self.bits = 0                       # coefficient bits of the words (0: no words yet)
        self.lo = self.hi = self.top = 0    # coefficient range and largest slot of the words
        self.coef_dtype = np.dtype(np.int8)  # of every chunk's coefficients, promoted

    def append(self, index: np.ndarray, coef: np.ndarray, capacity: int) -> None:
        """A chunk's slots and coefficients (`capacity`: operands the arrays are sized for, if
        this is the first chunk, or grown to if they are full: `_Growing.reserve`)."""
        if self.index is None:
            self.index = _Growing(index.dtype, capacity=capacity)
        self.coef_dtype = np.promote_types(self.coef_dtype, coef.dtype)
        if self.coef is None:
            bits = self._bits_with(index, coef)
            if bits >= 0:
                if len(index):
                    self._repack(bits)
                    _pack_into(index, coef, bits,
                               self.index.reserve(len(index), np.uint16, capacity=capacity))
                return
            self._unpack()
        self.index.append(index, capacity)
        self.coef.append(coef, capacity)

    def _bits_with(self, index: np.ndarray, coef: np.ndarray) -> int:
        """The coefficient bits of words holding the operands so far and these, or -1 if they do
        not fit 16 bits (0 while there are no operands)."""
        if index.dtype != np.uint16 or coef.dtype.kind != "i":
            return -1
        if not len(index):
            return self.bits
        # (0 lies in every range coef_bits_needed covers: starting from it changes no width)
        lo, hi, top = _operand_range(index, coef)
        lo, hi, top = min(self.lo, lo), max(self.hi, hi), max(self.top, top)
        bits = coef_bits_needed(lo, hi)
        if top.bit_length() + bits > 16:
            return -1
        self.lo, self.hi, self.top = lo, hi, top
        return bits

    def _blocks(self):
        words = self.index.filled()
        for lo in range(0, len(words), PACK_BLOCK):
            yield lo, words[lo: lo + PACK_BLOCK]

    def _repack(self, bits: int) -> None:
        """The words so far with `bits` coefficient bits (in place)."""
        old = self.bits
        if old and bits != old:
            shift = (1 << (bits - 1)) - (1 << (old - 1))  # from one offset to the other
            for _, w in self._blocks():
                c = ((w & ((1 << old) - 1)).astype(np.int32) + shift).astype(np.uint16)
                w >>= old
                w <<= bits
                w |= c
        self.bits = bits

    def _unpack(self) -> None:
        """The words so far back to slots (in place) and coefficients (a new array)."""
        self.coef = _Growing(self.coef_dtype, capacity=len(self.index.a))
        bits = self.bits
        self.coef.n = self.index.n
        for lo, w in self._blocks():
            c = self.coef.a[lo: lo + len(w)]
            if bits:
                c[:] = (w & ((1 << bits) - 1)).astype(np.int32) - (1 << (bits - 1))
                w >>= bits
        self.bits = 0

    def finish(self) -> tuple[np.ndarray, np.ndarray, int]:
        """``(index, coef, coef_bits)`` of the store (`coef` empty when packed)."""
        index = self.index.trimmed() if self.index is not None else np.zeros(0, np.uint16)
        if self.coef is not None:
            return index, self.coef.trimmed(), 0
        return index, np.zeros(0, np.int8 if self.bits else self.coef_dtype), self.bits


class _Scalars:
    """The scalars of a store being built, a row per position as positions come, holding per
    template only the columns (its records' scalars, in order) seen to differ between its
    positions so far: a column bitwise equal over every position of its template so far is
    held once, its value in the template's first position, and written into the rows before
    when a position first differs. So the store's scalars are never held beside the constant
    ones (K, say), and the result is the split into varying columns (in record order) and
    template constants that the whole would give."""

    def __init__(self, expected: int):
        self.rows = _Growing(np.float64, 1, expected)
        self.first = np.zeros((0, 1))           # [T, S]: each template's first scalars
        self.kept: list[list[int]] = []         # each template's varying columns, as found
        self.cols = np.zeros((0, 1), np.int64)  # [T, W]: kept, -1 after its end

    def append(self, flat: np.ndarray, counts: np.ndarray, tmpl: np.ndarray,
               past: np.ndarray) -> None:
        """The scalars of positions of templates `tmpl` (int64[n]; position i's are ``counts[i]``
        of the concatenated `flat`), after positions of templates `past`."""
        width = max(1, int(counts.max(initial=0)))  # a position's, zero-padded
        starts = _list_starts(counts)
        if width > self.first.shape[1]:
            self.first = np.pad(self.first, ((0, 0), (0, width - self.first.shape[1])))
        if len(tmpl) and tmpl.max() >= len(self.first):
            ts, at = np.unique(tmpl, return_index=True)
            new = at[ts >= len(self.first)]  # templates first seen here, in their numbers' order
            first = np.zeros((len(new), self.first.shape[1]))
            _rows_into(flat, starts[new], counts[new], first)
            self.first = np.concatenate([self.first, first])
            self.kept += [[] for _ in new]
            self.cols = np.pad(self.cols, ((0, len(new)), (0, 0)), constant_values=-1)
        # (padding is +0.0 in every row: it never differs)
        differs = np.zeros((len(self.first), width), np.bool_)
        _differing(flat.view(np.int64), starts, counts, tmpl, self.first.view(np.int64), differs)
        for t, c in zip(*np.nonzero(differs)):
            if c not in self.kept[t]:
                self._keep(int(t), int(c), past)
        _kept_into(flat, starts, counts, tmpl, self.cols,
                   self.rows.reserve(len(tmpl), np.float64, self.cols.shape[1]))

    def _keep(self, t: int, c: int, past: np.ndarray) -> None:
        """Column `c` of template `t` varies: kept from now on, and its value (its first) written
        into the rows before of positions of `t`."""
        j = len(self.kept[t])
        self.kept[t].append(c)
        if j >= self.cols.shape[1]:
            self.cols = np.pad(self.cols, ((0, 0), (0, 1)), constant_values=-1)
        self.cols[t, j] = c
        self.rows.widen(np.float64, j + 1)
        before = self.rows.filled()
        before[past == t if len(self.kept) > 1 else slice(None), j] = self.first[t, c]

    def finish(self, recs: np.ndarray, t_first: np.ndarray, tmpl: np.ndarray) -> tuple:
        """``(scalars, t_scol, t_sconst)`` of the store of templates `recs` / `t_first` and
        positions `tmpl`: each template's varying columns in record order (reordered in place
        where they were found out of order), its other scalars constants of its records."""
        rows = self.rows.trimmed()
        t_scol = np.full((len(recs), 2), -1, np.int32)
        t_sconst = np.zeros((len(recs), 2))
        for t, kept in enumerate(self.kept):
            used = FORM_SCALARS[recs[t_first[t]: t_first[t + 1], 0] >> KERNEL_BITS]
            r_of = t_first[t] + np.repeat(np.arange(len(used)), used)   # record of each column
            s_of = np.arange(len(r_of)) - np.repeat(_list_starts(used), used)  # its scalar
            if kept != sorted(kept):
                self._reorder(rows, np.argsort(kept), tmpl == t if len(self.kept) > 1 else None)
            kept = np.array(sorted(kept), np.int64)
            const = np.ones(len(r_of), bool)
            const[kept] = False
            t_sconst[r_of[const], s_of[const]] = self.first[t, : len(r_of)][const]
            t_scol[r_of[kept], s_of[kept]] = np.arange(len(kept))
        return rows, t_scol, t_sconst

    @staticmethod
    def _reorder(rows: np.ndarray, order: np.ndarray, sel: np.ndarray | None) -> None:
        """``rows[sel, :k] = rows[sel][:, order]`` (every row if `sel` is None), by blocks."""
        which = np.arange(len(rows)) if sel is None else np.flatnonzero(sel)
        for lo in range(0, len(which), PACK_BLOCK):
            r = which[lo: lo + PACK_BLOCK, None]
            rows[r, np.arange(len(order))] = rows[r, order]


def _list_starts(counts: np.ndarray) -> np.ndarray:
    """Where each of the concatenated per-position lists of `counts` entries starts."""
    return np.cumsum(counts) - counts


@njit(**JIT)
def _rows_into(flat, starts, counts, out):
    """The per-position lists of `flat` (position i has ``counts[i]`` entries from
    ``starts[i]``) as the rows of `out`, zero-padded."""
    for i in range(out.shape[0]):
        s, k = starts[i], counts[i]
        for j in range(out.shape[1]):
            out[i, j] = flat[s + j] if j < k else 0


@njit(**JIT)
def _differing(bits, starts, counts, tmpl, first, differs):
    """``differs[t, c]`` set where a position of template t has scalar column c (``counts[i]``
    of `bits` from ``starts[i]``, zero-padded to ``differs.shape[1]``) bitwise other than
    ``first[t, c]`` (both the int64 view of the float64s)."""
    for i in range(tmpl.shape[0]):
        t, s, k = tmpl[i], starts[i], counts[i]
        for c in range(differs.shape[1]):
            if (bits[s + c] if c < k else 0) != first[t, c]:
                differs[t, c] = True


@njit(**JIT)
def _kept_into(flat, starts, counts, tmpl, cols, out):
    """``out[i, j]``: position i's scalar column ``cols[tmpl[i], j]`` (0 where that is -1 or
    beyond its ``counts[i]`` scalars from ``starts[i]`` of `flat`)."""
    for i in range(out.shape[0]):
        t, s, k = tmpl[i], starts[i], counts[i]
        for j in range(out.shape[1]):
            c = cols[t, j] if j < cols.shape[1] else -1
            out[i, j] = flat[s + c] if 0 <= c < k else 0.0


#: The margin a `StoreBuilder` sizes its operand arrays with, beyond the operands the positions
#: still to come would have at the operands per position so far (`_operand_capacity`): the
#: first chunk of a micro-batch's positions (2048) estimates them within about 1 % for
#: positions in a random order (a blocks run's part), the rest closer.
OPERAND_MARGIN = 1 / 32


def offset_dtype(operands: int):
    """The dtype of a store's `opnd_off` for `operands` operands in all: int32, or int64 past
    2^31 - 1 of them."""
    return np.int32 if operands <= np.iinfo(np.int32).max else np.int64


class StoreBuilder:
    """Merges the chunks of `extract`, in position order, into one `Store` as they come: each
    chunk goes once into arrays grown in place, already in the store's layout (its operands
    packed, its scalars without the template constants: `_Operands`, `_Scalars`), so building
    costs the store's own memory, not a copy of every chunk or a wider layout besides it.
    `expected` positions (a hint) size the arrays."""

    def __init__(self, n_value_params: int, n_pair_params: int, expected: int = 0):
        self.params = np.array([n_value_params, n_pair_params], np.int64)
        self.keys: dict[bytes, int] = {}
        self.t_recs: list[np.ndarray] = []
        self.t_infos: list[np.ndarray] = []
        self.n_seg = 1
        self.expected = expected
        self.tmpl = _Growing(np.uint16, capacity=expected)
        # Operand counts after a leading 0: summed in place, they become the offsets.
        self.n_opnd = _Growing(np.int32, capacity=expected + 1)
        self.n_opnd.append(np.zeros(1, np.int32))
        self.nary = _Growing(np.uint16, 1, expected)
        self.scalars = _Scalars(expected)
        self.operands = _Operands()

    def add(self, ch: Chunk) -> None:
        n_t = int(ch.counts[CH_TEMPLATES])
        self.n_seg = ch.t_info.shape[1] - 4
        local = np.empty(n_t, np.int64)
        for t in range(n_t):
            recs = ch.t_rec[ch.t_first[t]: ch.t_first[t + 1]]
            key = recs.tobytes() + ch.t_info[t, TI_VALUES:].tobytes()
            if key not in self.keys:
                self.keys[key] = len(self.t_recs)
                self.t_recs.append(recs)
                self.t_infos.append(ch.t_info[t, TI_VALUES:])
            local[t] = self.keys[key]
        if len(self.t_recs) > np.iinfo(np.uint16).max:
            raise FreezeError(f"{len(self.t_recs)} distinct record structures: more than a "
                              f"store holds")
        n = len(ch.tmpl)
        tmpl = local[ch.tmpl]
        self.scalars.append(ch.scal, ch.n_scal, tmpl, self.tmpl.filled())
        self.tmpl.append(tmpl.astype(np.uint16))
        self.n_opnd.append(ch.n_opnd.astype(np.int32))  # (a chunk's operands fit int32)
        _rows_into(ch.nary, _list_starts(ch.n_nary), ch.n_nary,
                   self.nary.reserve(n, np.uint16, max(1, int(ch.n_nary.max(initial=0)))))
        self.operands.append(ch.index, ch.coef, self._operand_capacity(len(ch.index)))

    def _operand_capacity(self, m: int) -> int:
        """The operands of the positions so far (the last `m` of them in the chunk being added)
        and of the rest of the `expected` ones at the operands per position so far, with a
        margin of `OPERAND_MARGIN` for the rest: what the operand arrays are sized for, and
        grown to if they are full (0, growing by half, past the expected positions or before
        any). Its slack costs memory where the arrays come from the heap (a blocks run's parts,
        `tuner.train.record.StoreRecorder`), and each growth there a copy."""
        n = self.tmpl.n
        if not n or n > self.expected:
            return 0
        ops = m + (self.operands.index.n if self.operands.index is not None else 0)
        return ops + math.ceil(ops / n * (self.expected - n) * (1 + OPERAND_MARGIN))

    def finish(self) -> Store:
        """The store (the builder is spent)."""
        t_recs, n_seg = self.t_recs, self.n_seg
        tmpl = self.tmpl.trimmed()
        # (the headers without their hash: column c is TI_VALUES + c)
        info = np.array(self.t_infos, np.int64).reshape(len(t_recs), TI_OUTPUTS - TI_VALUES + n_seg)
        recs = np.concatenate(t_recs) if t_recs else np.zeros((0, 4), np.int32)
        t_first = np.zeros(len(t_recs) + 1, np.int64)
        np.cumsum([len(r) for r in t_recs], out=t_first[1:])
        # A scalar column constant over a template is in the template.
        scalars, t_scol, t_sconst = self.scalars.finish(recs, t_first, tmpl)
        opnd_off = self.n_opnd.trimmed()
        if offset_dtype(int(opnd_off.sum(dtype=np.int64))) == np.int32:
            np.cumsum(opnd_off, dtype=np.int32, out=opnd_off)
        else:  # (a copy: 8 bytes a position, for more operands than 2^31 - 1)
            opnd_off = np.cumsum(opnd_off, dtype=np.int64)
        index, coef, coef_bits = self.operands.finish()
        self.scalars = self.operands = None
        out_slots = info[:, TI_OUTPUTS - TI_VALUES:].astype(np.int32).reshape(len(t_recs), n_seg)
        return Store(
            t_first=t_first, t_op=recs[:, 0].astype(np.uint16), t_out=recs[:, 1].copy(),
            t_lhs=recs[:, 2].copy(), t_rhs=recs[:, 3].copy(), t_scol=t_scol, t_sconst=t_sconst,
            t_temps=info[:, :TI_SCALARS - TI_VALUES].astype(np.int32), t_out_slots=out_slots,
            t_linear=_linear_templates(recs, t_first, out_slots),
            tmpl=tmpl, opnd_off=opnd_off, nary=self.nary.trimmed(), scalars=scalars,
            index=index, coef=coef, params=self.params,
            coef_bits=np.array([coef_bits], np.int64))


def build_store(chunks: list[Chunk], n_value_params: int, n_pair_params: int) -> Store:
    """Merge the chunks of `extract` (in position order) into one `Store`."""
    builder = StoreBuilder(n_value_params, n_pair_params, sum(len(ch.tmpl) for ch in chunks))
    for ch in chunks:
        builder.add(ch)
    return builder.finish()


@njit(**JIT)
def _operands_into(idx, coef, bits, off, rows, index, coef_out):
    """The operands of positions `rows` of a store (``idx``, ``coef``, its `coef_bits` `bits`;
    ``off``: each position's first), read by `tuner.tape.ops.operand` into slots `index` and
    coefficients `coef_out` (their total length)."""
    w = 0
    for p in rows:
        for q in range(off[p], off[p + 1]):
            index[w], coef_out[w] = operand(idx, coef, q, bits)
            w += 1


@njit(**JIT)
def _store_scalars_into(scalars, rows, tmpl, col_start, col_src, col_const, out):
    """Every scalar of positions `rows` (templates `tmpl`) as their records read them, in record
    order, concatenated into `out`: template t's columns ``col_start[t]:col_start[t + 1]`` are
    column ``col_src[c]`` of the position's row of `scalars`, or the constant ``col_const[c]``
    where that is -1."""
    w = 0
    for i in range(rows.shape[0]):
        t = tmpl[i]
        for c in range(col_start[t], col_start[t + 1]):
            src = col_src[c]
            out[w] = scalars[rows[i], src] if src >= 0 else col_const[c]
            w += 1


@njit(**JIT)
def _store_nary_into(nary, rows, n_lists, out):
    """The n-ary counts of positions `rows` (``n_lists[i]`` of them each), concatenated into
    `out`."""
    w = 0
    for i in range(rows.shape[0]):
        for j in range(n_lists[i]):
            out[w] = nary[rows[i], j]
            w += 1


def store_chunk(store: Store, rows: np.ndarray) -> Chunk:
    """Positions `rows` of `store`, in that order, as the chunk `extract` makes of recordings of
    them: its local templates numbered in the order of their first position, every scalar in
    record order (a template constant included), the operands unpacked (in dtypes that a
    builder promotes with other chunks' as it does the recordings' chunks'). A `StoreBuilder`
    adds it as it adds those recordings' chunk, so that chunks of stores, fed in any order,
    build the store of the positions in that order (`reordered_store`). The template hashes
    are not made (the builder does not read them)."""
    rows = np.asarray(rows, np.int64)
    tmpl = store.tmpl[rows].astype(np.int64)
    seen, firsts = np.unique(tmpl, return_index=True)
    used = seen[np.argsort(firsts)]               # the templates in order of first position
    local_of = np.empty(len(store.t_first), np.int64)
    local_of[used] = np.arange(len(used))
    forms = store.t_op.astype(np.int64) >> KERNEL_BITS
    rec_scalars = FORM_SCALARS[forms]
    # The (record, scalar) pairs of every template in record order, flattened: template t's
    # are col_start[t]:col_start[t + 1]; its n-ary lists, lists_of[t].
    col_start = np.concatenate([[0], np.cumsum(rec_scalars)])[store.t_first]
    pairs = np.arange(store.t_scol.shape[1])[None, :] < rec_scalars[:, None]
    col_src, col_const = store.t_scol[pairs].astype(np.int64), store.t_sconst[pairs]
    lists_of = np.diff(np.concatenate([[0], np.cumsum(FORM_NARY[forms] != S_NONE)])[store.t_first])
    lengths = np.diff(store.t_first)[used]
    t_first = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    recs = np.repeat(store.t_first[used] - t_first[:-1], lengths) + np.arange(t_first[-1])
    t_rec = np.stack([store.t_op[recs], store.t_out[recs], store.t_lhs[recs],
                      store.t_rhs[recs]], axis=1).astype(np.int32)
    t_info = np.zeros((len(used), TI_OUTPUTS + store.t_out_slots.shape[1]), np.int64)
    t_info[:, TI_VALUES: TI_PAIRS + 1] = store.t_temps[used]
    t_info[:, TI_SCALARS] = np.diff(col_start)[used]
    t_info[:, TI_OUTPUTS:] = store.t_out_slots[used]
    n_scal = np.diff(col_start)[tmpl]
    scal = np.empty(int(n_scal.sum()))
    _store_scalars_into(store.scalars, rows, tmpl, col_start, col_src, col_const, scal)
    n_nary = lists_of[tmpl]
    nary = np.empty(int(n_nary.sum()), np.uint16)
    _store_nary_into(store.nary, rows, n_nary, nary)
    n_opnd = (store.opnd_off[rows + 1] - store.opnd_off[rows]).astype(np.int64)
    m = int(n_opnd.sum())
    index = np.empty(m, store.index.dtype)
    bits = int(store.coef_bits[0])
    if bits:
        # Coefficients of at most 8 bits are i8, else i16: the narrowest dtype of these ones
        # or not, the one that the chunks of the store's positions promote to (a coefficient
        # beyond i8 needs more than 8 bits), which is all the builder's promotion keeps.
        coef = np.empty(m, np.int8 if bits <= 8 else np.int16)
    else:  # (the dtypes of the store: the widest of its chunks', which the builder promotes to)
        coef = np.empty(m, store.coef.dtype)
    _operands_into(store.index, store.coef, bits, store.opnd_off, rows, index, coef)
    counts = np.array([len(used), len(t_rec), len(scal), len(nary), m], np.int64)
    return Chunk(t_first, t_rec, t_info, local_of[tmpl].astype(np.int32), n_opnd, n_scal,
                 n_nary, scal, nary, index, coef, counts)


def return_freed_memory() -> None:
    """Give the pages of freed memory back to the system where the C library can (glibc's
    ``malloc_trim``; nothing elsewhere). glibc keeps freed blocks smaller than its mmap threshold
    (at most 32 MB: a part's arrays, say) in its heaps for later allocations, which the
    assembled store's large (mmapped) arrays never reuse: without this, a store assembled from
    parts would hold their memory twice (measured, 2 M positions of clockwork: +420 MB against
    +245 MB for a store of 184 MB). Cheap when little was freed (a few ms for 75 MB)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim():
    """The C library's ``malloc_trim`` (None where it has none), looked up once: a run gives
    freed memory back about 80 times (`return_freed_memory`)."""
    return getattr(ctypes.CDLL(None), "malloc_trim", None)


#: The fields of a `Store` that describe its templates and its operands' layout, not its
#: positions: what parts must share to be reordered by a plain gather (`gatherable`).
LAYOUT_FIELDS = ("t_first", "t_op", "t_out", "t_lhs", "t_rhs", "t_scol", "t_sconst", "t_temps",
                 "t_out_slots", "t_linear", "params", "coef_bits")


def gatherable(parts: list[Store]) -> bool:
    """Whether the stores `parts` have one template, the same one (its records, scalar columns and
    constants), and the same operand layout (coefficient bits and dtypes, widths of the
    per-position arrays): then the store of their positions in any order is theirs gathered
    (`reordered_store`), bitwise what a `StoreBuilder` would make of them. A builder folds a
    scalar column constant over the whole, packs the operands in the bits the whole needs and
    numbers the templates in order of first position: parts that agree on all of it already,
    agree with the whole (a column constant in each with one value is constant in all, and the
    fewest coefficient bits of a union of ranges is the most any of them needs)."""
    first = parts[0]
    if len(first.t_first) != 2:
        return False
    for part in parts[1:]:
        for name in LAYOUT_FIELDS:
            a, b = getattr(first, name), getattr(part, name)
            if a.dtype != b.dtype or a.shape != b.shape or a.tobytes() != b.tobytes():
                return False
        for name in ("tmpl", "opnd_off", "nary", "scalars", "index", "coef"):
            a, b = getattr(first, name), getattr(part, name)
            if a.dtype != b.dtype or a.shape[1:] != b.shape[1:]:
                return False
    return True


@njit(**JIT)
def _is_permutation(rows, n) -> bool:
    """Whether `rows` are ``0..n - 1`` in some order."""
    if rows.shape[0] != n:
        return False
    seen = np.zeros(n, np.bool_)
    for r in rows:
        if r < 0 or r >= n or seen[r]:
            return False
        seen[r] = True
    return True


@njit(**JIT)
def _gather_into(part, rows, first, q, out) -> int:
    """Positions `rows` of store `part`, in that order, into the store arrays ``out = (tmpl,
    counts, nary, scalars, index, coef)`` from position `first` and operand `q` on
    (``counts[i]``: position i's operands); the next operand."""
    tmpl, counts, nary, scalars, index, coef = out
    for k in range(rows.shape[0]):
        r = rows[k]
        i = first + k
        tmpl[i] = part.tmpl[r]
        nary[i, :] = part.nary[r, :]
        scalars[i, :] = part.scalars[r, :]
        a, b = part.opnd_off[r], part.opnd_off[r + 1]
        counts[i] = b - a
        index[q: q + b - a] = part.index[a: b]
        if coef.shape[0]:
            coef[q: q + b - a] = part.coef[a: b]
        q += b - a
    return q


def _gathered_store(parts: list[Store], rows: Iterable[np.ndarray], threads: int) -> Store:
    """`reordered_store` of `gatherable` parts, each part's rows an order of all its positions:
    their arrays of positions gathered straight into the store's, each part freed once its
    positions are in. Each part's positions and operands have their own place in the store
    (after the parts before), so `threads` parts are gathered at once, each on its own thread
    (the compiled loop releases the GIL) while the next part's rows are made."""
    n = sum(len(part.tmpl) for part in parts)
    m = sum(int(part.opnd_off[-1]) for part in parts)
    first = np.cumsum([0] + [len(part.tmpl) for part in parts])
    first_operand = np.cumsum([0] + [int(part.opnd_off[-1]) for part in parts])
    like = parts[0]  # (not kept: each part is freed once its positions are in)
    tmpl = np.empty(n, like.tmpl.dtype)
    opnd_off = np.empty(n + 1, offset_dtype(m))
    nary = np.empty((n,) + like.nary.shape[1:], like.nary.dtype)
    scalars = np.empty((n,) + like.scalars.shape[1:], like.scalars.dtype)
    index = np.empty(m, like.index.dtype)
    coef = np.empty(0 if like.coef_bits[0] else m, like.coef.dtype)  # (empty when packed)
    # the first part's small layout arrays, not copied: holding them keeps no more of it alive
    layout = {name: getattr(like, name) for name in LAYOUT_FIELDS}
    del like
    out = (tmpl, opnd_off[1:], nary, scalars, index, coef)

    def gather(i: int, part_rows: np.ndarray) -> None:
        part, parts[i] = parts[i], None
        part_rows = np.ascontiguousarray(part_rows, dtype=np.int64)
        if not _is_permutation(part_rows, len(part.tmpl)):  # (what n and m count)
            raise ValueError(f"part {i}'s rows are not an order of its {len(part.tmpl)} positions")
        _gather_into(part, part_rows, first[i], first_operand[i], out)

    given = 0
    with ThreadPoolExecutor(threads) as pool:
        running: deque = deque()
        for i, part_rows in enumerate(rows):
            if len(running) == threads:
                running.popleft().result()
                return_freed_memory()
            running.append(pool.submit(gather, i, part_rows))
            given += 1
        for f in running:
            f.result()
    return_freed_memory()
    if given != len(parts):
        raise ValueError(f"rows were given for {first[given]} of the parts' {n} positions")
    opnd_off[0] = 0
    np.cumsum(opnd_off[1:], out=opnd_off[1:])  # (the counts summed in place)
    return Store(tmpl=tmpl, opnd_off=opnd_off, nary=nary, scalars=scalars, index=index,
                 coef=coef, **layout)


def reordered_store(parts: list[Store], rows: Iterable[np.ndarray], expected: int,
                    chunk: int, threads: int = 1) -> Store:
    """The store of positions ``rows[0]`` of ``parts[0]``, then ``rows[1]`` of ``parts[1]``, ...
    in that order, ``rows[p]`` an order of every position of part p (`rows` may be an iterator:
    each part's rows are made when its turn comes):
    bitwise the store a `StoreBuilder` makes of their recordings in that order, each part freed
    (its entry of `parts` set to None) once its positions are in; so it costs the store's own
    memory, and one part's, at most. Positions go into the builder `chunk` at a time
    (`store_chunk`), each chunk made on a second thread while the builder adds the one before
    (the two are about even: the compiled loops run at once); `expected` positions (a hint)
    size its arrays. Parts that are `gatherable` are gathered instead (the same store), on
    `threads` threads."""
    if not parts:
        raise ValueError("no stores to reorder")
    if gatherable(parts):  # (the usual case: one template, parts alike)
        return _gathered_store(parts, rows, threads)
    params = parts[0].params
    return_freed_memory()  # (what building the parts freed, and their trimmed tails)
    builder = StoreBuilder(int(params[0]), int(params[1]), expected)

    def chunks():
        for i, part_rows in enumerate(rows):
            part, parts[i] = parts[i], None
            for lo in range(0, len(part_rows), chunk):
                yield store_chunk(part, part_rows[lo: lo + chunk])
            del part
            return_freed_memory()

    made = chunks()
    with ThreadPoolExecutor(1) as pool:  # (one call of `next` at a time: the next is made
        ahead = pool.submit(next, made, None)  # after the last one's result)
        while (ch := ahead.result()) is not None:
            ahead = pool.submit(next, made, None)
            builder.add(ch)
    return builder.finish()


def freeze(rec: Recording, outputs: np.ndarray) -> Store:
    """One recording's positions as a `Store` (see `extract` and `build_store`)."""
    c = rec.counts
    return build_store([extract(rec, outputs)], int(c[C_VALUE_PARAMS]), int(c[C_PAIR_PARAMS]))


# ------------------------------------------------------------------------------------------------
# Playing.
# ------------------------------------------------------------------------------------------------

def prefetch_lines(with_tmpl: bool = True, with_nary: bool = True,
                   with_coef: bool | None = None) -> list[str]:
    """Source that prefetches what the positions a few steps ahead of ``rows[i]`` (rows are
    played last to first) read of the store: the header of the one `PREFETCH_ROW` ahead (its
    template number and n-ary counts unless the player does not read them), every cache line of
    the operands of the one `PREFETCH_OPERANDS` ahead (and of their coefficients: `with_coef`,
    None to test whether they are apart), the first `PREFETCH_LINES` without a test. It names
    the store's arrays as the players unpack them (``tmpl``, ``opnd_off``, ``nary``,
    ``scalars``, ``idx``, ``coef``): in the players' own loops, since a function handed the store
    would cost reference-count updates per position (most of the kernel's time, measured), and
    one handed the arrays too many parameters."""
    header = (["    prefetch(tmpl, pf_ahead)"] * with_tmpl
              + ["    prefetch(nary, pf_ahead * nary.shape[1])"] * with_nary)

    def lines(offsets):  # prefetch idx (and coef) at each of `offsets`
        fetch = [f"prefetch(idx, {q})" for q in offsets]
        coef = [f"prefetch(coef, {q})" for q in offsets]
        if with_coef is None:
            coef = ["if coef.shape[0]:  # (empty when packed into idx)"] + ["    " + c for c in coef]
        return fetch + coef if with_coef is not False else fetch

    # The first PREFETCH_LINES lines of the list, then the rest of a longer one in a loop.
    return ([f"if i >= {PREFETCH_ROW}:", f"    pf_ahead = rows[i - {PREFETCH_ROW}]"] + header
            + ["    prefetch(opnd_off, pf_ahead)",
               "    prefetch(scalars, pf_ahead * scalars.shape[1])",
               f"if i >= {PREFETCH_OPERANDS}:", f"    pf_ahead = rows[i - {PREFETCH_OPERANDS}]",
               "    pf_q, pf_end = opnd_off[pf_ahead], opnd_off[pf_ahead + 1]",
               "    pf_step = 64 // idx.itemsize  # operands a cache line"]
            + ["    " + line for line in lines(
                ["pf_q"] + [f"pf_q + {k} * pf_step" for k in range(1, PREFETCH_LINES)])]
            + [f"    pf_q += {PREFETCH_LINES} * pf_step", "    while pf_q < pf_end:"]
            + ["        " + line for line in lines(["pf_q"])] + ["        pf_q += pf_step"])


#: The forms the interpreter's dispatch tests first (the records most stores are made of); the
#: others follow in table order.
HOT_FORMS = (F_LINCOMB_PAIR, F_PHASE)


def dispatch_lines(forms, backward: bool, names: dict | None = None,
                   keep_partial: bool = False) -> list[str]:
    """Source of a dispatch on ``form`` over `forms`: each form's call (`tuner.tape.ops.call`,
    its arguments renamed by `names`; with `keep_partial`, a loss forward's partial kept in
    ``partial``), and for a tag of no form in `forms`, ``return op``."""
    lines = []
    for n, f in enumerate(forms):
        row = FORM_TABLE[f]
        lines.append(f"{'if' if n == 0 else 'elif'} form == {f}:  # {row.name}")
        if backward and row.bwd is None:
            lines.append("    pass  # a leaf: nothing to propagate")
        else:
            lines.append("    " + ("partial = " if row.loss and keep_partial else "")
                         + call(f, backward, names))
    return lines + ["else:", "    return op  # freezing refuses unknown tags; the caller raises"]


def _indented(lines: list[str], depth: int) -> str:
    return "\n".join("    " * depth + line for line in lines)


def interpreter_source() -> str:
    """The source of `play`, its dispatch by form generated from `tuner.tape.ops.FORM_TABLE`."""
    order = list(HOT_FORMS) + [f for f in range(len(FORM_TABLE)) if f not in HOT_FORMS]
    loss = dispatch_lines(LOSS_FORMS, False, dict(o="o2", a="o1"), keep_partial=True)
    return _PLAY.format(
        imports=", ".join(form_functions()), prefetch=_indented(prefetch_lines(), 2),
        loss=_indented(loss, 3), forward=_indented(dispatch_lines(order, False), 3),
        backward=_indented(dispatch_lines(order, True), 3))


_PLAY = '''
from tuner.tape.ops import KERNEL_MASK, {imports}


def play(st, arena, rows, seed, with_grad, outputs):
    """Play positions ``rows`` last to first: ``outputs[i]`` = the segment outputs of
    ``rows[i]``; with `with_grad`, each position's backward sweep follows its forward sweep,
    seeded with `seed` at its last output, and the parameter gradients accumulate in the arena.

    Returns -1, or the tag of a record no branch knows (the sweep stops there; freezing never
    lets one through). Rows come in any (shuffled) order: what the next positions read is
    prefetched. The dispatch by form is generated from the form table (`interpreter_source`),
    in the loop bodies, and the store's and arena's arrays are unpacked once: a function called
    per record with arrays (or with the namedtuples) would cost Numba's reference-count updates,
    several times the arithmetic; for the same reason nothing in the loops raises (an exception
    path there defeats the pruning of those updates).
    """
    val, vg, pv, pg = arena.val, arena.val_grad, arena.pair_val, arena.pair_grad
    t_first, t_op, t_out, t_lhs, t_rhs = st.t_first, st.t_op, st.t_out, st.t_lhs, st.t_rhs
    t_scol, t_sconst, t_temps, t_outs = st.t_scol, st.t_sconst, st.t_temps, st.t_out_slots
    tmpl, opnd_off, nary, scalars, idx, coef = (st.tmpl, st.opnd_off, st.nary, st.scalars,
                                                st.index, st.coef)
    v0, p0 = st.params[0], st.params[1]
    bits = st.coef_bits[0]
    n_seg = t_outs.shape[1]
    t_linear = st.t_linear
    for i in range(rows.shape[0] - 1, -1, -1):
{prefetch}
        p = rows[i]
        t = tmpl[p]
        r0, r1 = t_first[t], t_first[t + 1]
        q = np.int64(opnd_off[p])  # (its type from the start: no first compilation of a
        # form function for an int32 offset while Numba settles the type)
        if t_linear[t]:
            # A measured fast case: a linear combination, its phase blend and its loss, the
            # same form functions called in the order the general loops below call them.
            n = nary[p, 0]
            c = t_scol[r0 + 1, 0]
            alpha = t_sconst[r0 + 1, 0] if c < 0 else scalars[p, c]
            c0, c1 = t_scol[r0 + 2, 0], t_scol[r0 + 2, 1]
            s0 = t_sconst[r0 + 2, 0] if c0 < 0 else scalars[p, c0]
            s1 = t_sconst[r0 + 2, 1] if c1 < 0 else scalars[p, c1]
            o0, o1, o2 = t_out[r0], t_out[r0 + 1], t_out[r0 + 2]
            _lincomb_pair_fwd(pv, idx, coef, o0, q, n, bits)
            _phase_fwd(val, pv, o1, o0, alpha)
            op = t_op[r0 + 2]
            form = op >> KERNEL_BITS
{loss}
            outputs[i, 0] = val[o1]
            outputs[i, 1] = val[o2]
            if with_grad:
                vg[o1] = 0.0
                vg[o2] = 0.0
                pg[o0, 0] = 0.0
                pg[o0, 1] = 0.0
                vg[o2] += seed
                _loss_bwd(vg, o2, o1, partial)
                _phase_bwd(vg, pg, o1, o0, alpha)
                _lincomb_pair_bwd(pg, idx, coef, o0, q, n, bits)
            continue
        for r in range(r0, r1):
            op, o, a, b = t_op[r], t_out[r], t_lhs[r], t_rhs[r]
            form, k = op >> KERNEL_BITS, op & KERNEL_MASK
            if FORM_NARY[form] != S_NONE:
                a, b = q, nary[p, b]
                q += b
            c0, c1 = t_scol[r, 0], t_scol[r, 1]
            s0 = t_sconst[r, 0] if c0 < 0 else scalars[p, c0]
            s1 = t_sconst[r, 1] if c1 < 0 else scalars[p, c1]
{forward}
        for s in range(n_seg):
            o = t_outs[t, s]
            outputs[i, s] = val[o] if o >= 0 else np.nan
        if not with_grad:
            continue
        for j in range(v0, v0 + t_temps[t, 0]):
            vg[j] = 0.0
        for j in range(p0, p0 + t_temps[t, 1]):
            pg[j, 0] = 0.0
            pg[j, 1] = 0.0
        vg[t_outs[t, n_seg - 1]] += seed
        for r in range(r1 - 1, r0 - 1, -1):
            op, o, a, b = t_op[r], t_out[r], t_lhs[r], t_rhs[r]
            form, k = op >> KERNEL_BITS, op & KERNEL_MASK
            if FORM_NARY[form] != S_NONE:
                b = nary[p, b]
                q -= b
                a = q
            c0, c1 = t_scol[r, 0], t_scol[r, 1]
            s0 = t_sconst[r, 0] if c0 < 0 else scalars[p, c0]
            s1 = t_sconst[r, 1] if c1 < 0 else scalars[p, c1]
{backward}
    return -1
'''

# `play` is compiled from its generated source, under this file's name: Numba caches its machine
# code like the rest of this module's (the cache folder is named after the package's sources, so
# a changed form table never meets code compiled from another).
exec(compile(interpreter_source(), __file__, "exec"), globals())
play = njit(**JIT)(play)  # noqa: F821 (defined by the exec above)


# ------------------------------------------------------------------------------------------------
# A whole tape as one position: what the Python front end and the tests sweep.
# ------------------------------------------------------------------------------------------------

def freeze_tape(tape, output: int = -1) -> Store:
    """Every record of `tape` as one stored position whose output is value slot `output` (-1:
    none, for forward sweeps only). Every slot of a tape is written by a record in slot order,
    so the rebased slots are the tape's own and the store plays in the tape's arena."""
    rec = tape.rec
    n_rec = int(rec.counts[C_RECORDS])
    outputs = np.array([[output]], np.int64)
    ranges = np.array([[[0, n_rec]]], np.int64)
    c = rec.counts
    store = build_store([extract(rec, outputs, ranges=ranges)], int(c[C_VALUE_PARAMS]),
                        int(c[C_PAIR_PARAMS]))
    if tuple(store.t_temps[0]) != (c[C_VALUES] - c[C_VALUE_PARAMS], c[C_PAIRS] - c[C_PAIR_PARAMS]):
        raise FreezeError("the tape has slots that no record writes")
    return store


def check_played(status: int) -> None:
    """Raise if `play` stopped at a record tag it does not know."""
    if status >= 0:
        raise FreezeError(f"unknown record tag {status} in a sweep")


def forward(tape) -> None:
    """Recompute every record of `tape` in order from the current parameter values."""
    if tape.rec.counts[C_RECORDS]:
        check_played(play(freeze_tape(tape), tape.arena, np.zeros(1, np.int64), 0.0, False,
                          np.zeros((1, 1))))


def backward(tape, output: int) -> None:
    """Gradients of value `output` with respect to every slot: temporary gradients are cleared
    first; parameter gradients accumulate (``+=``) across calls until `zero_grad`."""
    if output < 0:
        raise ValueError(f"backward needs a value slot to start from, got {output}")
    check_played(play(freeze_tape(tape, output), tape.arena, np.zeros(1, np.int64), 1.0, True,
                      np.zeros((1, 1))))
