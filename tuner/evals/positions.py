"""The two kinds of positions an evaluation records: packed boards (uint64[N, 9]) or the rows
of a trace (`TraceRows`, the positions of the trace evaluation, `tuner.evals.trace`), and the
functions that move either kind about.

This is the part of the trace format that evaluations need; the trace files themselves (schema,
row checks) are read by `tuner.data.trace`, which re-exports these names.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class TraceLayout(NamedTuple):
    """What a trace's rows are checked against: its parameter file's pair count and phase_max."""

    n_params: int
    phase_max: float
    source: str  # the parameter file, for messages


class TraceRows(NamedTuple):
    """Trace rows held in memory (what the trace evaluation records).

    alpha  float64[N]: phase / phase_max, the midgame weight
    scale  float64[N]: the endgame scale factor (1.0 without a scale column)
    start  int64[N + 1]: the terms of row i are ``start[i]:start[i + 1]``
    index  int32[M], count  int64[M]: the terms, in the file's order
    """

    alpha: np.ndarray
    scale: np.ndarray
    start: np.ndarray
    index: np.ndarray
    count: np.ndarray


def empty_rows() -> TraceRows:
    """No trace rows."""
    return TraceRows(np.zeros(0), np.zeros(0), np.zeros(1, np.int64), np.zeros(0, np.int32),
                     np.zeros(0, np.int64))


def gather_rows(alpha, scale, offsets, lengths, index, count, keep) -> TraceRows:
    """The rows `keep` of compressed rows (`offsets` into `index`/`count`, any base)."""
    sel = lengths[keep]
    start = np.zeros(len(keep) + 1, np.int64)
    np.cumsum(sel, out=start[1:])
    terms = np.repeat(offsets[keep] - start[:-1], sel) + np.arange(start[-1], dtype=np.int64)
    return TraceRows(np.ascontiguousarray(alpha[keep], np.float64),
                     np.ascontiguousarray(scale[keep], np.float64), start,
                     np.ascontiguousarray(index[terms], np.int32),
                     np.ascontiguousarray(count[terms], np.int64))


def take_positions(positions, rows):
    """``positions[rows]`` (rows an int array or a slice) for either kind of positions. A slice
    of trace rows, like one of boards, is views of their arrays (the offsets made anew)."""
    if not isinstance(positions, TraceRows):
        return positions[rows]
    start = positions.start
    if isinstance(rows, slice) and rows.step in (None, 1):
        lo, hi, _ = rows.indices(len(start) - 1)
        hi = max(lo, hi)
        terms = slice(start[lo], start[hi])
        return TraceRows(positions.alpha[lo:hi], positions.scale[lo:hi],
                         start[lo: hi + 1] - start[lo], positions.index[terms],
                         positions.count[terms])
    keep = np.arange(len(start) - 1)[rows]
    return gather_rows(positions.alpha, positions.scale, start[:-1], np.diff(start),
                   positions.index, positions.count, keep)


def concat_positions(parts: list):
    """The positions of `parts` (of one kind, at least one part) one after the other."""
    if not isinstance(parts[0], TraceRows):
        return np.concatenate(parts)
    start = [np.zeros(1, np.int64)]
    base = 0
    for p in parts:
        start.append(p.start[1:] + base)
        base += int(p.start[-1])
    return TraceRows(np.concatenate([p.alpha for p in parts]),
                     np.concatenate([p.scale for p in parts]), np.concatenate(start),
                     np.concatenate([p.index for p in parts]),
                     np.concatenate([p.count for p in parts]))


def position_arrays(positions) -> tuple:
    """The arrays that say what `positions` (either kind) are, the same arrays one after the
    other however they are cut into parts (a trace's row lengths, not its offsets)."""
    if not isinstance(positions, TraceRows):
        return (positions,)
    return (positions.alpha, positions.scale, np.diff(positions.start), positions.index,
            positions.count)


def position_count(positions) -> int:
    """How many positions `positions` holds (either kind)."""
    return len(positions.alpha) if isinstance(positions, TraceRows) else len(positions)
