"""Recording the replay store: positions per second per core, split into its stages.

What a replay run does before its first epoch (`tuner.train.record.StoreRecorder`, the path of
`tuner.train.prepare`): every position of the sample recorded with its loss in micro-batches on
one tape, each micro-batch extracted (rebased, validated, templates shared) and added to the
store, which is finished once. Per evaluation (default: `clockwork` and `clockwork-10d79e6`) it
times, on one thread, cumulative stages over every position:

* attacks:      the attack set of every piece (the chess work alone, no evaluation logic);
* features:     the evaluation's `features` (chess work and evaluation logic, into the
                accumulators; no tape);
* record eval:  `record_batch` per micro-batch, the tape reset between them (features + the
                evaluation's records);
* record + loss: `record_positions` (+ the loss records and the recording's check);
* + extract:    + `extract` of each micro-batch (the store's chunks): a micro-batch recorded in
                full;
* followed:     + each micro-batch's chunk made by following the template of the first one
                instead of `extract` (`tuner.tape.follow`): what a run does for every
                micro-batch after a thread's first when the evaluation's positions all have
                one structure (less than the stage before: it replaces it);
* store:        the whole `record_store` on one thread (+ building and finishing the store);
* store in parts: the store as a run in the default shuffle (blocks) records it
                (`StoreRecorder` given the run's random order: the positions cut into 64
                parts, recorded part by part, gathered in that order at the end; the positions
                given in the reader's batches): its difference from the store's is what
                recording in parts adds. On the sample a part holds 4,286 positions, a
                6.97 M run's 108,906: what each part costs once weighs more here.

The differences are the stages' own costs: chess work, evaluation logic, tape recording, loss
and extraction. Prints the median of several runs from process CPU time (the stable figure on a
shared machine; one thread, so positions/s per core) and the digest of the store recorded, which
must not change when the recording gets faster. Runs against the `tuner` of the tree it is in.
Micro-batches of `RECORD_MICRO` positions by default, a run's (`--micro`; until 2026-12-07 the
default was 1,024: each micro-batch costs about 50 us of Python work, half as much a position
at 2,048).

Compiled code and arrays land at other addresses in each process, which moves a stage's time by
up to a tenth from one process to the next (measured 2026-12-07: the best of four runs of the
whole store 1,028 to 1,152 ns a position in six processes of the same tree): `--processes P`
runs the measurement in P fresh processes, one after another, and prints each stage's median
over them, with their range.

    .venv/bin/python benchmarks/store_record_bench.py [--data PATH] [--runs 5] [--limit N]
                                                      [--micro N] [-e NAME] [--processes P]
"""
import json
import os
import statistics
import subprocess
import sys

import numpy as np
from numba import njit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from eval_bench import features_kernel, timeit  # noqa: E402
from record_bench import EVALUATIONS, K, setup  # noqa: E402

from tuner.chess.attacks import piece_attacks  # noqa: E402
from tuner.chess.bitboard import lsb, popcount  # noqa: E402
from tuner.chess.position import W_BLACK, W_PAWN, W_WHITE  # noqa: E402
from tuner.data.loader import BATCH_ROWS  # noqa: E402
from tuner.evals import get_evaluation  # noqa: E402
from tuner.tape.follow import followed_chunk, template_of  # noqa: E402
from tuner.tape.ops import F_SIGMOID_SQ_ERR  # noqa: E402
from tuner.tape.player import extract, store_digest  # noqa: E402
from tuner.tape.recording import reset  # noqa: E402
from tuner.train.record import (RECORD_MICRO, Labelled, StoreRecorder,  # noqa: E402
                                new_training_tape, record_positions, record_store)
from tuner.train.stream import record_order  # noqa: E402

U1 = np.uint64(1)
PAWN, KNIGHT, BISHOP, ROOK, QUEEN, KING = range(6)


@njit(cache=True, nogil=True)
def attacks_only(positions):
    """Every piece's attack set (both sides): the bulk of an evaluation's chess work, without its
    logic."""
    s = np.int64(0)
    for i in range(positions.shape[0]):
        pos = positions[i]
        occ = pos[W_WHITE] | pos[W_BLACK]
        for c in range(2):
            mine = pos[W_WHITE + c]
            for t in range(6):
                bb = mine & pos[W_PAWN + t]
                while bb:
                    sq = lsb(bb)
                    bb &= bb - U1
                    s += popcount(piece_attacks(t, c, sq, occ))
    return s


def stages(ev, module, positions, micro):
    """The stage functions of `ev` (see the module docstring), each over every position."""
    n = len(positions)
    results = np.full(n, 0.5)
    rows = np.arange(n, dtype=np.int64)
    batch = Labelled(positions, results, K, F_SIGMOID_SQ_ERR)
    slots = np.zeros((2, micro), np.int64)
    state = [new_training_tape(ev.registry, micro), ev.new_scratch()]
    # (10d79e6's features clear its accumulators themselves)
    run_features = features_kernel(module.features, clears=not hasattr(module, "Scratch"))
    # grown once to the evaluation's records per position, as record_positions does
    state[0], state[1] = record_positions(ev, state[0], state[1], batch, rows[:micro],
                                          slots[:, : min(n, micro)])

    def record_eval():
        for lo in range(0, n, micro):
            hi = min(n, lo + micro)
            reset(state[0])
            ev.record_batch(state[0], state[1], positions, rows[lo:hi], slots[0, : hi - lo])

    def record(with_extract):
        def go():
            for lo in range(0, n, micro):
                hi = min(n, lo + micro)
                state[0], state[1] = record_positions(ev, state[0], state[1], batch,
                                                      rows[lo:hi], slots[:, : hi - lo])
                if with_extract:
                    extract(state[0].rec, slots[:, : hi - lo], base=lo)
        return go

    template = template_of(extract(state[0].rec, slots[:, : min(n, micro)]),
                           ev.registry.n_values, ev.registry.n_params)

    def followed():
        for lo in range(0, n, micro):
            hi = min(n, lo + micro)
            state[0], state[1] = record_positions(ev, state[0], state[1], batch, rows[lo:hi],
                                                  slots[:, : hi - lo])
            if followed_chunk(state[0].rec, template, slots[:, : hi - lo]) is None:
                raise SystemExit(f"{ev.name}: micro-batch {lo // micro} did not follow")

    return [("attacks", lambda: attacks_only(positions)),
            ("features", lambda: run_features(positions, state[1])),
            ("record eval", record_eval),
            ("record + loss", record(False)),
            ("+ extract", record(True))] + ([("followed", followed)] if template else []) + [
            ("store", lambda: record_store(ev, positions, results, K, 1, micro)),
            ("store in parts", lambda: in_run_order(ev, positions, results, micro))]


def in_run_order(ev, positions, results, micro):
    """The store as a run in the default shuffle (blocks) records it: the positions given in
    the reader's batches (`BATCH_ROWS`), the store in a random order (`record_order`), so cut
    into parts, each recorded apart, then gathered in that order (`StoreRecorder`)."""
    n = len(positions)
    recorder = StoreRecorder(ev, K, 1, micro, record_order(np.arange(n), np.zeros(0, np.int64), 0))
    for lo in range(0, n, BATCH_ROWS):
        recorder.add(positions[lo: lo + BATCH_ROWS], results[lo: lo + BATCH_ROWS])
    return recorder.finish()


def options(ap) -> None:
    ap.add_argument("--processes", type=int, default=1,
                    help="run the measurement in this many fresh processes, one after another, "
                         "and print each stage's median over them (with their range)")
    ap.add_argument("--json", action="store_true",
                    help="print the figures as one JSON line (what --processes reads)")


def measure(args, positions) -> dict:
    """``{evaluation: {"stages": [[stage, median CPU s], ...], "digest": store digest}}``."""
    import importlib

    from tuner.evals.clockwork import EVALUATIONS as MODULES
    out = {}
    for name in args.evaluation or EVALUATIONS:
        ev = get_evaluation(name)
        module = importlib.import_module(MODULES[name])
        figures = [[stage, timeit(fn, args.runs)[1]]
                   for stage, fn in stages(ev, module, positions, args.micro)]
        store = record_store(ev, positions, np.full(len(positions), 0.5), K, 1, args.micro)
        out[name] = {"stages": figures, "digest": store_digest(store)}
    return out


def in_processes(args) -> list[dict]:
    """`measure` in `args.processes` fresh processes, one after another: compiled code and
    arrays land at other addresses in each, which moves a stage's time by up to a tenth
    (2026-12-07), more than a change is often worth."""
    runs = []
    for p in range(args.processes):
        # (the last --processes given is the one that counts)
        done = subprocess.run([sys.executable, os.path.abspath(__file__), *sys.argv[1:],
                               "--processes", "1", "--json"],
                              capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"  process {p + 1} of {args.processes} done", flush=True)
    return runs


def main():
    args, positions = setup(__doc__, 5, RECORD_MICRO, options)  # (a run's micro-batches)
    if args.json:
        print(json.dumps(measure(args, positions)))
        return
    runs = in_processes(args) if args.processes > 1 else [measure(args, positions)]
    n = positions.shape[0]
    print("rates from CPU time (one thread: per core)"
          + (f"; the median over {len(runs)} processes (their range in brackets)"
             if len(runs) > 1 else ""))
    for name in runs[0]:
        print(f"{name}:")
        last = 0.0
        for j, (stage, _) in enumerate(runs[0][name]["stages"]):
            cpus = [run[name]["stages"][j][1] for run in runs]
            cpu = statistics.median(cpus)
            spread = (f" [{n / max(cpus) / 1e6:.3f}-{n / min(cpus) / 1e6:.3f}]"
                      if len(cpus) > 1 else "")
            print(f"  {stage:<14} {n / cpu / 1e6:7.3f} M pos/s ({cpu * 1e3:7.1f} ms, "
                  f"{(cpu - last) / n * 1e9:6.0f} ns/pos over the stage before){spread}")
            last = cpu
        digests = {run[name]["digest"] for run in runs}
        print(f"  store digest {' '.join(sorted(digests))}")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
