"""Summary statistics of a dataset (``tuner data stats``).

Phase = knights + bishops + 2*rooks + 4*queens (both colours), capped at 24.

Variant rule (decided from each position, which carries its castling rights and the castling
field as written; positions without castling rights cannot be told apart):

* **DFRC** -- some castling right is not a standard one (king not on the e-file, or the castling
  rook not on the a- or h-file), or the castling field is written Shredder-style with rook-file
  letters (``HAha``, ``GAfd``...) as DFRC/Chess960 tools write it;
* **standard** -- castling rights present, all standard (king on e1/e8, rooks on a/h), written
  ``KQkq``;
* **unknown** -- no castling rights left: the position could come from either variant.

When the file has a ``variant`` column (the shipped sets do), its counts are shown too.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .loader import Dataset, load_dataset, open_parquet
from .registry import Resolved, resolve

PHASE_BINS = ((0, 4), (5, 8), (9, 12), (13, 16), (17, 20), (21, 23), (24, 24))
RESULT_NAMES = {1.0: "white wins (1.0)", 0.5: "draws (0.5)", 0.0: "black wins (0.0)"}


def phases(positions: np.ndarray) -> np.ndarray:
    """min(24, N + B + 2R + 4Q) for each row of positions[N, 9]."""
    from tuner.chess.position import W_BISHOP, W_KNIGHT, W_QUEEN, W_ROOK

    bc = np.bitwise_count
    p = (bc(positions[:, W_KNIGHT] | positions[:, W_BISHOP]).astype(np.int32)
         + 2 * bc(positions[:, W_ROOK]).astype(np.int32)
         + 4 * bc(positions[:, W_QUEEN]).astype(np.int32))
    return np.minimum(p, 24)


def phase_histogram(positions: np.ndarray) -> list[tuple[str, int]]:
    counts = np.bincount(phases(positions), minlength=25)
    return [(f"{lo}-{hi}" if lo != hi else f"{lo}", int(counts[lo:hi + 1].sum()))
            for lo, hi in PHASE_BINS]


VARIANT_STANDARD, VARIANT_DFRC, VARIANT_UNKNOWN = 0, 1, 2


def classify_variants(positions: np.ndarray) -> np.ndarray:
    """int8 per position: 0 standard, 1 DFRC, 2 unknown (no castling rights); rule above."""
    from tuner.chess.position import (META_CASTLE_SLOTS_SHIFT, META_CASTLE_TEXT_SHIFT,
                                      W_KING, W_META)

    meta = positions[:, W_META]
    has_right = np.zeros(len(meta), dtype=bool)
    nonstd = np.zeros(len(meta), dtype=bool)
    for colour in (0, 1):
        king = positions[:, colour] & positions[:, W_KING]
        kfile = np.bitwise_count(king - np.uint64(1)).astype(np.int64) & 7  # one-bit lsb
        for side, rook_file in ((0, 7), (1, 0)):  # king side: h-file, queen side: a-file
            shift = np.uint64(META_CASTLE_SLOTS_SHIFT + 4 * (2 * colour + side))
            nib = ((meta >> shift) & np.uint64(15)).astype(np.int64)
            present = (nib & 8) != 0
            has_right |= present
            nonstd |= present & ((kfile != 4) | ((nib & 7) != rook_file))
    # castling field as written: 4 chars x 5 bits; codes 5..20 are file letters (Shredder style)
    text = meta >> np.uint64(META_CASTLE_TEXT_SHIFT)
    shredder = np.zeros(len(meta), dtype=bool)
    for k in range(4):
        code = ((text >> np.uint64(5 * k)) & np.uint64(31)).astype(np.int64)
        shredder |= code >= 5
    out = np.full(len(meta), VARIANT_UNKNOWN, dtype=np.int8)
    out[has_right] = VARIANT_STANDARD
    out[has_right & (nonstd | shredder)] = VARIANT_DFRC
    return out


@dataclass
class Stats:
    source: str
    rows_in_file: int
    rows: int
    n_bad: int
    bad_rows: list[tuple[int, str]]
    results: dict[str, int]
    phase: list[tuple[str, int]]
    variant: dict[str, int]
    variant_column: dict[str, int] | None = None
    score_cp: dict[str, float] | None = None
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def _variant_column(resolved: Resolved, ds: Dataset) -> dict[str, int] | None:
    pf = open_parquet(resolved.path, resolved.description)
    try:
        if "variant" not in pf.schema_arrow.names:
            return None
        col = pf.read(columns=["variant"]).column(0)
        if ds.row_index is not None and len(ds.row_index) != col.length():
            col = col.take(pa.array(ds.row_index))
        vc = pc.value_counts(col)
        return {str(v["values"]): int(v["counts"]) for v in vc.to_pylist()}
    except pa.ArrowException:
        return None
    finally:
        pf.close()


def dataset_stats(path_or_name: str | os.PathLike, policy: str = "skip") -> Stats:
    resolved = resolve(path_or_name)
    ds = load_dataset(resolved, policy=policy, keep_row_index=True, quiet=True)
    n = len(ds)
    results = {name: int(np.count_nonzero(ds.results == v)) for v, name in RESULT_NAMES.items()}
    variants = np.bincount(classify_variants(ds.positions), minlength=3)
    variant = {"standard": int(variants[0]), "dfrc": int(variants[1]),
               "unknown": int(variants[2])}
    score = None
    if ds.score_cp is not None and n:
        a = np.abs(ds.score_cp.astype(np.int64))
        score = {"min": int(ds.score_cp.min()), "max": int(ds.score_cp.max()),
                 "mean_abs": float(a.mean()), "share_abs_below_100": float((a < 100).mean())}
    return Stats(
        source=ds.source, rows_in_file=n + ds.n_bad, rows=n, n_bad=ds.n_bad,
        bad_rows=[tuple(b) for b in ds.bad_rows], results=results,
        phase=phase_histogram(ds.positions), variant=variant,
        variant_column=_variant_column(resolved, ds), score_cp=score)


def _pct(k: int, n: int) -> str:
    return f"{100.0 * k / n:5.1f}%" if n else "    -"


def format_stats(s: Stats, show_bad: int = 10) -> str:
    n = s.rows
    out = [f"dataset   {s.source}",
           f"rows      {s.rows:,} valid of {s.rows_in_file:,} ({s.n_bad:,} bad)"]
    for row, reason in s.bad_rows[:show_bad]:
        out.append(f"            bad row {row}: {reason}")
    if s.n_bad > show_bad:
        out.append(f"            ... and {s.n_bad - show_bad:,} more bad rows")
    out.append("results")
    for name, k in s.results.items():
        out.append(f"  {name:<18}{k:>12,}  {_pct(k, n)}")
    out.append("phase (N+B+2R+4Q, capped at 24)")
    for label, k in s.phase:
        out.append(f"  {label:<18}{k:>12,}  {_pct(k, n)}")
    out.append("variant (from castling rights; see `tuner data stats --help`)")
    labels = {"standard": "standard", "dfrc": "DFRC", "unknown": "unknown (no rights)"}
    for key, k in s.variant.items():
        out.append(f"  {labels[key]:<18}{k:>12,}  {_pct(k, n)}")
    if s.variant_column:
        out.append("variant column")
        for key, k in sorted(s.variant_column.items()):
            out.append(f"  {key:<18}{k:>12,}  {_pct(k, n)}")
    if s.score_cp:
        sc = s.score_cp
        out.append(f"score_cp  range {sc['min']}..{sc['max']}, mean |score| {sc['mean_abs']:.1f}, "
                   f"|score| < 100: {100 * sc['share_abs_below_100']:.1f}%")
    else:
        out.append("score_cp  none")
    return "\n".join(out)
