"""Reading labelled positions from Parquet: ``load_dataset``."""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import MAX_BAD_KEPT, BadRow, DatasetError, format_bad_list
from .fenarrow import parse_fen_array, status_text
from .registry import Resolved, resolve
from .schema import check_schema

POSITION_WORDS = 9
#: Rows per Arrow batch while streaming a file.
BATCH_ROWS = 65_536
POLICIES = ("skip", "strict")


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


def open_parquet(path: Path, source: str) -> pq.ParquetFile:
    """Open ``path`` as Parquet, turning every failure into a DatasetError naming ``source``."""
    if not os.path.exists(path):
        raise DatasetError(f"{source}: no such file")
    if os.path.isdir(path):
        raise DatasetError(f"{source}: is a directory, not a Parquet file")
    try:
        return pq.ParquetFile(path, page_checksum_verification=True)
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


def load_dataset(path_or_name: str | os.PathLike, policy: str = "skip", *,
                 need_scores: bool = False, with_game: bool = False,
                 keep_row_index: bool = False,
                 quiet: bool = False, batch_rows: int = BATCH_ROWS) -> Dataset:
    """Load a dataset: a registered name (see ``tuner.data.registry``) or a Parquet path.

    Streams the file batch by batch, parses the FENs in bulk from the Arrow buffers, checks
    the results. Bad rows (invalid or null FEN, result not 1.0/0.5/0.0) are dropped under
    ``policy="skip"`` (a count and the first few are printed to stderr unless ``quiet``) or
    make ``policy="strict"`` raise DatasetError listing them. Every problem with the file
    itself raises DatasetError naming it, and so does a file left with no valid row.

    ``score_cp`` is loaded when the column exists and is not all null. When only some rows
    have a score: with ``need_scores=False`` (default) every row is kept and ``score_cp`` is
    None (a note is printed); with ``need_scores=True`` rows without a score are bad rows, and
    a file without any score raises DatasetError.
    """
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
    resolved = resolve(path_or_name) if not isinstance(path_or_name, Resolved) else path_or_name
    source = resolved.description
    pf = open_parquet(resolved.path, source)
    entry = resolved.entry
    if entry is not None and entry.rows is not None and entry.rows != pf.metadata.num_rows:
        pf.close()
        raise DatasetError(f"{source}: row count mismatch: the registry expects {entry.rows:,} "
                           f"rows, the file has {pf.metadata.num_rows:,}")
    try:
        return _load(pf, source, policy, need_scores, with_game, keep_row_index, quiet,
                     batch_rows)
    except (pa.ArrowException, OSError) as e:
        raise DatasetError(f"{source}: corrupted Parquet file ({e})") from e
    finally:
        pf.close()


def _load(pf, source, policy, need_scores, with_game, keep_row_index, quiet,
          batch_rows) -> Dataset:
    present = check_schema(pf.schema_arrow, source)
    n_rows = pf.metadata.num_rows
    score_nulls = _null_count(pf, "score_cp") if present["score_cp"] else n_rows
    with_score = score_nulls < n_rows
    if need_scores and not with_score:
        raise DatasetError(f"{source}: no scores (column 'score_cp' "
                           + ("is all null)" if present["score_cp"] else "is missing)"))
    if with_score and score_nulls and not need_scores:
        with_score = False
        if not quiet:
            print(f"{source}: note: {score_nulls:,} of {n_rows:,} rows have no score_cp; "
                  "scores not loaded (all rows kept)", file=sys.stderr)
    with_game = with_game and present["game"]
    with_ply = with_game and present["ply"]
    columns = ["fen", "result"] + ["score_cp"] * with_score + ["game"] * with_game \
        + ["ply"] * with_ply

    positions = np.empty((n_rows, POSITION_WORDS), dtype=np.uint64)
    results = np.empty(n_rows, dtype=np.float64)
    score = np.empty(n_rows, dtype=np.int32) if with_score else None
    game = np.empty(n_rows, dtype=np.int64) if with_game else None
    ply = np.empty(n_rows, dtype=np.int32) if with_ply else None
    row_index = np.empty(n_rows, dtype=np.int64) if keep_row_index else None
    bad_rows: list[BadRow] = []
    n_bad = 0
    kept = 0
    start = 0

    for batch in pf.iter_batches(batch_size=batch_rows, columns=columns, use_threads=False):
        n = batch.num_rows
        if start + n > n_rows:
            raise DatasetError(f"{source}: corrupted Parquet file (more rows than the footer's "
                               f"{n_rows:,})")
        pos_b, status = parse_fen_array(batch.column(0))
        res_arr = batch.column(1)
        res = res_arr.cast(pa.float64()).to_numpy(zero_copy_only=False)  # nulls -> NaN
        res_valid = res_arr.is_valid().to_numpy(zero_copy_only=False) \
            if res_arr.null_count else None
        res_ok = (res == 1.0) | (res == 0.5) | (res == 0.0)
        ok = (status == 0) & res_ok
        score_valid = None
        if with_score:
            sc_arr = _int_column(batch.column("score_cp"), pa.int32(), "score_cp", source)
            if sc_arr.null_count:
                score_valid = sc_arr.is_valid().to_numpy(zero_copy_only=False)
                ok &= score_valid
                sc_arr = sc_arr.fill_null(0)
            sc = sc_arr.to_numpy(zero_copy_only=False)
        all_ok = bool(ok.all())
        if not all_ok:
            bad_idx = np.flatnonzero(~ok)
            n_bad += len(bad_idx)
            room = MAX_BAD_KEPT - len(bad_rows)
            for i in bad_idx[:max(room, 0)]:
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
        sel = slice(None) if all_ok else ok
        k = n if all_ok else int(ok.sum())
        positions[kept:kept + k] = pos_b[sel]
        results[kept:kept + k] = res[sel]
        if with_score:
            score[kept:kept + k] = sc[sel]
        if with_game:
            game[kept:kept + k] = _int_column(batch.column("game"), pa.int64(), "game",
                                              source).fill_null(-1).to_numpy()[sel]
        if with_ply:
            ply[kept:kept + k] = _int_column(batch.column("ply"), pa.int32(), "ply",
                                             source).fill_null(-1).to_numpy()[sel]
        if keep_row_index:
            row_index[kept:kept + k] = np.arange(start, start + n, dtype=np.int64)[sel]
        kept += k
        start += n

    if start != n_rows:
        raise DatasetError(f"{source}: corrupted Parquet file (read {start:,} rows, the footer "
                           f"says {n_rows:,})")
    if n_bad:
        shown = [f"row {b.row}: {b.reason}" for b in bad_rows]
        if policy == "strict":
            raise DatasetError(f"{source}: {n_bad:,} bad row(s) of {n_rows:,} "
                               f"(policy strict; use policy skip to drop them):\n"
                               + format_bad_list(shown, n_bad))
        if not quiet:
            print(f"{source}: skipped {n_bad:,} bad row(s) of {n_rows:,}:\n"
                  + format_bad_list(shown, n_bad), file=sys.stderr)
    if kept == 0:
        raise DatasetError(f"{source}: no valid rows" + (
            f" (all {n_bad:,} rows are bad):\n" + format_bad_list(
                [f"row {b.row}: {b.reason}" for b in bad_rows], n_bad) if n_bad else
            " (the file is empty)"))
    if kept < n_rows:
        arrays = [positions, results, score, game, ply, row_index]
        for a in arrays:
            if a is not None:
                a.resize((kept,) + a.shape[1:], refcheck=False)
    return Dataset(positions, results, score, source, n_bad, bad_rows, game, ply, row_index)
