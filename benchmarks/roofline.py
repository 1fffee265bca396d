"""Roofline: how fast an epoch could be on this machine, and how close the trainer gets.

Measures the machine (streaming read bandwidth and random cache-line reads per second, on 1 and
2 threads), then for each evaluation: the replay store of the shipped sample tiled to
--positions (bytes per position and per epoch), the player's in-cache cost (a store of
--cache-positions positions played over and over: ns per position and per term, a term being
an operand or a record; the specialised player the epochs use, and the interpreter), and the
epoch actually measured (batches of 262,144; each batch's positions in store order, and, for
comparison, in shuffled order). The limit of an epoch is the
larger of reading the store once at the streaming bandwidth and running the kernel in cache on
every position; the fraction reached is that limit over the measured epoch.

    .venv/bin/python benchmarks/roofline.py [--positions N] [--evaluations clockwork ...]
                                            [--threads 1 2] [--repeat R]
"""
import argparse
import math
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from tuner.evals import get_evaluation
from tuner.tape.player import store_len, store_nbytes
from tuner.train.bench import CPP_BENCH_POSITIONS, tiled_data
from tuner.train.record import record_store
from tuner.train.workers import ReplaySource, Workers

#: Bytes of the arrays the machine measurements sweep (well beyond the last-level cache).
PROBE_BYTES = 1 << 30
#: Random reads per thread of the random-access measurement.
RANDOM_READS = 1 << 23
CACHE_LINE = 64
BATCH = 262_144
MICRO = 1024
EVALUATIONS = ("clockwork", "clockwork-10d79e6")


@njit(cache=True, nogil=True)
def _stream(a):
    """Sum of `a`: a streaming read the compiler vectorises."""
    s = np.uint64(0)
    for x in a:
        s += x
    return s


@njit(cache=True, nogil=True)
def _gather(a, idx):
    """Sum of ``a[idx[i]]``: independent random reads (one cache line each)."""
    s = np.uint64(0)
    for i in idx:
        s += a[i]
    return s


def _parallel(fn, args_per_thread):
    """Seconds for running fn(*args) on every thread at once (compiled, GIL released)."""
    with ThreadPoolExecutor(len(args_per_thread)) as pool:
        t0 = time.perf_counter()
        for f in [pool.submit(fn, *a) for a in args_per_thread]:
            f.result()
        return time.perf_counter() - t0


def machine(threads, repeat):
    """{threads: (bytes/s streamed, random cache-line reads/s)}: the best of `repeat` (what the
    machine can do; on a shared machine the other runs measure the neighbours)."""
    a = np.arange(PROBE_BYTES // 8, dtype=np.uint64)
    rng = np.random.default_rng(0)
    idx = [rng.integers(0, len(a), RANDOM_READS) for _ in range(max(threads))]
    _stream(a[:8]), _gather(a, idx[0][:8])
    out = {}
    for t in threads:
        parts = np.array_split(a, t)
        bw = max(a.nbytes / _parallel(_stream, [(p,) for p in parts]) for _ in range(repeat))
        rnd = max(t * RANDOM_READS / _parallel(_gather, [(a, idx[w]) for w in range(t)])
                  for _ in range(repeat))
        out[t] = (bw, rnd)
    return out


def epoch_seconds(workers, data, rng, theta):
    """(wall, CPU) seconds of one epoch's loss and gradient over shuffled batches (no optimiser
    step); the CPU time is the process's, every thread's."""
    order = rng.permutation(len(data.results))
    t0, c0 = time.perf_counter(), time.process_time()
    for b in range(0, len(order), BATCH):
        workers.loss_grad(theta, order[b: b + BATCH])
    return time.perf_counter() - t0, time.process_time() - c0


def terms_per_position(store) -> float:
    """Terms per position of a replay store: its operands and records (the unit of ns per
    term)."""
    return (store.opnd_off[-1] + np.diff(store.t_first)[store.tmpl].sum()) / store_len(store)


def in_cache_ns(ev, data, n_cache, repeat, specialised=True):
    """ns per position (CPU time, 1 thread) of the player (the specialised one the epochs use,
    or the interpreter) on a store small enough to stay in cache, played in store order."""
    small = record_store(ev, data.positions[:n_cache], data.results[:n_cache], 1 / 400, 1)
    reg = ev.registry
    w = Workers(ReplaySource(small, specialised=specialised), 1, MICRO, n_cache)
    theta = np.full(2 * reg.n_params + reg.n_values, 1.0)
    rows = np.arange(n_cache)
    w.loss_grad(theta, rows)
    reps = max(1, 2_000_000 // n_cache)
    times = []
    for _ in range(repeat):  # this thread's CPU time: the other processes' share is not ours
        t0 = time.thread_time()
        for _ in range(reps):
            w.loss_grad(theta, rows)
        times.append((time.thread_time() - t0) / (reps * n_cache))
    return statistics.median(times) * 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--positions", type=int, default=CPP_BENCH_POSITIONS)
    ap.add_argument("--cache-positions", type=int, default=2048,
                    help="positions of the in-cache store (default 2048)")
    ap.add_argument("--evaluations", nargs="+", default=list(EVALUATIONS))
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--shuffled", action=argparse.BooleanOptionalAction, default=True,
                    help="also time epochs in shuffled order (default: yes)")
    a = ap.parse_args()
    with open("/proc/loadavg") as f:
        print(f"load average: {' '.join(f.read().split()[:3])}")
    m = machine(a.threads, a.repeat)
    for t, (bw, rnd) in m.items():
        print(f"machine, {t} thread(s): streaming read {bw / 1e9:.1f} GB/s; random cache-line "
              f"reads {rnd / 1e6:.0f} M/s ({1e9 / rnd:.1f} ns each)")
    data = tiled_data(a.positions)
    n = a.positions
    for name in a.evaluations:
        ev = get_evaluation(name)
        reg = ev.registry
        t0 = time.perf_counter()
        store = record_store(ev, data.positions, data.results, 1 / 400, max(a.threads))
        rec_s = time.perf_counter() - t0
        nbytes = store_nbytes(store)
        terms = terms_per_position(store)
        ns_pos = in_cache_ns(ev, data, a.cache_positions, a.repeat)
        ns_interp = in_cache_ns(ev, data, a.cache_positions, a.repeat, specialised=False)
        print(f"\n{name}: {n:,} positions, store {nbytes / n:.0f} bytes/position, "
              f"{nbytes / 1e9:.2f} GB per epoch (recorded in {rec_s:.1f} s on {max(a.threads)} "
              f"thread(s)); {terms:.1f} terms/position")
        print(f"  kernel in cache: {ns_pos:.0f} ns/position, {ns_pos / terms:.2f} ns/term "
              f"(1 thread, the specialised player the epochs use; the interpreter: "
              f"{ns_interp:.0f} ns/position)")
        theta = np.full(2 * reg.n_params + reg.n_values, 1.0)
        rng = np.random.default_rng(0)
        for t in a.threads:
            bw, rnd = m[t]
            stream_s = nbytes / bw
            kernel_s = n * ns_pos * 1e-9 / t
            limit = max(stream_s, kernel_s)
            lines = math.ceil(nbytes / n / CACHE_LINE)
            random_s = n * lines / rnd
            variants = [("store order", True)] + [("shuffled", False)] * a.shuffled
            got = {}
            for label, sort in variants:
                w = Workers(ReplaySource(store), t, MICRO, BATCH, in_store_order=sort)
                epoch_seconds(w, data, rng, theta)  # warm up
                runs = [epoch_seconds(w, data, rng, theta) for _ in range(a.repeat)]
                got[label] = tuple(statistics.median(x) for x in zip(*runs))
                w.close()
            wall, cpu = got["store order"]
            print(f"  {t} thread(s): limit {limit:.3f} s/epoch (stream {stream_s:.3f} s, kernel "
                  f"{kernel_s:.3f} s; visiting in shuffled order costs at least {random_s:.3f} s "
                  f"for {lines} random lines per position)")
            print("    measured: " + ", ".join(f"{k} {v[0]:.3f} s/epoch (CPU {v[1]:.3f} s)"
                                             for k, v in got.items())
                  + f"; fraction of the limit reached: {limit / wall:.2f} (CPU time per "
                    f"thread: {kernel_s / (cpu / t):.2f} of the kernel's)")
        del store


if __name__ == "__main__":
    main()
