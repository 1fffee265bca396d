"""Packed chess positions and FEN parsing (standard FEN, X-FEN and Shredder-FEN castling).

A position is one row of ``POSITION_WORDS = 9`` uint64 words (72 bytes), see docs/interfaces.md:

    word 0  W_WHITE      all white pieces
    word 1  W_BLACK      all black pieces
    word 2+t W_PAWN + t  pieces of type t (PAWN=0 ... KING=5), both colours
    word 8  W_META       side to move, castling, en passant, clocks (layout below)

Meta word layout (bit ranges inclusive):

    bit  0       side to move (0 White, 1 Black)
    bits 1..16   castling rook slots, 4 nibbles in the order White king side (bits 1..4), White queen
                 side (5..8), Black king side (9..12), Black queen side (13..16). Nibble: bit 3 =
                 right present, bits 0..2 = the rook's file. A right is present only when its letter
                 names a rook of that colour on its back rank beside a king on the same rank (K/Q:
                 the outermost rook on that side of the king, as X-FEN and python-chess do; A..H:
                 the rook on that file). Letters that name no rook are kept in the text (below) but
                 give no slot. If two letters resolve to the same side, the outermost rook wins
                 (so the slots always equal python-chess's ``clean_castling_rights()``).
    bits 17..36  the castling field exactly as written: up to 4 characters, 5 bits each, first
                 character in the low bits; code 0 = end, 1..4 = K Q k q, 5..12 = A..H,
                 13..20 = a..h. All zero means '-'. (This is what makes KQkq-style, Shredder-style
                 and mixed X-FEN fields round-trip exactly.)
    bits 37..40  en passant: bit 37 = present, bits 38..40 = file. The rank is implied by the side
                 to move (rank 6 when White is to move, rank 3 when Black is).
    bits 41..48  half-move clock (0..MAX_HALFMOVE = 100)
    bits 49..62  full-move number (1..MAX_FULLMOVE = 9999)
    bit  63      reserved, 0

Accepted FEN (everything else is rejected with a reason):

* fields separated by runs of ASCII whitespace; leading/trailing whitespace ignored;
* piece placement: exactly 8 ranks of exactly 8 files, letters KQRBNP/kqrbnp, digits 1..8, no two
  consecutive digits (so every accepted placement is in canonical form); exactly one king per
  colour, at most 16 pieces per colour, no pawn on rank 1 or 8;
* side to move: ``w`` or ``b``;
* castling: ``-`` or 1..4 distinct characters from ``KQkqABCDEFGHabcdefgh``, at most two per colour,
  White's (upper case) before Black's (as python-chess requires);
* en passant: ``-`` or a square on rank 6 (White to move) / rank 3 (Black to move);
* optional half-move clock (0..100) and full-move number (1..9999), plain decimal without sign or
  leading zeros; missing clocks default to ``0 1``; no further fields.

Every accepted FEN round-trips exactly: ``to_fen(parse_fen(f)) == " ".join(f.split())`` when f has
all six fields (with the clocks ``0 1`` appended when they were missing).

One njit parser (`_parse_row`) serves both :func:`parse_fen` and the bulk :func:`parse_fens`.
A status is an int32: 0 = valid; otherwise the low 8 bits are a reason code and the higher bits carry
details (rank number, offending character, value) that :func:`status_reason` turns into
``"<field>: <reason>"``.
"""

import re

import numpy as np
from numba import njit

from .bitboard import popcount, lsb, msb

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

# meta word fields
META_STM_BIT = 0
META_CASTLE_SLOTS_SHIFT = 1
META_CASTLE_TEXT_SHIFT = 17
META_EP_SHIFT = 37
META_HALFMOVE_SHIFT = 41
META_FULLMOVE_SHIFT = 49
# castling slot index: 2*colour + (0 king side, 1 queen side)
SLOT_WK, SLOT_WQ, SLOT_BK, SLOT_BQ = 0, 1, 2, 3

# ---------------------------------------------------------------------------------------------
# status codes (low 8 bits of a status); details in bits 8..30

OK = 0
E_NULL = 1
E_EMPTY = 2
E_MISSING_FIELD = 3  # a = index of the missing field (1 side to move, 2 castling, 3 en passant)
E_EXTRA_FIELDS = 4
E_PL_CHAR = 10  # a = character, b = rank label 1..8
E_PL_FILES = 11  # a = rank label, b = number of files (capped at 255)
E_PL_RANKS = 12  # a = number of ranks (capped at 255)
E_PL_DIGITS = 13  # a = rank label
E_PL_KINGS = 14  # a = colour, b = king count
E_PL_TOO_MANY = 15  # a = colour, b = piece count
E_PL_PAWN_BACK = 16  # a = square
E_STM = 20
E_CASTLE_CHAR = 30  # a = character
E_CASTLE_DASH = 31
E_CASTLE_DUP = 32  # a = character
E_CASTLE_COUNT = 33  # a = colour
E_CASTLE_ORDER = 34  # a = character (a White right after a Black one)
E_EP_SYNTAX = 40
E_EP_RANK = 41  # a = square, b = side to move
E_HM_SYNTAX = 50
E_HM_ZERO = 51
E_HM_RANGE = 52  # value in bits 8..30 (capped)
E_FM_SYNTAX = 53
E_FM_ZERO = 54
E_FM_RANGE = 55  # value in bits 8..30 (capped)

_VALUE_CAP = (1 << 23) - 1

_FIELD_OF_CODE = {
    E_NULL: "fen",
    E_EMPTY: "fen",
    E_MISSING_FIELD: None,
    E_EXTRA_FIELDS: "extra fields",
    E_PL_CHAR: "piece placement",
    E_PL_FILES: "piece placement",
    E_PL_RANKS: "piece placement",
    E_PL_DIGITS: "piece placement",
    E_PL_KINGS: "piece placement",
    E_PL_TOO_MANY: "piece placement",
    E_PL_PAWN_BACK: "piece placement",
    E_STM: "side to move",
    E_CASTLE_CHAR: "castling",
    E_CASTLE_DASH: "castling",
    E_CASTLE_DUP: "castling",
    E_CASTLE_COUNT: "castling",
    E_CASTLE_ORDER: "castling",
    E_EP_SYNTAX: "en passant",
    E_EP_RANK: "en passant",
    E_HM_SYNTAX: "half-move clock",
    E_HM_ZERO: "half-move clock",
    E_HM_RANGE: "half-move clock",
    E_FM_SYNTAX: "full-move number",
    E_FM_ZERO: "full-move number",
    E_FM_RANGE: "full-move number",
}
_FIELD_NAMES = ("piece placement", "side to move", "castling", "en passant", "half-move clock",
                "full-move number")
_COLOUR_NAMES = ("White", "Black")
_SQUARE_NAMES = [f + r for r in "12345678" for f in "abcdefgh"]


def _char_repr(c):
    ch = chr(c)
    if 32 < c < 127:
        return "'" + ch + "'"
    return "byte 0x%02x" % c


def status_reason(code):
    """Human-readable ``"<field>: <reason>"`` for a status returned by :func:`parse_fens`."""
    code = int(code)
    if code == OK:
        return "ok"
    kind = code & 0xFF
    a = (code >> 8) & 0xFF
    b = (code >> 16) & 0xFF
    value = (code >> 8) & _VALUE_CAP
    if kind == E_NULL:
        return "fen: null entry"
    if kind == E_EMPTY:
        return "fen: empty string"
    if kind == E_MISSING_FIELD:
        if 0 < a < len(_FIELD_NAMES):
            return "%s: missing (a FEN needs at least 4 fields)" % _FIELD_NAMES[a]
        return "fen: missing field (a FEN needs at least 4 fields)"
    if kind == E_EXTRA_FIELDS:
        return "extra fields: text after the full-move number (at most 6 fields)"
    if kind == E_PL_CHAR:
        return "piece placement: unknown piece letter %s in rank %d" % (_char_repr(a), b)
    if kind == E_PL_FILES:
        return "piece placement: rank %d has %s file%s (expected 8)" % (
            a, b if b < 255 else "255+", "" if b == 1 else "s")
    if kind == E_PL_RANKS:
        return "piece placement: %s ranks (expected 8)" % (a if a < 255 else "255+")
    if kind == E_PL_DIGITS:
        return "piece placement: two consecutive digits in rank %d" % a
    if kind == E_PL_KINGS:
        return "piece placement: %s has %d kings (expected exactly 1)" % (_COLOUR_NAMES[a & 1], b)
    if kind == E_PL_TOO_MANY:
        return "piece placement: %s has %d pieces (at most 16)" % (_COLOUR_NAMES[a & 1], b)
    if kind == E_PL_PAWN_BACK:
        return "piece placement: pawn on %s (pawns cannot stand on rank 1 or 8)" % _SQUARE_NAMES[a & 63]
    if kind == E_STM:
        return "side to move: expected 'w' or 'b'"
    if kind == E_CASTLE_CHAR:
        return "castling: invalid character %s (expected '-' or letters from KQkqA-Ha-h)" % _char_repr(a)
    if kind == E_CASTLE_DASH:
        return "castling: '-' must stand alone"
    if kind == E_CASTLE_DUP:
        return "castling: duplicate %s" % _char_repr(a)
    if kind == E_CASTLE_COUNT:
        return "castling: more than 2 rights for %s" % _COLOUR_NAMES[a & 1]
    if kind == E_CASTLE_ORDER:
        return "castling: White's right %s after a Black right (White's come first)" % _char_repr(a)
    if kind == E_EP_SYNTAX:
        return "en passant: expected '-' or a square a1..h8"
    if kind == E_EP_RANK:
        want = 6 if b == 0 else 3
        return "en passant: %s is not on rank %d (%s to move)" % (_SQUARE_NAMES[a & 63], want,
                                                                   _COLOUR_NAMES[b & 1])
    if kind == E_HM_SYNTAX:
        return "half-move clock: not a non-negative decimal integer"
    if kind == E_HM_ZERO:
        return "half-move clock: leading zero"
    if kind == E_HM_RANGE:
        shown = str(value) if value < _VALUE_CAP else "a number >= %d" % _VALUE_CAP
        return "half-move clock: %s exceeds %d" % (shown, MAX_HALFMOVE)
    if kind == E_FM_SYNTAX:
        return "full-move number: not a positive decimal integer"
    if kind == E_FM_ZERO:
        return "full-move number: leading zero or 0"
    if kind == E_FM_RANGE:
        shown = str(value) if value < _VALUE_CAP else "a number >= %d" % _VALUE_CAP
        return "full-move number: %s is outside 1..%d" % (shown, MAX_FULLMOVE)
    return "fen: unknown status code %d" % code


# ---------------------------------------------------------------------------------------------
# lookup tables (module-level numpy arrays are frozen into the njit code as constants)

def _build_char_tables():
    piece = np.full(256, -1, np.int8)  # colour*8 + type
    for t, ch in enumerate("pnbrqk"):
        piece[ord(ch.upper())] = t
        piece[ord(ch)] = 8 + t
    castle = np.zeros(256, np.int8)  # 5-bit castling text code, 0 = invalid
    for k, ch in enumerate("KQkq"):
        castle[ord(ch)] = 1 + k
    for f in range(8):
        castle[ord("A") + f] = 5 + f
        castle[ord("a") + f] = 13 + f
    ws = np.zeros(256, np.bool_)
    for ch in " \t\n\r\v\f":
        ws[ord(ch)] = True
    return piece, castle, ws


_PIECE_OF_CHAR, _CASTLE_CODE_OF_CHAR, _IS_WS = _build_char_tables()
_CASTLE_TEXT = "?KQkqABCDEFGHabcdefgh"
_PIECE_CHARS = "PNBRQKpnbrqk"

_RANK1 = U64(0x00000000000000FF)
_RANK8 = U64(0xFF00000000000000)
_BACK = _RANK1 | _RANK8


@njit(cache=True, nogil=True)
def _err(kind, a, b):
    return np.int32(kind | (min(a, 255) << 8) | (min(b, 255) << 16))


@njit(cache=True, nogil=True)
def _err_value(kind, value):
    return np.int32(kind | (min(value, _VALUE_CAP) << 8))


@njit(cache=True, nogil=True)
def _castle_slot(bbs, colour, code):
    """Castling slot nibble (0 = none) for castling text code `code` of `colour`."""
    back = _RANK1 if colour == 0 else _RANK8
    rooks = bbs[colour] & bbs[W_ROOK] & back
    king = bbs[colour] & bbs[W_KING] & back
    if king == U64(0) or rooks == U64(0):
        return -1, 0
    ksq = lsb(king)
    kfile = ksq & 7
    if code == 1 or code == 3:  # K / k: outermost rook on the king side
        r = msb(rooks)
        if r > ksq:
            return 0, 8 | (r & 7)
        return -1, 0
    if code == 2 or code == 4:  # Q / q: outermost rook on the queen side
        r = lsb(rooks)
        if r < ksq:
            return 1, 8 | (r & 7)
        return -1, 0
    f = (code - 5) & 7  # A..H / a..h
    sq = (ksq & 56) + f
    if ((rooks >> U64(sq)) & U64(1)) == U64(0) or f == kfile:
        return -1, 0
    if f > kfile:
        return 0, 8 | f
    return 1, 8 | f


@njit(cache=True, nogil=True)
def _read_uint(data, i, end):
    """Parse a plain decimal at data[i:...] up to whitespace. Returns (value, next_i, state):
    state 0 ok, 1 syntax error, 2 leading zero. value saturates at 2**40."""
    start = i
    value = np.int64(0)
    while i < end and not _IS_WS[data[i]]:
        c = np.int64(data[i])
        if c < 48 or c > 57:
            while i < end and not _IS_WS[data[i]]:
                i += 1
            return value, i, 1
        if value < (np.int64(1) << 40):
            value = value * 10 + (c - 48)
        i += 1
    if i - start > 1 and data[start] == 48:
        return value, i, 2
    return value, i, 0


@njit(cache=True, nogil=True)
def _parse_row(data, start, end, out, row):
    """Parse the FEN in data[start:end] into out[row, :9]. Returns the status (int32).
    On any error the row is left all zero."""
    bbs = out[row]
    for k in range(POSITION_WORDS):
        bbs[k] = U64(0)
    status = _parse_board(data, start, end, bbs)
    if status != 0:
        for k in range(POSITION_WORDS):
            bbs[k] = U64(0)
    return status


@njit(cache=True, nogil=True)
def _parse_board(data, start, end, bbs):
    i = start
    while i < end and _IS_WS[data[i]]:
        i += 1
    if i >= end:
        return _err(E_EMPTY, 0, 0)

    # ---- field 1: piece placement ----
    rank = 7  # board rank index being filled (rank label = rank + 1)
    nfiles = 0
    prev_digit = False
    nranks = 1
    white = U64(0)
    black = U64(0)
    while i < end:
        c = data[i]
        if _IS_WS[c]:
            break
        if c == 47:  # '/'
            if nfiles != 8:
                return _err(E_PL_FILES, rank + 1, nfiles)
            nranks += 1
            if nranks > 8:
                # count every rank of the field to report how many there are
                i += 1
                while i < end and not _IS_WS[data[i]]:
                    if data[i] == 47:
                        nranks += 1
                    i += 1
                return _err(E_PL_RANKS, nranks, 0)
            rank -= 1
            nfiles = 0
            prev_digit = False
        elif 49 <= c <= 56:  # '1'..'8'
            if prev_digit:
                return _err(E_PL_DIGITS, rank + 1, 0)
            nfiles += np.int64(c) - 48
            prev_digit = True
        else:
            p = _PIECE_OF_CHAR[c]
            if p < 0:
                return _err(E_PL_CHAR, np.int64(c), rank + 1)
            if nfiles < 8:
                b = U64(1) << U64(rank * 8 + nfiles)
                if p < 8:
                    white |= b
                else:
                    black |= b
                bbs[W_PAWN + (p & 7)] |= b
            nfiles += 1
            prev_digit = False
        i += 1
    if nfiles != 8:
        return _err(E_PL_FILES, rank + 1, nfiles)
    if nranks != 8:
        return _err(E_PL_RANKS, nranks, 0)
    bbs[W_WHITE] = white
    bbs[W_BLACK] = black
    for colour in range(2):
        mine = bbs[colour]
        nk = popcount(mine & bbs[W_KING])
        if nk != 1:
            return _err(E_PL_KINGS, colour, nk)
        n = popcount(mine)
        if n > 16:
            return _err(E_PL_TOO_MANY, colour, n)
    bad_pawns = bbs[W_PAWN] & _BACK
    if bad_pawns != U64(0):
        return _err(E_PL_PAWN_BACK, lsb(bad_pawns), 0)

    return _parse_rest(data, i, end, bbs)


@njit(cache=True, nogil=True)
def _parse_rest(data, i, end, bbs):
    """Fields 2..6 (board already in bbs[0..7]); writes bbs[W_META]."""
    meta = U64(0)
    # ---- field 2: side to move ----
    while i < end and _IS_WS[data[i]]:
        i += 1
    if i >= end:
        return _err(E_MISSING_FIELD, 1, 0)
    j = i
    while j < end and not _IS_WS[data[j]]:
        j += 1
    if j - i != 1 or (data[i] != 119 and data[i] != 98):  # 'w' 'b'
        return _err(E_STM, 0, 0)
    stm = 0 if data[i] == 119 else 1
    meta |= U64(stm)
    i = j

    # ---- field 3: castling ----
    while i < end and _IS_WS[data[i]]:
        i += 1
    if i >= end:
        return _err(E_MISSING_FIELD, 2, 0)
    j = i
    while j < end and not _IS_WS[data[j]]:
        j += 1
    if not (j - i == 1 and data[i] == 45):  # not a lone '-'
        text = U64(0)
        seen = 0  # bit per code
        per_colour0 = 0
        per_colour1 = 0
        n = 0
        black_seen = False
        for k in range(i, j):
            c = data[k]
            if c == 45:
                return _err(E_CASTLE_DASH, 0, 0)
            code = np.int64(_CASTLE_CODE_OF_CHAR[c])
            if code == 0:
                return _err(E_CASTLE_CHAR, np.int64(c), 0)
            if (seen >> code) & 1:
                return _err(E_CASTLE_DUP, np.int64(c), 0)
            seen |= 1 << code
            colour = 0 if (code == 1 or code == 2 or (5 <= code <= 12)) else 1
            if colour == 1:
                black_seen = True
            elif black_seen:
                return _err(E_CASTLE_ORDER, np.int64(c), 0)
            if colour == 0:
                per_colour0 += 1
                if per_colour0 > 2:
                    return _err(E_CASTLE_COUNT, 0, 0)
            else:
                per_colour1 += 1
                if per_colour1 > 2:
                    return _err(E_CASTLE_COUNT, 1, 0)
            text |= U64(code) << U64(5 * n)
            n += 1
            side, nib = _castle_slot(bbs, colour, code)
            if side >= 0:
                shift = U64(META_CASTLE_SLOTS_SHIFT + 4 * (2 * colour + side))
                old = np.int64((meta >> shift) & U64(15))
                # two letters for the same side: the outermost rook wins (as in python-chess)
                if old == 0 or (side == 0 and nib > old) or (side == 1 and nib < old):
                    meta = (meta & ~(U64(15) << shift)) | (U64(nib) << shift)
        meta |= text << U64(META_CASTLE_TEXT_SHIFT)
    i = j

    # ---- field 4: en passant ----
    while i < end and _IS_WS[data[i]]:
        i += 1
    if i >= end:
        return _err(E_MISSING_FIELD, 3, 0)
    j = i
    while j < end and not _IS_WS[data[j]]:
        j += 1
    if not (j - i == 1 and data[i] == 45):
        if j - i != 2:
            return _err(E_EP_SYNTAX, 0, 0)
        f = np.int64(data[i]) - 97
        r = np.int64(data[i + 1]) - 49
        if f < 0 or f > 7 or r < 0 or r > 7:
            return _err(E_EP_SYNTAX, 0, 0)
        want = 5 if stm == 0 else 2
        if r != want:
            return _err(E_EP_RANK, 8 * r + f, stm)
        meta |= U64(1 | (f << 1)) << U64(META_EP_SHIFT)
    i = j

    # ---- fields 5, 6: clocks (optional) ----
    halfmove = np.int64(0)
    fullmove = np.int64(1)
    while i < end and _IS_WS[data[i]]:
        i += 1
    if i < end:
        value, i, state = _read_uint(data, i, end)
        if state == 1:
            return _err(E_HM_SYNTAX, 0, 0)
        if state == 2:
            return _err(E_HM_ZERO, 0, 0)
        if value > MAX_HALFMOVE:
            return _err_value(E_HM_RANGE, value)
        halfmove = value
        while i < end and _IS_WS[data[i]]:
            i += 1
        if i < end:
            value, i, state = _read_uint(data, i, end)
            if state == 1:
                return _err(E_FM_SYNTAX, 0, 0)
            if state == 2 or value == 0:
                return _err(E_FM_ZERO, 0, 0)
            if value > MAX_FULLMOVE:
                return _err_value(E_FM_RANGE, value)
            fullmove = value
            while i < end and _IS_WS[data[i]]:
                i += 1
            if i < end:
                return _err(E_EXTRA_FIELDS, 0, 0)
    meta |= U64(halfmove) << U64(META_HALFMOVE_SHIFT)
    meta |= U64(fullmove) << U64(META_FULLMOVE_SHIFT)
    bbs[W_META] = meta
    return np.int32(0)


@njit(cache=True, nogil=True)
def _parse_fens_core(offsets, data, positions, status):
    n = positions.shape[0]
    for r in range(n):
        status[r] = _parse_row(data, offsets[r], offsets[r + 1], positions, r)


def parse_fens(offsets, data):
    """Bulk parse of an Arrow string array's buffers.

    offsets: int32 or int64 array of length N+1 (already adjusted for any array slice offset, i.e.
    row r is data[offsets[r]:offsets[r+1]]); data: uint8 array. Returns (positions[N, 9] uint64,
    status[N] int32); invalid rows are all zero and have a non-zero status (see status_reason).
    Null rows are not known here (the caller masks them, see parse_fen_array / parse_fen_list)."""
    offsets = np.asarray(offsets)
    if offsets.dtype not in (np.int32, np.int64):
        raise TypeError("offsets must be int32 or int64, got %s" % offsets.dtype)
    data = np.asarray(data)
    if data.dtype != np.uint8:
        raise TypeError("data must be uint8, got %s" % data.dtype)
    offsets = np.ascontiguousarray(offsets)
    data = np.ascontiguousarray(data)
    n = max(offsets.shape[0] - 1, 0)
    if n and (offsets[0] < 0 or offsets[-1] > data.shape[0] or np.any(np.diff(offsets) < 0)):
        raise ValueError("offsets are not a valid monotone index into data")
    positions = np.empty((n, POSITION_WORDS), np.uint64)
    status = np.empty(n, np.int32)
    if n:
        _parse_fens_core(offsets, data, positions, status)
    return positions, status


def parse_fen_array(array):
    """Parse a pyarrow string/large_string (or binary/large_binary) Array or ChunkedArray.
    Handles sliced arrays; null rows get status E_NULL ("fen: null entry")."""
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        parts = [parse_fen_array(chunk) for chunk in array.chunks]
        if not parts:
            return np.empty((0, POSITION_WORDS), np.uint64), np.empty(0, np.int32)
        return (np.concatenate([p for p, _ in parts]), np.concatenate([s for _, s in parts]))
    t = array.type
    if pa.types.is_string(t) or pa.types.is_binary(t):
        off_dtype = np.int32
    elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        off_dtype = np.int64
    elif getattr(pa.types, "is_string_view", None) and (pa.types.is_string_view(t)
                                                        or pa.types.is_binary_view(t)):
        return parse_fen_array(array.cast(pa.large_binary()))
    else:
        raise TypeError("expected a string array, got %s" % t)
    n = len(array)
    if n == 0:
        return np.empty((0, POSITION_WORDS), np.uint64), np.empty(0, np.int32)
    bufs = array.buffers()
    offsets = np.frombuffer(bufs[1], dtype=off_dtype, count=array.offset + n + 1)[array.offset:]
    data = (np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size
            else np.zeros(1, np.uint8))
    positions, status = parse_fens(offsets, data)
    if array.null_count:
        nulls = array.is_null().to_numpy(zero_copy_only=False)
        positions[nulls] = 0
        status[nulls] = E_NULL
    return positions, status


def parse_fen_list(fens):
    """Parse a list of FEN strings (None entries get status E_NULL). Returns (positions, status)."""
    import pyarrow as pa

    encoded = []
    for f in fens:
        if f is None:
            encoded.append(None)
        elif isinstance(f, str):
            encoded.append(f.encode("utf-8", "surrogatepass"))
        else:
            raise TypeError("expected str or None, got %s" % type(f).__name__)
    return parse_fen_array(pa.array(encoded, type=pa.large_binary()))


# ---------------------------------------------------------------------------------------------
# single FEN

_WS_SPLIT = re.compile(r"[ \t\n\r\v\f]+")


def _fields(fen):
    return [f for f in _WS_SPLIT.split(fen) if f]


def _detail(code, fen):
    """Offending text to append to a status message for the single-FEN parser."""
    kind = code & 0xFF
    a = (code >> 8) & 0xFF
    fields = _fields(fen)
    field_index = {
        E_STM: 1, E_CASTLE_CHAR: 2, E_CASTLE_DASH: 2, E_CASTLE_DUP: 2, E_CASTLE_COUNT: 2,
        E_CASTLE_ORDER: 2,
        E_EP_SYNTAX: 3, E_EP_RANK: 3, E_HM_SYNTAX: 4, E_HM_ZERO: 4, E_HM_RANGE: 4,
        E_FM_SYNTAX: 5, E_FM_ZERO: 5, E_FM_RANGE: 5,
    }
    if kind in (E_PL_CHAR, E_PL_FILES, E_PL_DIGITS) and fields:
        label = (code >> 16) & 0xFF if kind == E_PL_CHAR else a
        ranks = fields[0].split("/")
        idx = 8 - label
        if 0 <= idx < len(ranks):
            return ": %r" % ranks[idx]
        return ""
    if kind in (E_PL_RANKS, E_PL_KINGS, E_PL_TOO_MANY, E_PL_PAWN_BACK) and fields:
        return ": %r" % fields[0]
    if kind in field_index and len(fields) > field_index[kind]:
        return ": %r" % fields[field_index[kind]]
    if kind == E_EXTRA_FIELDS and len(fields) > 6:
        return ": %r" % " ".join(fields[6:])
    return ""


def parse_fen(fen):
    """Parse one FEN into a (9,) uint64 position. Raises ValueError("<field>: <reason>")."""
    if not isinstance(fen, str):
        raise TypeError("parse_fen expects a str, got %s" % type(fen).__name__)
    raw = fen.encode("utf-8", "surrogatepass")
    data = np.frombuffer(raw, dtype=np.uint8) if raw else np.empty(0, np.uint8)
    out = np.empty((1, POSITION_WORDS), np.uint64)
    code = int(_parse_row(data, 0, len(raw), out, 0))
    if code != OK:
        raise ValueError(status_reason(code) + _detail(code, fen))
    return out[0]


_PIECE_CHAR_CODES = np.frombuffer(b"PNBRQKpnbrqk", dtype=np.uint8).copy()
_CASTLE_CHAR_CODES = np.frombuffer(_CASTLE_TEXT.encode(), dtype=np.uint8).copy()
FEN_MAX_BYTES = 96  # longest FEN to_fen can write: 71 placement + 21 other fields


@njit(cache=True, nogil=True)
def _write_uint(buf, k, value):
    if value >= 10000:
        buf[k] = 48 + (value // 10000) % 10
        k += 1
    if value >= 1000:
        buf[k] = 48 + (value // 1000) % 10
        k += 1
    if value >= 100:
        buf[k] = 48 + (value // 100) % 10
        k += 1
    if value >= 10:
        buf[k] = 48 + (value // 10) % 10
        k += 1
    buf[k] = 48 + value % 10
    return k + 1


@njit(cache=True, nogil=True)
def _write_fen(pos, buf, k):
    """Write the FEN of pos into buf[k:] (at most FEN_MAX_BYTES bytes); returns the end index."""
    for r in range(7, -1, -1):
        empty = 0
        for f in range(8):
            b = U64(1) << U64(8 * r + f)
            ch = -1
            for t in range(6):
                if (pos[W_PAWN + t] & b) != U64(0):
                    if (pos[W_WHITE] & b) != U64(0):
                        ch = np.int64(_PIECE_CHAR_CODES[t])
                    elif (pos[W_BLACK] & b) != U64(0):
                        ch = np.int64(_PIECE_CHAR_CODES[6 + t])
                    break
            if ch < 0:
                empty += 1
            else:
                if empty:
                    buf[k] = 48 + empty
                    k += 1
                    empty = 0
                buf[k] = ch
                k += 1
        if empty:
            buf[k] = 48 + empty
            k += 1
        if r:
            buf[k] = 47
            k += 1
    meta = pos[W_META]
    stm = np.int64(meta & U64(1))
    buf[k] = 32
    buf[k + 1] = 98 if stm else 119
    buf[k + 2] = 32
    k += 3
    text = (meta >> U64(META_CASTLE_TEXT_SHIFT)) & U64(0xFFFFF)
    if text == U64(0):
        buf[k] = 45
        k += 1
    while text != U64(0):
        code = np.int64(text & U64(31))
        buf[k] = _CASTLE_CHAR_CODES[code] if code <= 20 else 63
        k += 1
        text >>= U64(5)
    buf[k] = 32
    k += 1
    ep_bits = np.int64((meta >> U64(META_EP_SHIFT)) & U64(15))
    if ep_bits & 1:
        buf[k] = 97 + (ep_bits >> 1)
        buf[k + 1] = 51 if stm else 54
        k += 2
    else:
        buf[k] = 45
        k += 1
    buf[k] = 32
    k = _write_uint(buf, k + 1, np.int64((meta >> U64(META_HALFMOVE_SHIFT)) & U64(0xFF)))
    buf[k] = 32
    k = _write_uint(buf, k + 1, np.int64((meta >> U64(META_FULLMOVE_SHIFT)) & U64(0x3FFF)))
    return k


@njit(cache=True, nogil=True)
def _write_fens(positions, buf, offsets):
    k = 0
    offsets[0] = 0
    for i in range(positions.shape[0]):
        k = _write_fen(positions[i], buf, k)
        offsets[i + 1] = k


def to_fens_arrow(positions):
    """FENs of positions[N, 9] as a pyarrow large_string array (njit writer, no Python loop)."""
    import pyarrow as pa

    positions = np.ascontiguousarray(np.asarray(positions, dtype=np.uint64).reshape(-1, POSITION_WORDS))
    n = positions.shape[0]
    buf = np.empty(max(n, 1) * FEN_MAX_BYTES, np.uint8)
    offsets = np.empty(n + 1, np.int64)
    _write_fens(positions, buf, offsets)
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets),
                                            pa.py_buffer(buf[:offsets[-1]].copy()))


def to_fens(positions):
    """List of FEN strings of positions[N, 9]."""
    return to_fens_arrow(positions).to_pylist()


def to_fen(pos):
    """FEN of a packed position (always six fields)."""
    pos = np.ascontiguousarray(np.asarray(pos, dtype=np.uint64).reshape(POSITION_WORDS))
    buf = np.empty(FEN_MAX_BYTES, np.uint8)
    k = _write_fen(pos, buf, 0)
    return buf[:k].tobytes().decode("ascii")


# ---------------------------------------------------------------------------------------------
# small njit accessors


@njit(cache=True, nogil=True)
def side_to_move(pos):
    return np.int64(pos[W_META] & U64(1))


@njit(cache=True, nogil=True)
def phase(pos):
    """min(24, N + B + 2R + 4Q), both colours."""
    p = (popcount(pos[W_KNIGHT]) + popcount(pos[W_BISHOP]) + 2 * popcount(pos[W_ROOK])
         + 4 * popcount(pos[W_QUEEN]))
    return min(p, np.int64(24))


@njit(cache=True, nogil=True)
def piece_on(pos, sq):
    """-1 if sq is empty, else type + 6*colour (0..5 White PAWN..KING, 6..11 Black)."""
    b = U64(1) << U64(sq)
    if (pos[W_WHITE] & b) != U64(0):
        base = 0
    elif (pos[W_BLACK] & b) != U64(0):
        base = 6
    else:
        return np.int64(-1)
    for t in range(6):
        if (pos[W_PAWN + t] & b) != U64(0):
            return np.int64(base + t)
    return np.int64(-1)


@njit(cache=True, nogil=True)
def pieces(pos, colour, ptype):
    """Bitboard of colour's pieces of type ptype."""
    return pos[colour] & pos[W_PAWN + ptype]


@njit(cache=True, nogil=True)
def occupied(pos):
    return pos[W_WHITE] | pos[W_BLACK]


@njit(cache=True, nogil=True)
def castling_rook_file(pos, colour, queen_side):
    """File (0..7) of the castling rook for (colour, side), or -1 if there is no such right."""
    shift = U64(META_CASTLE_SLOTS_SHIFT + 4 * (2 * colour + (1 if queen_side else 0)))
    nib = np.int64((pos[W_META] >> shift) & U64(15))
    if nib & 8:
        return nib & 7
    return np.int64(-1)


@njit(cache=True, nogil=True)
def ep_square(pos):
    """En-passant square or -1."""
    bits = np.int64((pos[W_META] >> U64(META_EP_SHIFT)) & U64(15))
    if bits & 1 == 0:
        return np.int64(-1)
    rank = 5 if (pos[W_META] & U64(1)) == U64(0) else 2
    return np.int64(8 * rank + (bits >> 1))


@njit(cache=True, nogil=True)
def halfmove_clock(pos):
    return np.int64((pos[W_META] >> U64(META_HALFMOVE_SHIFT)) & U64(0xFF))


@njit(cache=True, nogil=True)
def fullmove_number(pos):
    return np.int64((pos[W_META] >> U64(META_FULLMOVE_SHIFT)) & U64(0x3FFF))
