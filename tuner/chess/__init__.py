"""Board layer: packed positions, FEN parsing, legality, bitboard helpers and attack generation.

See docs/interfaces.md. Submodules: ``position`` (the packed layout and its njit accessors),
``fen`` (FEN parsing and writing, single and bulk), ``status`` (the parser's status codes and
their reasons), ``legality`` (the njit legality rules the parser applies), ``bitboard`` (njit
popcount / lsb / edge-safe shifts), ``attacks`` (njit attack generation and attacker counts).
"""

from .fen import parse_fen, parse_fen_array, parse_fen_list, parse_fens, to_fen  # noqa: F401
from .position import (  # noqa: F401
    POSITION_WORDS, W_WHITE, W_BLACK, W_PAWN, W_KNIGHT, W_BISHOP, W_ROOK, W_QUEEN, W_KING, W_META,
    WHITE, BLACK, PAWN, KNIGHT, BISHOP, ROOK, QUEEN, KING, phase, piece_on, side_to_move,
)
from .status import FenStatus, status_reason  # noqa: F401
