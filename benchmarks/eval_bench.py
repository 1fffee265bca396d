"""Throughput of the Clockwork evaluation on the tape (single thread).

Loads the self-play sample (FENs parsed in bulk from the Parquet column's Arrow buffers with
tuner.chess.position.parse_fens), then times, per position:

* features:           `features(pos, acc)` into the linear accumulator, then clear (no tape);
* record:             `record_eval` (one linear-combination record + one phase record), tape reset
                      every CHUNK positions;
* record + backward:  reset, `record_eval`, `backward` from the eval value (parameter gradients
                      accumulate), one position at a time;
* record batch + backward: CHUNK positions recorded, summed with one n-ary sum record, one backward.

Prints the median of several runs in positions per second, from wall time and from process CPU
time (the CPU figure is the stable one on a shared machine).

    .venv/bin/python benchmarks/eval_bench.py [--data PATH] [--runs 7] [--limit N]
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np
from numba import njit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from tuner.chess.fen import parse_fens  # noqa: E402
from tuner.evals.clockwork import N_PARAMS, features, record_eval, registry  # noqa: E402
from tuner.tape import (backward, lin_clear, new_accumulator, new_tape, record_sum,  # noqa: E402
                        reset, zero_grad)
from tuner.tape.ops import operand_mark, push_operand  # noqa: E402

DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tuner", "samples",
                            "selfplay-std.parquet")
CHUNK = 4096


def features_kernel(features, clears: bool):
    """An njit loop of an evaluation's `features` over the positions, the accumulators cleared
    after each one where `clears` (a 10d79e6 `features` clears its own)."""
    if clears:
        @njit(nogil=True)
        def run(positions, acc):
            s = 0
            for i in range(positions.shape[0]):
                s += features(positions[i], acc)
                lin_clear(acc)
            return s
    else:
        @njit(nogil=True)
        def run(positions, acc):
            s = 0
            for i in range(positions.shape[0]):
                s += features(positions[i], acc)
            return s
    return run


run_features = features_kernel(features, clears=True)


@njit(cache=True, nogil=True)
def run_record(positions, tape, acc, chunk):
    s = 0.0
    for i in range(positions.shape[0]):
        if i % chunk == 0:
            reset(tape)
        v = record_eval(tape, acc, positions[i])
        s += tape.arena.val[v]
    return s


@njit(cache=True, nogil=True)
def run_record_backward(positions, tape, acc):
    s = 0.0
    for i in range(positions.shape[0]):
        reset(tape)
        v = record_eval(tape, acc, positions[i])
        backward(tape, v)
        s += tape.arena.val[v]
    return s


@njit(cache=True, nogil=True)
def run_batch_backward(positions, tape, acc, chunk, evals):
    s = 0.0
    n = positions.shape[0]
    for start in range(0, n, chunk):
        reset(tape)
        stop = min(n, start + chunk)
        for i in range(start, stop):
            evals[i - start] = record_eval(tape, acc, positions[i])
        first = operand_mark(tape)
        for i in range(stop - start):
            push_operand(tape, evals[i], 1.0)
        total = record_sum(tape, first)
        backward(tape, total)
        s += tape.arena.val[total]
    return s


def load_positions(path, limit=None):
    import pyarrow.parquet as pq

    col = pq.read_table(path, columns=["fen"]).column("fen").combine_chunks()
    if limit:
        col = col.slice(0, limit)
    if col.type != __import__("pyarrow").large_string():
        col = col.cast(__import__("pyarrow").large_string())
    bufs = col.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int64, count=col.offset + len(col) + 1)[col.offset:]
    data = np.frombuffer(bufs[2], dtype=np.uint8)
    positions, status = parse_fens(offsets, data)
    return positions[status == 0], int((status != 0).sum())


def timeit(fn, runs):
    """Median wall time and median process CPU time (robust when other jobs share the machine)."""
    fn()  # warm-up (compile or load from cache)
    wall, cpu = [], []
    for _ in range(runs):
        t, c = time.perf_counter(), time.process_time()
        fn()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - t)
    return statistics.median(wall), statistics.median(cpu)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--limit", type=int, default=None)
    args = ap.parse_args()

    t = time.perf_counter()
    positions, bad = load_positions(args.data, args.limit)
    n = positions.shape[0]
    print(f"{args.data}: {n} positions ({bad} rejected), parsed in {time.perf_counter() - t:.2f} s")

    reg = registry()
    acc = new_accumulator(N_PARAMS)
    tape = new_tape(0, N_PARAMS, records=2 * CHUNK + 8, operands=160 * CHUNK)
    tape.arena.pair_val[:N_PARAMS] = reg.defaults
    tape1 = new_tape(0, N_PARAMS, records=8, operands=1024)
    tape1.pair_val[:N_PARAMS] = reg.defaults
    evals = np.empty(CHUNK, np.int64)

    cases = [
        ("features only (accumulator)", lambda: run_features(positions, acc)),
        ("record_eval", lambda: run_record(positions, tape, acc, CHUNK)),
        ("record_eval + backward (per position)", lambda: (zero_grad(tape1),
                                                            run_record_backward(positions, tape1, acc))),
        (f"record_eval x{CHUNK} + sum + backward", lambda: (zero_grad(tape),
                                                           run_batch_backward(positions, tape, acc,
                                                                              CHUNK, evals))),
    ]
    print(f"median of {args.runs} runs, single thread; rates from wall time and from CPU time")
    for name, fn in cases:
        wall, cpu = timeit(fn, args.runs)
        print(f"  {name:<40} {n / wall / 1e6:7.3f} M pos/s wall ({wall * 1e3:7.1f} ms)   "
              f"{n / cpu / 1e6:7.3f} M pos/s CPU ({cpu * 1e3:7.1f} ms)")


if __name__ == "__main__":
    main()
