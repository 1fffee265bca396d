"""Trace datasets: per position, which parameters an engine's evaluation used how many times.

A hand-crafted evaluation that is linear in its (mg, eg) parameters, blended by the phase (and
perhaps with its endgame half scaled), is fully described per position by its *trace*: the
result, the phase, the endgame scale and a list of (parameter index, count) terms. An engine in
any language can print it; the tuner then trains on it with the trace evaluation
(`tuner.evals.trace`) and no port of the evaluation. The schema (docs/trace.md):

    result  float (any floating type), White's point of view: 1.0, 0.5 or 0.0
    phase   integer or float, 0 <= phase <= the parameter file's ``phase_max``; the
            evaluation is ``a * mg + (1 - a) * eg`` with ``a = phase / phase_max``
    terms   list<struct<index: integer, count: integer or float>>: ``mg`` and ``eg`` are
            ``sum(count * param[index])`` over the terms, summed in the order given (a repeated
            index is merged into its first occurrence; terms summing to 0 are dropped)
    scale   optional float, 0 <= scale <= `MAX_SCALE`: the endgame half is ``eg * scale``
            (rows with scale 1.0 are recorded without the scaling, which changes no bit)
    game    optional integer: positions of one game share it (validation by game)
    ply     optional integer

A file is a trace when its schema has the ``terms`` column (`is_trace`); its parameters (names,
starting values, ``phase_max``) are the registry JSON that the configuration names as its
evaluation. Every row is checked before compiled code sees it (`parse_batch`): a bad row is
reported with its file row and field like a bad FEN.

The valid rows of a batch are held as `TraceRows` (compressed rows: the terms of row i are
``index[start[i]:start[i + 1]]``), the "positions" the trace evaluation records.
`take_positions`, `concat_positions` and `position_count` handle both kinds of positions
(packed boards uint64[N, 9] and `TraceRows`) for the code that moves them about. These and
`TraceLayout` are defined in `tuner.evals.positions` (the evaluations use them, and a layer
never imports one above it) and importable from here too.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from tuner.evals.positions import (TraceLayout, TraceRows, concat_positions,  # noqa: F401  (re-exported)
                                   empty_rows, gather_rows, position_arrays, position_count,
                                   take_positions)

from .errors import BadRow, DatasetError

TERMS, PHASE, SCALE = "terms", "phase", "scale"
TERM_INDEX, TERM_COUNT = "index", "count"
#: Largest endgame scale factor accepted (1.0 leaves the endgame half as it is).
MAX_SCALE = 4.0
#: Largest |count| of one term (its sum with others is exact in the tape's f64 coefficients).
MAX_COUNT = 1 << 31


def is_trace(schema: pa.Schema) -> bool:
    """Whether a Parquet schema is a trace's (it has the ``terms`` column)."""
    return TERMS in schema.names


def _struct_of_terms(t: pa.DataType) -> pa.StructType | None:
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return None
    v = t.value_type
    if not pa.types.is_struct(v):
        return None
    names = [v.field(i).name for i in range(v.num_fields)]
    if TERM_INDEX not in names or TERM_COUNT not in names:
        return None
    return v


def check_schema(schema: pa.Schema, source: str) -> None:
    """DatasetError naming `source` unless `schema` has a trace's columns with usable types."""
    names = schema.names
    for col in ("result", PHASE, TERMS):
        if col not in names:
            raise DatasetError(f"{source}: wrong schema for a trace: missing column '{col}' "
                               f"(columns: {', '.join(names)}; see docs/trace.md)")
    for col in names:
        if names.count(col) > 1:
            raise DatasetError(f"{source}: wrong schema: column '{col}' appears twice")
    t = schema.field("result").type
    if not pa.types.is_floating(t):
        raise DatasetError(f"{source}: wrong schema: column 'result' has type {t}, expected "
                           "double (1.0 / 0.5 / 0.0, White's point of view)")
    for col in (PHASE, SCALE):
        if col in names:
            t = schema.field(col).type
            if not (pa.types.is_floating(t) or pa.types.is_integer(t)):
                raise DatasetError(f"{source}: wrong schema: column '{col}' has type {t}, "
                                   "expected a number")
    t = schema.field(TERMS).type
    v = _struct_of_terms(t)
    if v is None:
        raise DatasetError(f"{source}: wrong schema: column 'terms' has type {t}, expected "
                           f"list<struct<{TERM_INDEX}: int32, {TERM_COUNT}: int32>>")
    if not pa.types.is_integer(v.field(TERM_INDEX).type):
        raise DatasetError(f"{source}: wrong schema: terms.{TERM_INDEX} has type "
                           f"{v.field(TERM_INDEX).type}, expected an integer type")
    ct = v.field(TERM_COUNT).type
    if not (pa.types.is_integer(ct) or pa.types.is_floating(ct)):
        raise DatasetError(f"{source}: wrong schema: terms.{TERM_COUNT} has type {ct}, "
                           "expected an integer type")


def columns(schema: pa.Schema) -> list[str]:
    """The trace columns a reader reads (besides ``game`` and ``ply``)."""
    return ["result", PHASE, TERMS] + [SCALE] * (SCALE in schema.names)


def _numbers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """float64 values (nulls NaN) and whether each is not null."""
    valid = arr.is_valid().to_numpy(zero_copy_only=False)
    return arr.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False), valid


def _in_range(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return np.isfinite(x) & (x >= lo) & (x <= hi)


def _describe(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def parse_batch(batch: pa.RecordBatch, start_row: int, layout: TraceLayout,
                bad_rows: list[BadRow], room: int):
    """The rows of one Arrow batch of a trace (file rows from `start_row`) checked against
    `layout`: ``(rows, results, ok)``, the valid rows' `TraceRows` and results and which rows
    are valid (None: all). The first `room` bad rows go into `bad_rows`, each with every field
    that is wrong."""
    n = batch.num_rows
    res, res_valid = _numbers(batch.column("result"))
    res_ok = (res == 1.0) | (res == 0.5) | (res == 0.0)
    phase, phase_valid = _numbers(batch.column(PHASE))
    phase_ok = _in_range(phase, 0.0, layout.phase_max)
    has_scale = SCALE in batch.schema.names
    if has_scale:
        scale, scale_valid = _numbers(batch.column(SCALE))
        scale_ok = _in_range(scale, 0.0, MAX_SCALE)
    else:
        scale, scale_ok = np.ones(n), np.ones(n, bool)
    terms = batch.column(TERMS)
    lists_ok = terms.is_valid().to_numpy(zero_copy_only=False)
    offsets = terms.offsets.to_numpy().astype(np.int64)
    values = terms.values  # what the offsets index (children with its offset and nulls applied)
    struct_ok = values.is_valid().to_numpy(zero_copy_only=False)
    fields = dict(zip([f.name for f in values.type], values.flatten()))
    index, index_valid = _numbers(fields[TERM_INDEX])
    count, count_valid = _numbers(fields[TERM_COUNT])
    index_ok = struct_ok & _in_range(index, 0, layout.n_params - 1)
    count_ok = struct_ok & _in_range(count, -MAX_COUNT, MAX_COUNT) & (np.floor(count) == count)
    term_bad = np.concatenate([[0], np.cumsum(~(index_ok & count_ok))])
    terms_ok = lists_ok & (term_bad[offsets[1:]] == term_bad[offsets[:-1]])
    ok = res_ok & phase_ok & scale_ok & terms_ok
    if not ok.all():
        for i in np.flatnonzero(~ok)[:max(room, 0)]:
            why = []
            if not res_ok[i]:
                why.append("result is null" if not res_valid[i] else
                           f"bad result {float(res[i])!r} (expected 1.0, 0.5 or 0.0)")
            if not phase_ok[i]:
                why.append("phase is null" if not phase_valid[i] else
                           f"phase {_describe(phase[i])} outside 0..{_describe(layout.phase_max)}"
                           f" (phase_max of {layout.source})")
            if not scale_ok[i]:
                why.append("scale is null" if not scale_valid[i] else
                           f"scale {float(scale[i])!r} outside 0..{MAX_SCALE:g}")
            if not lists_ok[i]:
                why.append("terms is null")
            elif not terms_ok[i]:
                why.append(_bad_term(i, _Terms(offsets, struct_ok, index, index_valid, index_ok,
                                               count, count_valid), layout))
            bad_rows.append(BadRow(start_row + int(i), "; ".join(why)))
    keep = np.flatnonzero(ok)
    lengths = offsets[1:] - offsets[:-1]
    good = index_ok & count_ok  # bad terms (of rows not kept) read as 0, not cast from NaN
    rows = gather_rows(phase / layout.phase_max, scale, offsets, lengths,
                   np.where(good, index, 0).astype(np.int32),
                   np.where(good, count, 0).astype(np.int64), keep)
    return rows, res[keep], None if keep.size == n else ok


class _Terms(NamedTuple):
    """A batch's terms column as `_bad_term` reads it: list offsets, and per term whether it is
    present, its index (present, in range) and its count (present)."""

    offsets: np.ndarray
    struct_ok: np.ndarray
    index: np.ndarray
    index_valid: np.ndarray
    index_ok: np.ndarray
    count: np.ndarray
    count_valid: np.ndarray


def _bad_term(i: int, terms: _Terms, layout: TraceLayout) -> str:
    """What is wrong with the first bad term of row i (field named)."""
    offsets, struct_ok, index, index_valid, index_ok, count, count_valid = terms
    for j in range(offsets[i], offsets[i + 1]):
        at = f"terms[{j - offsets[i]}]"
        if not struct_ok[j]:
            return f"{at} is null"
        if not index_valid[j]:
            return f"{at}.{TERM_INDEX} is null"
        if not index_ok[j]:
            return (f"{at}.{TERM_INDEX} {_describe(index[j])} outside 0..{layout.n_params - 1} "
                    f"(the {layout.n_params} pairs of {layout.source})")
        if not count_valid[j]:
            return f"{at}.{TERM_COUNT} is null"
        c = float(count[j])
        if not (np.isfinite(c) and c == np.floor(c) and abs(c) <= MAX_COUNT):
            return f"{at}.{TERM_COUNT} {c!r} is not an integer within +-{MAX_COUNT:,}"
    raise AssertionError("no bad term in a row marked bad")


def check_layout(layout: TraceLayout | None, is_trace_file: bool, source: str) -> None:
    """DatasetError unless a file's kind matches what reads it (`layout`: a trace evaluation's,
    None: an evaluation of boards)."""
    if is_trace_file and layout is None:
        raise DatasetError(f"{source}: is a trace (it has a 'terms' column, no FENs): train it "
                           f"with [evaluation] name = \"<its parameter file>.json\" "
                           f"(docs/trace.md)")
    if not is_trace_file and layout is not None:
        raise DatasetError(f"{source}: holds no trace (no 'terms' column): the trace "
                           f"evaluation of {layout.source} trains on traces only "
                           f"(docs/trace.md)")
