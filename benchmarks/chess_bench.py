"""Benchmarks for tuner.chess: bulk FEN parsing and attack generation (one core).

    .venv/bin/python benchmarks/chess_bench.py [--runs N] [--parquet PATH]

Prints the bulk parse rate (FENs/s, median of N runs, single thread) on the `fen` column of
selfplay-std.parquet, the single-FEN parse_fen rate, and attack-generation timings (magic vs
classical ray sliders, attacker_counts per position).
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from numba import njit

from tuner.chess import attacks as A
from tuner.chess.bitboard import lsb
from tuner.chess.fen import parse_fen, parse_fen_array, parse_fens, to_fen

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the magic sliders live with the tests they cross-check
import magic_sliders  # noqa: E402

U64 = np.uint64
DEFAULT = str(REPO / "tuner" / "samples" / "selfplay-std.parquet")


def _median_time(fn, runs):
    """(median wall time, best wall time, median CPU time of this thread) over `runs` calls.
    On a loaded machine the CPU time is the better measure of one core's throughput."""
    times, cpu = [], []
    for _ in range(runs):
        c0 = time.thread_time()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    return statistics.median(times), min(times), statistics.median(cpu)


@njit(cache=True, nogil=True)
def _sliders(pos, magic):
    """XOR of the rook and bishop attacks from every occupied square (magic or classical rays)."""
    acc = U64(0)
    for i in range(pos.shape[0]):
        occ = pos[i, 0] | pos[i, 1]
        bb = occ
        while bb != U64(0):
            s = lsb(bb)
            bb &= bb - U64(1)
            if magic:
                acc ^= (magic_sliders.rook_attacks_magic(s, occ)
                        ^ magic_sliders.bishop_attacks_magic(s, occ))
            else:
                acc ^= A.rook_attacks(s, occ) ^ A.bishop_attacks(s, occ)
    return acc


@njit(cache=True, nogil=True)
def _counts(pos):
    out = np.zeros((2, 64), np.int32)
    tot = 0
    for i in range(pos.shape[0]):
        A.attacker_counts(pos[i], out)
        tot += out[0, 27] + out[1, 36]
    return tot


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--parquet", default=DEFAULT)
    args = ap.parse_args()

    col = pq.read_table(args.parquet, columns=["fen"]).column("fen")
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    n = len(arr)
    nbytes = arr.buffers()[2].size
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=arr.offset + n + 1)[arr.offset:]
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)
    print("dataset: %s, %d FENs, %.1f MB of text" % (args.parquet, n, nbytes / 1e6))

    parse_fens(offsets[:2], data)  # compile / load cache
    positions, status = parse_fens(offsets, data)
    print("invalid rows: %d" % int(np.count_nonzero(status)))

    med, best, cpu = _median_time(lambda: parse_fens(offsets, data), args.runs)
    print("parse_fens (njit core, buffers):   %.2f M FENs/s median wall, %.2f M best wall, "
          "%.2f M per CPU-second (median of %d runs)"
          % (n / med / 1e6, n / best / 1e6, n / cpu / 1e6, args.runs))
    med, best, cpu = _median_time(lambda: parse_fen_array(col), args.runs)
    print("parse_fen_array (chunked column):  %.2f M FENs/s median wall, %.2f M best wall, "
          "%.2f M per CPU-second" % (n / med / 1e6, n / best / 1e6, n / cpu / 1e6))

    fens = arr.to_pylist()[:20000]
    med, _, _ = _median_time(lambda: [parse_fen(f) for f in fens], 3)
    print("parse_fen (single, Python loop):   %.0f k FENs/s" % (len(fens) / med / 1e3))
    med, _, _ = _median_time(lambda: [to_fen(p) for p in positions[:20000]], 3)
    print("to_fen:                            %.0f k positions/s" % (20000 / med / 1e3))

    npieces = int(sum(bin(int(a | b)).count("1") for a, b in positions[:, :2]))
    _sliders(positions[:2], False)
    _counts(positions[:2])
    assert _sliders(positions, False) == _sliders(positions, True)
    med, _, _ = _median_time(lambda: _sliders(positions, True), args.runs)
    print("slider attacks, magic:     %.2f ns per rook+bishop lookup pair" % (med / npieces * 1e9))
    med, _, _ = _median_time(lambda: _sliders(positions, False), args.runs)
    print("slider attacks, classical: %.2f ns per rook+bishop lookup pair" % (med / npieces * 1e9))
    med, _, _ = _median_time(lambda: _counts(positions), args.runs)
    print("attacker_counts:           %.0f ns per position" % (med / n * 1e9))


if __name__ == "__main__":
    main()
