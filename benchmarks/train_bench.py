"""Training speed at the scale of Clockwork's data: the shipped sample (390,968 positions) tiled
to --positions (default 6.97 M, the size of the C++ tuner's benchmark), batches of 262,144,
zero initialisation, AdamW lr 10 (the shipped clockwork-seed configuration's settings).

Prints the one-off recording time and memory of the replay store, then s/epoch (median),
positions/s and peak memory for each mode and thread count asked for.

    .venv/bin/python benchmarks/train_bench.py [--positions N] [--epochs E] [--threads 1 2]
                                               [--modes replay eager] [--evaluation NAME]
"""
import argparse
import resource
import statistics
import tempfile
import time
from pathlib import Path

from tuner.train.bench import CPP_BENCH_POSITIONS, tiled_data
from tuner.train.config import validate
from tuner.train.loop import Run


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--positions", type=int, default=CPP_BENCH_POSITIONS)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--modes", nargs="+", default=["replay"], choices=["replay", "eager"])
    ap.add_argument("--evaluation", default="clockwork", help="evaluation to train")
    a = ap.parse_args()
    data = tiled_data(a.positions)
    print(f"{a.evaluation}: {a.positions:,} positions (the shipped sample tiled), batch 262,144")
    sigs = set()
    for mode in a.modes:
        for threads in a.threads:
            cfg = validate({"data": {"train": ["unused"], "validation_fraction": 0.0},
                            "evaluation": {"name": a.evaluation, "init": "zero"},
                            "optimizer": {"lr": 10.0},
                            "training": {"epochs": a.epochs, "batch_size": 262_144,
                                         "micro_batch_size": 1024, "threads": threads,
                                         "mode": mode}}, "bench")
            lines = []
            with tempfile.TemporaryDirectory() as tmp:
                run = Run(cfg, Path(tmp), log=lines.append)
                t0 = time.perf_counter()
                hist = run.run(data)
                total = time.perf_counter() - t0
            med = statistics.median(hist["seconds"])
            sigs.add(run.theta.tobytes())
            store = [line for line in lines if line.startswith("replay")]
            print(f"{mode:6s} threads {threads}: {med:.3f} s/epoch (median of {a.epochs}), "
                  f"{a.positions / med:,.0f} positions/s; run {total:.1f} s; peak memory "
                  f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB"
                  + (f"\n    {store[0]}" if store else ""))
    print("identical parameters across modes and thread counts:", len(sigs) == 1)


if __name__ == "__main__":
    main()
