"""Clockwork's hand-crafted evaluation at engine commit 10d79e6, recorded on the tape.

Specification: docs/reference-eval-head.md (a delta to the cde2ced docs/reference-eval.md; its
data in tests/data/spec/clockwork-head/) and the engine's src/evaluation.cpp, src/eval_types.hpp
at 10d79e6, which win where they disagree. Unlike cde2ced the evaluation is not linear in its
parameters:

    L    = sum of pair parameters times integer counts (material, PSQT, pawns, pieces, threats,
           ...; tempo included: + if White is to move)
    A_W  = the king-attack pair sum of Black's king (White attacking), A_B the mirror image
    S    = L + act(A_W) - act(A_B),  act(x) = a * sigmoid(x / 32 + c / 32) per component
    S'   = winnable(S): eg += w (w negated when eg < 0), clamped so that eg keeps its sign
    S''  = eg scale: eg * alpha / 128, alpha chosen by the strong side (White iff eg > 0)
    eval = phase blend of S'' (p / 24)

with a = KING_SAFETY_ACTIVATION.a and c = .c (pairs 625, 626) and w a linear combination of the
five WINNABLE_* value parameters. `features(pos, scratch)` computes every integer input: the
counts of L, A_W and A_B into three lazy linear accumulators and, in ``scratch.ints``, the
winnable counts (in value-parameter order, so count k multiplies value parameter k), the two
possible alphas and the phase.

Two forms follow from the same features:

* the engine's integer evaluation (`int_steps`): 32-bit packed scores read as 16-bit halves,
  the king-safety sigmoid from a 256-entry table built from the current a and c with fixed-point
  interpolation, C++ truncating divisions;
* the continuous form on the tape (`record_eval`), which the engine's tuner differentiates:
  three linear-combination records, the sigmoid ops, S as a pair add and a pair subtraction
  (fixed slots: no list of three operands stored per position), then `record_add_winnable_eg`,
  `record_eg_scale_by_sign` and `record_phase`. Every choice that depends on parameter values
  (signs of eg, the clamp, the strong side) happens inside those ops at each sweep.

Implementation notes. Each side is evaluated in its own frame, as in `cde2ced`:
Black's bitboards are mirrored vertically, so "forward" is north and relative ranks are ``sq >>
3``; ``scratch.board[s, OWN|THEM, type]`` holds the pieces seen from side s (s = 0 White, 1
Black). Attack sets are computed once per piece, piece type by piece type for both sides (rooks
need both sides' minor attacks, queens the rooks'), and kept per side in its own frame in
``scratch.sets``; the other side's sets are one byte swap away. Passed-pawn push squares look up
their attacker counts from the square outward (`count_attackers`). Nothing allocates per position.
"""
from __future__ import annotations

import math
import os
from enum import IntEnum
from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numba import njit
from tuner.jit import BORROWED, JIT, INLINE

from tuner.chess.attacks import (bishop_attacks, count_attackers, king_attacks, knight_attacks,
                                 pawn_attacks_set, piece_attacks, rook_attacks)
from tuner.chess.bitboard import (CENTRAL_FILES, DARK_SQUARES, LIGHT_SQUARES, chebyshev, east,
                                  file_fill, file_mask, file_of, flip_vertical, lsb, north_east,
                                  north_fill, north_west, popcount, rank_of, south_fill, test_bit,
                                  west)
from tuner.chess.fen import parse_fen
from tuner.chess.position import (BISHOP, BLACK, KING, KNIGHT, PAWN, QUEEN, ROOK, W_BLACK, W_META,
                                  W_PAWN, W_WHITE, WHITE)
from tuner.tape import (LinearAccumulator, lin_add, lin_clear,
                        lin_record_pair, new_accumulator, new_tape, operand_mark, push_operand,
                        record_add_winnable_eg, record_eg_scale_by_sign,
                        record_lincomb_value, record_pair_add, record_pair_mul,
                        record_pair_sigmoid_sum, record_pair_sub, record_phase, set_params)

from .. import CPP_CLOCKWORK, Evaluation, registered_name
from ..export import round_half_away, round_params
from ..registry import ParamRegistry
from .common import (PHASE_MAX, RANKS_1_5, RANKS_2_3, RANKS_4_6, TABLE_HEAD, U0, U1, U8, U64,
                     Counts, Evaluated, Layout, Params, add_nonzero, add_packed, check_domain,
                     fmt_pair, group_rows, pack_score, positions_array, s16, score_eg, score_mg,
                     sub_packed, trunc_div)


PARAMS_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "params",
                           "clockwork-10d79e6.json")

# ---------------------------------------------------------------------------------------------
# The offsets table, declared once (checked against the shipped JSON by `registry()`).


class Pair(IntEnum):
    """Flat offset of every pair group (registration order); the member names are the JSON group
    names, but for the two of `JSON_NAMES`."""

    PAWN_MAT = 0                      # MAT + t for piece type t (pawn..queen)
    TEMPO_VAL = 5
    BISHOP_XRAY_PAWNS = 6
    BISHOP_PAIR_VAL = 7
    ROOK_OPEN_VAL = 8
    ROOK_SEMIOPEN_VAL = 9
    MINOR_BEHIND_PAWN = 10
    RESTRICTED_SQUARES = 11
    DOUBLED_PAWN_VAL = 12
    ISOLATED_PAWN_VAL = 13
    POTENTIAL_CHECKER_VAL = 14
    OUTPOST_KNIGHT_VAL = 15
    OUTPOST_BISHOP_VAL = 16
    PAWN_PUSH_THREAT_KNIGHT = 17      # + t - KNIGHT for t = knight..queen
    PAWN_PHALANX = 21
    DEFENDED_PAWN = 27
    PASSED_PAWN = 32
    PASSED_CLEAR_STOPPERS = 38
    PASSED_CLEAR_FORWARD = 44
    DEFENDED_PASSED_PUSH = 50
    BLOCKED_PASSED_PAWN = 56
    FRIENDLY_KING_PASSED_PAWN_DISTANCE = 62
    ENEMY_KING_PASSED_PAWN_DISTANCE = 70
    KNIGHT_MOBILITY = 78
    BISHOP_MOBILITY = 87
    ROOK_MOBILITY = 101
    QUEEN_MOBILITY = 116
    PAWN_THREAT_KNIGHT = 144          # + t - KNIGHT for t = knight..queen
    MINOR_THREAT = 148                # + t for the threatened piece's type t (pawn..king)
    ROOK_THREAT = 154                 # + t likewise
    KING_THREAT = 160
    HANGING_PAWN = 161
    HANGING_NON_PAWN = 162
    KNIGHT_ON_QUEEN = 163             # + 1 if the attacking side has no queen
    BISHOP_ON_QUEEN = 165
    ROOK_ON_QUEEN = 167
    BISHOP_PAWNS = 169
    ROOK_LINEUP = 178
    PAWN_PSQT = 179
    KNIGHT_PSQT = 227
    BISHOP_PSQT = 291
    ROOK_PSQT = 355
    QUEEN_PSQT = 419
    KING_PSQT = 483
    KS_NO_QUEEN = 547
    PT_INNER_RING_ATTACKS = 548       # + t for the attacking piece type t (pawn..queen)
    PT_OUTER_RING_ATTACKS = 553
    KS_FLANK_ATTACK = 558
    KS_FLANK_DEFENSE = 559
    KS_FLANK_DOUBLE_ATTACK = 560
    KS_FLANK_DOUBLE_DEFENSE = 561
    KING_SHELTER = 562                # [edge][rank], 4 x 7
    BLOCKED_SHELTER_STORM = 590       # [rank]
    SHELTER_STORM = 597               # [edge][rank], 4 x 7
    KS_ACTIVATION_A = 625             # KING_SAFETY_ACTIVATION.a
    KS_ACTIVATION_C = 626             # KING_SAFETY_ACTIVATION.c


class Value(IntEnum):
    """Flat offset of every value group (the winnable terms)."""

    WINNABLE_PAWNS = 0
    WINNABLE_SYM = 1
    WINNABLE_ASYM = 2
    WINNABLE_PAWN_ENDGAME = 3
    WINNABLE_BIAS = 4


N_PAIRS = 627
N_VALUES = len(Value)
#: Pair members whose JSON group name is not the member name.
JSON_NAMES = (("KS_ACTIVATION_A", "KING_SAFETY_ACTIVATION.a"),
              ("KS_ACTIVATION_C", "KING_SAFETY_ACTIVATION.c"))
LAYOUT = Layout("clockwork-10d79e6", Pair, Value, N_PAIRS, N_VALUES, JSON_NAMES)
#: JSON group name -> flat pair offset, for the groups this module indexes by name.
PAIR_OFFSETS = LAYOUT.pair_offsets()
VALUE_OFFSETS = LAYOUT.value_offsets()

# Board geometry (a1 = 0 ... h8 = 63, 8 * rank + file).
N_SQUARES = 64
N_FILES = 8
RANK_SQUARES = 8         # squares per rank: one step north is + 8
FILE_SQUARES = 8         # squares per file: a file fill sets 8 bits per file
LAST_FILE = 7
RANK_2 = 1               # relative rank indices of the engine's tables (rank 1 = 0)
RANK_3 = 2
MIRROR_RANKS = 56        # sq ^ 56: vertical mirror
MIRROR_FILES = 7         # sq ^ 7: horizontal mirror
KING_SIDE_FILE = 4       # a king on files e..h mirrors its side's PSQT horizontally
US = WHITE               # in a side's own frame its pawns move like White's (north) ...
OPPONENT = BLACK         # ... and the other side's like Black's (south)

# Per piece type (pawn..queen): PSQT offset (pawn rows start at rank 2), mobility offset (pawns
# have none), phase weight. Tuples of ints, indexed by type at run time.
_PSQT = tuple(int(g) for g in (Pair.PAWN_PSQT - RANK_SQUARES * RANK_2, Pair.KNIGHT_PSQT,
                               Pair.BISHOP_PSQT, Pair.ROOK_PSQT, Pair.QUEEN_PSQT))
_MOBILITY = tuple(int(g) for g in (-1, Pair.KNIGHT_MOBILITY, Pair.BISHOP_MOBILITY,
                                   Pair.ROOK_MOBILITY, Pair.QUEEN_MOBILITY))
PHASE_WEIGHTS = (0, 1, 1, 2, 4)
N_MEN_TYPES = 5          # pawn..queen: the types with material, PSQT rows and ring attacks
N_TYPES = 6              # pawn..king
BISHOP_PAIR = 2          # bishops for the bishop pair
SHELTER_RANKS = 7        # the KING_SHELTER / SHELTER_STORM row length
SHELTER_FIRST_CENTRE = 1  # the three shelter files are centred on the king's file clamped to b..g
SHELTER_LAST_CENTRE = 6

# ---------------------------------------------------------------------------------------------
# Non-linear constants (eval_types.hpp, evaluation.cpp).

KS_SCALE = 32.0               # TunableSigmoid<32>: the fixed scale B
LN_39 = 3.6635616461296463    # the table covers x / B in [-ln 39, ln 39] (2.5 % .. 97.5 %)
TABLE_SIZE = 256
FP_SHIFT = 16                 # fixed-point interpolation: 16 fractional bits
FP_ONE = 1 << FP_SHIFT
EG_SCALE_MAX = 128            # eg scale factors are alpha / 128
FULL_PAWNS = 8                # rule 3: alpha = 128 - (8 - pawns)^2
PAWNLESS_BARE = 0             # rule 1 (strong side without pawns, thin material edge)
PAWNLESS_VS_MINOR = 8
PAWNLESS_OTHER = 28
OCB_PURE_BASE = 28            # rule 2, opposite bishops alone
OCB_PURE_PER_PASSER = 8
OCB_PURE_PAWN_LEAD = 8
OCB_PAWN_LEAD_MIN = 2
OCB_MIXED_BASE = 44           # rule 2, opposite bishops with other pieces
OCB_MIXED_PER_MAN = 3
THIN_EDGE = 1                 # rule 1 applies when strong phase - weak phase <= 1
MINOR_PHASE = 1               # a side's phase with one minor piece

# scratch.ints: the five winnable counts at the value-parameter offsets, then:
INT_ALPHA_WHITE = N_VALUES    # eg scale factor if White is the strong side (eg > 0)
INT_ALPHA_BLACK = N_VALUES + 1
INT_PHASE = N_VALUES + 2      # min(24, phase): the blend's p
N_INTS = N_VALUES + 3

# scratch.sets[s, k], side s in its own frame: attacks by piece type k (0..5), then:
SET_ANY = N_TYPES             # attacked by any piece of s
SET_ANY2 = N_TYPES + 1        # attacked at least twice
SET_AREA = N_TYPES + 2        # mobility area
SET_BLOCKED = N_TYPES + 3     # own pawns with an occupied square ahead
SET_OCC = N_TYPES + 4         # all pieces (in s's frame)
N_SETS = N_TYPES + 5
OWN = 0
THEM = 1

# Steps of the integer pipeline (`int_steps` output; raw sums for L, A_W, A_B).
class Step(IntEnum):
    """The entries of `int_steps`' output, in pipeline order."""

    L_MG = 0
    L_EG = 1
    AW_MG = 2
    AW_EG = 3
    AB_MG = 4
    AB_EG = 5
    ACTW_MG = 6
    ACTW_EG = 7
    ACTB_MG = 8
    ACTB_EG = 9
    S_MG = 10
    S_EG = 11
    WINNABLE = 12
    WIN_EG = 13
    ALPHA = 14
    SCALED_EG = 15
    EVAL = 16


N_STEPS = len(Step)

# scratch.steps: arena indices of the recorded steps (pairs, except the two values).
class Rec(IntEnum):
    """The entries of ``scratch.steps``: arena indices of the recorded steps (pairs, except the
    two values W and EVAL)."""

    L = 0
    AW = 1
    AB = 2
    ACTW = 3
    ACTB = 4
    S = 5
    W = 6
    WIN = 7
    SCALED = 8
    EVAL = 9


N_REC_STEPS = len(Rec)
RECORDS_PER_POSITION = 13

# sigmoid table rows: range_min, range_max, scale, then the 256 values.
T_MIN = 0
T_MAX = 1
T_SCALE = 2
T_VALUES = 3
TABLE_ROW = T_VALUES + TABLE_SIZE

# ---------------------------------------------------------------------------------------------
# Bitboard tables (np.uint64 so that numba never promotes to float).

FLANK_FIRST_FILE = (0, 0, 0, 2, 2, 4, 4, 4)  # by king file: a-c -> a-d, d-e -> c-f, f-h -> e-h
FLANK_FILES = 4
EXTENDED_RING_RADIUS = 2


def _extended_rings() -> np.ndarray:
    """uint64[64]: the 5 x 5 square around each square (Chebyshev distance <= 2)."""
    out = np.zeros(N_SQUARES, np.uint64)
    for s in range(N_SQUARES):
        out[s] = sum(1 << t for t in range(N_SQUARES) if chebyshev(s, t) <= EXTENDED_RING_RADIUS)
    return out


def _flanks() -> np.ndarray:
    """uint64[8]: the king flank by king file, in the king's own frame."""
    out = np.zeros(N_FILES, np.uint64)
    for f in range(N_FILES):
        files = sum(int(file_mask(g)) for g in range(FLANK_FIRST_FILE[f],
                                                     FLANK_FIRST_FILE[f] + FLANK_FILES))
        out[f] = files & int(RANKS_1_5)
    return out


EXTENDED_RING = _extended_rings()
FLANK = _flanks()


class Scratch(NamedTuple):
    """Per-thread working memory of `features` / `record_eval` (`new_scratch`)."""

    linear: LinearAccumulator        # L: every linear term, tempo included
    attack_white: LinearAccumulator  # A_W: the king-attack terms of Black's king
    attack_black: LinearAccumulator  # A_B: those of White's king
    ints: np.ndarray    # int64[N_INTS]: winnable counts, alphas, phase (see INT_*)
    board: np.ndarray   # uint64[2, 2, 6]: pieces seen from each side's frame
    sets: np.ndarray    # uint64[2, N_SETS]: attack sets and masks per side, own frame
    steps: np.ndarray   # int64[N_REC_STEPS]: arena indices of the last recorded position's steps


def new_scratch() -> Scratch:
    """An empty scratch for `features`, `record_eval` and `record_batch` (one per thread)."""
    return Scratch(new_accumulator(N_PAIRS), new_accumulator(N_PAIRS), new_accumulator(N_PAIRS),
                   np.zeros(N_INTS, np.int64), np.zeros((2, 2, N_TYPES), np.uint64),
                   np.zeros((2, N_SETS), np.uint64), np.zeros(N_REC_STEPS, np.int64))


# ---------------------------------------------------------------------------------------------
# Features, side by side in each side's frame. `s` is the side (0 White, 1 Black), `sign` its
# sign in L (+1 White, -1 Black).


@njit(**INLINE)
def _other(sets, s, k):
    """Set k of the other side, seen from side s's frame."""
    return flip_vertical(sets[1 - s, k])


@njit(**INLINE)
def _sign(s):
    """+1 for White (s = 0), -1 for Black: a side's sign in L."""
    return 1 - 2 * np.int64(s)


@njit(**INLINE)
def _psqt_mirror(ksq):
    """x such that sq ^ x is the PSQT index of a square in the side's own frame (king ksq)."""
    return np.int64(MIRROR_RANKS) ^ (np.int64(MIRROR_FILES) * np.int64(file_of(ksq) >= KING_SIDE_FILE))


@njit(**INLINE)
def _load(pos, board, sets):
    """Both frames' piece bitboards and the per-side masks known before any piece moves."""
    for t in range(N_TYPES):
        w = pos[W_WHITE] & pos[W_PAWN + t]
        b = pos[W_BLACK] & pos[W_PAWN + t]
        board[0, OWN, t] = w
        board[0, THEM, t] = b
        board[1, OWN, t] = flip_vertical(b)
        board[1, THEM, t] = flip_vertical(w)
    occ = pos[W_WHITE] | pos[W_BLACK]
    sets[0, SET_OCC] = occ
    sets[1, SET_OCC] = flip_vertical(occ)
    for s in range(2):
        occ = sets[s, SET_OCC]
        P = board[s, OWN, PAWN]
        west_att = north_west(P)
        east_att = north_east(P)
        ka = king_attacks(lsb(board[s, OWN, KING]))
        pa = west_att | east_att
        sets[s, PAWN] = pa
        sets[s, KING] = ka
        sets[s, SET_ANY] = pa | ka
        sets[s, SET_ANY2] = (west_att & east_att) | (pa & ka)
        for t in range(KNIGHT, KING):
            sets[s, t] = U0
        blocked = P & (occ >> U8)
        sets[s, SET_BLOCKED] = blocked
        sets[s, SET_AREA] = ~(blocked | (P & RANKS_2_3)
                              | pawn_attacks_set(board[s, THEM, PAWN], OPPONENT))


@njit(**INLINE)
def _piece_terms(lin, board, sets, s, t, chk):
    """PSQT, mobility and per-piece terms of side s's pieces of type t (knight..queen), their
    attack sets into ``sets[s]``; returns how many (square, piece) pairs attack the squares
    `chk` (potential checks against the other king)."""
    sign = _sign(s)
    occ = sets[s, SET_OCC]
    area = sets[s, SET_AREA]
    area2 = area           # rooks and queens count a second area: minus enemy minor (and rook)
    if t >= ROOK:          # attacks
        area2 &= ~(_other(sets, s, KNIGHT) | _other(sets, s, BISHOP))
    if t == QUEEN:
        area2 &= ~_other(sets, s, ROOK)
    P = board[s, OWN, PAWN]
    oP = board[s, THEM, PAWN]
    queens = board[s, OWN, QUEEN] | board[s, THEM, QUEEN]
    blocked_central = popcount(sets[s, SET_BLOCKED] & CENTRAL_FILES)
    x = _psqt_mirror(lsb(board[s, OWN, KING]))
    union = U0
    anyset = sets[s, SET_ANY]
    any2 = sets[s, SET_ANY2]
    checkers = np.int64(0)
    bb = board[s, OWN, t]
    while bb:
        sq = lsb(bb)
        bb &= bb - U1
        a = piece_attacks(t, US, sq, occ)
        union |= a
        any2 |= anyset & a
        anyset |= a
        checkers += popcount(a & chk)
        lin_add(lin, _PSQT[t] + (sq ^ x), sign)
        lin_add(lin, _MOBILITY[t] + popcount(a & area), sign)
        if t >= ROOK:
            lin_add(lin, _MOBILITY[t] + popcount(a & area2), sign)
        if t == BISHOP:
            same_colour = LIGHT_SQUARES if test_bit(LIGHT_SQUARES, sq) else DARK_SQUARES
            n = min(FULL_PAWNS, popcount(P & same_colour))
            undefended = 1 - np.int64(test_bit(sets[s, PAWN], sq))
            add_nonzero(lin, Pair.BISHOP_PAWNS + n, sign * (undefended + blocked_central))
            add_nonzero(lin, Pair.BISHOP_XRAY_PAWNS, sign * popcount(bishop_attacks(sq, U0) & oP))
        elif t == ROOK:
            add_nonzero(lin, Pair.ROOK_LINEUP, sign * popcount(file_mask(file_of(sq)) & queens))
    sets[s, t] = union
    sets[s, SET_ANY] = anyset
    sets[s, SET_ANY2] = any2
    return checkers


@njit(**INLINE)
def _pawns(lin, board, sets, s):
    """Doubled, isolated, passed (with its follow-up terms), phalanx and defended pawns of side
    s; returns the number of passed pawns."""
    sign = _sign(s)
    P = board[s, OWN, PAWN]
    oP = board[s, THEM, PAWN]
    occ = sets[s, SET_OCC]
    ksq = lsb(board[s, OWN, KING])
    oksq = lsb(board[s, THEM, KING])
    their_attacks = _other(sets, s, SET_ANY)
    own_diagonal = board[s, OWN, BISHOP] | board[s, OWN, QUEEN]       # for count_attackers
    own_orthogonal = board[s, OWN, ROOK] | board[s, OWN, QUEEN]
    their_diagonal = board[s, THEM, BISHOP] | board[s, THEM, QUEEN]
    their_orthogonal = board[s, THEM, ROOK] | board[s, THEM, QUEEN]

    add_nonzero(lin, Pair.DOUBLED_PAWN_VAL, sign * popcount(P & (P << U8)))
    files = file_fill(P)
    add_nonzero(lin, Pair.ISOLATED_PAWN_VAL, sign * popcount(P & ~(east(files) | west(files))))

    stoppers = south_fill(oP >> U8)      # squares with an enemy pawn ahead on their file...
    stoppers |= east(stoppers) | west(stoppers)  # ... or on an adjacent one
    passers = np.int64(0)
    bb = P & ~stoppers
    while bb:
        sq = lsb(bb)
        bb &= bb - U1
        passers += 1
        i = rank_of(sq) - RANK_2
        q = sq + RANK_SQUARES
        ahead = north_fill(U1 << U64(q))
        lin_add(lin, Pair.PASSED_PAWN + i, sign)
        if ((ahead | east(ahead) | west(ahead)) & their_attacks) == U0:
            lin_add(lin, Pair.PASSED_CLEAR_STOPPERS + i, sign)
        elif (ahead & their_attacks) == U0:
            lin_add(lin, Pair.PASSED_CLEAR_FORWARD + i, sign)
        elif (count_attackers(q, occ, US, P, board[s, OWN, KNIGHT], own_diagonal,
                              own_orthogonal, board[s, OWN, KING])
              > count_attackers(q, occ, OPPONENT, oP, board[s, THEM, KNIGHT], their_diagonal,
                                their_orthogonal, board[s, THEM, KING])):
            lin_add(lin, Pair.DEFENDED_PASSED_PUSH + i, sign)
        if test_bit(occ, q):
            lin_add(lin, Pair.BLOCKED_PASSED_PAWN + i, sign)
        lin_add(lin, Pair.FRIENDLY_KING_PASSED_PAWN_DISTANCE + chebyshev(ksq, sq), sign)
        lin_add(lin, Pair.ENEMY_KING_PASSED_PAWN_DISTANCE + chebyshev(oksq, sq), sign)

    bb = P & east(P)                       # pawns with an own pawn immediately west
    while bb:
        sq = lsb(bb)
        bb &= bb - U1
        lin_add(lin, Pair.PAWN_PHALANX + rank_of(sq) - RANK_2, sign)
    bb = P & sets[s, PAWN]
    while bb:
        sq = lsb(bb)
        bb &= bb - U1
        lin_add(lin, Pair.DEFENDED_PAWN + rank_of(sq) - RANK_3, sign)
    return passers


@njit(**INLINE)
def _threats(lin, board, sets, s):
    """Threats of side s against the other side's pieces, pawn (push) threats and the attacks on
    a lone enemy queen."""
    sign = _sign(s)
    ours = sets[s, SET_ANY]
    ours2 = sets[s, SET_ANY2]
    theirs = _other(sets, s, SET_ANY)
    their_pawn_attacks = _other(sets, s, PAWN)
    oP = board[s, THEM, PAWN]
    their_men = U0
    for t in range(N_TYPES):
        their_men |= board[s, THEM, t]
    non_pawn = their_men & ~oP

    strong = their_pawn_attacks | (_other(sets, s, SET_ANY2) & ~ours2)
    weak = their_men & ~strong & ours
    minor_targets = ((non_pawn & strong) | weak) & (sets[s, KNIGHT] | sets[s, BISHOP])
    rook_targets = weak & sets[s, ROOK]
    for t in range(N_TYPES):
        add_nonzero(lin, Pair.MINOR_THREAT + t, sign * popcount(minor_targets & board[s, THEM, t]))
        add_nonzero(lin, Pair.ROOK_THREAT + t, sign * popcount(rook_targets & board[s, THEM, t]))
    add_nonzero(lin, Pair.KING_THREAT, sign * np.int64((weak & sets[s, KING]) != U0))
    hanging = weak & (~theirs | (non_pawn & ours2))
    add_nonzero(lin, Pair.HANGING_PAWN, sign * popcount(hanging & oP))
    add_nonzero(lin, Pair.HANGING_NON_PAWN, sign * popcount(hanging & non_pawn))
    add_nonzero(lin, Pair.RESTRICTED_SQUARES, sign * popcount(ours & ~strong & theirs))

    pushed = (board[s, OWN, PAWN] << U8) & ~sets[s, SET_OCC]
    push_attacks = pawn_attacks_set(pushed, US)
    for t in range(KNIGHT, KING):
        add_nonzero(lin, Pair.PAWN_THREAT_KNIGHT + t - KNIGHT,
                    sign * popcount(sets[s, PAWN] & board[s, THEM, t]))
        add_nonzero(lin, Pair.PAWN_PUSH_THREAT_KNIGHT + t - KNIGHT,
                    sign * popcount(push_attacks & board[s, THEM, t]))

    their_queens = board[s, THEM, QUEEN]
    if popcount(their_queens) == 1:
        qsq = lsb(their_queens)
        imbalance = np.int64(board[s, OWN, QUEEN] == U0)
        safe = sets[s, SET_AREA] & ~board[s, OWN, PAWN] & ~strong
        add_nonzero(lin, Pair.KNIGHT_ON_QUEEN + imbalance,
                    sign * popcount(knight_attacks(qsq) & sets[s, KNIGHT] & safe))
        safe &= ours2
        queen_attacks = _other(sets, s, QUEEN)
        diagonal = queen_attacks & bishop_attacks(qsq, U0)
        add_nonzero(lin, Pair.BISHOP_ON_QUEEN + imbalance,
                    sign * popcount(diagonal & sets[s, BISHOP] & safe))
        add_nonzero(lin, Pair.ROOK_ON_QUEEN + imbalance,
                    sign * popcount((queen_attacks ^ diagonal) & sets[s, ROOK] & safe))


@njit(**INLINE)
def _files_and_outposts(lin, board, sets, s):
    """Rook files, minors behind pawns, outposts and the bishop pair of side s."""
    sign = _sign(s)
    P = board[s, OWN, PAWN]
    oP = board[s, THEM, PAWN]
    R = board[s, OWN, ROOK]
    minors = board[s, OWN, KNIGHT] | board[s, OWN, BISHOP]
    own_files = file_fill(P)
    their_files = file_fill(oP)
    add_nonzero(lin, Pair.ROOK_OPEN_VAL, sign * popcount(R & ~(own_files | their_files)))
    add_nonzero(lin, Pair.ROOK_SEMIOPEN_VAL, sign * popcount(R & ~own_files & their_files))
    add_nonzero(lin, Pair.MINOR_BEHIND_PAWN, sign * popcount((minors << U8) & (P | oP)))
    # outposts: squares no enemy pawn can ever attack (their attack span)
    viable = RANKS_4_6 & sets[s, PAWN] & ~pawn_attacks_set(south_fill(oP), OPPONENT)
    add_nonzero(lin, Pair.OUTPOST_KNIGHT_VAL, sign * popcount(board[s, OWN, KNIGHT] & viable))
    add_nonzero(lin, Pair.OUTPOST_BISHOP_VAL, sign * popcount(board[s, OWN, BISHOP] & viable))
    add_nonzero(lin, Pair.BISHOP_PAIR_VAL, sign * np.int64(popcount(board[s, OWN, BISHOP]) >= BISHOP_PAIR))


@njit(**INLINE)
def _king_safety(acc, board, sets, s):
    """The king-attack terms of side s's king (s defends), all with coefficient +count."""
    ksq = lsb(board[s, OWN, KING])
    ring = king_attacks(ksq) | (U1 << U64(ksq))
    outer = EXTENDED_RING[ksq] & ~ring
    for t in range(N_MEN_TYPES):
        a = _other(sets, s, t)
        add_nonzero(acc, Pair.PT_INNER_RING_ATTACKS + t, popcount(a & ring))
        add_nonzero(acc, Pair.PT_OUTER_RING_ATTACKS + t, popcount(a & outer))
    flank = FLANK[file_of(ksq)]
    add_nonzero(acc, Pair.KS_FLANK_DEFENSE, popcount(sets[s, SET_ANY] & flank))
    add_nonzero(acc, Pair.KS_FLANK_ATTACK, popcount(_other(sets, s, SET_ANY) & flank))
    add_nonzero(acc, Pair.KS_FLANK_DOUBLE_DEFENSE, popcount(sets[s, SET_ANY2] & flank))
    add_nonzero(acc, Pair.KS_FLANK_DOUBLE_ATTACK, popcount(_other(sets, s, SET_ANY2) & flank))

    # shelter and storm: pawns on or ahead of the king's rank, on the three files around it
    level = ~((U1 << U64(RANK_SQUARES * rank_of(ksq))) - U1)
    ours = board[s, OWN, PAWN] & level & ~_other(sets, s, PAWN)
    theirs = board[s, THEM, PAWN] & level
    centre = min(max(file_of(ksq), SHELTER_FIRST_CENTRE), SHELTER_LAST_CENTRE)
    for f in range(centre - 1, centre + 2):
        fm = file_mask(f)
        # the pawn nearest the king's side of the board (lowest rank), 0 if none
        our_rank = rank_of(lsb(ours & fm)) if (ours & fm) != U0 else 0
        their_rank = rank_of(lsb(theirs & fm)) if (theirs & fm) != U0 else 0
        edge = min(f, LAST_FILE - f)
        lin_add(acc, Pair.KING_SHELTER + SHELTER_RANKS * edge + our_rank, 1)
        if our_rank != 0 and our_rank == their_rank - 1:
            lin_add(acc, Pair.BLOCKED_SHELTER_STORM + their_rank, 1)
        else:
            lin_add(acc, Pair.SHELTER_STORM + SHELTER_RANKS * edge + their_rank, 1)
    add_nonzero(acc, Pair.KS_NO_QUEEN, np.int64(board[s, THEM, QUEEN] == U0))


@njit(**INLINE)
def _eg_scale_alpha(strong_phase, weak_phase, strong_pawns, weak_pawns, strong_passers,
                    strong_men, opposite_bishops):
    """The eg scale factor (out of 128) when the given side is the strong one."""
    if strong_pawns == 0:
        if strong_phase - weak_phase <= THIN_EDGE:
            if strong_phase <= MINOR_PHASE:
                return PAWNLESS_BARE
            return PAWNLESS_VS_MINOR if weak_phase <= MINOR_PHASE else PAWNLESS_OTHER
    elif opposite_bishops:
        if strong_phase == MINOR_PHASE and weak_phase == MINOR_PHASE:
            return (OCB_PURE_BASE + OCB_PURE_PER_PASSER * strong_passers
                    + OCB_PURE_PAWN_LEAD * np.int64(strong_pawns >= weak_pawns + OCB_PAWN_LEAD_MIN))
        return OCB_MIXED_BASE + OCB_MIXED_PER_MAN * strong_men
    d = FULL_PAWNS - strong_pawns
    return EG_SCALE_MAX - d * d


@njit(**BORROWED)
def features(pos, scratch):
    """Every integer input of `pos` (uint64[9]): the counts of L, A_W and A_B into
    ``scratch.linear``, ``.attack_white``, ``.attack_black`` (cleared first) and ``scratch.ints``
    (winnable counts, the two alphas, the phase). Returns the phase (0..24)."""
    lin = scratch.linear
    board = scratch.board
    sets = scratch.sets
    ints = scratch.ints
    lin_clear(lin)
    lin_clear(scratch.attack_white)
    lin_clear(scratch.attack_black)
    _load(pos, board, sets)

    phase_w = np.int64(0)      # per side, not capped: the eg scale rules compare them
    phase_b = np.int64(0)
    for t in range(N_MEN_TYPES):
        nw = popcount(board[0, OWN, t])
        nb = popcount(board[0, THEM, t])
        add_nonzero(lin, Pair.PAWN_MAT + t, nw - nb)
        phase_w += PHASE_WEIGHTS[t] * nw
        phase_b += PHASE_WEIGHTS[t] * nb
    lin_add(lin, Pair.TEMPO_VAL, _sign(pos[W_META] & U1))   # + if White is to move

    for s in range(2):      # pawn PSQT and king PSQT
        sign = _sign(s)
        ksq = lsb(board[s, OWN, KING])
        x = _psqt_mirror(ksq)
        bb = board[s, OWN, PAWN]
        while bb:
            sq = lsb(bb)
            bb &= bb - U1
            lin_add(lin, _PSQT[PAWN] + (sq ^ x), sign)
        lin_add(lin, Pair.KING_PSQT + (ksq ^ x), sign)

    checkers = np.int64(0)     # net potential checks: against White's king minus Black's
    # the squares checking the other king along diagonals and lines, once per side (side s)
    oksq = (lsb(board[0, THEM, KING]), lsb(board[1, THEM, KING]))
    diagonal = (bishop_attacks(oksq[0], sets[0, SET_OCC]), bishop_attacks(oksq[1], sets[1, SET_OCC]))
    orthogonal = (rook_attacks(oksq[0], sets[0, SET_OCC]), rook_attacks(oksq[1], sets[1, SET_OCC]))
    # piece type by piece type, each a constant in its inlined `_piece_terms` (its branches fold)
    for s in range(2):
        checkers -= _sign(s) * _piece_terms(lin, board, sets, s, KNIGHT, knight_attacks(oksq[s]))
    for s in range(2):
        checkers -= _sign(s) * _piece_terms(lin, board, sets, s, BISHOP, diagonal[s])
    for s in range(2):
        checkers -= _sign(s) * _piece_terms(lin, board, sets, s, ROOK, orthogonal[s])
    for s in range(2):
        checkers -= _sign(s) * _piece_terms(lin, board, sets, s, QUEEN,
                                            diagonal[s] | orthogonal[s])
    add_nonzero(lin, Pair.POTENTIAL_CHECKER_VAL, checkers)

    passers_w = _pawns(lin, board, sets, 0)
    passers_b = _pawns(lin, board, sets, 1)
    for s in range(2):
        _threats(lin, board, sets, s)
        _files_and_outposts(lin, board, sets, s)
    _king_safety(scratch.attack_white, board, sets, 1)
    _king_safety(scratch.attack_black, board, sets, 0)

    phase = min(phase_w + phase_b, PHASE_MAX)
    white_pawns = board[0, OWN, PAWN]
    black_pawns = board[0, THEM, PAWN]
    white_files = file_fill(white_pawns)
    black_files = file_fill(black_pawns)
    ints[Value.WINNABLE_PAWNS] = popcount(white_pawns | black_pawns)
    ints[Value.WINNABLE_SYM] = popcount(white_files & black_files) // FILE_SQUARES
    ints[Value.WINNABLE_ASYM] = popcount(white_files ^ black_files) // FILE_SQUARES
    ints[Value.WINNABLE_PAWN_ENDGAME] = np.int64(phase == 0)
    ints[Value.WINNABLE_BIAS] = 1

    wb = board[0, OWN, BISHOP]
    bb = board[0, THEM, BISHOP]
    opposite = (popcount(wb) == 1 and popcount(bb) == 1
                and test_bit(LIGHT_SQUARES, lsb(wb)) != test_bit(LIGHT_SQUARES, lsb(bb)))
    nw = popcount(white_pawns)
    nb = popcount(black_pawns)
    ints[INT_ALPHA_WHITE] = _eg_scale_alpha(phase_w, phase_b, nw, nb, passers_w,
                                            popcount(pos[W_WHITE]), opposite)
    ints[INT_ALPHA_BLACK] = _eg_scale_alpha(phase_b, phase_w, nb, nw, passers_b,
                                            popcount(pos[W_BLACK]), opposite)
    ints[INT_PHASE] = phase
    return phase


# ---------------------------------------------------------------------------------------------
# The continuous form on the tape.


@njit(**INLINE)
def _activation(tape, x):
    """a * sigmoid(x / 32 + c / 32), componentwise."""
    return record_pair_mul(tape, Pair.KS_ACTIVATION_A,
                           record_pair_sigmoid_sum(tape, x, Pair.KS_ACTIVATION_C, KS_SCALE))


@njit(**BORROWED)
def record_eval(tape, scratch, pos):
    """Record the continuous White-POV evaluation of `pos`; return its value index. The arena
    indices of the steps are left in ``scratch.steps`` (by `Rec`)."""
    features(pos, scratch)
    ints = scratch.ints
    steps = scratch.steps
    steps[Rec.L] = lin_record_pair(tape, scratch.linear)
    steps[Rec.AW] = lin_record_pair(tape, scratch.attack_white)
    steps[Rec.AB] = lin_record_pair(tape, scratch.attack_black)
    steps[Rec.ACTW] = _activation(tape, steps[Rec.AW])
    steps[Rec.ACTB] = _activation(tape, steps[Rec.AB])
    # S = (L + ACT_W) - ACT_B: two records of fixed slots, not a list of three operands that
    # every position would store
    steps[Rec.S] = record_pair_sub(tape, record_pair_add(tape, steps[Rec.L], steps[Rec.ACTW]),
                                   steps[Rec.ACTB])
    first = operand_mark(tape)
    for k in range(N_VALUES):
        if ints[k] != 0:
            push_operand(tape, k, ints[k])
    steps[Rec.W] = record_lincomb_value(tape, first)
    steps[Rec.WIN] = record_add_winnable_eg(tape, steps[Rec.S], steps[Rec.W])
    steps[Rec.SCALED] = record_eg_scale_by_sign(tape, steps[Rec.WIN],
                                                ints[INT_ALPHA_WHITE] / EG_SCALE_MAX,
                                                ints[INT_ALPHA_BLACK] / EG_SCALE_MAX)
    steps[Rec.EVAL] = record_phase(tape, steps[Rec.SCALED], ints[INT_PHASE] / PHASE_MAX)
    return steps[Rec.EVAL]


# ---------------------------------------------------------------------------------------------
# The engine's integer form (eval_types.hpp: PScore, TunableSigmoid's table; evaluation.cpp).


@njit(**INLINE)
def _int_sum(acc, ipairs):
    """(sum of coef * mg, sum of coef * eg) over the accumulator's terms (int64); clears it."""
    mg = np.int64(0)
    eg = np.int64(0)
    for k in range(acc.count[0]):
        j = acc.touched[k]
        c = acc.coef[j]
        mg += c * ipairs[j, 0]
        eg += c * ipairs[j, 1]
    lin_clear(acc)
    return mg, eg


@njit(**INLINE)
def _lookup(x, row):
    """TunableSigmoid::lookup: the table value at the i16 x, linearly interpolated in 16-bit
    fixed point (arithmetic shifts floor)."""
    lo = row[T_MIN]
    x = min(max(x, lo), row[T_MAX])
    f = (x - lo) * row[T_SCALE]
    idx = f >> FP_SHIFT
    frac = f & (FP_ONE - 1)
    v0 = row[T_VALUES + idx]
    v1 = row[T_VALUES + min(idx + 1, TABLE_SIZE - 1)]
    return s16(v0 + (((v1 - v0) * frac) >> FP_SHIFT))


@njit(**INLINE)
def _int_activation(packed, table):
    return pack_score(_lookup(score_mg(packed), table[0]), _lookup(score_eg(packed), table[1]))


@njit(**JIT)
def int_steps(scratch, ipairs, ivalues, table, out):
    """The engine's integer evaluation after `features(pos, scratch)`: out[Step] (int64), the
    White-POV result in out[Step.EVAL]. ipairs (int64[627, 2]) and ivalues (int64[5]) are the
    parameters as the engine holds them (`integer_params`), table the sigmoid's (`sigmoid_table`).
    Clears the accumulators."""
    ints = scratch.ints
    out[Step.L_MG], out[Step.L_EG] = _int_sum(scratch.linear, ipairs)
    out[Step.AW_MG], out[Step.AW_EG] = _int_sum(scratch.attack_white, ipairs)
    out[Step.AB_MG], out[Step.AB_EG] = _int_sum(scratch.attack_black, ipairs)
    act_w = _int_activation(pack_score(out[Step.AW_MG], out[Step.AW_EG]), table)
    act_b = _int_activation(pack_score(out[Step.AB_MG], out[Step.AB_EG]), table)
    out[Step.ACTW_MG], out[Step.ACTW_EG] = score_mg(act_w), score_eg(act_w)
    out[Step.ACTB_MG], out[Step.ACTB_EG] = score_mg(act_b), score_eg(act_b)
    total = sub_packed(add_packed(pack_score(out[Step.L_MG], out[Step.L_EG]), act_w), act_b)
    mg = score_mg(total)
    eg = score_eg(total)
    out[Step.S_MG], out[Step.S_EG] = mg, eg

    # apply_winnable / PScore::complexity_add
    symmetry = s16(ivalues[Value.WINNABLE_SYM] * ints[Value.WINNABLE_SYM]
                   + ivalues[Value.WINNABLE_ASYM] * ints[Value.WINNABLE_ASYM])
    w = s16(ivalues[Value.WINNABLE_PAWNS] * ints[Value.WINNABLE_PAWNS] + symmetry
            + ivalues[Value.WINNABLE_PAWN_ENDGAME] * ints[Value.WINNABLE_PAWN_ENDGAME]
            + ivalues[Value.WINNABLE_BIAS] * ints[Value.WINNABLE_BIAS])
    if eg < 0:
        w = s16(-w)
    out[Step.WINNABLE] = w
    if eg != 0:
        moved = s16(eg + w)
        eg = max(moved, 0) if eg > 0 else min(moved, 0)
    out[Step.WIN_EG] = eg

    # apply_eg_scale / PScore::scale_eg<128>
    alpha = ints[INT_ALPHA_WHITE] if eg > 0 else ints[INT_ALPHA_BLACK]
    out[Step.ALPHA] = alpha
    eg = s16(trunc_div(eg * alpha, EG_SCALE_MAX))
    out[Step.SCALED_EG] = eg

    p = ints[INT_PHASE]
    out[Step.EVAL] = s16(trunc_div(mg * p + eg * (PHASE_MAX - p), PHASE_MAX))


@njit(**JIT)
def int_eval_batch(positions, scratch, ipairs, ivalues, table, out, phases):
    """out[i] (int64) = the engine's integer White-POV evaluation of positions[i], phases[i] its
    phase."""
    steps = np.empty(N_STEPS, np.int64)
    for i in range(positions.shape[0]):
        phases[i] = features(positions[i], scratch)
        int_steps(scratch, ipairs, ivalues, table, steps)
        out[i] = steps[Step.EVAL]


def sigmoid_table(a, c) -> np.ndarray:
    """int64[2, TABLE_ROW]: TunableSigmoid<32>::build_table for the integer pairs a = (a_mg,
    a_eg) and c = (c_mg, c_eg), one row per component (range_min, range_max, scale, values)."""
    table = np.zeros((2, TABLE_ROW), np.int64)
    bound = KS_SCALE * LN_39
    for j in range(2):
        lo = int(-bound) - int(c[j])           # static_cast<i32> truncates
        hi = int(bound) - int(c[j])
        span = hi - lo
        table[j, T_MIN] = lo
        table[j, T_MAX] = hi
        table[j, T_SCALE] = ((TABLE_SIZE - 1) << FP_SHIFT) // span
        for i in range(TABLE_SIZE):
            x = lo + (i / (TABLE_SIZE - 1)) * span
            sig = 1.0 / (1.0 + math.exp(-((x + int(c[j])) / KS_SCALE)))
            table[j, T_VALUES + i] = s16(round_half_away(int(a[j]) * sig))   # std::lround
    return table


def integer_params(pairs, values):
    """The parameters as the engine's integer build holds them after its tuner printed them:
    every value rounded like std::round / std::lround, pairs and values narrowed to 16 bits
    (PScore halves, VParam). Returns (ipairs int64[627, 2], ivalues int64[5], sigmoid table)."""
    rp = round_params(pairs)
    rv = round_params(values)
    wrap = np.vectorize(s16, otypes=[np.int64])
    ipairs = np.ascontiguousarray(wrap(rp))
    ivalues = np.ascontiguousarray(wrap(rv))
    return ipairs, ivalues, sigmoid_table(rp[Pair.KS_ACTIVATION_A], rp[Pair.KS_ACTIVATION_C])


# ---------------------------------------------------------------------------------------------
# Batch helpers and the Python convenience layer.


@njit(**JIT)
def counts_batch(positions, scratch, sums, ints, phases):
    """Dense counts of every position (the contract's `counts_batch`): ``sums[i, k]``
    (int32[N, 3, 627], zeroed by the caller) the counts of L, A_W and A_B (k in `SUMS` order),
    ``ints[i]`` (int64[N, N_INTS]) the other integer inputs, ``phases[i]`` (int64[N]) the
    phase."""
    for i in range(positions.shape[0]):
        phases[i] = features(positions[i], scratch)
        k = 0
        for acc in (scratch.linear, scratch.attack_white, scratch.attack_black):
            for m in range(acc.count[0]):
                j = acc.touched[m]
                sums[i, k, j] = acc.coef[j]
            lin_clear(acc)
            k += 1
        ints[i] = scratch.ints


@lru_cache(maxsize=None)
def registry() -> ParamRegistry:
    """The 10d79e6 parameter registry with the engine's defaults (shipped JSON)."""
    return LAYOUT.read(PARAMS_PATH)


#: Raise ValueError if a registry does not have the layout this evaluation indexes into.
check_layout = LAYOUT.check


def load_params(params=None, value_params=None) -> Params:
    """`Params` (pairs float64[627, 2], values float64[5]): the defaults (None), a ParamRegistry
    or JSON path (its values), or arrays (`value_params` None: the default value parameters)."""
    return LAYOUT.load_params(registry(), params, value_params)


def new_eval_tape(pairs, values, positions: int = 1):
    """A tape with the parameters written in, with room for `positions` recorded positions."""
    tape = new_tape(N_VALUES, N_PAIRS, records=RECORDS_PER_POSITION * max(positions, 1))
    set_params(tape.arena, pairs, values)
    return tape


@njit(**BORROWED)
def record_batch(tape, scratch, positions, rows, out):
    """Record the evaluation of ``positions[rows[i]]`` for every i; ``out[i]`` = its value index."""
    for i in range(rows.shape[0]):
        out[i] = record_eval(tape, scratch, positions[rows[i]])


def continuous_eval(positions, pairs, values) -> np.ndarray:
    """float64[N]: the continuous (tuner) evaluation of positions, recorded on a tape in chunks."""
    from ..generic import continuous
    return continuous(EVALUATION, positions, pairs, values)


def evaluate_positions(positions, params=None, value_params=None) -> Evaluated:
    """Evaluate positions (uint64[N, 9]) with the parameters of `load_params`.

    Returns `Evaluated`: the engine's integer evaluation (int64[N], after rounding every parameter
    as `integer_params` does, exactly the engine's for integer parameters), the tuner's continuous
    evaluation (float64[N], the value `record_eval` records) and the phase (int64[N], 0..24), all
    from White's point of view.
    """
    positions = positions_array(positions)
    pairs, values = load_params(params, value_params)
    ipairs, ivalues, table = integer_params(pairs, values)
    ie = np.empty(positions.shape[0], np.int64)
    phases = np.empty(positions.shape[0], np.int64)
    int_eval_batch(positions, new_scratch(), ipairs, ivalues, table, ie, phases)
    return Evaluated(ie, continuous_eval(positions, pairs, values), phases)


#: The pair sums of `Counts.sums`: L, A_W, A_B.
SUMS = ("linear", "attack_white", "attack_black")
#: The columns of `Counts.ints` (``scratch.ints``): the winnable counts, the alphas, the phase.
INTS = (*(m.name.lower() for m in Value), "alpha_white", "alpha_black", "phase")


def feature_counts(positions) -> Counts:
    """`Counts` of positions uint64[N, 9]: sums int32[N, 3, 627] (L, A_W, A_B), ints int64[N,
    N_INTS] (see `features`), phase int64[N]."""
    positions = positions_array(positions)
    n = positions.shape[0]
    counts = Counts(np.zeros((n, len(SUMS), N_PAIRS), np.int32), np.empty((n, N_INTS), np.int64),
                    np.empty(n, np.int64))
    counts_batch(positions, new_scratch(), *counts)
    return counts


def evaluate_fen(fen: str, params=None, value_params=None) -> Evaluated:
    """`Evaluated` of one FEN (int, float, int), White's point of view. Raises ValueError for an
    invalid FEN or a position outside the evaluation's domain."""
    pos = parse_fen(fen)
    check_domain(pos)
    ie, cont, phase = evaluate_positions(pos, params, value_params)
    return Evaluated(int(ie[0]), float(cont[0]), int(phase[0]))


def breakdown(pos, params=None, value_params=None) -> dict:
    """Every step of one position's evaluation, integer (the engine) and continuous (the tape).

    Keys: ``counts`` (linear, attack_white, attack_black: dense int32[627]; ints), ``int``
    (the `int_steps` vector by `Step` name, lower case), ``cont`` (the continuous steps: l, aw,
    ab, actw, actb, s, win, scaled as (mg, eg); w, eval), ``tempo`` ((mg, eg) of the tempo term
    inside L, integer), ``pairs`` and ``values`` (the parameters used).
    """
    pos = positions_array(pos)[0]
    pairs, values = load_params(params, value_params)
    counts = feature_counts(pos)
    linear = counts.sums[0, SUMS.index("linear")]
    ipairs, ivalues, table = integer_params(pairs, values)
    scratch = new_scratch()
    features(pos, scratch)
    steps = np.empty(N_STEPS, np.int64)
    int_steps(scratch, ipairs, ivalues, table, steps)
    tape = new_eval_tape(pairs, values)
    record_eval(tape, scratch, pos)
    arena = tape.arena
    rec = scratch.steps
    pair_of = lambda k: tuple(float(v) for v in arena.pair_val[rec[k]])  # noqa: E731
    tempo_count = int(linear[Pair.TEMPO_VAL])
    return {
        "counts": {**{name: counts.sums[0, k] for k, name in enumerate(SUMS)},
                   "ints": counts.ints[0]},
        "int": {step.name.lower(): int(steps[step]) for step in Step},
        "cont": {"l": pair_of(Rec.L), "aw": pair_of(Rec.AW), "ab": pair_of(Rec.AB),
                 "actw": pair_of(Rec.ACTW), "actb": pair_of(Rec.ACTB), "s": pair_of(Rec.S),
                 "w": float(arena.val[rec[Rec.W]]), "win": pair_of(Rec.WIN),
                 "scaled": pair_of(Rec.SCALED), "eval": float(arena.val[rec[Rec.EVAL]])},
        "tempo": (tempo_count * int(ipairs[Pair.TEMPO_VAL, 0]),
                  tempo_count * int(ipairs[Pair.TEMPO_VAL, 1])),
        "pairs": pairs, "values": values,
    }


def explain(fen: str, pos: np.ndarray, reg: ParamRegistry, int_eval: int) -> str:
    """The ``tuner eval --breakdown`` text of one position: the three pair sums term by term, then
    the activations, winnable, eg scale and blend, integer (engine) beside continuous (tuner)."""
    b = breakdown(pos, reg)
    c, i, ints = b["cont"], b["int"], b["counts"]["ints"]
    pairs = b["pairs"]
    lines = [f"position: {fen}", TABLE_HEAD]
    rows, _ = group_rows(reg.pair_groups, b["counts"]["linear"], pairs)
    lines += rows
    lines.append(f"{'linear sum L (tempo included)':<71} {fmt_pair(c['l'])}")
    lines.append(f"{'  of which tempo':<71} {fmt_pair(b['tempo'])}")
    for key, total, act, title in (
            ("attack_white", "aw", "actw", "A_W: White's attack on Black's king"),
            ("attack_black", "ab", "actb", "A_B: Black's attack on White's king")):
        rows, _ = group_rows(reg.pair_groups, b["counts"][key], pairs)
        lines += ["", title, *rows,
                  f"{'  total':<71} {fmt_pair(c[total])}",
                  f"{'  act = a*sigmoid(x/32 + c/32), continuous':<71} {fmt_pair(c[act])}",
                  f"{'  act, integer (table)':<71} {fmt_pair((i[act + '_mg'], i[act + '_eg']))}"]
    lines += ["",
              f"{'S = L + act(A_W) - act(A_B), continuous':<71} {fmt_pair(c['s'])}",
              f"{'S, integer (16-bit halves)':<71} {fmt_pair((i['s_mg'], i['s_eg']))}",
              f"winnable counts: pawns {ints[Value.WINNABLE_PAWNS]}, symmetric files "
              f"{ints[Value.WINNABLE_SYM]}, asymmetric files {ints[Value.WINNABLE_ASYM]}, pawn "
              f"endgame {ints[Value.WINNABLE_PAWN_ENDGAME]}, bias {ints[Value.WINNABLE_BIAS]}",
              f"winnable w = {c['w']:.6f} (integer, sign of eg applied: {i['winnable']})",
              f"eg after winnable: continuous {c['win'][1]:.6f}, integer {i['win_eg']}",
              f"eg scale (out of {EG_SCALE_MAX}): {ints[INT_ALPHA_WHITE]} if White is the "
              f"strong side (eg > 0), {ints[INT_ALPHA_BLACK]} otherwise; integer applies "
              f"{i['alpha']}",
              f"eg after scaling: continuous {c['scaled'][1]:.6f}, integer {i['scaled_eg']}",
              f"phase: {ints[INT_PHASE]}/{PHASE_MAX}",
              f"continuous eval: {c['eval']:.6f}",
              f"integer eval (White POV): {int_eval}"]
    return "\n".join(lines)


EVALUATION = Evaluation(registered_name(__name__), registry(), record_eval, record_batch,
                        new_scratch, evaluate=evaluate_positions, explain=explain,
                        cpp=CPP_CLOCKWORK)
