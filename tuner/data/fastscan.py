"""njit line scanner for the Clockwork text format (``FEN;w|d|b``), the bulk format.

One pass over a block of bytes finds each line, trims it, splits FEN and result at the first
``;`` and copies the FEN (inner whitespace runs collapsed to one space) into a contiguous buffer
with Arrow-style offsets, ready for ``parse_fens`` and a zero-copy Arrow string array.
"""
from __future__ import annotations

import numpy as np
from numba import njit

# line codes (per non-blank line that is rejected)
BAD_NO_SEP = 1
BAD_TOKEN = 2


@njit(cache=True, nogil=True, inline="always")
def _is_ws(c):
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@njit(cache=True, nogil=True)
def scan_clockwork(buf, fen_data, fen_offsets, results, row_line, bad_line, bad_code,
                   bad_start, bad_end):
    """Scan ``buf`` (uint8, whole lines). Outputs (capacity: len(buf) bytes / lines):
    fen_data/fen_offsets (int32) for accepted rows, results (float64), row_line (line index of
    each row), and bad lines as (line index, code, token start, token end).
    Returns (number of lines, rows, bad lines)."""
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
        s = i
        e = j
        while s < e and _is_ws(buf[s]):
            s += 1
        while e > s and _is_ws(buf[e - 1]):
            e -= 1
        if s < e:
            sep = s
            while sep < e and buf[sep] != 59:  # ';'
                sep += 1
            if sep == e:
                bad_line[nbad] = line
                bad_code[nbad] = BAD_NO_SEP
                bad_start[nbad] = s
                bad_end[nbad] = e
                nbad += 1
            else:
                ts = sep + 1
                while ts < e and _is_ws(buf[ts]):
                    ts += 1
                r = -1.0
                if e - ts == 1:
                    c = buf[ts]
                    if c == 119:  # w
                        r = 1.0
                    elif c == 100:  # d
                        r = 0.5
                    elif c == 98:  # b
                        r = 0.0
                if r < 0.0:
                    bad_line[nbad] = line
                    bad_code[nbad] = BAD_TOKEN
                    bad_start[nbad] = ts
                    bad_end[nbad] = e
                    nbad += 1
                else:
                    fe = sep
                    while fe > s and _is_ws(buf[fe - 1]):
                        fe -= 1
                    prev_ws = False
                    for k in range(s, fe):
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
                    row_line[rows] = line
                    rows += 1
                    fen_offsets[rows] = out
        line += 1
        i = j + 1
    return line, rows, nbad


def scan_clockwork_block(raw: bytes):
    """Python wrapper: returns (n_lines, fen_offsets int32[rows+1], fen_data uint8, results,
    row_line, bad list of (line index, reason))."""
    buf = np.frombuffer(raw, dtype=np.uint8)
    n = len(buf)
    cap_lines = int(np.count_nonzero(buf == 10)) + 1
    fen_data = np.empty(n, np.uint8)
    fen_offsets = np.empty(cap_lines + 1, np.int32)
    results = np.empty(cap_lines, np.float64)
    row_line = np.empty(cap_lines, np.int64)
    bad_line = np.empty(cap_lines, np.int64)
    bad_code = np.empty(cap_lines, np.int8)
    bad_start = np.empty(cap_lines, np.int64)
    bad_end = np.empty(cap_lines, np.int64)
    n_lines, rows, nbad = scan_clockwork(buf, fen_data, fen_offsets, results, row_line,
                                         bad_line, bad_code, bad_start, bad_end)
    bad = []
    for k in range(nbad):
        if bad_code[k] == BAD_NO_SEP:
            reason = "no ';' before the result (expected FEN;w|d|b)"
        else:
            tok = raw[bad_start[k]:bad_end[k]].decode("utf-8", "replace")
            reason = f"bad result token {tok!r} (expected w, d or b)"
        bad.append((int(bad_line[k]), reason))
    used = int(fen_offsets[rows])
    return (n_lines, fen_offsets[:rows + 1], fen_data[:used], results[:rows], row_line[:rows],
            bad)
