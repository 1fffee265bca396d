"""FEN parsing and writing (standard FEN, X-FEN and Shredder-FEN castling) for packed positions.

Accepted FEN (everything else is rejected with a reason, see tuner.chess.status):

* fields separated by runs of ASCII whitespace; leading/trailing whitespace ignored;
* piece placement: exactly 8 ranks of exactly 8 files, letters KQRBNP/kqrbnp, digits 1..8, no two
  consecutive digits (so every accepted placement is in canonical form);
* side to move: ``w`` or ``b``;
* castling: ``-`` or 1..4 distinct characters from ``KQkqABCDEFGHabcdefgh``, at most two per colour,
  White's (upper case) before Black's (as python-chess requires);
* en passant: ``-`` or a square on rank 6 (White to move) / rank 3 (Black to move);
* optional half-move clock (0..100) and full-move number (1..9999), plain decimal without sign or
  leading zeros; missing clocks default to ``0 1``; no further fields;
* the position is legal by the rules of tuner.chess.legality (kings, piece and pawn counts, pawns
  off the back ranks, the side not to move not in check, castling rights and en-passant square
  that match the board).

Every accepted FEN round-trips exactly: ``to_fen(parse_fen(f)) == " ".join(f.split())`` when f has
all six fields (with the clocks ``0 1`` appended when they were missing).

One njit parser (`_parse_row`) serves :func:`parse_fen`, :func:`parse_fens` (Arrow buffers),
:func:`parse_fen_array` (Arrow arrays) and :func:`parse_fen_list`; its statuses are
`tuner.chess.status.FenStatus` codes.
"""

import re

import numpy as np
import pyarrow as pa
from numba import njit
from tuner.jit import JIT, INLINE

from .bitboard import FILE_A, flip_vertical
from .legality import (CASTLE_CODE_BLACK_FILE_A, CASTLE_CODE_WHITE_FILE_A, castle_colour,
                       castle_slot, check_status, ep_status, material_status)
from .position import (CASTLE_TEXT_BITS, CASTLE_TEXT_MASK, FULLMOVE_MASK, HALFMOVE_MASK,
                       MAX_FULLMOVE, MAX_HALFMOVE, META_CASTLE_TEXT_SHIFT, META_EP_SHIFT,
                       META_FULLMOVE_SHIFT, META_HALFMOVE_SHIFT, POSITION_WORDS, W_BLACK, W_META,
                       W_PAWN, W_WHITE, castle_slot_shift)
from .status import (DETAIL_A_SHIFT, DETAIL_B_SHIFT, DETAIL_MASK, F_CASTLING, F_EP, F_EXTRA, F_FEN,
                     F_PLACEMENT, F_STM, FenStatus, pack_status, pack_value_status, status_field,
                     status_kind, status_reason)

U64 = np.uint64
#: The parser's helpers take the text and position arrays: inlined, so that no call in the per-FEN
#: path passes an array (each such call costs reference counting in Numba).

# characters (bytes) the parser and writer compare against
CH_SPACE = ord(" ")
CH_SLASH = ord("/")
CH_DASH = ord("-")
CH_ZERO = ord("0")
CH_ONE = ord("1")
CH_EIGHT = ord("8")
CH_NINE = ord("9")
CH_WHITE = ord("w")
CH_BLACK = ord("b")
CH_FILE_A = ord("a")
CH_RANK_3 = ord("3")
CH_RANK_6 = ord("6")
CH_UNKNOWN = ord("?")

BOARD_SIZE = 8
MAX_CASTLE_CHARS = 4
MAX_RIGHTS_PER_COLOUR = 2
EP_RANK_INDEX = (5, 2)  # rank index of the en-passant square, by side to move
UINT_SATURATION = 1 << 40  # _read_uint stops growing a value here (any larger is out of range)
UINT_OK, UINT_SYNTAX, UINT_LEADING_ZERO = 0, 1, 2
FEN_MAX_BYTES = 96  # longest FEN to_fen can write: 71 placement + 21 other fields
WHITESPACE = " \t\n\r\v\f"
BLACK_PIECE = 8  # _PIECE_OF_CHAR: colour * BLACK_PIECE + type
PIECE_TYPES = 6

# The placement scan (`_scan_placement`) ORs one bit per byte of the field into a word of a scratch
# array: a piece letter's word is its _PIECE_OF_CHAR code (0..5 White, 8..13 Black), the others:
SCAN_SLASH = 6  # '/': the bit of the first square of the rank it starts
SCAN_DIGIT = 7  # 1..8: the bit of the first square of the empty run it stands for
SCAN_BAD = 15  # any other byte
SCAN_WORDS = 16
#: `_SCAN_CODE` of whitespace (the end of the field); any other byte's code is its scratch word
#: plus its advance (files, or one rank for a '/') << SCAN_ADVANCE_SHIFT
SCAN_END = 0xFFFF
SCAN_ADVANCE_SHIFT = 4
SCAN_RANK_SHIFT = 10  # the scan counts files below this bit and ranks above it (a '/' adds a rank)
PLACEMENT_MAX_BYTES = 71  # 8 ranks of 8 pieces and 7 slashes
#: The scan's position after a valid placement: 64 files, 7 slashes.
SCAN_FULL_BOARD = BOARD_SIZE * BOARD_SIZE + (BOARD_SIZE - 1 << SCAN_RANK_SHIFT)
#: The scan's slash word of a valid placement: rank k's slash (k = 1..7 from the top) at bit 8k.
SCAN_SLASH_BITS = U64(0x0101010101010100)
SCAN_POS_MASK = U64(63)  # the square of the scan's position (top rank first) within its word


def _build_char_tables():
    piece = np.full(256, -1, np.int8)  # colour * BLACK_PIECE + type
    for t, ch in enumerate("pnbrqk"):
        piece[ord(ch.upper())] = t
        piece[ord(ch)] = BLACK_PIECE + t
    castle = np.zeros(256, np.int8)  # castling text code, 0 = invalid
    for k, ch in enumerate("KQkq"):
        castle[ord(ch)] = 1 + k
    for f in range(BOARD_SIZE):
        castle[ord("A") + f] = CASTLE_CODE_WHITE_FILE_A + f
        castle[ord("a") + f] = CASTLE_CODE_BLACK_FILE_A + f
    ws = np.zeros(256, np.bool_)
    for ch in WHITESPACE:
        ws[ord(ch)] = True
    scan = np.full(256, SCAN_BAD, np.uint16)
    for c in range(256):
        if piece[c] >= 0:
            scan[c] = piece[c] | 1 << SCAN_ADVANCE_SHIFT
    for d in range(1, BOARD_SIZE + 1):
        scan[CH_ZERO + d] = SCAN_DIGIT | d << SCAN_ADVANCE_SHIFT
    scan[CH_SLASH] = SCAN_SLASH | 1 << (SCAN_RANK_SHIFT + SCAN_ADVANCE_SHIFT)
    for ch in WHITESPACE:
        scan[ord(ch)] = SCAN_END
    return piece, castle, ws, scan


_PIECE_OF_CHAR, _CASTLE_CODE_OF_CHAR, _IS_WS, _SCAN_CODE = _build_char_tables()
_PIECE_CHAR_CODES = np.frombuffer(b"PNBRQKpnbrqk", dtype=np.uint8).copy()
_CASTLE_CHAR_CODES = np.frombuffer(b"?KQkqABCDEFGHabcdefgh", dtype=np.uint8).copy()


# ---------------------------------------------------------------------------------------------
# the njit parser


@njit(**INLINE)
def _skip_ws(data, i, end):
    """The index of the first non-whitespace byte at or after i (end if there is none)."""
    while i < end and _IS_WS[data[i]]:
        i += 1
    return i


@njit(**INLINE)
def _field(data, i, end):
    """(start, stop) of the next whitespace-separated field at or after i; start == stop == end
    when there is none."""
    i = _skip_ws(data, i, end)
    j = i
    while j < end and not _IS_WS[data[j]]:
        j += 1
    return i, j


@njit(**INLINE)
def _is_dash(data, start, stop):
    return stop - start == 1 and data[start] == CH_DASH


@njit(**INLINE)
def _read_uint(data, start, stop):
    """(value, state) of the field data[start:stop] as a plain decimal: state UINT_OK,
    UINT_SYNTAX or UINT_LEADING_ZERO. The value saturates at UINT_SATURATION."""
    value = np.int64(0)
    for i in range(start, stop):
        c = np.int64(data[i])
        if c < CH_ZERO or c > CH_NINE:
            return value, UINT_SYNTAX
        if value < UINT_SATURATION:
            value = value * 10 + (c - CH_ZERO)
    if stop - start > 1 and data[start] == CH_ZERO:
        return value, UINT_LEADING_ZERO
    return value, UINT_OK


@njit(**INLINE)
def _parse_placement(data, start, end, bbs):
    """Field 1, from data[start] (not whitespace) to the next whitespace or end, into bbs[0..7]:
    (status, index after the field). One pass: the field's end is found while parsing it."""
    rank = BOARD_SIZE - 1  # rank index being filled (its label is rank + 1)
    nfiles = 0
    nranks = 1
    prev_digit = False
    i = start
    while i < end:
        c = data[i]
        if _IS_WS[c]:
            break
        if c == CH_SLASH:
            if nfiles != BOARD_SIZE:
                return pack_status(FenStatus.PL_FILES, rank + 1, nfiles), i
            nranks += 1
            if nranks > BOARD_SIZE:  # count every rank of the field to say how many there are
                s, e = _field(data, i + 1, end)
                for k in range(i + 1, e):
                    nranks += data[k] == CH_SLASH
                return pack_status(FenStatus.PL_RANKS, nranks, 0), e
            rank -= 1
            nfiles = 0
            prev_digit = False
        elif CH_ONE <= c <= CH_EIGHT:
            if prev_digit:
                return pack_status(FenStatus.PL_DIGITS, rank + 1, 0), i
            nfiles += np.int64(c) - CH_ZERO
            prev_digit = True
        else:
            p = _PIECE_OF_CHAR[c]
            if p < 0:
                return pack_status(FenStatus.PL_CHAR, np.int64(c), rank + 1), i
            if nfiles < BOARD_SIZE:
                b = U64(1) << U64(rank * BOARD_SIZE + nfiles)
                bbs[W_WHITE if p < BLACK_PIECE else W_BLACK] |= b
                bbs[W_PAWN + (p & 7)] |= b
            nfiles += 1
            prev_digit = False
        i += 1
    if nfiles != BOARD_SIZE:
        return pack_status(FenStatus.PL_FILES, rank + 1, nfiles), i
    if nranks != BOARD_SIZE:
        return pack_status(FenStatus.PL_RANKS, nranks, 0), i
    return np.int32(FenStatus.OK), i


@njit(**INLINE)
def _scan_placement(data, start, end, bbs, scratch):
    """The fast path of field 1 (`_parse_placement` gives the reason when it fails): (whether the
    field from data[start] (not whitespace) to the next whitespace or end is a valid placement,
    the index after it); its pieces in bbs[0..7] when it is.

    One branch-free step per byte: the byte's bit at the scan's position (rank from the top * 8 +
    file) into its scratch word (`_SCAN_CODE`), the position advanced. The field is valid iff no
    byte is bad, the position ends at 64 files after 7 slashes, the slashes stand at the starts
    of ranks 2..8 from the top (the position only grows, so each rank then has 8 files), and the
    digits at the starts of the empty runs of their ranks (so no two digits are consecutive)."""
    for k in range(SCAN_WORDS):
        scratch[k] = U64(0)
    # unsigned: no wrap-around code for negative indices (a third of the loop's instructions)
    stop = U64(min(end, start + PLACEMENT_MAX_BYTES))
    pos = U64(0)
    i = U64(start)
    while i < stop:
        code = U64(_SCAN_CODE[data[i]])
        if code == U64(SCAN_END):
            break
        scratch[code & U64(SCAN_BAD)] |= U64(1) << (pos & SCAN_POS_MASK)
        pos += code >> U64(SCAN_ADVANCE_SHIFT)
        i += U64(1)
    white = scratch[0] | scratch[1] | scratch[2] | scratch[3] | scratch[4] | scratch[5]
    black = (scratch[BLACK_PIECE] | scratch[BLACK_PIECE + 1] | scratch[BLACK_PIECE + 2]
             | scratch[BLACK_PIECE + 3] | scratch[BLACK_PIECE + 4] | scratch[BLACK_PIECE + 5])
    empty = ~(white | black)
    run_starts = empty & ~((empty << U64(1)) & ~FILE_A)
    e = np.int64(i)
    if (pos != U64(SCAN_FULL_BOARD) or scratch[SCAN_BAD] != U64(0)
            or scratch[SCAN_SLASH] != SCAN_SLASH_BITS or scratch[SCAN_DIGIT] != run_starts
            or (i == stop and e < end)):
        return False, e
    bbs[W_WHITE] = flip_vertical(white)
    bbs[W_BLACK] = flip_vertical(black)
    for t in range(PIECE_TYPES):
        bbs[W_PAWN + t] = flip_vertical(scratch[t] | scratch[BLACK_PIECE + t])
    return True, e


@njit(**INLINE)
def _parse_castling(data, start, stop, bbs):
    """(status, meta bits) of field 3: the castling text and the rook slots it names."""
    meta = U64(0)
    if _is_dash(data, start, stop):
        return np.int32(FenStatus.OK), meta
    text = U64(0)
    seen = 0  # bit per code
    n_white = 0
    n_black = 0
    black_seen = False
    for k in range(start, stop):
        c = np.int64(data[k])
        if c == CH_DASH:
            return pack_status(FenStatus.CASTLE_DASH, 0, 0), meta
        code = np.int64(_CASTLE_CODE_OF_CHAR[c])
        if code == 0:
            return pack_status(FenStatus.CASTLE_CHAR, c, 0), meta
        if (seen >> code) & 1:
            return pack_status(FenStatus.CASTLE_DUP, c, 0), meta
        seen |= 1 << code
        colour = castle_colour(code)
        if colour == 1:
            black_seen = True
        elif black_seen:
            return pack_status(FenStatus.CASTLE_ORDER, c, 0), meta
        n_white += colour == 0
        n_black += colour == 1
        if n_white > MAX_RIGHTS_PER_COLOUR or n_black > MAX_RIGHTS_PER_COLOUR:
            return pack_status(FenStatus.CASTLE_COUNT, colour, 0), meta
        text |= U64(code) << U64(CASTLE_TEXT_BITS * (k - start))
        kind, side, nib = castle_slot(bbs, colour, code)
        if kind != FenStatus.OK:
            return pack_status(kind, c, 0), meta
        shift = castle_slot_shift(colour, side)
        old = np.int64((meta >> shift) & U64(15))
        if old != 0 and old != nib:
            return pack_status(FenStatus.CASTLE_SAME_SIDE, c, 0), meta
        meta |= U64(nib) << shift
    return np.int32(FenStatus.OK), meta | (text << U64(META_CASTLE_TEXT_SHIFT))


@njit(**INLINE)
def _parse_ep(data, start, stop, bbs, stm):
    """(status, meta bits) of field 4."""
    if _is_dash(data, start, stop):
        return np.int32(FenStatus.OK), U64(0)
    if stop - start != 2:
        return pack_status(FenStatus.EP_SYNTAX, 0, 0), U64(0)
    f = np.int64(data[start]) - CH_FILE_A
    r = np.int64(data[start + 1]) - CH_ONE
    if f < 0 or f >= BOARD_SIZE or r < 0 or r >= BOARD_SIZE:
        return pack_status(FenStatus.EP_SYNTAX, 0, 0), U64(0)
    sq = BOARD_SIZE * r + f
    if r != EP_RANK_INDEX[stm]:
        return pack_status(FenStatus.EP_RANK, sq, stm), U64(0)
    status = ep_status(bbs, stm, sq)
    return status, U64(1 | (f << 1)) << U64(META_EP_SHIFT)


@njit(**INLINE)
def _parse_clock(data, start, stop, syntax, zero, out_of_range, lowest, highest):
    """(status, value) of a clock field."""
    value, state = _read_uint(data, start, stop)
    if state == UINT_SYNTAX:
        return pack_status(syntax, 0, 0), value
    if state == UINT_LEADING_ZERO or value < lowest:
        return pack_status(zero, 0, 0), value
    if value > highest:
        return pack_value_status(out_of_range, value), value
    return np.int32(FenStatus.OK), value


@njit(**INLINE)
def _pack_meta(stm, castling, ep, halfmove, fullmove):
    """The meta word of a position: side to move, the castling and en-passant bits (as their
    parsers give them), the clocks."""
    return (U64(stm) | castling | ep | U64(halfmove) << U64(META_HALFMOVE_SHIFT)
            | U64(fullmove) << U64(META_FULLMOVE_SHIFT))


@njit(**INLINE)
def _parse_tail(data, e, end, bbs):
    """The fields after the placement (which ends at data[e]) into bbs[W_META]; the status."""
    s, e = _field(data, e, end)
    if s == end:
        return pack_status(FenStatus.MISSING_FIELD, F_STM, 0)
    if e - s != 1 or (data[s] != CH_WHITE and data[s] != CH_BLACK):
        return pack_status(FenStatus.STM, 0, 0)
    stm = 0 if data[s] == CH_WHITE else 1
    status = check_status(bbs, stm)
    if status != FenStatus.OK:
        return status

    s, e = _field(data, e, end)
    if s == end:
        return pack_status(FenStatus.MISSING_FIELD, F_CASTLING, 0)
    status, castling = _parse_castling(data, s, e, bbs)
    if status != FenStatus.OK:
        return status

    s, e = _field(data, e, end)
    if s == end:
        return pack_status(FenStatus.MISSING_FIELD, F_EP, 0)
    status, ep = _parse_ep(data, s, e, bbs, stm)
    if status != FenStatus.OK:
        return status

    halfmove = np.int64(0)
    fullmove = np.int64(1)
    s, e = _field(data, e, end)  # the clocks are optional: s == end once the text is used up
    if s < end:
        status, halfmove = _parse_clock(data, s, e, FenStatus.HM_SYNTAX, FenStatus.HM_ZERO,
                                        FenStatus.HM_RANGE, 0, MAX_HALFMOVE)
        if status != FenStatus.OK:
            return status
        s, e = _field(data, e, end)
    if s < end:
        status, fullmove = _parse_clock(data, s, e, FenStatus.FM_SYNTAX, FenStatus.FM_ZERO,
                                        FenStatus.FM_RANGE, 1, MAX_FULLMOVE)
        if status != FenStatus.OK:
            return status
        s, e = _field(data, e, end)
    if s < end:
        return pack_status(FenStatus.EXTRA_FIELDS, 0, 0)
    bbs[W_META] = _pack_meta(stm, castling, ep, halfmove, fullmove)
    return np.int32(FenStatus.OK)


@njit(**INLINE)
def _parse_fields(data, start, end, bbs, scratch):
    """Every field of the FEN in data[start:end] into bbs (all zero on entry); the status. The
    placement's fast path first (`_scan_placement`), the parser that tells what is wrong when it
    fails."""
    s = _skip_ws(data, start, end)
    if s == end:
        return pack_status(FenStatus.EMPTY, 0, 0)
    ok, e = _scan_placement(data, s, end, bbs, scratch)
    if not ok:  # bbs still all zero
        status, e = _parse_placement(data, s, end, bbs)
        if status != FenStatus.OK:
            return status
    status = material_status(bbs)
    if status != FenStatus.OK:
        return status
    return _parse_tail(data, e, end, bbs)


@njit(**INLINE)
def _parse_row(data, start, end, out, row, scratch):
    """Parse the FEN in data[start:end] into out[row] (scratch: SCAN_WORDS words); the status.
    A rejected row is all zero. Inlined into the loop over the rows: a call per row would cost
    the reference counting of its arrays."""
    bbs = out[row]
    for k in range(POSITION_WORDS):
        bbs[k] = U64(0)
    status = _parse_fields(data, start, end, bbs, scratch)
    if status != FenStatus.OK:
        for k in range(POSITION_WORDS):
            bbs[k] = U64(0)
    return status


@njit(**JIT)
def _parse_fens_core(offsets, data, positions, status):
    """Row r of `positions` and `status`: the FEN in data[offsets[r]:offsets[r + 1]]."""
    scratch = np.empty(SCAN_WORDS, np.uint64)
    for r in range(positions.shape[0]):
        status[r] = _parse_row(data, offsets[r], offsets[r + 1], positions, r, scratch)


@njit(**JIT)
def _parse_one(data, out):
    """The FEN that is all of `data` into out[0]; the status (`parse_fen`'s core)."""
    return _parse_row(data, 0, data.shape[0], out, 0, np.empty(SCAN_WORDS, np.uint64))


# ---------------------------------------------------------------------------------------------
# bulk parsing


def parse_fens(offsets: np.ndarray, data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bulk parse of an Arrow string array's buffers.

    offsets: int32 or int64 array of length N+1 (already adjusted for any array slice offset, i.e.
    row r is data[offsets[r]:offsets[r+1]]); data: uint8 array. Returns (positions[N, 9] uint64,
    status[N] int32); rejected rows are all zero and have a non-zero status (see status_reason).
    Null rows are not known here (parse_fen_array and parse_fen_list mark them)."""
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


def _empty_result() -> tuple[np.ndarray, np.ndarray]:
    return np.empty((0, POSITION_WORDS), np.uint64), np.empty(0, np.int32)


def parse_fen_array(array: "pa.Array | pa.ChunkedArray") -> tuple[np.ndarray, np.ndarray]:
    """Parse every FEN of a pyarrow string-like Array or ChunkedArray (string, large_string,
    binary, large_binary, their views, or a dictionary of those; sliced arrays too), chunk by
    chunk without copying: (positions[N, 9] uint64, status[N] int32). Null rows get
    `FenStatus.NULL`."""
    if isinstance(array, pa.ChunkedArray):
        parts = [parse_fen_array(chunk) for chunk in array.chunks]
        if not parts:
            return _empty_result()
        return np.concatenate([p for p, _ in parts]), np.concatenate([s for _, s in parts])
    t = array.type
    if pa.types.is_dictionary(t):
        return parse_fen_array(array.dictionary_decode())
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return parse_fen_array(array.cast(pa.large_binary()))
    if pa.types.is_string(t) or pa.types.is_binary(t):
        off_dtype = np.int32
    elif pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        off_dtype = np.int64
    else:
        raise TypeError("expected a string array, got %s" % t)
    n = len(array)
    if n == 0:
        return _empty_result()
    bufs = array.buffers()
    offsets = np.frombuffer(bufs[1], dtype=off_dtype, count=array.offset + n + 1)[array.offset:]
    data = (np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None and bufs[2].size
            else np.zeros(1, np.uint8))
    positions, status = parse_fens(offsets, data)
    if array.null_count:
        nulls = array.is_null().to_numpy(zero_copy_only=False)
        positions[nulls] = 0
        status[nulls] = FenStatus.NULL
    return positions, status


def parse_fen_list(fens: "list[str | None]") -> tuple[np.ndarray, np.ndarray]:
    """Parse a list of FEN strings (None entries get `FenStatus.NULL`): (positions, status)."""
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

_WS_SPLIT = re.compile("[" + WHITESPACE + "]+")
#: where the rank label of a piece-placement status is (the detail shift)
_RANK_LABEL_DETAIL = {FenStatus.PL_CHAR: DETAIL_B_SHIFT, FenStatus.PL_FILES: DETAIL_A_SHIFT,
                      FenStatus.PL_DIGITS: DETAIL_A_SHIFT}


def _detail(code: int, fen: str) -> str:
    """The offending text to append to a status message of the single-FEN parser."""
    fields = [f for f in _WS_SPLIT.split(fen) if f]
    kind = status_kind(code)
    field = status_field(code)
    if kind in _RANK_LABEL_DETAIL and fields:
        label = (code >> _RANK_LABEL_DETAIL[kind]) & DETAIL_MASK
        ranks = fields[0].split("/")
        idx = BOARD_SIZE - label
        return ": %r" % ranks[idx] if 0 <= idx < len(ranks) else ""
    if field == F_EXTRA:
        return ": %r" % " ".join(fields[F_EXTRA - 1:]) if len(fields) >= F_EXTRA else ""
    if field != F_FEN and kind != FenStatus.MISSING_FIELD and len(fields) >= field:
        return ": %r" % fields[field - F_PLACEMENT]
    return ""


def parse_fen(fen: str) -> np.ndarray:
    """Parse one FEN into a (9,) uint64 position. Raises ValueError("<field>: <reason>: 'text'")."""
    if not isinstance(fen, str):
        raise TypeError("parse_fen expects a str, got %s" % type(fen).__name__)
    raw = fen.encode("utf-8", "surrogatepass")
    data = np.frombuffer(raw, dtype=np.uint8) if raw else np.empty(0, np.uint8)
    out = np.empty((1, POSITION_WORDS), np.uint64)
    code = int(_parse_one(data, out))
    if code != FenStatus.OK:
        raise ValueError(status_reason(code) + _detail(code, fen))
    return out[0]


# ---------------------------------------------------------------------------------------------
# writing


@njit(**JIT)
def _write_uint(buf, k, value):
    """Write value (0..99999) in decimal at buf[k:]; returns the end index."""
    div = 10000
    while div > 1 and value < div:
        div //= 10
    while div >= 1:
        buf[k] = CH_ZERO + (value // div) % 10
        k += 1
        div //= 10
    return k


@njit(**JIT)
def _write_fen(pos, buf, k):
    """Write the FEN of pos into buf[k:] (at most FEN_MAX_BYTES bytes); returns the end index."""
    for r in range(BOARD_SIZE - 1, -1, -1):
        empty = 0
        for f in range(BOARD_SIZE):
            b = U64(1) << U64(BOARD_SIZE * r + f)
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
                    buf[k] = CH_ZERO + empty
                    k += 1
                    empty = 0
                buf[k] = ch
                k += 1
        if empty:
            buf[k] = CH_ZERO + empty
            k += 1
        if r:
            buf[k] = CH_SLASH
            k += 1
    meta = pos[W_META]
    stm = np.int64(meta & U64(1))
    buf[k] = CH_SPACE
    buf[k + 1] = CH_BLACK if stm else CH_WHITE
    buf[k + 2] = CH_SPACE
    k += 3
    text = (meta >> U64(META_CASTLE_TEXT_SHIFT)) & U64(CASTLE_TEXT_MASK)
    if text == U64(0):
        buf[k] = CH_DASH
        k += 1
    while text != U64(0):
        code = np.int64(text & U64((1 << CASTLE_TEXT_BITS) - 1))
        buf[k] = _CASTLE_CHAR_CODES[code] if code < len(_CASTLE_CHAR_CODES) else CH_UNKNOWN
        k += 1
        text >>= U64(CASTLE_TEXT_BITS)
    buf[k] = CH_SPACE
    k += 1
    ep_bits = np.int64((meta >> U64(META_EP_SHIFT)) & U64(15))
    if ep_bits & 1:
        buf[k] = CH_FILE_A + (ep_bits >> 1)
        buf[k + 1] = CH_RANK_3 if stm else CH_RANK_6
        k += 2
    else:
        buf[k] = CH_DASH
        k += 1
    buf[k] = CH_SPACE
    k = _write_uint(buf, k + 1, np.int64((meta >> U64(META_HALFMOVE_SHIFT)) & U64(HALFMOVE_MASK)))
    buf[k] = CH_SPACE
    k = _write_uint(buf, k + 1, np.int64((meta >> U64(META_FULLMOVE_SHIFT)) & U64(FULLMOVE_MASK)))
    return k


@njit(**JIT)
def _write_fens(positions, buf, offsets):
    k = 0
    offsets[0] = 0
    for i in range(positions.shape[0]):
        k = _write_fen(positions[i], buf, k)
        offsets[i + 1] = k


def to_fens_arrow(positions: np.ndarray) -> pa.LargeStringArray:
    """FENs of positions[N, 9] as a pyarrow large_string array (njit writer, no Python loop)."""
    positions = np.ascontiguousarray(np.asarray(positions, dtype=np.uint64).reshape(-1, POSITION_WORDS))
    n = positions.shape[0]
    buf = np.empty(max(n, 1) * FEN_MAX_BYTES, np.uint8)
    offsets = np.empty(n + 1, np.int64)
    _write_fens(positions, buf, offsets)
    return pa.LargeStringArray.from_buffers(n, pa.py_buffer(offsets),
                                            pa.py_buffer(buf[:offsets[-1]].copy()))


def to_fens(positions: np.ndarray) -> list[str]:
    """List of FEN strings of positions[N, 9]."""
    return to_fens_arrow(positions).to_pylist()


def to_fen(pos: np.ndarray) -> str:
    """FEN of a packed position (always six fields)."""
    pos = np.ascontiguousarray(np.asarray(pos, dtype=np.uint64).reshape(POSITION_WORDS))
    buf = np.empty(FEN_MAX_BYTES, np.uint8)
    k = _write_fen(pos, buf, 0)
    return buf[:k].tobytes().decode("ascii")
