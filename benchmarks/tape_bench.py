"""Tape benchmark: ns per record for recording, freezing and playing (forward; forward and
backward) a synthetic tape of >= 10^7 records, and ns per linear combination of 60 pairs.

Run: `make bench` or `.venv/bin/python benchmarks/tape_bench.py [--records N] [--repeat R]`.
Prints medians over the repeats.
"""
import argparse
import statistics
import time

import numpy as np
from numba import njit

from tuner.tape import freeze_tape, new_tape, play, reset
from tuner.tape.ops import (operand_mark, push_operand, record_add,
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


def sweeps(t, out):
    """Seconds to freeze the tape, play it forward, and forward + backward from `out`."""
    one, scratch = np.zeros(1, np.int64), np.zeros((1, 1))
    dz, store = timed(freeze_tape, t, out)
    df = timed(play, store, t.arena, one, 0.0, False, scratch)[0]
    dfb = timed(play, store, t.arena, one, 1.0, True, scratch)[0]
    return dz, df, dfb


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--records", type=int, default=10_000_000)
    ap.add_argument("--lincombs", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()

    n = a.records
    t = new_tape(0, 64, records=n, operands=16)
    t.arena.pair_val[:64] = np.random.default_rng(0).normal(size=(64, 2))
    record_mixed(t, 64), reset(t)           # compile
    sweeps(t, record_mixed(t, 64)), reset(t)
    rec, frz, fwd, both = [], [], [], []
    for _ in range(a.repeat):
        reset(t)
        dt, out = timed(record_mixed, t, n)
        rec.append(dt)
        dz, df, dfb = sweeps(t, out)
        frz.append(dz), fwd.append(df), both.append(dfb)
    nrec = int(t.rec.counts[2])
    print(f"synthetic tape: {nrec:,} records (mixed value and pair ops), medians of {a.repeat}")
    for what, times in (("record", rec), ("freeze", frz), ("forward", fwd),
                        ("fwd+bwd", both)):
        print(f"  {what:8s} {statistics.median(times) / nrec * 1e9:6.2f} ns/record")

    # Linear combinations as an evaluation records them: a micro-batch of `batch` positions per
    # tape (cache-resident, as in training), reset and recorded again until `lincombs` are done.
    width, batch, rounds = 60, 1024, max(1, a.lincombs // 1024)
    rng = np.random.default_rng(1)
    n_params = 541
    idx = rng.integers(0, n_params, size=1 << 16).astype(np.int32)
    coef = rng.integers(-3, 4, size=1 << 16).astype(np.float64)
    t = new_tape(0, n_params, records=batch + 1, operands=batch * width)
    t.arena.pair_val[:n_params] = rng.normal(size=(n_params, 2))
    record_lincombs(t, 10, width, idx, coef), reset(t)
    rec, fwd, both = [], [], []
    for _ in range(a.repeat):
        tr = tf = tb = 0.0
        for _ in range(rounds):
            reset(t)
            dt, out = timed(record_lincombs, t, batch, width, idx, coef)
            tr += dt
            _, df, dfb = sweeps(t, record_phase(t, out, 0.5))
            tf += df
            tb += dfb
        rec.append(tr), fwd.append(tf), both.append(tb)
    m = batch * rounds
    print(f"linear combination of {width} pairs: {m:,} records, {batch} per tape")
    for what, times in (("record", rec), ("forward", fwd), ("fwd+bwd", both)):
        print(f"  {what:8s} {statistics.median(times) / m * 1e9:7.1f} ns/lincomb")


if __name__ == "__main__":
    main()
