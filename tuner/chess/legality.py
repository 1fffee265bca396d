"""Legality checks of a parsed position (njit; the FEN parser calls them, see tuner.chess.fen).

The rules are python-chess's ``Board.status()`` for everything it checks except the number and
geometry of checkers (``STATUS_TOO_MANY_CHECKERS``, ``STATUS_IMPOSSIBLE_CHECK``), with castling
read as in Chess960 (``chess.Board(fen, chess960=True)``), since a FEN does not say its variant:

* exactly one king per colour, at most 16 pieces and 8 pawns per colour, no pawn on rank 1 or 8;
* the side not to move is not in check;
* every castling letter names a rook of its colour on its back rank, beside its king on that rank
  (K/Q: the outermost rook on the king/queen side, as X-FEN; A..H: the rook on that file), and
  two letters of one colour name different sides (or the same rook twice, which python-chess
  also accepts);
* an en-passant square has an enemy pawn in front of it that could just have pushed two squares,
  and that square and the pawn's origin are empty. The square is kept whether or not a pawn can
  capture there (python-chess does the same; engines that set it after every double push, as
  Clockwork's data may, are accepted).
"""

import numpy as np
from numba import njit
from tuner.jit import JIT, INLINE

from .attacks import KING_ATTACKS, KNIGHT_ATTACKS, PAWN_ATTACKS, bishop_attacks, rook_attacks
from .bitboard import BACK_RANKS, RANK_1, RANK_8, lsb, msb, popcount
from .position import (CASTLE_SLOT_PRESENT, W_BISHOP, W_BLACK, W_KING, W_KNIGHT, W_PAWN, W_QUEEN,
                       W_ROOK, W_WHITE)
from .status import FenStatus, pack_status

U64 = np.uint64
#: The checks take the position array: inlined into the parser, so that no call passes an array
#: (each such call costs reference counting in Numba).
MAX_PIECES = 16
MAX_PAWNS = 8
RANK_STEP = 8  # square offset of one rank

# castling text codes (see the meta layout in tuner.chess.position)
CASTLE_CODE_WHITE_KING = 1  # K
CASTLE_CODE_WHITE_QUEEN = 2  # Q
CASTLE_CODE_BLACK_KING = 3  # k
CASTLE_CODE_BLACK_QUEEN = 4  # q
CASTLE_CODE_WHITE_FILE_A = 5  # A..H = 5..12
CASTLE_CODE_BLACK_FILE_A = 13  # a..h = 13..20
KING_SIDE = 0
QUEEN_SIDE = 1


@njit(**INLINE)
def material_status(bbs):
    """Kings, piece and pawn counts per colour, pawns on back ranks (board words only)."""
    for colour in range(2):
        mine = bbs[colour]
        n = popcount(mine & bbs[W_KING])
        if n != 1:
            return pack_status(FenStatus.KINGS, colour, n)
        n = popcount(mine)
        if n > MAX_PIECES:
            return pack_status(FenStatus.TOO_MANY_PIECES, colour, n)
        n = popcount(mine & bbs[W_PAWN])
        if n > MAX_PAWNS:
            return pack_status(FenStatus.TOO_MANY_PAWNS, colour, n)
    bad_pawns = bbs[W_PAWN] & BACK_RANKS
    if bad_pawns != U64(0):
        return pack_status(FenStatus.PAWN_BACK_RANK, lsb(bad_pawns), 0)
    return np.int32(FenStatus.OK)


@njit(**INLINE)
def check_status(bbs, stm):
    """OPPOSITE_CHECK if the king of the side not to move is attacked (one king per colour).

    Looks outward from the king (the attack relation is symmetric; a pawn of `stm` attacks it
    from where a pawn of the other colour on its square would attack), and ORs the attackers
    instead of counting them (`count_attackers`): parse_fens ~35 -> ~15 ns per position, with
    the sliders' classical rays (`tuner.chess.attacks`: 4 KB, where a random position per row
    missed the 800 KB magic rook table's cache lines)."""
    ksq = lsb(bbs[1 - stm] & bbs[W_KING])
    mine = bbs[stm]
    occ = bbs[W_WHITE] | bbs[W_BLACK]
    attackers = ((PAWN_ATTACKS[1 - stm, ksq] & bbs[W_PAWN])
                 | (KNIGHT_ATTACKS[ksq] & bbs[W_KNIGHT])
                 | (KING_ATTACKS[ksq] & bbs[W_KING])
                 | (bishop_attacks(ksq, occ) & (bbs[W_BISHOP] | bbs[W_QUEEN]))
                 | (rook_attacks(ksq, occ) & (bbs[W_ROOK] | bbs[W_QUEEN])))
    if attackers & mine != U64(0):
        return pack_status(FenStatus.OPPOSITE_CHECK, ksq, stm)
    return np.int32(FenStatus.OK)


@njit(**JIT)
def castle_colour(code):
    """Colour (0 White, 1 Black) of castling text code `code` (1..20)."""
    if code == CASTLE_CODE_WHITE_KING or code == CASTLE_CODE_WHITE_QUEEN:
        return 0
    if CASTLE_CODE_WHITE_FILE_A <= code < CASTLE_CODE_BLACK_FILE_A:
        return 0
    return 1


@njit(**INLINE)
def castle_slot(bbs, colour, code):
    """(status, side, nibble) of castling text code `code` of `colour`: the side (KING_SIDE or
    QUEEN_SIDE) and slot nibble of the rook it names, or a CASTLE_NO_KING / CASTLE_NO_ROOK status
    (its character filled in by the caller) when it names none."""
    back = RANK_1 if colour == 0 else RANK_8
    king = bbs[colour] & bbs[W_KING] & back
    if king == U64(0):
        return FenStatus.CASTLE_NO_KING, -1, 0
    rooks = bbs[colour] & bbs[W_ROOK] & back
    ksq = lsb(king)
    if code == CASTLE_CODE_WHITE_KING or code == CASTLE_CODE_BLACK_KING:
        if rooks != U64(0) and msb(rooks) > ksq:
            return FenStatus.OK, KING_SIDE, CASTLE_SLOT_PRESENT | (msb(rooks) & 7)
        return FenStatus.CASTLE_NO_ROOK, -1, 0
    if code == CASTLE_CODE_WHITE_QUEEN or code == CASTLE_CODE_BLACK_QUEEN:
        if rooks != U64(0) and lsb(rooks) < ksq:
            return FenStatus.OK, QUEEN_SIDE, CASTLE_SLOT_PRESENT | (lsb(rooks) & 7)
        return FenStatus.CASTLE_NO_ROOK, -1, 0
    f = (code - CASTLE_CODE_WHITE_FILE_A) & 7
    kfile = ksq & 7
    if ((rooks >> U64((ksq & 56) + f)) & U64(1)) == U64(0):
        return FenStatus.CASTLE_NO_ROOK, -1, 0
    return FenStatus.OK, (KING_SIDE if f > kfile else QUEEN_SIDE), CASTLE_SLOT_PRESENT | f


@njit(**INLINE)
def ep_status(bbs, stm, sq):
    """Whether en-passant square sq (on the rank the side to move captures on) is one a double
    push of the other side just passed: its pawn in front of sq, sq and the origin empty."""
    forward = RANK_STEP if stm == 1 else -RANK_STEP  # from sq towards the pushed pawn
    pawn_sq = sq + forward
    origin_sq = sq - forward
    if ((bbs[1 - stm] & bbs[W_PAWN]) >> U64(pawn_sq)) & U64(1) == U64(0):
        return pack_status(FenStatus.EP_NO_PAWN, sq, stm)
    occ = bbs[0] | bbs[1]
    if (occ >> U64(sq)) & U64(1) != U64(0):
        return pack_status(FenStatus.EP_OCCUPIED, sq, stm)
    if (occ >> U64(origin_sq)) & U64(1) != U64(0):
        return pack_status(FenStatus.EP_OCCUPIED, origin_sq, stm)
    return np.int32(FenStatus.OK)
