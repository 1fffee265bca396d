"""Status codes of the FEN parser: one vocabulary for the single, bulk and Arrow parsers.

A status is an int32: 0 (`FenStatus.OK`) for an accepted FEN; otherwise its low 8 bits are a
`FenStatus` and the higher bits carry details (a rank label, a character, a square, a colour, a
value) that :func:`status_reason` turns into ``"<field>: <reason>"``. Two layouts of the details:
``kind | a << DETAIL_A_SHIFT | b << DETAIL_B_SHIFT`` (`pack_status`, a and b capped at 255) or
``kind | value << DETAIL_A_SHIFT``
(`pack_value_status`, value capped at `VALUE_CAP`).
"""

from enum import IntEnum
from functools import lru_cache

import numpy as np
from numba import njit
from tuner.jit import JIT

from .position import MAX_FULLMOVE, MAX_HALFMOVE


class FenStatus(IntEnum):
    """The reason a FEN was rejected (the low 8 bits of a status); comments name the details."""
    OK = 0
    NULL = 1  # a null entry of an Arrow array or a None in a list
    EMPTY = 2
    MISSING_FIELD = 3  # a = index into FIELD_NAMES of the missing field (F_STM, F_CASTLING, F_EP)
    EXTRA_FIELDS = 4
    PL_CHAR = 10  # a = character, b = rank label 1..8
    PL_FILES = 11  # a = rank label, b = number of files (capped at 255)
    PL_RANKS = 12  # a = number of ranks (capped at 255)
    PL_DIGITS = 13  # a = rank label
    KINGS = 14  # a = colour, b = king count
    TOO_MANY_PIECES = 15  # a = colour, b = piece count
    PAWN_BACK_RANK = 16  # a = square
    TOO_MANY_PAWNS = 17  # a = colour, b = pawn count
    STM = 20
    OPPOSITE_CHECK = 21  # a = square of the king in check, b = side to move
    CASTLE_CHAR = 30  # a = character
    CASTLE_DASH = 31
    CASTLE_DUP = 32  # a = character
    CASTLE_COUNT = 33  # a = colour
    CASTLE_ORDER = 34  # a = character (a White right after a Black one)
    CASTLE_NO_KING = 35  # a = character (its colour's king is not on its back rank)
    CASTLE_NO_ROOK = 36  # a = character (names no rook of its colour beside the king)
    CASTLE_SAME_SIDE = 37  # a = character (a second, different rook on the same side)
    EP_SYNTAX = 40
    EP_RANK = 41  # a = square, b = side to move
    EP_NO_PAWN = 42  # a = square, b = side to move
    EP_OCCUPIED = 43  # a = occupied square (the en-passant square or the pawn's origin)
    HM_SYNTAX = 50
    HM_ZERO = 51
    HM_RANGE = 52  # value
    FM_SYNTAX = 53
    FM_ZERO = 54
    FM_RANGE = 55  # value


STATUS_KIND_MASK = 0xFF
DETAIL_MASK = 0xFF
DETAIL_A_SHIFT = 8
DETAIL_B_SHIFT = 16
VALUE_CAP = (1 << 23) - 1

#: Field names, in FEN order after the pseudo-field "fen" (the whole text); a reason starts with one.
FIELD_NAMES = ("fen", "piece placement", "side to move", "castling", "en passant",
               "half-move clock", "full-move number", "extra fields")
F_FEN, F_PLACEMENT, F_STM, F_CASTLING, F_EP, F_HALFMOVE, F_FULLMOVE, F_EXTRA = range(8)
COLOUR_NAMES = ("White", "Black")
SQUARE_NAMES = tuple(f + r for r in "12345678" for f in "abcdefgh")
_BACK_RANK_LABEL = (1, 8)
_EP_RANK_LABEL = (6, 3)  # by side to move
_FIRST_PRINTABLE, _LAST_PRINTABLE = 33, 126


@njit(**JIT)
def pack_status(kind, a, b):
    """A status with details a and b (each capped at 255)."""
    return np.int32(kind | (min(a, DETAIL_MASK) << DETAIL_A_SHIFT) | (min(b, DETAIL_MASK) << DETAIL_B_SHIFT))


@njit(**JIT)
def pack_value_status(kind, value):
    """A status with one value (capped at VALUE_CAP)."""
    return np.int32(kind | (min(value, VALUE_CAP) << DETAIL_A_SHIFT))


def status_kind(code: int) -> FenStatus:
    """The `FenStatus` of a status; raises ValueError naming an unknown code."""
    try:
        return FenStatus(int(code) & STATUS_KIND_MASK)
    except ValueError:
        raise ValueError(f"unknown FEN status code {int(code)}") from None


def _char(c: int) -> str:
    if _FIRST_PRINTABLE <= c <= _LAST_PRINTABLE:
        return "'" + chr(c) + "'"
    return "byte 0x%02x" % c


def _uint(value: int) -> str:
    return str(value) if value < VALUE_CAP else "a number >= %d" % VALUE_CAP


def _colour_of_castle_char(c: int) -> str:
    return COLOUR_NAMES[0 if chr(c).isupper() else 1]


#: kind -> (index into FIELD_NAMES, reason from (a, b, value)).
REASONS = {
    FenStatus.NULL: (F_FEN, lambda a, b, v: "null entry"),
    FenStatus.EMPTY: (F_FEN, lambda a, b, v: "empty string"),
    FenStatus.MISSING_FIELD: (F_FEN, None),  # named after the missing field, see status_reason
    FenStatus.EXTRA_FIELDS: (F_EXTRA, lambda a, b, v: "text after the full-move number (at most 6 fields)"),
    FenStatus.PL_CHAR: (F_PLACEMENT, lambda a, b, v: "unknown piece letter %s in rank %d" % (_char(a), b)),
    FenStatus.PL_FILES: (F_PLACEMENT, lambda a, b, v: "rank %d has %s file%s (expected 8)" % (
        a, b if b < DETAIL_MASK else "255+", "" if b == 1 else "s")),
    FenStatus.PL_RANKS: (F_PLACEMENT, lambda a, b, v: "%s ranks (expected 8)" % (a if a < DETAIL_MASK else "255+")),
    FenStatus.PL_DIGITS: (F_PLACEMENT, lambda a, b, v: "two consecutive digits in rank %d" % a),
    FenStatus.KINGS: (F_PLACEMENT, lambda a, b, v: "%s has %d kings (expected exactly 1)" % (
        COLOUR_NAMES[a & 1], b)),
    FenStatus.TOO_MANY_PIECES: (F_PLACEMENT, lambda a, b, v: "%s has %d pieces (at most 16)" % (
        COLOUR_NAMES[a & 1], b)),
    FenStatus.PAWN_BACK_RANK: (F_PLACEMENT, lambda a, b, v: "pawn on %s (pawns cannot stand on rank 1 or 8)"
                               % SQUARE_NAMES[a & 63]),
    FenStatus.TOO_MANY_PAWNS: (F_PLACEMENT, lambda a, b, v: "%s has %d pawns (at most 8)" % (
        COLOUR_NAMES[a & 1], b)),
    FenStatus.STM: (F_STM, lambda a, b, v: "expected 'w' or 'b'"),
    FenStatus.OPPOSITE_CHECK: (F_STM, lambda a, b, v: "%s to move, but %s's king on %s is in check" % (
        COLOUR_NAMES[b & 1], COLOUR_NAMES[1 - (b & 1)], SQUARE_NAMES[a & 63])),
    FenStatus.CASTLE_CHAR: (F_CASTLING, lambda a, b, v: "invalid character %s (expected '-' or letters from "
                            "KQkqA-Ha-h)" % _char(a)),
    FenStatus.CASTLE_DASH: (F_CASTLING, lambda a, b, v: "'-' must stand alone"),
    FenStatus.CASTLE_DUP: (F_CASTLING, lambda a, b, v: "duplicate %s" % _char(a)),
    FenStatus.CASTLE_COUNT: (F_CASTLING, lambda a, b, v: "more than 2 rights for %s" % COLOUR_NAMES[a & 1]),
    FenStatus.CASTLE_ORDER: (F_CASTLING, lambda a, b, v: "White's right %s after a Black right (White's "
                             "come first)" % _char(a)),
    FenStatus.CASTLE_NO_KING: (F_CASTLING, lambda a, b, v: "right %s, but %s's king is not on rank %d" % (
        _char(a), _colour_of_castle_char(a), _BACK_RANK_LABEL[chr(a).islower()])),
    FenStatus.CASTLE_NO_ROOK: (F_CASTLING, lambda a, b, v: "right %s names no %s rook on that side of the "
                               "king on rank %d" % (_char(a), _colour_of_castle_char(a),
                                                   _BACK_RANK_LABEL[chr(a).islower()])),
    FenStatus.CASTLE_SAME_SIDE: (F_CASTLING, lambda a, b, v: "right %s names a second %s rook on the same "
                                 "side of the king" % (_char(a), _colour_of_castle_char(a))),
    FenStatus.EP_SYNTAX: (F_EP, lambda a, b, v: "expected '-' or a square a1..h8"),
    FenStatus.EP_RANK: (F_EP, lambda a, b, v: "%s is not on rank %d (%s to move)" % (
        SQUARE_NAMES[a & 63], _EP_RANK_LABEL[b & 1], COLOUR_NAMES[b & 1])),
    FenStatus.EP_NO_PAWN: (F_EP, lambda a, b, v: "%s, but no %s pawn stands on %s (no double push "
                           "was just made)" % (SQUARE_NAMES[a & 63], COLOUR_NAMES[1 - (b & 1)],
                                               SQUARE_NAMES[(a & 63) + (-8 if b & 1 == 0 else 8)])),
    FenStatus.EP_OCCUPIED: (F_EP, lambda a, b, v: "%s is occupied (a double push leaves the square "
                            "passed and the square left empty)" % SQUARE_NAMES[a & 63]),
    FenStatus.HM_SYNTAX: (F_HALFMOVE, lambda a, b, v: "not a non-negative decimal integer"),
    FenStatus.HM_ZERO: (F_HALFMOVE, lambda a, b, v: "leading zero"),
    FenStatus.HM_RANGE: (F_HALFMOVE, lambda a, b, v: "%s exceeds %d" % (_uint(v), MAX_HALFMOVE)),
    FenStatus.FM_SYNTAX: (F_FULLMOVE, lambda a, b, v: "not a positive decimal integer"),
    FenStatus.FM_ZERO: (F_FULLMOVE, lambda a, b, v: "leading zero or 0"),
    FenStatus.FM_RANGE: (F_FULLMOVE, lambda a, b, v: "%s is outside 1..%d" % (_uint(v), MAX_FULLMOVE)),
}


def status_field(code: int) -> int:
    """Index into FIELD_NAMES of the field a (non-OK) status is about."""
    kind = status_kind(code)
    if kind == FenStatus.MISSING_FIELD:
        return (int(code) >> DETAIL_A_SHIFT) & DETAIL_MASK
    return REASONS[kind][0]


def status_reason(code: int) -> str:
    """``"<field>: <reason>"`` for a status (``"ok"`` for 0); raises ValueError for an unknown one."""
    code = int(code)
    kind = status_kind(code)
    if kind == FenStatus.OK:
        return "ok"
    a = (code >> DETAIL_A_SHIFT) & DETAIL_MASK
    b = (code >> DETAIL_B_SHIFT) & DETAIL_MASK
    if kind == FenStatus.MISSING_FIELD:
        field = FIELD_NAMES[a] if 0 < a < len(FIELD_NAMES) else FIELD_NAMES[0]
        return "%s: missing (a FEN needs at least 4 fields)" % field
    field, reason = REASONS[kind]
    return "%s: %s" % (FIELD_NAMES[field], reason(a, b, (code >> DETAIL_A_SHIFT) & VALUE_CAP))


@lru_cache(maxsize=None)
def status_text(code: int) -> str:
    """What the data commands say about a rejected row: ``"fen is null"`` or ``"bad FEN: <reason>"``."""
    if int(code) == FenStatus.NULL:
        return "fen is null"
    return "bad FEN: " + status_reason(code)
