"""The packed position: its layout and the small njit accessors that read it.

A position is one row of ``POSITION_WORDS = 9`` uint64 words (72 bytes), see docs/interfaces.md:

    word 0  W_WHITE      all white pieces
    word 1  W_BLACK      all black pieces
    word 2+t W_PAWN + t  pieces of type t (PAWN=0 ... KING=5), both colours
    word 8  W_META       side to move, castling, en passant, clocks (layout below)

Meta word layout (bit ranges inclusive):

    bit  0       side to move (0 White, 1 Black)
    bits 1..16   castling rook slots, 4 nibbles in the order White king side (bits 1..4), White queen
                 side (5..8), Black king side (9..12), Black queen side (13..16). Nibble: bit 3 =
                 right present, bits 0..2 = the rook's file.
    bits 17..36  the castling field exactly as written: up to 4 characters, 5 bits each, first
                 character in the low bits; code 0 = end, 1..4 = K Q k q, 5..12 = A..H,
                 13..20 = a..h. All zero means '-'. (This is what makes KQkq-style, Shredder-style
                 and mixed X-FEN fields round-trip exactly.)
    bits 37..40  en passant: bit 37 = present, bits 38..40 = file. The rank is implied by the side
                 to move (rank 6 when White is to move, rank 3 when Black is).
    bits 41..48  half-move clock (0..NO_PIECE = -1  # piece_on() of an empty square

MAX_HALFMOVE = 100)
    bits 49..62  full-move number (1..MAX_FULLMOVE = 9999)
    bit  63      reserved, 0

Positions are made by the FEN parser (`tuner.chess.fen`), which only packs legal positions.
"""

import numpy as np
from numba import njit
from tuner.jit import JIT

from .bitboard import popcount

U64 = np.uint64

POSITION_WORDS = 9
W_WHITE = 0
W_BLACK = 1
W_PAWN = 2
W_KNIGHT = 3
W_BISHOP = 4
W_ROOK = 5
W_QUEEN = 6
W_KING = 7
W_META = 8

WHITE = 0
BLACK = 1
PAWN = 0
KNIGHT = 1
BISHOP = 2
ROOK = 3
QUEEN = 4
KING = 5

NO_PIECE = -1  # piece_on() of an empty square

MAX_HALFMOVE = 100
MAX_FULLMOVE = 9999
PHASE_MAX = 24  # phase() of the start position: 4 N + 4 B + 2 * 4 R + 4 * 2 Q

# meta word fields
META_STM_BIT = 0
META_CASTLE_SLOTS_SHIFT = 1
META_CASTLE_TEXT_SHIFT = 17
META_EP_SHIFT = 37
META_HALFMOVE_SHIFT = 41
META_FULLMOVE_SHIFT = 49
CASTLE_SLOT_BITS = 4
CASTLE_SLOT_PRESENT = 8  # nibble bit: the right exists; bits 0..2 are the rook's file
CASTLE_TEXT_BITS = 5
CASTLE_TEXT_MASK = (1 << (4 * CASTLE_TEXT_BITS)) - 1
HALFMOVE_MASK = 0xFF
FULLMOVE_MASK = 0x3FFF


@njit(**JIT)
def castle_slot_shift(colour, queen_side):
    """Bit offset in the meta word of the castling slot nibble of (colour, side)."""
    return U64(META_CASTLE_SLOTS_SHIFT + CASTLE_SLOT_BITS * (2 * colour + (1 if queen_side else 0)))


@njit(**JIT)
def side_to_move(pos):
    return np.int64(pos[W_META] & U64(1))


@njit(**JIT)
def phase(pos):
    """min(PHASE_MAX, N + B + 2R + 4Q), both colours."""
    p = (popcount(pos[W_KNIGHT]) + popcount(pos[W_BISHOP]) + 2 * popcount(pos[W_ROOK])
         + 4 * popcount(pos[W_QUEEN]))
    return min(p, np.int64(PHASE_MAX))


@njit(**JIT)
def piece_on(pos, sq):
    """NO_PIECE if sq is empty, else type + 6 * colour (0..5 White PAWN..KING, 6..11 Black)."""
    b = U64(1) << U64(sq)
    if (pos[W_WHITE] & b) != U64(0):
        base = 0
    elif (pos[W_BLACK] & b) != U64(0):
        base = KING + 1
    else:
        return np.int64(NO_PIECE)
    for t in range(KING + 1):
        if (pos[W_PAWN + t] & b) != U64(0):
            return np.int64(base + t)
    return np.int64(NO_PIECE)


@njit(**JIT)
def castling_rook_file(pos, colour, queen_side):
    """File (0..7) of the castling rook for (colour, side), or -1 if there is no such right."""
    nib = np.int64((pos[W_META] >> castle_slot_shift(colour, queen_side)) & U64(15))
    if nib & CASTLE_SLOT_PRESENT:
        return nib & 7
    return np.int64(-1)


@njit(**JIT)
def ep_square(pos):
    """En-passant square or -1."""
    bits = np.int64((pos[W_META] >> U64(META_EP_SHIFT)) & U64(15))
    if bits & 1 == 0:
        return np.int64(-1)
    rank = 5 if (pos[W_META] & U64(1)) == U64(0) else 2
    return np.int64(8 * rank + (bits >> 1))


@njit(**JIT)
def halfmove_clock(pos):
    return np.int64((pos[W_META] >> U64(META_HALFMOVE_SHIFT)) & U64(HALFMOVE_MASK))


@njit(**JIT)
def fullmove_number(pos):
    return np.int64((pos[W_META] >> U64(META_FULLMOVE_SHIFT)) & U64(FULLMOVE_MASK))
