"""Attack generation (njit), following the attack model of docs/reference-eval.md (section 4).

* pawn: the two diagonal forward squares (no pushes, no en passant);
* knight / king: the usual up to 8 squares;
* bishop / rook / queen: each ray up to and including the first occupied square, whatever its colour
  (no x-ray); pins and legality are ignored and the king counts as an attacker.

Sliders (`bishop_attacks`, `rook_attacks`) use classical ray tables: per ray one load, one AND,
one bit scan to the first blocker and one load, from ``RAYS`` (8 x 64 words, 4 KB, in L1). That
is faster in an evaluation than fancy magic bitboards, whose rook table (102,400 entries, 0.8 MB)
misses the cache there: clockwork-10d79e6's features spent about a fifth of their time waiting on
it. The magic lookups (`bishop_attacks_magic`, `rook_attacks_magic`; one AND, one multiply, one
shift and one load; tables built and checked for collisions at import, in numpy, from magic
numbers found offline by a random search) are kept as the independent cross-check of the rays.

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

_ROOK_MAGICS = (
    0x3080004004603088, 0x4840400020001000, 0x0180200110008008, 0x2100089001000420,
    0x0600320008242050, 0x20800A0013800400, 0x4200080400810200, 0x008001210000D080,
    0x02C0802040018000, 0x8100802008814001, 0x000080100080A000, 0x0405004902209000,
    0x2080800800802C00, 0x0112002804020090, 0x1A210013001C0200, 0x11C2000100C0840A,
    0x00008180004000E0, 0x001000C00C402002, 0x0100858020011002, 0x0008008080081000,
    0x000B010008000C10, 0x2024808002005400, 0xC4008C0006071018, 0x0800420000408104,
    0x0080823180004006, 0x0210004440022001, 0x9452428200201202, 0xA010100480180080,
    0x450C008180080014, 0x2082020080040080, 0x0104100400098802, 0x000000920020410C,
    0x0008384000800080, 0x0C40100800200020, 0x4102100080802002, 0x1011100080800800,
    0x8001802401804800, 0x2000020080804400, 0x1601000401001200, 0x1C38800544800300,
    0x0041224008808000, 0x5028820100260044, 0x0004802192020040, 0x8A08001000808008,
    0x8304008040080800, 0x58020010480A0004, 0x0003140200010100, 0x4004008251020024,
    0x5A40398001024300, 0x2220208108400100, 0x1400200288100380, 0x40900010E0190100,
    0x0602002010084600, 0x0080040002008080, 0x40420801906A0400, 0x0C100C0045108200,
    0x4080158004204103, 0x2208802030400901, 0x8008B20021194082, 0x0041000810002005,
    0x4222000420081042, 0x0001000844001219, 0x0801120801100184, 0x8400041044810022,
)
_BISHOP_MAGICS = (
    0x10102002004A1420, 0x20600A0200C10001, 0x0108088400800283, 0x42060A0200148020,
    0x3004042121400000, 0x0109042004030000, 0x1002080424040084, 0x0800210410012800,
    0x9110622403081101, 0x0230041144010200, 0x2C00040806004080, 0x4000040C20808008,
    0x400004104C100228, 0x4422911120100000, 0x80019284100B1080, 0x20000A0104052480,
    0x00200410420A0804, 0x1084819004880040, 0x1008018102040010, 0x410100A801410201,
    0x70440082020A0608, 0x0004800808040A11, 0x0620800402845100, 0x0010C84021080804,
    0x1022300220041005, 0x0108200022020210, 0x08E0864088080100, 0x0004040040410200,
    0xA005001001004006, 0x08008A0080A21008, 0x0162040200510800, 0x010100C512240410,
    0x000402C80C401000, 0x2228040408120802, 0x00A0405000280120, 0x02808A0281480080,
    0x0004014011440100, 0x8C10100140048040, 0x001E440240010808, 0x010C0180206A0100,
    0x85480626100A20C0, 0x088401048260B000, 0x000101210308D000, 0x00C8062011104800,
    0x403008010040040A, 0x20241088020260C0, 0x2122100B59000200, 0x8221220401140D40,
    0x0020C80250101002, 0x2000620910088100, 0x00030200A4240028, 0x0400400020882100,
    0x081E006460821205, 0x06044004A8008484, 0x8140022849030200, 0x04020A0405020028,
    0x0400140284100880, 0x08A0A26208021800, 0x1800008242009060, 0x4008000010A09800,
    0x5000008440028208, 0x00080040302408C0, 0x0100114208010400, 0x8908091000810100,
)

_ROOK_DIRS = ((1, 0), (-1, 0), (0, 1), (0, -1))
_BISHOP_DIRS = ((1, 1), (1, -1), (-1, 1), (-1, -1))


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


def _relevant_mask(sq, dirs):
    f0, r0 = sq & 7, sq >> 3
    m = 0
    for df, dr in dirs:
        f, r = f0 + df, r0 + dr
        while 0 <= f + df < 8 and 0 <= r + dr < 8:  # edge squares never block anything further
            m |= 1 << (8 * r + f)
            f += df
            r += dr
    return m


def _build_magic(dirs, magics):
    """Fancy magic tables, built with numpy (vectorised over the occupancy subsets of a square)."""
    masks = np.zeros(64, np.uint64)
    shifts = np.zeros(64, np.uint64)
    offsets = np.zeros(64, np.int64)
    chunks = []
    total = 0
    for sq in range(64):
        m = _relevant_mask(sq, dirs)
        bits = [s for s in range(64) if m >> s & 1]
        n = len(bits)
        idx = np.arange(1 << n, dtype=np.uint64)
        occ = np.zeros(1 << n, np.uint64)
        for j, s in enumerate(bits):
            occ |= ((idx >> np.uint64(j)) & np.uint64(1)) << np.uint64(s)
        att = np.zeros(1 << n, np.uint64)
        f0, r0 = sq & 7, sq >> 3
        for df, dr in dirs:
            blocked = np.zeros(1 << n, bool)
            f, r = f0 + df, r0 + dr
            while 0 <= f < 8 and 0 <= r < 8:
                s = 8 * r + f
                att |= np.where(blocked, np.uint64(0), np.uint64(1 << s))
                blocked |= ((occ >> np.uint64(s)) & np.uint64(1)).astype(bool)
                f += df
                r += dr
        with np.errstate(over="ignore"):
            key = (occ * np.uint64(magics[sq])) >> np.uint64(64 - n)
        table = np.zeros(1 << n, np.uint64)
        table[key] = att
        if not np.array_equal(table[key], att):  # two subsets with different attacks collide
            raise RuntimeError("bad magic number for square %d" % sq)
        masks[sq] = m
        shifts[sq] = 64 - n
        offsets[sq] = total
        total += 1 << n
        chunks.append(table)
    return masks, np.array(magics, dtype=np.uint64), shifts, offsets, np.concatenate(chunks)


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
(ROOK_MASKS, ROOK_MAGICS, ROOK_SHIFTS, ROOK_OFFSETS, ROOK_TABLE) = _build_magic(_ROOK_DIRS,
                                                                                _ROOK_MAGICS)
(BISHOP_MASKS, BISHOP_MAGICS, BISHOP_SHIFTS, BISHOP_OFFSETS, BISHOP_TABLE) = _build_magic(
    _BISHOP_DIRS, _BISHOP_MAGICS)
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


@njit(**JIT)
def bishop_attacks_magic(sq, occ):
    """`bishop_attacks` from the magic tables (the cross-check of the rays)."""
    key = ((U64(occ) & BISHOP_MASKS[sq]) * BISHOP_MAGICS[sq]) >> BISHOP_SHIFTS[sq]
    return BISHOP_TABLE[BISHOP_OFFSETS[sq] + np.int64(key)]


@njit(**JIT)
def rook_attacks_magic(sq, occ):
    """`rook_attacks` from the magic tables (the cross-check of the rays)."""
    key = ((U64(occ) & ROOK_MASKS[sq]) * ROOK_MAGICS[sq]) >> ROOK_SHIFTS[sq]
    return ROOK_TABLE[ROOK_OFFSETS[sq] + np.int64(key)]


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
