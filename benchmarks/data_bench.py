"""Dataset layer benchmark: Parquet loading and text conversion on ~1M positions.

    .venv/bin/python benchmarks/data_bench.py [--rows 1000000] [--keep DIR]

Builds a ~1M-row Parquet file and a ~1M-line Clockwork text file by repeating the shipped
samples (tuner/samples/selfplay-*.parquet, and their text export) in a temporary directory, then
prints: load rate (positions/s), bytes per position held in memory, peak RSS growth while
loading, and conversion rate (lines/s, MB/s). Numba compilation is excluded (a warm-up load of
`tiny` runs first).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tuner.data import convert_files, load_dataset  # noqa: E402

SAMPLES = [ROOT / "tuner" / "samples" / "selfplay-std.parquet",
           ROOT / "tuner" / "samples" / "selfplay-dfrc.parquet"]


def build_inputs(tmp: Path, rows: int) -> tuple[Path, Path]:
    tables = [pq.read_table(p, columns=["fen", "result", "score_cp"]) for p in SAMPLES]
    parts, n = [], 0
    while n < rows:
        for t in tables:
            parts.append(t)
            n += t.num_rows
    table = pa.concat_tables(parts).slice(0, rows)
    pq_path = tmp / "bench.parquet"
    pq.write_table(table, pq_path, compression="zstd", row_group_size=131_072)
    txt_path = tmp / "bench.txt"
    tok = {1.0: "w", 0.5: "d", 0.0: "b"}
    with open(txt_path, "w") as f:
        for fen, r in zip(table.column("fen").to_pylist(), table.column("result").to_pylist()):
            f.write(f"{fen};{tok[r]}\n")
    return pq_path, txt_path


def other_formats(txt_path: Path) -> dict[str, Path]:
    """The Clockwork text rewritten as bracket, pipe and epd files next to it."""
    lines = txt_path.read_text().splitlines()
    num = {"w": "1.0", "d": "0.5", "b": "0.0"}
    pgn = {"w": "1-0", "d": "1/2-1/2", "b": "0-1"}
    out = {}
    for fmt in ("bracket", "pipe", "epd"):
        p = txt_path.with_name(f"bench.{fmt}.txt")
        with open(p, "w") as f:
            for k, line in enumerate(lines):
                fen, r = line[:-2], line[-1]
                if fmt == "bracket":
                    f.write(f"{fen} [{num[r]}]\n")
                elif fmt == "pipe":
                    f.write(f"{fen} | {k % 601 - 300} | {num[r]}\n")
                else:
                    x = fen.split()
                    f.write(f'{" ".join(x[:4])} hmvc {x[4]}; fmvn {x[5]}; c9 "{pgn[r]}";\n')
        out[fmt] = p
    return out


def _status_kb(key: str) -> int | None:
    try:
        for line in open("/proc/self/status"):
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_peak() -> int | None:
    """Reset the peak-RSS mark (Linux) and return the current RSS, or None if unsupported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return None
    return _status_kb("VmRSS")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3, help="timed loads (best is reported)")
    ap.add_argument("--keep", type=Path, help="build the inputs in this directory and keep them")
    ap.add_argument("--all-formats", action="store_true",
                    help="also time converting the same rows as bracket, pipe and epd text")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as td:
        tmp = args.keep or Path(td)
        tmp.mkdir(parents=True, exist_ok=True)
        # warm-up: numba compile / cache load of the FEN parser and the line scanner
        load_dataset("tiny", quiet=True)
        convert_files([ROOT / "tuner" / "samples" / "tiny.txt"], tmp / "warmup.parquet")
        pq_path, txt_path = build_inputs(tmp, args.rows)
        print(f"input: {args.rows:,} rows; {pq_path.stat().st_size / 1e6:.1f} MB Parquet, "
              f"{txt_path.stat().st_size / 1e6:.1f} MB text")

        best = cpu = float("inf")
        peak = None
        for _ in range(args.repeat):
            rss0 = reset_peak()
            t0, c0 = time.perf_counter(), time.process_time()
            ds = load_dataset(pq_path, quiet=True)
            best = min(best, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
            if rss0 is not None:
                peak = _status_kb("VmHWM") - rss0
            n, held = len(ds), ds.nbytes
            del ds
        print(f"load:    {n:,} positions in {best:.3f} s = {n / best:,.0f} positions/s "
              f"(CPU {cpu:.3f} s: one core)")
        print(f"memory:  {held / n:.1f} bytes/position held (positions 72 + result 8 + "
              f"score_cp 4) = {held / 1e6:.1f} MB"
              + (f"; peak RSS growth while loading {peak / 1e6:.1f} MB "
                 f"({peak / n:.0f} bytes/position)" if peak is not None else ""))

        out = tmp / "converted.parquet"
        dt = cpu = float("inf")
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            s = convert_files([txt_path], out)
            dt = min(dt, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
        mb = txt_path.stat().st_size / 1e6
        print(f"convert: {s.rows:,} lines in {dt:.3f} s = {s.rows / dt:,.0f} lines/s "
              f"({mb / dt:.1f} MB/s; CPU {cpu:.3f} s), output {out.stat().st_size / 1e6:.1f} MB")
        if args.all_formats:
            for fmt, path in other_formats(txt_path).items():
                t0, c0 = time.perf_counter(), time.process_time()
                s = convert_files([path], out, fmt=fmt)
                dt, cpu = time.perf_counter() - t0, time.process_time() - c0
                print(f"  {fmt:<8} {s.rows:,} lines in {dt:.3f} s = {s.rows / dt:,.0f} lines/s "
                      f"(CPU {cpu:.3f} s = {s.rows / cpu:,.0f} lines/s)")


if __name__ == "__main__":
    main()
