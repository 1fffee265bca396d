"""Recording throughput: positions per second the trainer records (single thread).

For each evaluation (default: `clockwork` and `clockwork-10d79e6`), every position of the sample
is recorded with its loss chain by `tuner.train.record.record_positions`, what eager epochs do
every epoch and a replay run once, in micro-batches of `--micro` positions on one tape (reset
between micro-batches; freezing is not timed). Prints the median of several runs in positions
per second, from wall time and from process CPU time (the stable figure on a shared machine).
Runs against the `tuner` of the tree the script is in (as eval_bench does), so two versions (two
checkouts) can be compared one after the other in the same session.

    .venv/bin/python benchmarks/record_bench.py [--data PATH] [--runs 7] [--limit N] [-e NAME ...]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from eval_bench import DEFAULT_DATA, load_positions, timeit  # noqa: E402

from tuner.evals import get_evaluation  # noqa: E402
from tuner.tape.ops import F_SIGMOID_SQ_ERR  # noqa: E402
from tuner.train.record import Labelled, new_training_tape, record_positions  # noqa: E402

EVALUATIONS = ("clockwork", "clockwork-10d79e6")
K = 1 / 400


def record_all(ev, positions, results, micro, state):
    """Record every position, micro-batch by micro-batch, on the tape in `state`."""
    n = len(positions)
    slots = np.zeros((2, micro), np.int64)
    rows = np.arange(n, dtype=np.int64)
    batch = Labelled(positions, results, K, F_SIGMOID_SQ_ERR)
    for lo in range(0, n, micro):
        hi = min(n, lo + micro)
        state[0], state[1] = record_positions(ev, state[0], state[1], batch, rows[lo:hi],
                                              slots[:, : hi - lo])


def setup(doc: str, runs: int, micro: int = 1024, options=None):
    """The command line of a recording benchmark (described by `doc`, `runs` runs and
    micro-batches of `micro` positions by default; `options(parser)` adds the benchmark's own)
    parsed, and the sample's positions loaded: ``(args, positions)``, what was loaded printed."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--runs", type=int, default=runs)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--micro", type=int, default=micro)
    ap.add_argument("-e", "--evaluation", action="append", help="evaluation(s) to record")
    if options is not None:
        options(ap)
    args = ap.parse_args()

    import tuner
    t = time.perf_counter()
    positions, bad = load_positions(args.data, args.limit)
    print(f"tuner from {os.path.dirname(tuner.__file__)}")
    print(f"{args.data}: {len(positions)} positions ({bad} rejected), parsed in "
          f"{time.perf_counter() - t:.2f} s")
    print(f"median of {args.runs} runs, single thread, micro-batches of {args.micro}; load "
          f"average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return args, positions


def main():
    args, positions = setup(__doc__, 7)
    n = positions.shape[0]
    results = np.full(n, 0.5)
    for name in args.evaluation or EVALUATIONS:
        ev = get_evaluation(name)
        state = [new_training_tape(ev.registry, args.micro), ev.new_scratch()]
        wall, cpu = timeit(lambda: record_all(ev, positions, results, args.micro, state),
                           args.runs)
        print(f"  {name:<20} {n / wall / 1e6:7.3f} M pos/s wall ({wall * 1e3:7.1f} ms)   "
              f"{n / cpu / 1e6:7.3f} M pos/s CPU ({cpu * 1e3:7.1f} ms)")


if __name__ == "__main__":
    main()
