"""Board layer: packed positions, FEN parsing, bitboard helpers and attack generation.

See docs/interfaces.md. Submodules: ``position`` (layout constants, FEN parsing / writing, small
njit accessors), ``bitboard`` (njit popcount / lsb / edge-safe shifts), ``attacks`` (njit attack
generation and per-square attacker counts).
"""

from .position import (  # noqa: F401
    POSITION_WORDS, W_WHITE, W_BLACK, W_PAWN, W_KNIGHT, W_BISHOP, W_ROOK, W_QUEEN, W_KING, W_META,
    WHITE, BLACK, PAWN, KNIGHT, BISHOP, ROOK, QUEEN, KING,
    parse_fen, to_fen, parse_fens, parse_fen_list, parse_fen_array, status_reason,
    phase, piece_on, side_to_move,
)
