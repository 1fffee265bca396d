"""njit line scanner for the line formats ``clockwork`` (``FEN;w``), ``bracket`` (``FEN [1.0]``)
and ``pipe`` (``FEN | score | wdl``).

One pass over a block of bytes finds each line, trims it, splits FEN and result (and score),
checks the result token and copies the FEN (inner whitespace runs collapsed to one space) into a
contiguous buffer with Arrow-style offsets, ready for ``parse_fens`` and a zero-copy Arrow
string array. No Python code runs per line. The pure-Python parsers in ``formats`` are the
reference (and handle ``epd``); tests check both give the same rows and the same reasons.
Whitespace here is ASCII space, tab, CR, VT and FF.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from tuner.jit import JIT, INLINE

from .formats import BRACKET_RESULTS, INT32_MAX, PIPE_RESULTS

MODE_CLOCKWORK, MODE_BRACKET, MODE_PIPE = 0, 1, 2
MODES = {"clockwork": MODE_CLOCKWORK, "bracket": MODE_BRACKET, "pipe": MODE_PIPE}

# codes of rejected lines
BAD_NO_SEP = 1  # clockwork: no ';'
BAD_TOKEN = 2  # clockwork / bracket: unknown result token (span = token)
BAD_NO_BRACKET = 3  # bracket: no [...] at the end
BAD_FIELDS = 4  # pipe: not 3 fields (extra = number of fields)
BAD_SCORE = 5  # pipe: score not an integer (span = score)
BAD_SCORE_RANGE = 6  # pipe: score outside int32 (span = score)
BAD_WDL = 7  # pipe: unknown wdl token (span = token)


def _token_table(tokens: dict[str, float]):
    width = max(len(t) for t in tokens)
    table = np.zeros((len(tokens), width), np.uint8)
    lens = np.zeros(len(tokens), np.int64)
    values = np.zeros(len(tokens), np.float64)
    for k, (tok, v) in enumerate(tokens.items()):
        table[k, :len(tok)] = np.frombuffer(tok.encode(), np.uint8)
        lens[k] = len(tok)
        values[k] = v
    return table, lens, values


_BR_TAB, _BR_LEN, _BR_VAL = _token_table(BRACKET_RESULTS)
_PI_TAB, _PI_LEN, _PI_VAL = _token_table(PIPE_RESULTS)
_INT32_MAX = INT32_MAX


@njit(**INLINE)
def _is_ws(c):
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(**JIT)
def _match(buf, s, e, table, lens, values):
    """Value of the token buf[s:e] in the table, or -1.0."""
    n = e - s
    for k in range(table.shape[0]):
        if lens[k] == n:
            same = True
            for m in range(n):
                if buf[s + m] != table[k, m]:
                    same = False
                    break
            if same:
                return values[k]
    return -1.0


@njit(**JIT)
def _trim(buf, s, e):
    while s < e and _is_ws(buf[s]):
        s += 1
    while e > s and _is_ws(buf[e - 1]):
        e -= 1
    return s, e


@njit(**JIT)
def _parse_int(buf, s, e):
    """(state, value) of an optionally signed ASCII decimal: state 0 ok, 1 syntax, 2 range."""
    if s < e and (buf[s] == 43 or buf[s] == 45):  # + -
        neg = buf[s] == 45
        s += 1
    else:
        neg = False
    if s == e:
        return 1, 0
    v = 0
    big = False
    for k in range(s, e):
        c = buf[k]
        if c < 48 or c > 57:
            return 1, 0
        if not big:
            v = v * 10 + (c - 48)
            if v > _INT32_MAX + 1:
                big = True
    if neg:
        v = -v
    if big or v > _INT32_MAX or v < -_INT32_MAX - 1:
        return 2, 0
    return 0, v


class ScannedRows(NamedTuple):
    """What `scan_lines` fills for the good lines: the FENs (bytes and row offsets), results,
    scores and each row's line number (sized for the number of lines / bytes)."""

    fen_data: np.ndarray
    fen_offsets: np.ndarray
    results: np.ndarray
    scores: np.ndarray
    row_line: np.ndarray


class BadLines(NamedTuple):
    """What `scan_lines` fills for the bad lines: line number, `BAD_*` code, the offending token's
    byte range and an extra count (fields found)."""

    line: np.ndarray
    code: np.ndarray
    start: np.ndarray
    end: np.ndarray
    extra: np.ndarray


@njit(**JIT)
def scan_lines(buf, mode, good, bad):
    """Scan ``buf`` (uint8, whole lines) in ``mode``, filling `good` (`ScannedRows`) and `bad`
    (`BadLines`); returns (number of lines, rows, bad lines)."""
    fen_data, fen_offsets, results, scores, row_line = good
    bad_line, bad_code, bad_start, bad_end, bad_extra = bad
    n = buf.shape[0]
    i = 0
    line = 0
    rows = 0
    nbad = 0
    out = 0
    fen_offsets[0] = 0
    while i < n:
        j = i
        while j < n and buf[j] != 10:
            j += 1
        s, e = _trim(buf, i, j)
        if s < e:
            code = 0
            a = 0
            b = 0
            extra = 0
            fs = s
            fe = s
            r = -1.0
            score = 0
            if mode == MODE_CLOCKWORK:
                sep = s
                while sep < e and buf[sep] != 59:  # ';'
                    sep += 1
                if sep == e:
                    code = BAD_NO_SEP
                else:
                    a, b = _trim(buf, sep + 1, e)
                    r = -1.0
                    if b - a == 1:
                        c = buf[a]
                        if c == 119:  # w
                            r = 1.0
                        elif c == 100:  # d
                            r = 0.5
                        elif c == 98:  # b
                            r = 0.0
                    if r < 0.0:
                        code = BAD_TOKEN
                    fe = sep
            elif mode == MODE_BRACKET:
                lb = e - 1
                while lb >= s and buf[lb] != 91:  # '['
                    lb -= 1
                if lb < s or buf[e - 1] != 93:  # ']'
                    code = BAD_NO_BRACKET
                else:
                    a, b = _trim(buf, lb + 1, e - 1)
                    r = _match(buf, a, b, _BR_TAB, _BR_LEN, _BR_VAL)
                    if r < 0.0:
                        code = BAD_TOKEN
                    fe = lb
            else:  # MODE_PIPE
                bars = 0
                p1 = -1
                p2 = -1
                for k in range(s, e):
                    if buf[k] == 124:  # '|'
                        bars += 1
                        if p1 < 0:
                            p1 = k
                        elif p2 < 0:
                            p2 = k
                if bars != 2:
                    code = BAD_FIELDS
                    extra = bars + 1
                else:
                    a, b = _trim(buf, p1 + 1, p2)
                    state, score = _parse_int(buf, a, b)
                    if state == 1:
                        code = BAD_SCORE
                    elif state == 2:
                        code = BAD_SCORE_RANGE
                    else:
                        a, b = _trim(buf, p2 + 1, e)
                        r = _match(buf, a, b, _PI_TAB, _PI_LEN, _PI_VAL)
                        if r < 0.0:
                            code = BAD_WDL
                    fe = p1
            if code != 0:
                bad_line[nbad] = line
                bad_code[nbad] = code
                bad_start[nbad] = a
                bad_end[nbad] = b
                bad_extra[nbad] = extra
                nbad += 1
            else:
                fs, fe = _trim(buf, fs, fe)
                prev_ws = False
                for k in range(fs, fe):
                    c = buf[k]
                    if _is_ws(c):
                        if not prev_ws:
                            fen_data[out] = 32
                            out += 1
                        prev_ws = True
                    else:
                        fen_data[out] = c
                        out += 1
                        prev_ws = False
                results[rows] = r
                scores[rows] = score
                row_line[rows] = line
                rows += 1
                fen_offsets[rows] = out
        line += 1
        i = j + 1
    return line, rows, nbad


def _reason(mode: int, code: int, tok: str, extra: int) -> str:
    """Same wording as the reference parsers in ``formats``."""
    if code == BAD_NO_SEP:
        return "no ';' before the result (expected FEN;w|d|b)"
    if code == BAD_TOKEN and mode == MODE_CLOCKWORK:
        return f"bad result token {tok!r} (expected w, d or b)"
    if code == BAD_TOKEN:
        return (f"bad result token [{tok}] (expected [1.0], [0.5], [0.0], [1-0], "
                "[1/2-1/2] or [0-1])")
    if code == BAD_NO_BRACKET:
        return "no [result] at the end of the line (expected FEN [1.0])"
    if code == BAD_FIELDS:
        return f"{extra} field(s) separated by '|', expected 3 (FEN | score | wdl)"
    if code == BAD_SCORE:
        return f"bad score {tok!r} (expected an integer in centipawns)"
    if code == BAD_SCORE_RANGE:
        return f"score {tok} out of the int32 range"
    return f"bad wdl {tok!r} (expected 1.0, 0.5 or 0.0)"


def scan_block(raw: bytes, fmt: str):
    """Scan a block of whole lines in format ``fmt`` (clockwork, bracket or pipe).

    Returns (n_lines, fen_offsets int32[rows+1], fen_data uint8, results float64[rows],
    scores int32[rows] (zeros unless pipe), row_line int64[rows], bad: list of
    (line index, reason))."""
    mode = MODES[fmt]
    buf = np.frombuffer(raw, dtype=np.uint8)
    cap = int(np.count_nonzero(buf == 10)) + 1
    good = ScannedRows(np.empty(len(buf), np.uint8), np.empty(cap + 1, np.int32),
                       np.empty(cap, np.float64), np.empty(cap, np.int32), np.empty(cap, np.int64))
    bad_lines = BadLines(np.empty(cap, np.int64), np.empty(cap, np.int8), np.empty(cap, np.int64),
                         np.empty(cap, np.int64), np.empty(cap, np.int64))
    n_lines, rows, nbad = scan_lines(buf, mode, good, bad_lines)
    fen_data, fen_offsets, results, scores, row_line = good
    bad_line, bad_code, bad_start, bad_end, bad_extra = bad_lines
    bad = []
    for k in range(nbad):
        code = int(bad_code[k])
        tok = raw[bad_start[k]:bad_end[k]].decode("utf-8", "replace")
        bad.append((int(bad_line[k]), _reason(mode, code, tok, int(bad_extra[k]))))
    used = int(fen_offsets[rows])
    return (n_lines, fen_offsets[:rows + 1], fen_data[:used], results[:rows], scores[:rows],
            row_line[:rows], bad)
