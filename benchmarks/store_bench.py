"""Store cache: what loading a kept replay store costs against recording it again.

For each evaluation, records the replay store of the shipped sample tiled to --positions
(default 6.97 M, the C++ tuner's benchmark size) on --threads threads, saves it as the
``[training] store_cache`` does, then times (median of --repeat) loading it back: the whole
`load_store` (reading, member CRCs, content digest, validation) and `validate_store` alone, the
check every loaded store passes before a player sees it. Prints each in seconds and as a fraction
of the recording.

    .venv/bin/python benchmarks/store_bench.py [--positions N] [--threads T] [--repeat R]
                                               [--evaluations clockwork clockwork-10d79e6]
"""
import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tuner.evals import get_evaluation
from tuner.tape.player import load_store, save_store, store_nbytes, validate_store
from tuner.train.bench import CPP_BENCH_POSITIONS, tiled_data
from tuner.train.record import LOSS, record_store

EVALUATIONS = ("clockwork", "clockwork-10d79e6")
K = 1 / 400


def timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--positions", type=int, default=CPP_BENCH_POSITIONS)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--evaluations", nargs="+", default=list(EVALUATIONS))
    a = ap.parse_args()
    with open("/proc/loadavg") as f:
        print(f"load average: {' '.join(f.read().split()[:3])}")
    data = tiled_data(a.positions)
    n = a.positions
    for name in a.evaluations:
        ev = get_evaluation(name)
        reg = ev.registry
        counts = (reg.n_values, reg.n_params, n, LOSS + 1)
        record_store(ev, data.positions[:1024], data.results[:1024], K, a.threads)  # compiled
        t0 = time.perf_counter()
        store = record_store(ev, data.positions, data.results, K, a.threads)
        rec_s = time.perf_counter() - t0
        size = store_nbytes(store) / n
        validate_store(store, *counts)  # compiled
        check_s = statistics.median(timed(validate_store, store, *counts)
                                    for _ in range(a.repeat))
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "store.npz"
            save_store(store, path, "bench")
            del store
            load_s = statistics.median(timed(load_store, path, "bench", *counts)
                                       for _ in range(a.repeat))
        print(f"{name}: {n:,} positions; recorded in {rec_s:.2f} s ({a.threads} thread(s)), "
              f"{size:.0f} bytes/position")
        print(f"  validate_store: {check_s:.3f} s = {check_s / rec_s:.1%} of recording "
              f"({check_s / n * 1e9:.0f} ns/position)")
        print(f"  load_store (read, CRCs, digest, validation): {load_s:.2f} s = "
              f"{load_s / rec_s:.1%} of recording")


if __name__ == "__main__":
    main()
