"""Write a trace dataset (docs/trace.md) from the `clockwork` evaluation's features.

An engine writes its trace itself, in its own language, from its own evaluation; this example
does it in plain Python for the tuner's reimplementation of Clockwork (commit cde2ced), so that
the result can be checked: trained with the trace evaluation, the trace gives bit for bit the
parameters `clockwork` itself trains to (tests/test_trace.py).

    python examples/write_trace.py IN.parquet OUT.parquet

reads the positions of IN (a FEN dataset: a file or a registered name such as ``tiny``) and
writes OUT.parquet with, per position,

* ``result`` (White's point of view), ``game`` and ``ply`` when IN has them;
* ``phase``: Clockwork's phase, 0..24 (``phase_max`` in the parameter file);
* ``terms``: the (parameter index, count) pairs the evaluation adds, in the order it first adds
  each index (that is the order of its sum: the same order gives the same rounding) and with
  the counts of one index merged (White's count minus Black's; zero sums left out);

and OUT.json beside it: the parameter file (names, layout, starting values, ``phase_max``),
here Clockwork's own. A configuration trains it with::

    [evaluation]
    name = "OUT.json"
    [data]
    train = ["OUT.parquet"]
"""
from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tuner.data import load_dataset
from tuner.evals import clockwork

#: Positions traced and written at a time (one Parquet row group each).
CHUNK = 1 << 20


def terms_array(start: np.ndarray, index: np.ndarray, count: np.ndarray) -> pa.Array:
    """The ``terms`` column: list<struct<index: int16, count: int16>> from compressed rows
    (row i's terms are ``index[start[i]:start[i + 1]]``)."""
    values = pa.StructArray.from_arrays([pa.array(index.astype(np.int16)),
                                         pa.array(count.astype(np.int16))],
                                        names=["index", "count"])
    return pa.ListArray.from_arrays(pa.array(start.astype(np.int32)), values)


def write_trace(dataset: str, out: str | Path) -> int:
    """Write the trace of `dataset`'s positions to `out` (Parquet) and its parameter file
    beside it (``out`` with the suffix ``.json``); returns the number of positions."""
    out = Path(out)
    ds = load_dataset(dataset, with_game=True, quiet=True)
    schema = pa.schema([("result", pa.float64()), ("phase", pa.int8()),
                        ("terms", pa.list_(pa.struct([("index", pa.int16()),
                                                      ("count", pa.int16())])))]
                       + [("game", pa.int64())] * (ds.game is not None)
                       + [("ply", pa.int32())] * (ds.ply is not None))
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
        for lo in range(0, len(ds), CHUNK):
            hi = min(len(ds), lo + CHUNK)
            start, index, count, phase = clockwork.feature_trace(ds.positions[lo:hi])
            columns = [pa.array(ds.results[lo:hi]), pa.array(phase.astype(np.int8)),
                       terms_array(start, index, count)]
            columns += [pa.array(a[lo:hi]) for a in (ds.game, ds.ply) if a is not None]
            writer.write_table(pa.Table.from_arrays(columns, schema=schema))
    shutil.copyfile(clockwork.PARAMS_PATH, out.with_suffix(".json"))
    return len(ds)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", help="a FEN dataset: Parquet file or registered name")
    parser.add_argument("out", help="the trace to write (OUT.parquet; OUT.json beside it)")
    args = parser.parse_args(argv)
    n = write_trace(args.dataset, args.out)
    print(f"{args.out}: the trace of {n:,} positions; parameters in "
          f"{Path(args.out).with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
