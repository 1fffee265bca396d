"""Fancy magic bitboard sliders: the independent cross-check of `tuner.chess.attacks`' ray sliders
(tests/test_chess_attacks.py) and their rival in benchmarks/chess_bench.py. One AND, one multiply,
one shift and one load per lookup; the tables are built and checked for collisions at import, in
numpy, from magic numbers found offline by a random search. The rook table has 102,400 entries,
the bishop table 5,248 (0.86 MB together): faster than the rays with the table in cache, slower
inside an evaluation, where it is not (docs/performance.md).
"""

import numpy as np
from numba import njit

U64 = np.uint64

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


(ROOK_MASKS, ROOK_MAGICS, ROOK_SHIFTS, ROOK_OFFSETS, ROOK_TABLE) = _build_magic(_ROOK_DIRS,
                                                                                _ROOK_MAGICS)
(BISHOP_MASKS, BISHOP_MAGICS, BISHOP_SHIFTS, BISHOP_OFFSETS, BISHOP_TABLE) = _build_magic(
    _BISHOP_DIRS, _BISHOP_MAGICS)


@njit
def bishop_attacks_magic(sq, occ):
    """`bishop_attacks` from the magic tables (the cross-check of the rays)."""
    key = ((U64(occ) & BISHOP_MASKS[sq]) * BISHOP_MAGICS[sq]) >> BISHOP_SHIFTS[sq]
    return BISHOP_TABLE[BISHOP_OFFSETS[sq] + np.int64(key)]


@njit
def rook_attacks_magic(sq, occ):
    """`rook_attacks` from the magic tables (the cross-check of the rays)."""
    key = ((U64(occ) & ROOK_MASKS[sq]) * ROOK_MAGICS[sq]) >> ROOK_SHIFTS[sq]
    return ROOK_TABLE[ROOK_OFFSETS[sq] + np.int64(key)]
