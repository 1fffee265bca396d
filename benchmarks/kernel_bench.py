"""The replay kernel in cache: ns per term of the players on a store small enough to stay in
cache (--positions, default 2048, of the shipped sample), played over and over.

A term is an operand or a record (`benchmarks.roofline.terms_per_position`). For each evaluation
it prints the specialised player (`tuner.tape.specialise`, what the epochs use) and the
interpreter (`tuner.tape.player.play`), each with
gradients (forward and backward, what an epoch runs) and forward only (what a validation pass
runs), with the positions in the store's order or (--orders) at random: a fresh permutation every
replay is what an epoch over a randomly ordered store meets, whose branches the predictor cannot
learn. Times are this thread's CPU time, the median of --repeat, so that other processes on a
shared machine count less; the players take turns, one repeat each, so that a change of load
falls on all of them.

    .venv/bin/python benchmarks/kernel_bench.py [--positions N] [--repeat R]
                                                [--evaluations clockwork ...]
                                                [--orders store replayed fresh]
"""
import argparse
import statistics
import time

import numpy as np

from tuner.evals import get_evaluation
from tuner.tape.arena import new_arena, set_params
from tuner.tape.player import arena_size, play
from tuner.tape import specialise as specialising
from tuner.train.bench import tiled_data
from tuner.train.record import record_store

from roofline import EVALUATIONS, terms_per_position

#: Position replays per measurement (about a second of work).
REPLAYS = 3_000_000
PLAYERS = ("specialised", "interpreter")
#: With gradients (what an epoch runs) or forward only (a validation pass).
MODES = {"forward+backward": True, "forward": False}
#: The order the positions are played in: the store's; one random permutation, replayed every
#: time (a sequence the branch predictor learns); a fresh permutation every replay (as an epoch
#: over a randomly ordered store meets its positions).
ORDERS = ("store", "replayed", "fresh")


def row_sets(n: int, reps: int, order: str) -> list[np.ndarray]:
    """The rows of each of `reps` replays of `n` positions in `order` (`ORDERS`)."""
    rng = np.random.default_rng(1)
    if order == "fresh":
        return [rng.permutation(n) for _ in range(reps)]
    return [np.arange(n) if order == "store" else rng.permutation(n)] * reps


def timed(player, store, with_grad: bool, order: str = "store"):
    """A function that returns the CPU seconds per position of one measurement of `player`."""
    n = len(store.tmpl)
    arena = new_arena(*arena_size(store))
    reg_pairs, reg_values = int(store.params[1]), int(store.params[0])
    set_params(arena, np.full((reg_pairs, 2), 1.0), np.full(reg_values, 1.0))
    rows = row_sets(n, max(1, REPLAYS // n), order)
    outputs = np.zeros((n, 2))
    player(store, arena, rows[0], 1.0 / n, with_grad, outputs)  # compile

    def measure():
        t0 = time.thread_time()
        for r in rows:
            player(store, arena, r, 1.0 / n, with_grad, outputs)
        return (time.thread_time() - t0) / (len(rows) * n)

    return measure


def players(store, labels):
    """The players of `labels` for `store`."""
    made = {}
    for label in labels:
        if label == "interpreter":
            made[label] = play
        else:
            made[label] = specialising.specialise(store).play
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--positions", type=int, default=2048)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--evaluations", nargs="+", default=list(EVALUATIONS))
    ap.add_argument("--players", nargs="+", default=list(PLAYERS), choices=PLAYERS)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--orders", nargs="+", default=["store"], choices=ORDERS,
                    help="the order positions are played in (store; replayed: one random "
                         "permutation every time; fresh: a new one every replay)")
    a = ap.parse_args()
    with open("/proc/loadavg") as f:
        print(f"load average: {' '.join(f.read().split()[:3])}")
    data = tiled_data(a.positions)
    for name in a.evaluations:
        ev = get_evaluation(name)
        store = record_store(ev, data.positions, data.results, 1 / 400, 1)
        terms = terms_per_position(store)
        print(f"{name}: {a.positions} positions, {terms:.1f} terms/position, "
              f"{len(store.t_temps)} template(s)")
        runs = {(label, mode, order): timed(player, store, MODES[mode], order)
                for label, player in players(store, a.players).items() for mode in a.modes
                for order in a.orders}
        times = {key: [] for key in runs}
        for _ in range(a.repeat):
            for key, measure in runs.items():
                times[key].append(measure())
        for (label, mode, order), ts in times.items():
            ns = statistics.median(ts) * 1e9
            print(f"  {label:12s} {mode:17s} {order:8s} {ns:7.1f} ns/position "
                  f"{ns / terms:5.2f} ns/term")

if __name__ == "__main__":
    main()
