"""Reading labelled positions from Parquet: ``load_dataset`` (whole files) and ``DatasetReader``
(batch by batch)."""
from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import MAX_BAD_KEPT, BadRow, DatasetError, format_bad_list
from tuner.chess.fen import parse_fen_array
from tuner.chess.status import status_text
from .registry import Resolved, resolve
from .schema import check_schema
from .uri import is_uri, locate
from . import trace as traces

POSITION_WORDS = 9
#: Rows per Arrow batch while streaming a file.
BATCH_ROWS = 65_536
POLICIES = ("skip", "strict")
#: Bytes read from a file at a time. Arrow otherwise reads a whole column chunk of a row group
#: ahead (pre-buffering): 150 MB held while a file of 7 M positions (1 M rows a row group) is
#: read, and most of it kept by Arrow's allocator afterwards; in pieces it holds ~16 MB, and
#: reads faster.
READ_BUFFER = 1 << 20


@dataclass
class Dataset:
    """Labelled positions held in memory.

    positions  uint64[N, 9] (layout: docs/interfaces.md)
    results    float64[N]: 1.0 / 0.5 / 0.0, White's point of view
    score_cp   int32[N] (White's point of view) or None when the file has no scores
    source     where the data came from (registry name and/or path)
    n_bad      rows rejected while loading (exact count)
    bad_rows   the first ``MAX_BAD_KEPT`` rejected rows: BadRow(row, reason), row 0-based
    game, ply  int64[N] / int32[N] when loaded with ``with_game=True`` and present, else None
    row_index  int64[N] row number in the file of each kept position (``keep_row_index=True``)
    """

    positions: np.ndarray
    results: np.ndarray
    score_cp: np.ndarray | None
    source: str
    n_bad: int = 0
    bad_rows: list[BadRow] = field(default_factory=list)
    game: np.ndarray | None = None
    ply: np.ndarray | None = None
    row_index: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.results)

    @property
    def nbytes(self) -> int:
        """Bytes held by the arrays."""
        return sum(a.nbytes for a in (self.positions, self.results, self.score_cp, self.game,
                                      self.ply, self.row_index) if a is not None)


def open_parquet(path: Path | str, source: str) -> pq.ParquetFile:
    """Open ``path`` as Parquet, turning every failure into a DatasetError naming ``source``: a
    local path, or a URI (a str, `tuner.data.uri`: opened through its pyarrow filesystem, its
    errors naming the URI)."""
    filesystem = None
    if isinstance(path, str) and is_uri(path):
        filesystem, path = locate(path)
    elif not os.path.exists(path):
        raise DatasetError(f"{source}: no such file")
    elif os.path.isdir(path):
        raise DatasetError(f"{source}: is a directory, not a Parquet file")
    try:
        return pq.ParquetFile(path, filesystem=filesystem, page_checksum_verification=True,
                              buffer_size=READ_BUFFER, pre_buffer=False)
    except (pa.ArrowException, OSError) as e:
        raise DatasetError(f"{source}: not a Parquet file, or corrupted ({e})") from e


def _null_count(pf: pq.ParquetFile, col: str) -> int:
    """Nulls in column ``col``, from the footer statistics when every row group has them."""
    md = pf.metadata
    idx = pf.schema_arrow.get_field_index(col)
    total = 0
    for g in range(md.num_row_groups):
        stats = md.row_group(g).column(idx).statistics
        if stats is None or not stats.has_null_count:
            return pf.read(columns=[col]).column(0).null_count
        total += stats.null_count
    return total


def _int_column(arr: pa.Array, target: pa.DataType, col: str, source: str) -> pa.Array:
    if arr.type == target:
        return arr
    try:
        return arr.cast(target, safe=True)
    except pa.ArrowInvalid as e:
        raise DatasetError(f"{source}: column '{col}' has values that do not fit {target} "
                           f"({e})") from e


@dataclass
class Batch:
    """The valid rows of one Arrow batch of a file (`DatasetReader.batches`), in file order.

    start      the file row (0-based) of the batch's first row
    n_rows     rows of the batch, valid or not
    ok         bool[n_rows]: which rows are valid; None when all are
    positions, results, score_cp, game, ply: as in `Dataset`, for the valid rows (a trace's
               positions are `tuner.data.trace.TraceRows`)
    """

    start: int
    n_rows: int
    ok: np.ndarray | None
    positions: np.ndarray
    results: np.ndarray
    score_cp: np.ndarray | None
    game: np.ndarray | None
    ply: np.ndarray | None

    def __len__(self) -> int:
        return len(self.results)

    def rows(self) -> np.ndarray:
        """int64: the file row of each valid row."""
        rows = np.arange(self.start, self.start + self.n_rows, dtype=np.int64)
        return rows if self.ok is None else rows[self.ok]


class DatasetReader:
    """A dataset file open for reading in Arrow batches: what `load_dataset` reads whole, and
    what a replay run streams into its store without holding every position.

    Opening checks the file (it exists and is Parquet, the registry's row count, the schema)
    and decides whether scores are read (see `load_dataset`); `batches` reads it. Every pass
    over the file yields the same batches; the first complete one reports the bad rows
    (`policy` "skip": printed unless `quiet`; "strict": DatasetError) and raises DatasetError
    when no row is valid. `n_bad` and `bad_rows` then hold what it found, `kept` the valid
    rows. Every Arrow or I/O failure is a DatasetError naming the file. Use it as a context
    manager (or `close` it).

    A file is read as what its reader expects: positions given as FENs (`trace` None) or a
    trace (`tuner.data.trace`: its rows checked against `trace`, the trace evaluation's
    layout); a file of the other kind is a DatasetError saying so.
    """

    def __init__(self, path_or_name: str | os.PathLike | Resolved, policy: str = "skip", *,
                 need_scores: bool = False, with_game: bool = False, quiet: bool = False,
                 batch_rows: int = BATCH_ROWS, trace: traces.TraceLayout | None = None):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        resolved = (path_or_name if isinstance(path_or_name, Resolved)
                    else resolve(path_or_name))
        self.resolved, self.policy, self.quiet, self.batch_rows = (resolved, policy, quiet,
                                                                   batch_rows)
        self.trace = trace
        self.source = source = resolved.description
        self.pf = pf = open_parquet(resolved.path, source)
        self.n_rows = n_rows = pf.metadata.num_rows
        entry = resolved.entry
        try:
            if entry is not None and entry.rows is not None and entry.rows != n_rows:
                raise DatasetError(f"{source}: row count mismatch: the registry expects "
                                   f"{entry.rows:,} rows, the file has {n_rows:,}")
            with self._arrow_errors():
                self._choose_columns(need_scores, with_game)
        except BaseException:
            pf.close()
            raise
        self.n_bad = 0
        self.bad_rows: list[BadRow] = []
        self.kept: int | None = None      # known after the first complete pass
        self._bad: list[np.ndarray] = []  # every bad row's number (for `file_rows`)

    def _choose_columns(self, need_scores: bool, with_game: bool) -> None:
        source, n_rows, pf = self.source, self.n_rows, self.pf
        schema = pf.schema_arrow
        traces.check_layout(self.trace, traces.is_trace(schema), source)
        if self.trace is not None:
            traces.check_schema(schema, source)
            if need_scores:
                raise DatasetError(f"{source}: a trace has no scores ([loss] score_blend needs "
                                   "them)")
            self.with_score = False
            self.with_game = with_game and "game" in schema.names
            self.with_ply = self.with_game and "ply" in schema.names
            self.columns = traces.columns(schema)
            return
        present = check_schema(schema, source)
        score_nulls = _null_count(pf, "score_cp") if present["score_cp"] else n_rows
        with_score = score_nulls < n_rows
        if need_scores and not with_score:
            raise DatasetError(f"{source}: no scores (column 'score_cp' "
                               + ("is all null)" if present["score_cp"] else "is missing)"))
        if with_score and score_nulls and not need_scores:
            with_score = False
            if not self.quiet:
                print(f"{source}: note: {score_nulls:,} of {n_rows:,} rows have no score_cp; "
                      "scores not loaded (all rows kept)", file=sys.stderr)
        self.with_score = with_score
        self.with_game = with_game and present["game"]
        if self.with_game and n_rows and _null_count(pf, "game") == n_rows:
            self.with_game = False  # else one game of every row: nothing left to train on
            if not self.quiet:
                print(f"{source}: note: column 'game' is all null; positions are grouped in "
                      f"blocks of consecutive rows instead of games", file=sys.stderr)
        self.with_ply = self.with_game and present["ply"]
        self.columns = ["fen", "result"] + ["score_cp"] * self.with_score

    @contextmanager
    def _arrow_errors(self):
        try:
            yield
        except (pa.ArrowException, OSError) as e:
            raise DatasetError(f"{self.source}: corrupted Parquet file ({e})") from e

    def close(self) -> None:
        self.pf.close()

    def __enter__(self) -> DatasetReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def batches(self) -> Iterator[Batch]:
        """One pass over the file: the valid rows of each batch, in file order."""
        columns = self.columns + ["game"] * self.with_game + ["ply"] * self.with_ply
        first = self.kept is None
        bad_rows: list[BadRow] = []
        bad: list[np.ndarray] = []
        n_bad = kept = start = 0
        with self._arrow_errors():
            for batch in self.pf.iter_batches(batch_size=self.batch_rows, columns=columns,
                                              use_threads=False):
                if start + batch.num_rows > self.n_rows:
                    raise DatasetError(f"{self.source}: corrupted Parquet file (more rows "
                                       f"than the footer's {self.n_rows:,})")
                b = self._parse(batch, start, bad_rows)
                if b.ok is not None:
                    bad.append(np.flatnonzero(~b.ok) + start)
                    n_bad += b.n_rows - len(b)
                kept += len(b)
                start += b.n_rows
                yield b
        if start != self.n_rows:
            raise DatasetError(f"{self.source}: corrupted Parquet file (read {start:,} rows, "
                               f"the footer says {self.n_rows:,})")
        if not first:
            if kept != self.kept:
                raise DatasetError(f"{self.source}: changed while it was read ({kept:,} valid "
                                   f"rows now, {self.kept:,} before)")
            return
        self.n_bad, self.bad_rows, self._bad = n_bad, bad_rows, bad
        self._report(kept)
        self.kept = kept

    def _parse(self, batch: pa.RecordBatch, start: int, bad_rows: list[BadRow]) -> Batch:
        """Batch `batch` (file rows from `start`) checked; its first bad rows into `bad_rows`."""
        source = self.source
        n = batch.num_rows
        if self.trace is not None:
            pos_b, res, ok = traces.parse_batch(batch, start, self.trace, bad_rows,
                                                MAX_BAD_KEPT - len(bad_rows))
            return Batch(start, n, ok, pos_b, res, None, *self._labels(batch, ok))
        pos_b, status = parse_fen_array(batch.column(0))
        res_arr = batch.column(1)
        res = res_arr.cast(pa.float64()).to_numpy(zero_copy_only=False)  # nulls -> NaN
        res_valid = res_arr.is_valid().to_numpy(zero_copy_only=False) \
            if res_arr.null_count else None
        res_ok = (res == 1.0) | (res == 0.5) | (res == 0.0)
        ok = (status == 0) & res_ok
        score_valid = sc = None
        if self.with_score:
            sc_arr = _int_column(batch.column("score_cp"), pa.int32(), "score_cp", source)
            if sc_arr.null_count:
                score_valid = sc_arr.is_valid().to_numpy(zero_copy_only=False)
                ok &= score_valid
                sc_arr = sc_arr.fill_null(0)
            sc = sc_arr.to_numpy(zero_copy_only=False)
        all_ok = bool(ok.all())
        if not all_ok:
            room = MAX_BAD_KEPT - len(bad_rows)
            for i in np.flatnonzero(~ok)[:max(room, 0)]:
                reasons = []
                if status[i] != 0:
                    reasons.append(status_text(status[i]))
                if not res_ok[i]:
                    reasons.append("result is null" if res_valid is not None and not res_valid[i]
                                   else f"bad result {float(res[i])!r} (expected 1.0, 0.5 or "
                                        "0.0)")
                if score_valid is not None and not score_valid[i]:
                    reasons.append("score_cp is null")
                bad_rows.append(BadRow(start + int(i), "; ".join(reasons)))
        sel = None if all_ok else ok
        return Batch(start, n, sel, pos_b if all_ok else pos_b[sel],
                     res if all_ok else res[sel],
                     (sc if all_ok else sc[sel]) if self.with_score else None,
                     *self._labels(batch, sel))

    def _labels(self, batch: pa.RecordBatch, ok: np.ndarray | None) -> tuple:
        """The game and ply columns (None when not read) of the valid rows `ok` (None: all)."""
        def column(name, dtype):
            values = _int_column(batch.column(name), dtype, name, self.source).fill_null(-1) \
                .to_numpy()
            return values if ok is None else values[ok]

        return (column("game", pa.int64()) if self.with_game else None,
                column("ply", pa.int32()) if self.with_ply else None)

    def _report(self, kept: int) -> None:
        """The bad rows of a complete pass: reported, or DatasetError (strict, none valid)."""
        source, n_bad, n_rows = self.source, self.n_bad, self.n_rows
        shown = [f"row {b.row}: {b.reason}" for b in self.bad_rows]
        if n_bad:
            if self.policy == "strict":
                raise DatasetError(f"{source}: {n_bad:,} bad row(s) of {n_rows:,} "
                                   f"(policy strict; use policy skip to drop them):\n"
                                   + format_bad_list(shown, n_bad))
            if not self.quiet:
                print(f"{source}: skipped {n_bad:,} bad row(s) of {n_rows:,}:\n"
                      + format_bad_list(shown, n_bad), file=sys.stderr)
        if kept == 0:
            raise DatasetError(f"{source}: no valid rows" + (
                f" (all {n_bad:,} rows are bad):\n" + format_bad_list(shown, n_bad) if n_bad
                else " (the file is empty)"))

    def bad_file_rows(self) -> np.ndarray:
        """int64: the file rows of the bad rows (after a complete pass), increasing."""
        return np.concatenate(self._bad) if self._bad else np.zeros(0, np.int64)

    def file_rows(self, kept: np.ndarray) -> np.ndarray:
        """The file rows of valid rows `kept` (indices among the valid rows, after a pass)."""
        return file_rows(kept, self.bad_file_rows())

    def _taken(self, rows: np.ndarray, columns: list) -> Iterator[tuple]:
        """``(lo, batch)`` for each batch of the file holding some of file rows `rows`
        (increasing): `batch` those rows of `columns`, ``rows[lo:lo + len(batch)]``. Only the row
        groups that hold them are read; DatasetError if the file has fewer rows now."""
        done = start = 0
        md = self.pf.metadata
        with self._arrow_errors():
            for g in range(md.num_row_groups):
                stop = start + md.row_group(g).num_rows
                if np.searchsorted(rows, stop) == done:  # no row of this group
                    start = stop
                    continue
                for batch in self.pf.iter_batches(batch_size=self.batch_rows, row_groups=[g],
                                                  columns=columns, use_threads=False):
                    hi = int(np.searchsorted(rows, start + batch.num_rows))
                    if hi > done:
                        yield done, batch.take(pa.array(rows[done:hi] - start))
                        done = hi
                    start += batch.num_rows
        if done != len(rows):
            raise DatasetError(f"{self.source}: changed since it was read (fewer rows)")

    def _changed(self, row: int, why: str) -> DatasetError:
        return DatasetError(f"{self.source}: row {row}: changed since it was read ({why})")

    def read_rows(self, rows: np.ndarray) -> tuple:
        """``(positions, results, score_cp)`` of file rows `rows` (increasing, every one valid
        when the file was read before), read again: only the row groups that hold them are
        read and only these rows parsed. DatasetError if one of them is not valid now."""
        rows = np.asarray(rows, np.int64)
        parts: list[Batch] = []
        for lo, taken in self._taken(rows, self.columns):
            b = self._parse(taken, int(rows[lo]), [])
            if b.ok is not None:
                raise self._changed(int(rows[lo + int(np.flatnonzero(~b.ok)[0])]),
                                    "no longer a valid row")
            parts.append(b)
        if not parts:
            return self.no_positions(), np.zeros(0), None
        return (traces.concat_positions([b.positions for b in parts]),
                np.concatenate([b.results for b in parts]),
                np.concatenate([b.score_cp for b in parts]) if self.with_score else None)

    def no_positions(self):
        """No positions, of this file's kind."""
        return (np.zeros((0, POSITION_WORDS), np.uint64) if self.trace is None
                else traces.empty_rows())

    def positions(self, kept: np.ndarray):
        """uint64[len(kept), 9]: the positions of valid rows `kept` (sorted indices among the
        valid rows), read from the file again (only the FEN column; only these rows parsed).
        A trace's are `TraceRows`, its batches read again."""
        if self.trace is not None:
            return self._trace_rows(np.asarray(kept, np.int64))
        rows = self.file_rows(np.asarray(kept, np.int64))
        out = np.empty((len(rows), POSITION_WORDS), np.uint64)
        for lo, taken in self._taken(rows, ["fen"]):
            pos, status = parse_fen_array(taken.column(0))
            if status.any():
                i = int(np.flatnonzero(status)[0])
                raise self._changed(int(rows[lo + i]), status_text(status[i]))
            out[lo: lo + len(pos)] = pos
        return out

    def _trace_rows(self, kept: np.ndarray) -> traces.TraceRows:
        """The `TraceRows` of valid rows `kept` (sorted), from a pass over the file."""
        parts, done = [], 0
        for b in self.batches():
            stop = done + len(b)
            lo, hi = np.searchsorted(kept, [done, stop])
            if hi > lo:
                parts.append(traces.take_positions(b.positions, kept[lo:hi] - done))
            done = stop
        return traces.concat_positions(parts) if parts else traces.empty_rows()


def file_rows(kept: np.ndarray, bad: np.ndarray) -> np.ndarray:
    """The file rows of valid rows `kept` (indices among a file's valid rows) of a file whose
    bad rows are `bad` (file rows, increasing)."""
    # the i-th bad row has bad[i] - i valid rows before it
    return kept + np.searchsorted(bad - np.arange(len(bad)), kept, side="right")


def load_dataset(path_or_name: str | os.PathLike, policy: str = "skip", *,
                 need_scores: bool = False, with_game: bool = False,
                 keep_row_index: bool = False,
                 quiet: bool = False, batch_rows: int = BATCH_ROWS) -> Dataset:
    """Load a dataset: a registered name (see ``tuner.data.registry``) or a Parquet path.

    Streams the file batch by batch (`DatasetReader`), parses the FENs in bulk from the Arrow
    buffers, checks the results. Bad rows (invalid or null FEN, result not 1.0/0.5/0.0) are
    dropped under ``policy="skip"`` (a count and the first few are printed to stderr unless
    ``quiet``) or make ``policy="strict"`` raise DatasetError listing them. Every problem with
    the file itself raises DatasetError naming it, and so does a file left with no valid row.

    ``score_cp`` is loaded when the column exists and is not all null. When only some rows
    have a score: with ``need_scores=False`` (default) every row is kept and ``score_cp`` is
    None (a note is printed); with ``need_scores=True`` rows without a score are bad rows, and
    a file without any score raises DatasetError.
    """
    with DatasetReader(path_or_name, policy, need_scores=need_scores, with_game=with_game,
                       quiet=quiet, batch_rows=batch_rows) as reader:
        n_rows = reader.n_rows
        positions = np.empty((n_rows, POSITION_WORDS), dtype=np.uint64)
        results = np.empty(n_rows, dtype=np.float64)
        score = np.empty(n_rows, dtype=np.int32) if reader.with_score else None
        game = np.empty(n_rows, dtype=np.int64) if reader.with_game else None
        ply = np.empty(n_rows, dtype=np.int32) if reader.with_ply else None
        row_index = np.empty(n_rows, dtype=np.int64) if keep_row_index else None
        arrays = [positions, results, score, game, ply, row_index]
        kept = 0
        for b in reader.batches():
            k = len(b)
            for out, part in zip(arrays, (b.positions, b.results, b.score_cp, b.game, b.ply)):
                if out is not None:
                    out[kept:kept + k] = part
            if keep_row_index:
                row_index[kept:kept + k] = b.rows()
            kept += k
    if kept < n_rows:
        for a in arrays:
            if a is not None:
                a.resize((kept,) + a.shape[1:], refcheck=False)
    return Dataset(positions, results, score, reader.source, reader.n_bad, reader.bad_rows, game,
                   ply, row_index)
