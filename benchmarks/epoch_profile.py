"""Where a replay epoch's time goes: its parts timed one by one, beside the kernel in cache.

Records the replay store of the shipped sample tiled to --positions (default 2 M) for one
evaluation, then times, on each thread count asked for (median of --repeat after a warm-up
call, wall and the process's CPU time): a whole epoch's `Workers.loss_grad` over every position
in store order (the full batch) and over the shuffled batches of --batch (--shuffle: every
position anew, the default here, or blocks of --block consecutive rows, as `epoch_batches` draws
them), and their parts: drawing the epoch's batches (`epoch_batches`), putting a batch in store
order (`store_order`'s bitmap sort), cutting it into chunks, computing the chunks (the player,
with the per-chunk zeroing and copying of the gradients), reducing the chunk gradients, and the
optimiser's step; plus the player in cache (the first --cache-positions positions played over
and over) for what the kernel alone costs per position.

    .venv/bin/python benchmarks/epoch_profile.py [--positions N] [--evaluation NAME]
        [--threads 1 2] [--repeat R] [--batch B] [--shuffle positions|blocks] [--block N]
        [--cache-positions C]
"""
import argparse

import numpy as np

from eval_bench import timeit
from scaling import K, MICRO, load

from tuner.evals import get_evaluation
from tuner.tape.player import store_len, store_nbytes
from tuner.train.bench import tiled_data
from tuner.train.config import DEFAULT_SHUFFLE_BLOCK, SHUFFLES
from tuner.train.kernels import AdamW, Batch, adamw_step, cut_chunks
from tuner.train.record import record_store
from tuner.train.stream import epoch_batches
from tuner.train.workers import ReplaySource, Workers, split_params

DEFAULT_POSITIONS = 2_000_000
DEFAULT_BATCH = 262_144


def shuffled_batches(n: int, training: dict) -> list[np.ndarray]:
    """An epoch's batches of rows 0..n-1 under the ``[training]`` settings `training` (the
    shuffle seed 0's first epoch)."""
    return [b.copy() for b in epoch_batches(np.arange(n), np.random.default_rng(0), training)]


def parts(workers: Workers, theta: np.ndarray, batches: list[np.ndarray], repeat: int,
          order) -> dict:
    """{part: (wall, CPU) seconds over every batch of `batches`} of `Workers.loss_grad`'s steps,
    each timed alone as `loss_grad` runs it, and of `order()`, which draws the epoch's
    batches."""
    n_theta = len(theta)
    sorted_batches = [workers._in_store_order(b, workers.source.n_rows).copy() for b in batches]
    cuts = []
    for rows in sorted_batches:
        starts = np.zeros(len(rows) + 1, np.int64)
        cuts.append(starts[: cut_chunks(rows, workers.micro, workers.segment, starts) + 1])
    views = split_params(theta, workers.source.n_pairs)
    m, v, mask = np.zeros(n_theta), np.zeros(n_theta), np.ones(n_theta, bool)
    hyper = AdamW(0.9, 0.999, 1e-8, 0.0)
    params = theta.copy()

    def sort():
        for b in batches:
            workers._in_store_order(b, workers.source.n_rows)

    def cut():
        for rows in sorted_batches:
            cut_chunks(rows, workers.micro, workers.segment, workers.starts)

    def compute():
        for rows, starts in zip(sorted_batches, cuts):
            n_chunks = len(starts) - 1
            workers.compute_chunks(views, Batch(rows, starts, 1.0 / len(rows), True,
                                                workers.chunk_grads, np.zeros(n_chunks)),
                                   np.arange(n_chunks))

    def reduce():
        for starts in cuts:
            workers.reduce(len(starts) - 1)

    def step():
        for s in range(len(batches)):
            adamw_step(params, workers.grad, m, v, mask, 1.0, hyper, s + 1)

    def whole():
        for b in batches:
            workers.loss_grad(theta, b)

    return {name: timeit(fn, repeat) for name, fn in
            [("epoch batches", order), ("loss_grad (all of it)", whole),
             ("store order (bitmap sort)", sort),
             ("cut_chunks", cut), ("compute chunks (player)", compute),
             ("reduce_chunks", reduce), ("optimiser step", step)]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--positions", type=int, default=DEFAULT_POSITIONS)
    ap.add_argument("--evaluation", default="clockwork")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    ap.add_argument("--shuffle", default=SHUFFLES[0], choices=SHUFFLES)
    ap.add_argument("--block", type=int, default=DEFAULT_SHUFFLE_BLOCK,
                    help="positions per block of --shuffle blocks")
    ap.add_argument("--cache-positions", type=int, default=2048)
    a = ap.parse_args()
    print(f"load average at the start: {load()}")
    ev = get_evaluation(a.evaluation)
    data = tiled_data(a.positions)
    store = record_store(ev, data.positions, data.results, K, max(a.threads))
    n = store_len(store)
    reg = ev.registry
    theta = np.full(2 * reg.n_params + reg.n_values, 1.0)
    print(f"{a.evaluation}: {n:,} positions, store {store_nbytes(store) / n:.0f} bytes/position, "
          f"{len(theta)} parameters, micro-batches of {MICRO}")
    training = {"batch_size": a.batch, "shuffle": a.shuffle, "shuffle_block": a.block}
    shuffled = shuffled_batches(n, training)
    how = "" if a.shuffle == SHUFFLES[0] else f", blocks of {a.block:,}"
    source = ReplaySource(store)
    cache_rows = np.arange(min(n, a.cache_positions))
    rows = np.arange(n)
    for t in a.threads:
        for label, batches, draw in [
                ("full batch", [np.arange(n)], lambda: None),
                (f"shuffled batches of {a.batch:,}{how}", shuffled,
                 lambda: sum(1 for _ in epoch_batches(rows, np.random.default_rng(0),
                                                       training)))]:
            w = Workers(source, t, MICRO, max(len(b) for b in batches))
            w.loss_grad(theta, batches[0][:MICRO])  # compiled (or loaded) untimed
            got = parts(w, theta, batches, a.repeat, draw)
            print(f"\n{t} thread(s), {label} ({len(batches)} step(s)); load {load()}")
            for name, (wall, cpu) in got.items():
                print(f"  {name:28s} wall {wall:.4f} s  CPU {cpu:.4f} s  "
                      f"({wall / n * 1e9:.1f} ns/position wall)")
            w.close()
        w = Workers(source, t, MICRO, len(cache_rows))
        reps = max(1, 2_000_000 // len(cache_rows))
        wall, cpu = timeit(lambda: [w.loss_grad(theta, cache_rows) for _ in range(reps)], a.repeat)
        print(f"  player in cache ({len(cache_rows):,} positions again and again): wall "
              f"{wall / (reps * len(cache_rows)) * 1e9:.1f} ns/position, CPU "
              f"{cpu / (reps * len(cache_rows)) * 1e9:.1f}")
        w.close()
    print(f"\nload average at the end: {load()}")


if __name__ == "__main__":
    main()
