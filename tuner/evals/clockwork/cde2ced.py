"""Clockwork's hand-crafted evaluation (engine commit cde2ced), recorded on the tape.

Specification: docs/reference-eval.md (sections 0-7, 9-10; "spec section N" below). Every term is
a parameter pair times an integer count, so the evaluation is linear in the parameters:

* `features(pos, acc) -> phase` adds every net feature count (White minus Black; tempo +1/-1) to the
  lazy linear accumulator with `lin_add`, and returns the integer phase 0..24;
* `record_eval(tape, acc, pos) -> value index` = features, one `lin_record_pair` (one linear-
  combination record of parameter pairs), then `record_phase(tape, pair, phase / PHASE_MAX)`.

The engine's integer evaluation (spec section 5: 16-bit packing, C++ truncating division) is
`int_eval(mg, eg, phase)`. The rest is the package's contract (`tuner.evals.clockwork`): the
offsets table `Pair` (`Value` is empty), `load_params`, `evaluate_positions`, `evaluate_fen`,
`feature_counts`, `explain`; `evaluate_totals` adds the MG and EG totals.

Implementation notes. Each side is evaluated in its own frame: Black's bitboards are mirrored
vertically (a byte swap), so "forward" is always north and every relative rank is ``sq >> 3``. All
features are invariant under that mirror (square colour flips for both the bishop and the pawns; the
absolute-north "doubled" count and west-neighbour "phalanx" are mirror-symmetric), and the PSQT index
``sq_rel ^ 56`` equals the spec's ``s ^ 56`` for White and ``s`` for Black. Attacks of every piece are
computed once. The full attacker counts of spec section 4.2 are only needed at the push squares of
passed pawns, so they are computed there, looking outward from the square (the attack relation is
symmetric): a few lookups per passed pawn instead of a 2x64 table per position. Counts that are often
zero (threats, outposts, ...) are only added when non-zero, so they never reach the tape. Nothing
allocates per position.
"""
from __future__ import annotations

import os
from enum import IntEnum
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numba import njit
from tuner.jit import BORROWED, JIT, INLINE

from tuner.chess.attacks import (bishop_attacks, count_attackers, king_attacks, knight_attacks,
                                 pawn_attacks_set, rook_attacks)
from tuner.chess.bitboard import (CENTRAL_FILES, DARK_SQUARES, LIGHT_SQUARES, chebyshev, east,
                                  file_fill, flip_vertical, lsb, popcount, south_fill, west)
from tuner.chess.fen import parse_fen
from tuner.tape import lin_add, lin_clear, lin_record_pair, new_accumulator, record_phase

from .. import CPP_CLOCKWORK, Evaluation, registered_name
from ..export import round_params
from ..registry import ParamRegistry
from .common import (PHASE_MAX, RANKS_2_3, RANKS_4_6, TABLE_HEAD, U0, U1, U8, U64, Counts,
                     Evaluated, Layout, Params, add_nonzero, check_domain, fmt_pair, group_rows,
                     pack_score, positions_array, s16, score_eg, score_mg, trunc_div)


PARAMS_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "params", "clockwork.json")

# ---------------------------------------------------------------------------------------------
# The offsets table, declared once (checked against the shipped JSON by `registry()`).

class Pair(IntEnum):
    """Flat offset of every pair group (registration order, spec section 7); the member names
    are the JSON group names."""

    PAWN_MAT = 0
    KNIGHT_MAT = 1
    BISHOP_MAT = 2
    ROOK_MAT = 3
    QUEEN_MAT = 4
    TEMPO_VAL = 5
    BISHOP_PAIR_VAL = 6
    ROOK_OPEN_VAL = 7
    ROOK_SEMIOPEN_VAL = 8
    DOUBLED_PAWN_VAL = 9
    POTENTIAL_CHECKER_VAL = 10
    OUTPOST_KNIGHT_VAL = 11
    OUTPOST_BISHOP_VAL = 12
    PAWN_PUSH_THREAT_KNIGHT = 13
    PAWN_PUSH_THREAT_BISHOP = 14
    PAWN_PUSH_THREAT_ROOK = 15
    PAWN_PUSH_THREAT_QUEEN = 16
    PAWN_PHALANX = 17
    DEFENDED_PAWN = 23
    PASSED_PAWN = 28
    DEFENDED_PASSED_PUSH = 34
    BLOCKED_PASSED_PAWN = 40
    FRIENDLY_KING_PASSED_PAWN_DISTANCE = 46
    ENEMY_KING_PASSED_PAWN_DISTANCE = 54
    KNIGHT_MOBILITY = 62
    BISHOP_MOBILITY = 71
    ROOK_MOBILITY = 85
    QUEEN_MOBILITY = 100
    KING_MOBILITY = 128
    KNIGHT_KING_RING = 137
    BISHOP_KING_RING = 140
    ROOK_KING_RING = 143
    QUEEN_KING_RING = 148
    PAWN_THREAT_KNIGHT = 154
    PAWN_THREAT_BISHOP = 155
    PAWN_THREAT_ROOK = 156
    PAWN_THREAT_QUEEN = 157
    KNIGHT_THREAT_BISHOP = 158
    KNIGHT_THREAT_ROOK = 159
    KNIGHT_THREAT_QUEEN = 160
    BISHOP_THREAT_KNIGHT = 161
    BISHOP_THREAT_ROOK = 162
    BISHOP_THREAT_QUEEN = 163
    BISHOP_PAWNS = 164
    PAWN_PSQT = 173
    KNIGHT_PSQT = 221
    BISHOP_PSQT = 285
    ROOK_PSQT = 349
    QUEEN_PSQT = 413
    KING_PSQT = 477


class Value(IntEnum):
    """cde2ced has no value parameters."""


N_PAIRS = 541
N_VALUES = 0
LAYOUT = Layout("clockwork", Pair, Value, N_PAIRS, N_VALUES)
#: JSON group name -> flat offset (registration order), from `Pair`.
PAIR_OFFSETS = LAYOUT.pair_offsets()
VALUE_OFFSETS = LAYOUT.value_offsets()

# ---------------------------------------------------------------------------------------------
# Bitboard helpers (uint64 throughout, so that numba never promotes to float).


@njit(**INLINE)
def _bit(bb, sq):
    """1 if square sq is in bb, else 0 (int64)."""
    return np.int64((U64(bb) >> U64(sq)) & U1)


# ---------------------------------------------------------------------------------------------
# One side, in its own frame (it moves north). `sign` is +1 for White, -1 for Black; `us` and
# `them` are the two sides' pieces in that frame.


class Men(NamedTuple):
    """One side's piece bitboards (uint64), pawn..king."""

    P: np.uint64
    N: np.uint64
    B: np.uint64
    R: np.uint64
    Q: np.uint64
    K: np.uint64


@njit(**INLINE)
def _pieces(acc, sign, us, them):
    """PSQT, mobility, king ring, bishop pawns and pair, threats, push threats, rook files and
    outposts of one side. Returns the potential-checker count *against the other side*."""
    P, N, B, R, Q, K = us
    oP, oN, oB, oR, oQ, oK = them
    occ = P | N | B | R | Q | K | oP | oN | oB | oR | oQ | oK
    ksq = lsb(K) & 63
    oksq = lsb(oK) & 63

    pa = pawn_attacks_set(P, 0)          # our pawn attacks (our pawns move north)
    opa = pawn_attacks_set(oP, 1)        # their pawn attacks
    blocked = P & (occ >> U8)
    mob_mask = ~(blocked | (P & RANKS_2_3) | opa)
    ring = king_attacks(oksq) | oK
    chk_n = knight_attacks(oksq)
    chk_o = rook_attacks(oksq, occ)
    chk_d = bishop_attacks(oksq, occ)

    # PSQT (mirrored when our own king is on files e..h), row 0 = our 8th rank.
    x = np.int64(56) ^ (np.int64(7) * np.int64((ksq & 7) >= 4))


    bb = P
    while bb:
        s = lsb(bb)
        bb &= bb - U1
        lin_add(acc, Pair.PAWN_PSQT + (s ^ x) - 8, sign)

    checkers = np.int64(0)

    att_n = U0
    bb = N
    while bb:
        s = lsb(bb)
        bb &= bb - U1
        a = knight_attacks(s)
        att_n |= a
        lin_add(acc, Pair.KNIGHT_PSQT + (s ^ x), sign)
        lin_add(acc, Pair.KNIGHT_MOBILITY + popcount(a & mob_mask), sign)
        lin_add(acc, Pair.KNIGHT_KING_RING + popcount(a & ring), sign)
        checkers += popcount(a & chk_n)

    blocked_central = popcount(blocked & CENTRAL_FILES)
    n_light = min(8, popcount(P & LIGHT_SQUARES))
    n_dark = min(8, popcount(P & DARK_SQUARES))
    att_b = U0
    bb = B
    while bb:
        s = lsb(bb)
        bb &= bb - U1
        a = bishop_attacks(s, occ)
        att_b |= a
        lin_add(acc, Pair.BISHOP_PSQT + (s ^ x), sign)
        lin_add(acc, Pair.BISHOP_MOBILITY + popcount(a & mob_mask), sign)
        lin_add(acc, Pair.BISHOP_KING_RING + popcount(a & ring), sign)
        checkers += popcount(a & chk_d)
        light = _bit(LIGHT_SQUARES, s)
        n = light * n_light + (1 - light) * n_dark
        add_nonzero(acc, Pair.BISHOP_PAWNS + n, sign * ((1 - _bit(pa, s)) + blocked_central))

    bb = R
    while bb:
        s = lsb(bb)
        bb &= bb - U1
        a = rook_attacks(s, occ)
        lin_add(acc, Pair.ROOK_PSQT + (s ^ x), sign)
        lin_add(acc, Pair.ROOK_MOBILITY + popcount(a & mob_mask), sign)
        lin_add(acc, Pair.ROOK_KING_RING + popcount(a & ring), sign)
        checkers += popcount(a & chk_o)

    bb = Q
    while bb:
        s = lsb(bb)
        bb &= bb - U1
        a = rook_attacks(s, occ) | bishop_attacks(s, occ)
        lin_add(acc, Pair.QUEEN_PSQT + (s ^ x), sign)
        lin_add(acc, Pair.QUEEN_MOBILITY + popcount(a & mob_mask), sign)
        lin_add(acc, Pair.QUEEN_KING_RING + popcount(a & ring), sign)
        checkers += popcount(a & (chk_o | chk_d))

    a = king_attacks(ksq)
    lin_add(acc, Pair.KING_PSQT + (ksq ^ x), sign)
    lin_add(acc, Pair.KING_MOBILITY + popcount(a & mob_mask), sign)

    add_nonzero(acc, Pair.BISHOP_PAIR_VAL, sign * np.int64(popcount(B) >= 2))

    # Threats (set intersections: each attacked piece once per term).
    add_nonzero(acc, Pair.PAWN_THREAT_KNIGHT, sign * popcount(pa & oN))
    add_nonzero(acc, Pair.PAWN_THREAT_BISHOP, sign * popcount(pa & oB))
    add_nonzero(acc, Pair.PAWN_THREAT_ROOK, sign * popcount(pa & oR))
    add_nonzero(acc, Pair.PAWN_THREAT_QUEEN, sign * popcount(pa & oQ))
    add_nonzero(acc, Pair.KNIGHT_THREAT_BISHOP, sign * popcount(att_n & oB))
    add_nonzero(acc, Pair.KNIGHT_THREAT_ROOK, sign * popcount(att_n & oR))
    add_nonzero(acc, Pair.KNIGHT_THREAT_QUEEN, sign * popcount(att_n & oQ))
    add_nonzero(acc, Pair.BISHOP_THREAT_KNIGHT, sign * popcount(att_b & oN))
    add_nonzero(acc, Pair.BISHOP_THREAT_ROOK, sign * popcount(att_b & oR))
    add_nonzero(acc, Pair.BISHOP_THREAT_QUEEN, sign * popcount(att_b & oQ))

    # Pawn push threats: single pushes to empty squares, then the pushed pawn's attacks.
    pushed = (P << U8) & ~occ
    t = pawn_attacks_set(pushed, 0)
    add_nonzero(acc, Pair.PAWN_PUSH_THREAT_KNIGHT, sign * popcount(t & oN))
    add_nonzero(acc, Pair.PAWN_PUSH_THREAT_BISHOP, sign * popcount(t & oB))
    add_nonzero(acc, Pair.PAWN_PUSH_THREAT_ROOK, sign * popcount(t & oR))
    add_nonzero(acc, Pair.PAWN_PUSH_THREAT_QUEEN, sign * popcount(t & oQ))

    # Rook files.
    own_files = file_fill(P)
    their_files = file_fill(oP)
    add_nonzero(acc, Pair.ROOK_OPEN_VAL, sign * popcount(R & ~(own_files | their_files)))
    add_nonzero(acc, Pair.ROOK_SEMIOPEN_VAL, sign * popcount(R & ~own_files & their_files))

    # Outposts (current enemy pawn attacks only).
    viable = RANKS_4_6 & pa & ~opa
    add_nonzero(acc, Pair.OUTPOST_KNIGHT_VAL, sign * popcount(N & viable))
    add_nonzero(acc, Pair.OUTPOST_BISHOP_VAL, sign * popcount(B & viable))

    return checkers


@njit(**INLINE)
def _pawns(acc, sign, us, them):
    """Doubled, passed (with push/blocked/king-distance terms), phalanx and defended pawns of one
    side in its own frame."""
    P, N, B, R, Q, K = us
    oP, oN, oB, oR, oQ, oK = them
    occ = P | N | B | R | Q | K | oP | oN | oB | oR | oQ | oK
    ksq = lsb(K) & 63
    oksq = lsb(oK) & 63

    add_nonzero(acc, Pair.DOUBLED_PAWN_VAL, sign * popcount(P & (P << U8)))

    span = south_fill(oP >> U8)
    span |= east(span) | west(span)
    bb = P & ~span
    while bb:
        s = lsb(bb)
        bb &= bb - U1
        i = (s >> 3) - 1
        q = s + 8
        lin_add(acc, Pair.PASSED_PAWN + i, sign)
        # ours move north (colour 0 in our frame), theirs south
        defended = (count_attackers(q, occ, 0, P, N, B | Q, R | Q, K)
                    > count_attackers(q, occ, 1, oP, oN, oB | oQ, oR | oQ, oK))
        add_nonzero(acc, Pair.DEFENDED_PASSED_PUSH + i, sign * np.int64(defended))
        add_nonzero(acc, Pair.BLOCKED_PASSED_PAWN + i, sign * _bit(occ, q))
        lin_add(acc, Pair.FRIENDLY_KING_PASSED_PAWN_DISTANCE + chebyshev(ksq, s), sign)
        lin_add(acc, Pair.ENEMY_KING_PASSED_PAWN_DISTANCE + chebyshev(oksq, s), sign)

    bb = P & east(P)                       # pawns with an own pawn immediately west
    while bb:
        s = lsb(bb)
        bb &= bb - U1
        lin_add(acc, Pair.PAWN_PHALANX + (s >> 3) - 1, sign)

    pa = pawn_attacks_set(P, 0)
    bb = P & pa
    while bb:
        s = lsb(bb)
        bb &= bb - U1
        lin_add(acc, Pair.DEFENDED_PAWN + (s >> 3) - 2, sign)


@njit(**BORROWED)
def features(pos, acc):
    """Add every net feature count of `pos` (uint64[9]) to `acc`; return the phase (0..24)."""
    white = U64(pos[0])
    black = U64(pos[1])
    pawns = U64(pos[2])
    knights = U64(pos[3])
    bishops = U64(pos[4])
    rooks = U64(pos[5])
    queens = U64(pos[6])
    kings = U64(pos[7])
    stm = np.int64(U64(pos[8]) & U1)

    w = Men(white & pawns, white & knights, white & bishops, white & rooks, white & queens,
            white & kings)
    a = Men(black & pawns, black & knights, black & bishops, black & rooks, black & queens,
            black & kings)
    wP, wN, wB, wR, wQ, _ = w
    aP, aN, aB, aR, aQ, _ = a
    # Black in its own frame (vertical mirror), and White seen from Black's frame.
    b = Men(flip_vertical(aP), flip_vertical(aN), flip_vertical(aB), flip_vertical(aR),
            flip_vertical(aQ), flip_vertical(a.K))
    v = Men(flip_vertical(wP), flip_vertical(wN), flip_vertical(wB), flip_vertical(wR),
            flip_vertical(wQ), flip_vertical(w.K))

    add_nonzero(acc, Pair.PAWN_MAT, popcount(wP) - popcount(aP))
    add_nonzero(acc, Pair.KNIGHT_MAT, popcount(wN) - popcount(aN))
    add_nonzero(acc, Pair.BISHOP_MAT, popcount(wB) - popcount(aB))
    add_nonzero(acc, Pair.ROOK_MAT, popcount(wR) - popcount(aR))
    add_nonzero(acc, Pair.QUEEN_MAT, popcount(wQ) - popcount(aQ))
    lin_add(acc, Pair.TEMPO_VAL, 1 - 2 * stm)

    chk_vs_b = _pieces(acc, np.int64(1), w, a)
    chk_vs_w = _pieces(acc, np.int64(-1), b, v)
    # Potential checkers are a penalty for the side whose king is looked at.
    add_nonzero(acc, Pair.POTENTIAL_CHECKER_VAL, chk_vs_w - chk_vs_b)

    _pawns(acc, np.int64(1), w, a)
    _pawns(acc, np.int64(-1), b, v)

    ph = (popcount(knights) + popcount(bishops) + 2 * popcount(rooks) + 4 * popcount(queens))
    return min(ph, PHASE_MAX)


@njit(**BORROWED)
def record_eval(tape, acc, pos):
    """Record the continuous White-POV evaluation of `pos`; return its value index."""
    ph = features(pos, acc)
    pair = lin_record_pair(tape, acc)
    return record_phase(tape, pair, ph / PHASE_MAX)


# ---------------------------------------------------------------------------------------------
# Engine integer semantics (spec section 5).


@njit(**JIT)
def int_eval(mg, eg, phase):
    """The engine's `evaluate_white_pov` from integer MG, EG totals and phase (0..24): 32-bit
    packed score (eg * 65536 + mg) unpacked into 16-bit halves, blended with C++ truncating
    division by 24, narrowed to 16 bits."""
    packed = pack_score(mg, eg)
    p = np.int64(phase)
    return s16(trunc_div(score_mg(packed) * p + score_eg(packed) * (PHASE_MAX - p), PHASE_MAX))


# ---------------------------------------------------------------------------------------------
# Batch helpers (njit) and the Python convenience layer.


@njit(**JIT)
def counts_batch(positions, scratch, sums, ints, phases):
    """Dense counts of every position (the contract's `counts_batch`): ``sums[i, 0, j]``
    (int32[N, 1, n_pairs], zeroed by the caller) the net count of pair j, ``phases[i]``
    (int64[N]) the phase; ``ints`` (int64[N, 0]) is empty. Clears the accumulator `scratch`
    after each position."""
    for i in range(positions.shape[0]):
        phases[i] = features(positions[i], scratch)
        for k in range(scratch.count[0]):
            j = scratch.touched[k]
            sums[i, 0, j] = scratch.coef[j]
            scratch.coef[j] = 0
            scratch.seen[j] = 0
        scratch.count[0] = 0


@njit(**JIT)
def terms_batch(positions, acc, start, index, count, phases, first) -> int:
    """The trace of positions `first`.. (docs/trace.md): their non-zero net feature counts in the
    order `features` first adds each index (the order of the linear-combination record's
    operands), compressed: position i's are ``index[start[i]:start[i + 1]]`` (and ``count``);
    ``start[first]`` is where they begin. Returns the position it stopped at: N, or the first
    one whose terms did not fit into `index`."""
    q = start[first]
    for i in range(first, positions.shape[0]):
        phases[i] = features(positions[i], acc)
        n = acc.count[0]
        if q + n > index.shape[0]:
            lin_clear(acc)
            return i
        for k in range(n):
            j = acc.touched[k]
            c = acc.coef[j]
            if c != 0:
                index[q] = j
                count[q] = c
                q += 1
        lin_clear(acc)
        start[i + 1] = q
    return positions.shape[0]


@njit(**JIT)
def totals_batch(positions, acc, params, mg, eg, phases):
    """MG and EG totals (sum of net count * value, in float64) and phases of every position, for
    the parameter values `params` (float64[n_params, 2]). Clears `acc` after each position."""
    for i in range(positions.shape[0]):
        phases[i] = features(positions[i], acc)
        m = 0.0
        e = 0.0
        for k in range(acc.count[0]):
            j = acc.touched[k]
            c = acc.coef[j]
            m += c * params[j, 0]
            e += c * params[j, 1]
            acc.coef[j] = 0
            acc.seen[j] = 0
        acc.count[0] = 0
        mg[i] = m
        eg[i] = e


@njit(**JIT)
def int_eval_batch(mg, eg, phases, out):
    """`int_eval` elementwise over integer-valued arrays (out: int64[N])."""
    for i in range(mg.shape[0]):
        out[i] = int_eval(np.int64(mg[i]), np.int64(eg[i]), phases[i])


def new_scratch():
    """The per-thread scratch `record_eval` and `record_batch` take: a linear accumulator."""
    return new_accumulator(N_PAIRS)


@lru_cache(maxsize=None)
def registry() -> ParamRegistry:
    """The Clockwork parameter registry with the engine's defaults (shipped JSON)."""
    return LAYOUT.read(PARAMS_PATH)


#: Raise ValueError if a registry does not have the layout this evaluation indexes into.
check_layout = LAYOUT.check


def load_params(params=None, value_params=None) -> Params:
    """`Params` (pairs float64[n_pairs, 2], values float64[0]): the defaults (None), a
    ParamRegistry or JSON path, or an array of pair values. cde2ced has no value parameters:
    `value_params` must be None or empty."""
    return LAYOUT.load_params(registry(), params, value_params)


class Totals(NamedTuple):
    """`evaluate_totals`: `Evaluated` and the MG and EG totals (float64[N])."""

    int_eval: np.ndarray
    continuous: np.ndarray
    mg: np.ndarray
    eg: np.ndarray
    phase: np.ndarray


def evaluate_totals(positions, params=None, value_params=None) -> Totals:
    """`evaluate_positions` with the MG and EG totals besides. ``mg``/``eg``/``continuous`` use
    the given (possibly fractional) values; ``int_eval`` is the engine's integer evaluation after
    rounding every value to an integer with ``std::round`` (exactly the engine's for integer
    params)."""
    positions = positions_array(positions)
    values = load_params(params, value_params).pairs
    n = positions.shape[0]
    acc = new_scratch()
    mg = np.empty(n)
    eg = np.empty(n)
    phase = np.empty(n, np.int64)
    totals_batch(positions, acc, values, mg, eg, phase)
    alpha = phase / PHASE_MAX
    cont = alpha * mg + (1.0 - alpha) * eg
    rounded = round_params(values).astype(np.float64)
    if np.array_equal(rounded, values):
        img, ieg = mg, eg
    else:
        img = np.empty(n)
        ieg = np.empty(n)
        totals_batch(positions, acc, rounded, img, ieg, phase)
    ie = np.empty(n, np.int64)
    int_eval_batch(img, ieg, phase, ie)
    return Totals(ie, cont, mg, eg, phase)


def evaluate_positions(positions, params=None, value_params=None) -> Evaluated:
    """`Evaluated` (int_eval int64[N], continuous float64[N], phase int64[N]) of positions
    uint64[N, 9] with the parameters of `load_params` (see `evaluate_totals`)."""
    t = evaluate_totals(positions, params, value_params)
    return Evaluated(t.int_eval, t.continuous, t.phase)


#: The pair sums `feature_counts` returns (one: the evaluation is linear).
SUMS = ("linear",)
#: The other integer inputs (none).
INTS = ()


def feature_counts(positions) -> Counts:
    """`Counts` of positions uint64[N, 9]: sums int32[N, 1, n_pairs] (the net feature counts),
    ints int64[N, 0], phase int64[N]."""
    positions = positions_array(positions)
    n = positions.shape[0]
    counts = Counts(np.zeros((n, len(SUMS), N_PAIRS), np.int32), np.zeros((n, len(INTS)), np.int64),
                    np.empty(n, np.int64))
    counts_batch(positions, new_scratch(), *counts)
    return counts


def feature_trace(positions, terms_per_position: int = 48):
    """The trace of positions uint64[N, 9] (`terms_batch`): ``(start int64[N + 1], index
    int32[M], count int32[M], phase int64[N])``."""
    positions = positions_array(positions)
    n = positions.shape[0]
    start = np.zeros(n + 1, np.int64)
    phases = np.empty(n, np.int64)
    index = np.empty(max(n, 1) * terms_per_position, np.int32)
    count = np.empty(len(index), np.int32)
    acc, done = new_scratch(), 0
    while True:
        done = terms_batch(positions, acc, start, index, count, phases, done)
        if done == n:
            break
        index, count = np.resize(index, 2 * len(index)), np.resize(count, 2 * len(count))
    m = int(start[n])
    return start, index[:m].copy(), count[:m].copy(), phases


def evaluate_fen(fen: str, params=None, value_params=None) -> Evaluated:
    """`Evaluated` of one FEN (int, float, int), White's point of view. Raises ValueError for an
    invalid FEN or a position outside the evaluation's domain (see `check_domain`)."""
    pos = parse_fen(fen)
    check_domain(pos)
    ie, cont, phase = evaluate_positions(pos, params, value_params)
    return Evaluated(int(ie[0]), float(cont[0]), int(phase[0]))


def explain(fen: str, pos: np.ndarray, reg: ParamRegistry, int_eval: int) -> str:
    """The ``tuner eval --breakdown`` text of one position: every parameter group's net counts
    and (mg, eg) contribution (net counts times values), the phase and the blend."""
    counts = feature_counts(pos)
    ph = int(counts.phase[0])
    alpha = ph / PHASE_MAX
    rows, total = group_rows(reg.groups, counts.sums[0, 0], reg.defaults)
    cont = alpha * total[0] + (1.0 - alpha) * total[1]
    return "\n".join([f"position: {fen}", TABLE_HEAD, *rows,
                      f"{'total (MG, EG)':<36} {'':<34} {fmt_pair(total)}",
                      f"phase: {ph}/{PHASE_MAX} (alpha = {alpha:.6f})",
                      f"continuous eval: {cont:.6f}",
                      f"integer eval (White POV): {int_eval}"])


# ---------------------------------------------------------------------------------------------
# Batch recording for the trainer. Every evaluation writes this loop itself, calling its own
# record_eval directly: passing record_eval to a generic kernel as an argument would stop Numba
# from caching the kernel, and it would be recompiled in every process.


@njit(**BORROWED)
def record_batch(tape, acc, positions, rows, out):
    """Record the evaluation of ``positions[rows[i]]`` for every i; ``out[i]`` = its value index."""
    for i in range(rows.shape[0]):
        out[i] = record_eval(tape, acc, positions[rows[i]])


EVALUATION = Evaluation(registered_name(__name__), registry(), record_eval, record_batch,
                        new_scratch, evaluate=evaluate_positions, explain=explain,
                        cpp=CPP_CLOCKWORK)
