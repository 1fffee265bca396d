"""Attack generation (njit), following the attack model of docs/reference-eval.md (section 4).

* pawn: the two diagonal forward squares (no pushes, no en passant);
* knight / king: the usual up to 8 squares;
* bishop / rook / queen: each ray up to and including the first occupied square, whatever its colour
  (no x-ray); pins and legality are ignored and the king counts as an attacker.

Sliders (`bishop_attacks`, `rook_attacks`) use classical ray tables: per ray one load, one AND,
one bit scan to the first blocker and one load, from ``RAYS`` (8 x 64 words, 4 KB, in L1). That
is faster in an evaluation than fancy magic bitboards, whose rook table (102,400 entries, 0.8 MB)
misses the cache there: clockwork-10d79e6's features spent about a fifth of their time waiting on
it. The magic lookups are the tests' independent cross-check of the rays (tests/magic_sliders.py).

``attacker_counts(pos, out)`` fills out[c, s] = number of colour c's pieces whose attack set
contains s (pawns and king included); ``count_attackers`` gives that number for one square from
bitboards.
"""

import numpy as np
from numba import njit
from tuner.jit import INLINE, JIT

from .bitboard import lsb, msb, popcount
from .position import (W_WHITE, W_BLACK, W_PAWN, W_KNIGHT, W_BISHOP, W_ROOK, W_QUEEN, W_KING,
                       PAWN, KNIGHT, BISHOP, ROOK, QUEEN)

U64 = np.uint64
_ONE = U64(1)
_NOT_A = U64(0xFEFEFEFEFEFEFEFE)
_NOT_H = U64(0x7F7F7F7F7F7F7F7F)

def _leaper_table(deltas):
    table = np.zeros(64, np.uint64)
    for sq in range(64):
        f0, r0 = sq & 7, sq >> 3
        b = 0
        for df, dr in deltas:
            f, r = f0 + df, r0 + dr
            if 0 <= f < 8 and 0 <= r < 8:
                b |= 1 << (8 * r + f)
        table[sq] = b
    return table


def _build_rays():
    """RAYS[d, s]: squares from s in direction d to the edge (s excluded). d = 0..3 increase the
    square index (N, E, NE, NW), d = 4..7 decrease it (S, W, SW, SE)."""
    dirs = ((0, 1), (1, 0), (1, 1), (-1, 1), (0, -1), (-1, 0), (-1, -1), (1, -1))
    rays = np.zeros((8, 64), np.uint64)
    for d, (df, dr) in enumerate(dirs):
        for sq in range(64):
            f, r = (sq & 7) + df, (sq >> 3) + dr
            b = 0
            while 0 <= f < 8 and 0 <= r < 8:
                b |= 1 << (8 * r + f)
                f += df
                r += dr
            rays[d, sq] = b
    return rays


KNIGHT_ATTACKS = _leaper_table(((1, 2), (2, 1), (2, -1), (1, -2), (-1, -2), (-2, -1), (-2, 1),
                                (-1, 2)))
KING_ATTACKS = _leaper_table(((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1),
                              (1, -1)))
PAWN_ATTACKS = np.stack([_leaper_table(((-1, 1), (1, 1))), _leaper_table(((-1, -1), (1, -1)))])
RAYS = _build_rays()


# ---------------------------------------------------------------------------------------------
# single-piece attacks


@njit(**JIT)
def pawn_attacks(sq, colour):
    return PAWN_ATTACKS[colour, sq]


@njit(**JIT)
def knight_attacks(sq):
    return KNIGHT_ATTACKS[sq]


@njit(**JIT)
def king_attacks(sq):
    return KING_ATTACKS[sq]


@njit(**INLINE)
def _ray_attacks(sq, occ, d):
    """Classical ray attacks in direction d (see RAYS); branch-free with a sentinel bit: the ray
    from h8 (increasing directions) or a1 (decreasing directions) is empty."""
    ray = RAYS[d, sq]
    if d < 4:
        blocker = lsb((ray & U64(occ)) | U64(0x8000000000000000))
    else:
        blocker = msb((ray & U64(occ)) | _ONE)
    return ray ^ RAYS[d, blocker]


@njit(**INLINE)
def bishop_attacks(sq, occ):
    """Attack set of a bishop on sq under occupancy occ: its four diagonal rays."""
    return (_ray_attacks(sq, occ, 2) | _ray_attacks(sq, occ, 3) | _ray_attacks(sq, occ, 6)
            | _ray_attacks(sq, occ, 7))


@njit(**INLINE)
def rook_attacks(sq, occ):
    """Attack set of a rook on sq under occupancy occ: its four orthogonal rays."""
    return (_ray_attacks(sq, occ, 0) | _ray_attacks(sq, occ, 1) | _ray_attacks(sq, occ, 4)
            | _ray_attacks(sq, occ, 5))


@njit(**INLINE)
def queen_attacks(sq, occ):
    return bishop_attacks(sq, occ) | rook_attacks(sq, occ)


# ---------------------------------------------------------------------------------------------
# set-wise and per-position attacks


@njit(**JIT)
def pawn_attacks_set(pawns_bb, colour):
    """Union of the attacks of every pawn in pawns_bb, for pawns of `colour`."""
    p = U64(pawns_bb)
    if colour == 0:
        return ((p & _NOT_A) << U64(7)) | ((p & _NOT_H) << U64(9))
    return ((p & _NOT_A) >> U64(9)) | ((p & _NOT_H) >> U64(7))


@njit(**JIT)
def count_attackers(sq, occ, colour, pawns, knights, diagonal, orthogonal, kings):
    """Number of the given pieces (pawns of `colour`, knights, `diagonal` sliders: bishops and
    queens, `orthogonal` ones: rooks and queens, kings; bitboards) attacking square sq under
    occupancy occ: cnt_c(sq) of a position without the attack table. A queen is in both slider
    sets and counts once, by the ray it reaches sq along. The attack relation is symmetric, so it
    looks outward from sq: a slider reaches sq iff sq reaches it, and a pawn of `colour` attacks
    sq from where a pawn of the other colour on sq would attack."""
    return (popcount(PAWN_ATTACKS[1 - colour, sq] & U64(pawns))
            + popcount(KNIGHT_ATTACKS[sq] & U64(knights))
            + popcount(bishop_attacks(sq, occ) & U64(diagonal))
            + popcount(rook_attacks(sq, occ) & U64(orthogonal))
            + popcount(KING_ATTACKS[sq] & U64(kings)))


@njit(**INLINE)
def piece_attacks(ptype, colour, sq, occ):
    """Attack set of a piece of type ptype and colour on sq, given occupancy occ."""
    if ptype == PAWN:
        return PAWN_ATTACKS[colour, sq]
    if ptype == KNIGHT:
        return KNIGHT_ATTACKS[sq]
    if ptype == BISHOP:
        return bishop_attacks(sq, occ)
    if ptype == ROOK:
        return rook_attacks(sq, occ)
    if ptype == QUEEN:
        return bishop_attacks(sq, occ) | rook_attacks(sq, occ)
    return KING_ATTACKS[sq]


@njit(**JIT)
def attacks_from(pos, sq):
    """Attack set of the piece standing on sq (0 if sq is empty)."""
    b = _ONE << U64(sq)
    if (pos[W_WHITE] & b) != U64(0):
        colour = 0
    elif (pos[W_BLACK] & b) != U64(0):
        colour = 1
    else:
        return U64(0)
    occ = pos[W_WHITE] | pos[W_BLACK]
    for t in range(6):
        if (pos[W_PAWN + t] & b) != U64(0):
            return piece_attacks(t, colour, sq, occ)
    return U64(0)


@njit(**JIT)
def attackers_to(pos, sq, colour):
    """Bitboard of colour's pieces whose attack set contains sq."""
    occ = pos[W_WHITE] | pos[W_BLACK]
    mine = pos[colour]
    diag = pos[W_BISHOP] | pos[W_QUEEN]
    orth = pos[W_ROOK] | pos[W_QUEEN]
    a = PAWN_ATTACKS[1 - colour, sq] & pos[W_PAWN]
    a |= KNIGHT_ATTACKS[sq] & pos[W_KNIGHT]
    a |= KING_ATTACKS[sq] & pos[W_KING]
    a |= bishop_attacks(sq, occ) & diag
    a |= rook_attacks(sq, occ) & orth
    return a & mine


@njit(**JIT)
def attacker_counts(pos, out):
    """out[c, s] (int32[2, 64]) = number of colour c's pieces attacking s (pawns, king included);
    out is returned.

    The counts are accumulated bit-sliced (five bit planes, carry-save adds of whole attack sets)
    and expanded to the 64 squares once per colour; a colour has at most 16 pieces, so 5 planes
    never overflow."""
    occ = pos[W_WHITE] | pos[W_BLACK]
    knights = pos[W_KNIGHT]
    diag = pos[W_BISHOP] | pos[W_QUEEN]
    orth = pos[W_ROOK] | pos[W_QUEEN]
    for c in range(2):
        mine = pos[c]
        pawns = mine & pos[W_PAWN]
        if c == 0:
            p1 = (pawns & _NOT_A) << U64(7)
            p2 = (pawns & _NOT_H) << U64(9)
        else:
            p1 = (pawns & _NOT_A) >> U64(9)
            p2 = (pawns & _NOT_H) >> U64(7)
        b0 = p1 ^ p2
        b1 = p1 & p2
        a = KING_ATTACKS[lsb(mine & pos[W_KING]) & 63]
        cy = b0 & a
        b0 ^= a
        b2 = b1 & cy
        b1 ^= cy
        b3 = U64(0)
        b4 = U64(0)
        bb = mine & (knights | diag | orth)
        while bb != U64(0):
            s = lsb(bb)
            bb &= bb - _ONE
            sb = _ONE << U64(s)
            if (knights & sb) != U64(0):
                a = KNIGHT_ATTACKS[s]
            else:
                a = U64(0)
                if (diag & sb) != U64(0):
                    a |= bishop_attacks(s, occ)
                if (orth & sb) != U64(0):
                    a |= rook_attacks(s, occ)
            cy = b0 & a
            b0 ^= a
            c2 = b1 & cy
            b1 ^= cy
            c3 = b2 & c2
            b2 ^= c2
            c4 = b3 & c3
            b3 ^= c3
            b4 |= c4
        for s in range(64):
            sh = U64(s)
            out[c, s] = np.int32(((b0 >> sh) & _ONE)
                                 | (((b1 >> sh) & _ONE) << U64(1))
                                 | (((b2 >> sh) & _ONE) << U64(2))
                                 | (((b3 >> sh) & _ONE) << U64(3))
                                 | (((b4 >> sh) & _ONE) << U64(4)))
    return out


# ---------------------------------------------------------------------------------------------
# batch helpers (Python entry points over njit loops)


@njit(**JIT)
def _piece_attack_table_core(positions, out):
    for i in range(positions.shape[0]):
        pos = positions[i]
        for s in range(64):
            out[i, s] = U64(0)
        bb = pos[W_WHITE] | pos[W_BLACK]
        while bb != U64(0):
            s = lsb(bb)
            bb &= bb - _ONE
            out[i, s] = attacks_from(pos, s)


@njit(**JIT)
def _attacker_count_table_core(positions, out):
    for i in range(positions.shape[0]):
        attacker_counts(positions[i], out[i])


@njit(**JIT)
def _attackers_to_table_core(positions, out):
    for i in range(positions.shape[0]):
        for c in range(2):
            for s in range(64):
                out[i, c, s] = attackers_to(positions[i], s, c)


def piece_attack_table(positions):
    """uint64[N, 64]: attack set of the piece on each square (0 for empty squares)."""
    positions = np.ascontiguousarray(np.asarray(positions, dtype=np.uint64).reshape(-1, 9))
    out = np.empty((positions.shape[0], 64), np.uint64)
    _piece_attack_table_core(positions, out)
    return out


def attacker_count_table(positions):
    """int32[N, 2, 64]: attacker_counts of every position."""
    positions = np.ascontiguousarray(np.asarray(positions, dtype=np.uint64).reshape(-1, 9))
    out = np.empty((positions.shape[0], 2, 64), np.int32)
    _attacker_count_table_core(positions, out)
    return out


def attackers_to_table(positions):
    """uint64[N, 2, 64]: attackers_to(pos, s, c) for every position, colour and square."""
    positions = np.ascontiguousarray(np.asarray(positions, dtype=np.uint64).reshape(-1, 9))
    out = np.empty((positions.shape[0], 2, 64), np.uint64)
    _attackers_to_table_core(positions, out)
    return out
