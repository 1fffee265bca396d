"""Cluster overhead: 2 Ray workers x 1 thread against 1 process x 2 threads, on this machine.

Writes the shipped sample tiled to --positions rows as Parquet, then trains the same run
(clockwork, batch --batch, micro-batch 1024, K fixed, no validation) twice: on this machine with
2 threads, and with ``[cluster] workers = 2`` and 1 thread each on a local Ray. Prints the
seconds per epoch (the median of the epochs but the first and the last), the cluster's overhead,
and for the cluster the bytes a batch's round trip moves and the milliseconds of a round trip
that computes nothing (the parameters sent to each worker, no rows, an empty result back), and
the parameters (for the projection in docs/cluster.md: gradient bytes = parameters x 16). Checks
that both runs end with bitwise the same parameters.

    .venv/bin/python benchmarks/cluster_bench.py [--positions N] [--batch B] [--epochs E]
"""
import argparse
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import ray

from tuner.train.bench import write_tiled_parquet
from tuner.train.config import validate
from tuner.train.loop import Run
from tuner.train.progress import Observer

MICRO = 1024
K = 1 / 400
#: Empty round trips timed per measurement.
ROUND_TRIPS = 50


class RoundTrips(Observer):
    """At the end of the last epoch, times `ROUND_TRIPS` round trips that compute nothing on
    `run`'s workers (their batch: the last one's size)."""

    def __init__(self, run: Run, epochs: int, batch: int):
        self.run, self.epochs, self.batch, self.epoch, self.ms = run, epochs, batch, 0, None

    def epoch_start(self, epoch, epochs, n):
        self.epoch = epoch

    def epoch_end(self):
        if self.epoch != self.epochs or not hasattr(self.run.workers, "actors"):
            return
        theta, none = self.run.theta, np.zeros(0, np.int64)
        times = []
        for _ in range(ROUND_TRIPS):
            t0 = time.perf_counter()
            t_ref = ray.put(theta)
            ray.get([a.compute.remote(t_ref, none, self.batch, True)
                     for a in self.run.workers.actors])
            times.append(time.perf_counter() - t0)
        self.ms = 1000 * statistics.median(times)


def train(parquet: Path, batch: int, epochs: int, threads: int, workers: int):
    cfg = validate({"data": {"train": [str(parquet)], "validation_fraction": 0.0},
                    "loss": {"k": K}, "evaluation": {"name": "clockwork", "init": "zero"},
                    "optimizer": {"lr": 10.0},
                    "training": {"epochs": epochs, "batch_size": batch, "micro_batch_size": MICRO,
                                 "threads": threads},
                    "cluster": {"workers": workers}}, "bench")
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(cfg, Path(tmp), log=print)
        trips = RoundTrips(run, epochs, batch)
        run.observer = trips
        run.run()
        # the first epoch warms up, the last one's time holds the round trips timed after it
        secs = statistics.median(run.history["seconds"][1:-1])
        return secs, trips.ms, run.theta.copy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--positions", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=16_384)
    ap.add_argument("--epochs", type=int, default=5)
    a = ap.parse_args()
    if a.epochs < 3:
        ap.error("--epochs must be >= 3 (the first and the last are not timed)")
    print(f"load average before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} "
          f"{os.getloadavg()[2]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        parquet = Path(tmp) / "tiled.parquet"
        write_tiled_parquet(parquet, a.positions)
        local, _, theta_local = train(parquet, a.batch, a.epochs, threads=2, workers=0)
        ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
        try:
            cluster, ms, theta_cluster = train(parquet, a.batch, a.epochs, threads=1, workers=2)
        finally:
            ray.shutdown()
    n_theta = len(theta_local)
    n_batches = math.ceil(a.positions / a.batch)
    chunks = math.ceil(a.batch / MICRO)
    sent = 2 * 8 * n_theta + 8 * a.batch               # parameters to each worker, its rows
    back = chunks * (8 * n_theta + 8)                   # every chunk's gradient and loss
    print(f"positions {a.positions:,}  batch {a.batch:,}  micro {MICRO}  batches/epoch "
          f"{n_batches}  parameters (flat) {n_theta:,}")
    print(f"1 process x 2 threads: {local:.3f} s/epoch")
    print(f"2 workers x 1 thread : {cluster:.3f} s/epoch  overhead "
          f"{100 * (cluster / local - 1):+.1f}%  ({1000 * (cluster - local) / n_batches:.2f} ms "
          f"per batch)")
    print(f"round trip per batch: {sent + back:,} bytes ({sent:,} out, {back:,} back); an empty "
          f"round trip to both workers {ms:.2f} ms")
    print(f"bitwise the same parameters: {np.array_equal(theta_local, theta_cluster)}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
