"""Scaling table: replay training from Parquet at 1x, 4x, 16x and 32x the shipped sample.

For each evaluation and size, one fresh process (so that its peak memory is its own) streams a
Parquet file of the sample tiled to that size into the replay store (2 threads) as `tuner train`
does (tuner/train/stream.py: reading and recording are one pass), then times epochs on 1 and 2
threads (batch 262,144, AdamW as configs/clockwork-seed.toml). Writes a Markdown table (--out,
default benchmarks/scaling.md) and prints it.

    .venv/bin/python benchmarks/scaling.py [--multiples 1 4 16 32] [--epochs E]
                                           [--evaluations clockwork clockwork-10d79e6]
"""
import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tuner.tape.player import store_len, store_nbytes
from tuner.train.bench import SAMPLE, sample_table, write_tiled_parquet
from tuner.train.config import validate
from tuner.train.loop import Run
from tuner.train.workers import ReplaySource, Workers

BATCH = 262_144
MICRO = 1024
RECORD_THREADS = 2
K = 1 / 400
THREADS = (1, 2)
COLUMNS = ("evaluation", "positions", "threads", "s/epoch", "positions/s", "store B/pos",
           "peak MB", "peak B/pos", "Parquet to first epoch s")


def child(evaluation: str, path: str, epochs: int) -> None:
    """One size of one evaluation: print its rows as JSON lines."""
    cfg = validate({"data": {"train": [path], "validation_fraction": 0.0},
                    "loss": {"k": K},
                    "evaluation": {"name": evaluation, "init": "zero"},
                    "optimizer": {"lr": 10.0},
                    "training": {"epochs": epochs, "batch_size": BATCH,
                                 "micro_batch_size": MICRO, "threads": RECORD_THREADS}}, "bench")
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(cfg, Path(tmp), log=lambda line: None)
        prep = run.preparation()
        prep.warm(None)  # as `tuner train`: before the load (K is known: nothing to fit)
        t0 = time.perf_counter()
        data, store = prep.stream()
        t2 = time.perf_counter()
        n = store_len(store)
        for threads in THREADS:
            workers = Workers(ReplaySource(store), threads, MICRO, min(BATCH, n))
            workers.loss_grad(run.theta, data.train[:MICRO])  # compiled (or loaded) untimed
            secs = [run.run_epoch(data, workers)["seconds"] for _ in range(epochs)]
            workers.close()
            med = statistics.median(secs)
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            print(json.dumps({
                "evaluation": evaluation, "positions": n, "threads": threads,
                "s/epoch": round(med, 3), "positions/s": round(n / med),
                "store B/pos": round(store_nbytes(store) / n),
                "peak MB": round(peak / 2**20), "peak B/pos": round(peak / n),
                "Parquet to first epoch s": round(t2 - t0, 2)}), flush=True)


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                if line.startswith("model name")), platform.processor())
    mem = next(int(line.split()[1]) for line in open("/proc/meminfo")
               if line.startswith("MemTotal")) / 2**20
    return f"{os.cpu_count()} x {cpu}, {mem:.0f} GB, Python {platform.python_version()}"


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--multiples", type=int, nargs="+", default=[1, 4, 16, 32])
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--evaluations", nargs="+", default=["clockwork", "clockwork-10d79e6"])
    ap.add_argument("--out", default=str(Path(__file__).with_name("scaling.md")))
    ap.add_argument("--child", nargs=3, metavar=("EVALUATION", "PARQUET", "EPOCHS"),
                    help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], a.child[1], int(a.child[2]))
        return
    sample = len(sample_table())
    rows, loads = [], [load()]
    with tempfile.TemporaryDirectory() as tmp:
        for mult in a.multiples:
            path = Path(tmp) / f"sample-x{mult}.parquet"
            write_tiled_parquet(path, mult * sample)
            for ev in a.evaluations:
                out = subprocess.run([sys.executable, __file__, "--child", ev, str(path),
                                      str(a.epochs)], check=True, capture_output=True, text=True)
                for line in out.stdout.splitlines():
                    row = json.loads(line)
                    rows.append(row)
                    print(" ".join(f"{k}={v}" for k, v in row.items()), flush=True)
                loads.append(load())
            path.unlink()
    table = [f"Replay training from Parquet, the shipped sample ({' + '.join(SAMPLE)}, "
             f"{sample:,} positions) tiled; batch {BATCH:,}, median of {a.epochs} epochs; "
             f"store recorded on {RECORD_THREADS} threads; peak memory of the whole process "
             f"(loading, recording, both thread counts).",
             "", f"Machine: {machine()}; load average (1, 5, 15 min) before and after each size: "
             + "; ".join(loads) + ".", "",
             "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for r in rows:
        table.append("| " + " | ".join(f"{r[c]:,}" if isinstance(r[c], int) else str(r[c])
                                       for c in COLUMNS) + " |")
    text = "\n".join(table) + "\n"
    Path(a.out).write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
