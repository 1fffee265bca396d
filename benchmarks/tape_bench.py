"""Tape benchmark: ns per record for recording and for backward on a synthetic tape of >= 10^7
records, and ns per linear combination of 60 pairs (recording, forward replay, backward).

Run: `make bench` or `.venv/bin/python benchmarks/tape_bench.py [--records N] [--repeat R]`.
Prints medians over the repeats.
"""
import argparse
import statistics
import time

import numpy as np
from numba import njit

from tuner.tape import new_tape, reset
from tuner.tape.ops import (backward, forward, operand_mark, push_operand, record_add,
                            record_lincomb_pair, record_mul, record_mul_scalar, record_pair_add,
                            record_pair_mul_scalar, record_phase, record_sigmoid, record_sub_scalar)


@njit(cache=True)
def record_mixed(t, n_records):
    """A chain of value and pair ops, 8 records per step, ending in one value."""
    acc = record_phase(t, 0, 0.5)
    for i in range(n_records // 8 - 1):
        p = record_pair_mul_scalar(t, i % 64, 0.5)
        p = record_pair_add(t, p, (i + 1) % 64)
        v = record_phase(t, p, 0.25)
        v = record_mul_scalar(t, v, 0.01)
        v = record_sigmoid(t, v)
        v = record_sub_scalar(t, v, 0.5)
        v = record_mul(t, v, v)
        acc = record_add(t, acc, v)
    return acc


@njit(cache=True)
def record_lincombs(t, n, width, idx, coef):
    """n linear combinations of `width` parameter pairs each, each blended to a value."""
    last = 0
    for i in range(n):
        first = operand_mark(t)
        base = (i * width) % (idx.shape[0] - width)
        for j in range(width):
            push_operand(t, idx[base + j], coef[base + j])
        last = record_lincomb_pair(t, first)
    return last


def timed(fn, *args):
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--lincombs", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()

    n = a.records
    t = new_tape(0, 64, records=n, operands=16)
    t.pair_val[:64] = np.random.default_rng(0).normal(size=(64, 2))
    record_mixed(t, 64), reset(t)           # compile
    out = record_mixed(t, 64)
    backward(t, out), forward(t), reset(t)
    rec, bwd, fwd = [], [], []
    for _ in range(a.repeat):
        reset(t)
        dt, out = timed(record_mixed, t, n)
        rec.append(dt)
        bwd.append(timed(backward, t, out)[0])
        fwd.append(timed(forward, t)[0])
    nrec = int(t.counts[2])
    print(f"synthetic tape: {nrec:,} records (mixed value and pair ops)")
    print(f"  record   {statistics.median(rec) / nrec * 1e9:6.2f} ns/record")
    print(f"  forward  {statistics.median(fwd) / nrec * 1e9:6.2f} ns/record (replay)")
    print(f"  backward {statistics.median(bwd) / nrec * 1e9:6.2f} ns/record")

    # Linear combinations as an evaluation records them: a micro-batch of `batch` positions per
    # tape (cache-resident, as in training), reset and recorded again until `lincombs` are done.
    width, batch, rounds = 60, 1024, max(1, a.lincombs // 1024)
    rng = np.random.default_rng(1)
    n_params = 541
    idx = rng.integers(0, n_params, size=1 << 16).astype(np.int32)
    coef = rng.integers(-3, 4, size=1 << 16).astype(np.float64)
    t = new_tape(0, n_params, records=batch + 1, operands=batch * width)
    t.pair_val[:n_params] = rng.normal(size=(n_params, 2))
    record_lincombs(t, 10, width, idx, coef), reset(t)
    rec, bwd, fwd = [], [], []
    for _ in range(a.repeat):
        tr = tf = tb = 0.0
        for _ in range(rounds):
            reset(t)
            dt, out = timed(record_lincombs, t, batch, width, idx, coef)
            tr += dt
            phase = record_phase(t, out, 0.5)
            tf += timed(forward, t)[0]
            tb += timed(backward, t, phase)[0]
        rec.append(tr), fwd.append(tf), bwd.append(tb)
    m = batch * rounds
    print(f"linear combination of {width} pairs: {m:,} records, {batch} per tape")
    print(f"  record   {statistics.median(rec) / m * 1e9:7.1f} ns/lincomb")
    print(f"  forward  {statistics.median(fwd) / m * 1e9:7.1f} ns/lincomb (replay)")
    print(f"  backward {statistics.median(bwd) / m * 1e9:7.1f} ns/lincomb")


if __name__ == "__main__":
    main()
