"""Cluster overhead: 2 Ray workers x 1 thread against 1 process x 2 threads, on this machine.

Writes the shipped sample tiled to --positions rows as Parquet, then trains the same run
(clockwork, batch --batch, micro-batch 1024, ``[training] segment`` --segment, K fixed, no
validation) twice, each in a process of its own (so that each peak memory is its own): on this
machine with 2 threads, and with ``[cluster] workers = 2`` and 1 thread each on a local Ray.
Prints:

* the seconds per epoch of both (the median of the epochs but the first and the last), and the
  cluster's overhead, in all and per batch;
* per batch round trip of the cluster: the micro-batches, the bytes it moves (the parameters
  to each worker, the rows and cuts of its micro-batches; the losses and gradients back) and
  its milliseconds (the driver's wait for the workers, computing included), and the
  milliseconds of a round trip that computes nothing (the calls of a batch: the parameters
  and a job without micro-batches to each worker, an empty result back);
* each worker's share (positions), the seconds it took to read and record it, and its peak
  memory; the driver's peak memory against the one process's;
* the parameters (for the projection in docs/cluster.md: gradient bytes = parameters x 16),
  and whether both runs end with bitwise the same parameters.

    .venv/bin/python benchmarks/cluster_bench.py [--positions N] [--batch B] [--epochs E]
                                                 [--segment S]
"""
import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tuner.train.bench import write_tiled_parquet
from tuner.train.config import DEFAULT_SEGMENT, validate
from tuner.train.loop import Run
from tuner.train.progress import Observer

MICRO = 1024
K = 1 / 400
#: Empty round trips timed per measurement.
ROUND_TRIPS = 50


class Measured(Observer):
    """What the cluster run's workers say at the end of the last epoch: the milliseconds of
    `ROUND_TRIPS` round trips that compute nothing (a batch of `batch` positions), and each
    worker's peak memory."""

    def __init__(self, run: Run, epochs: int, batch: int):
        self.run, self.epochs, self.batch, self.epoch = run, epochs, batch, 0
        self.ms, self.peak_mb = None, []

    def epoch_start(self, epoch, epochs, n):
        self.epoch = epoch

    def epoch_end(self):
        import ray

        from tuner.train.cluster import pack_job

        workers = self.run.workers
        if self.epoch != self.epochs or not hasattr(workers, "actors"):
            return
        self.peak_mb = ray.get([a.peak_mb.remote() for a in workers.actors])
        none, cut = np.zeros(0, np.int64), np.zeros(1, np.int64)
        times = []
        for _ in range(ROUND_TRIPS):  # the calls of `ClusterWorkers._compute`, no micro-batch
            t0 = time.perf_counter()
            theta = self.run.theta.tobytes()
            ray.get([a.compute.remote(theta, pack_job(none, 0, cut, self.batch, True))
                     for a in workers.actors])
            times.append(time.perf_counter() - t0)
        self.ms = 1000 * statistics.median(times)


def traffic(workers) -> dict:
    """Wraps `workers._compute` (a `ClusterWorkers`) to count, per batch with gradients, the
    micro-batches, the bytes out and back, and the seconds; returns the counts (lists)."""
    from tuner.train.cluster import JOB_HEADER  # (imports Ray: the cluster's process only)

    counts = dict(chunks=[], out=[], back=[], seconds=[])
    compute = workers._compute
    n_theta = workers.source.n_theta

    def counted(theta, batch, n_chunks):
        t0 = time.perf_counter()
        compute(theta, batch, n_chunks)
        if batch.with_grad:
            owner = np.searchsorted(workers.bounds, batch.order[batch.starts[:n_chunks]],
                                    side="right") - 1
            busy = len(np.unique(owner))
            counts["seconds"].append(time.perf_counter() - t0)
            counts["chunks"].append(n_chunks)
            # the parameters and a job's header to each busy worker, the rows and the cuts (one
            # more per worker)
            counts["out"].append(busy * 8 * (n_theta + JOB_HEADER) + 8 * len(batch.order)
                                 + 8 * (n_chunks + busy))
            counts["back"].append(n_chunks * 8 * (n_theta + 1))  # every gradient and loss

    workers._compute = counted
    return counts


def train(parquet: str, a, threads: int, workers: int) -> dict:
    """One run (in this process); what it measured, as JSON-able values."""
    cfg = validate({"data": {"train": [parquet], "validation_fraction": 0.0},
                    "loss": {"k": K}, "evaluation": {"name": "clockwork", "init": "zero"},
                    "optimizer": {"lr": 10.0},
                    "training": {"epochs": a.epochs, "batch_size": a.batch,
                                 "micro_batch_size": MICRO, "threads": threads,
                                 "segment": a.segment},
                    "cluster": {"workers": workers}}, "bench")
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(cfg, Path(tmp), log=lambda line: print("  " + line, file=sys.stderr))
        measured = run.observer = Measured(run, a.epochs, a.batch)
        make = run.make_workers

        def counting(*args):
            w = make(*args)
            if workers:
                out["traffic"] = traffic(w)
                out["info"] = w.info
            return w

        run.make_workers = counting
        t0 = time.perf_counter()
        run.run()
        out["total_s"] = time.perf_counter() - t0
    # the first epoch warms up, the last one's time holds the round trips timed after it
    out["s_epoch"] = statistics.median(run.history["seconds"][1:-1])
    out["theta"] = run.theta.tolist()
    out["empty_ms"], out["worker_peak_mb"] = measured.ms, measured.peak_mb
    out["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def part(parquet: str, a, name: str) -> dict:
    """The run `name` ("local" or "cluster") in a process of its own."""
    cmd = [sys.executable, __file__, "--part", name, "--parquet", parquet, "--positions",
           str(a.positions), "--batch", str(a.batch), "--epochs", str(a.epochs), "--segment",
           str(a.segment)]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True)
    return json.loads(done.stdout)


def run_part(a) -> None:
    if a.part == "local":
        print(json.dumps(train(a.parquet, a, threads=2, workers=0)))
        return
    import ray

    from tuner.train.cluster import RAY_SYSTEM_CONFIG

    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING",
             _system_config=RAY_SYSTEM_CONFIG)  # the settings of a local Ray a run starts
    try:
        print(json.dumps(train(a.parquet, a, threads=1, workers=2)))
    finally:
        ray.shutdown()


def report(a, local: dict, cluster: dict) -> None:
    n_theta = len(local["theta"])
    n_batches = math.ceil(a.positions / a.batch)
    t = cluster["traffic"]
    chunks, out, back = (statistics.mean(t[k]) for k in ("chunks", "out", "back"))
    ms = 1000 * statistics.median(t["seconds"])
    print(f"positions {a.positions:,}  batch {a.batch:,}  micro {MICRO}  segment {a.segment:,} "
          f"({math.ceil(a.positions / a.segment)} segments)  batches/epoch {n_batches}  "
          f"parameters (flat) {n_theta:,}")
    print(f"1 process x 2 threads: {local['s_epoch']:.3f} s/epoch")
    print(f"2 workers x 1 thread : {cluster['s_epoch']:.3f} s/epoch  overhead "
          f"{100 * (cluster['s_epoch'] / local['s_epoch'] - 1):+.1f}%  "
          f"({1000 * (cluster['s_epoch'] - local['s_epoch']) / n_batches:.2f} ms per batch)")
    print(f"round trip per batch: {chunks:.1f} micro-batches, {out + back:,.0f} bytes "
          f"({out:,.0f} out, {back:,.0f} back), {ms:.2f} ms (median, computing included); "
          f"an empty round trip to both workers {cluster['empty_ms']:.2f} ms")
    for w, (info, peak) in enumerate(zip(cluster["info"], cluster["worker_peak_mb"])):
        print(f"worker {w}: {info['rows']:,} positions, read in {info['read']:.2f} s and "
              f"recorded in {info['record']:.2f} s; peak memory {peak:,.0f} MB")
    print(f"peak memory: the one process {local['peak_mb']:,.0f} MB, the cluster's driver "
          f"{cluster['peak_mb']:,.0f} MB; the whole run (start to end) {local['total_s']:.1f} s "
          f"and {cluster['total_s']:.1f} s")
    print(f"bitwise the same parameters: {local['theta'] == cluster['theta']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--positions", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=16_384)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--segment", type=int, default=DEFAULT_SEGMENT)
    ap.add_argument("--part", choices=("local", "cluster"), help=argparse.SUPPRESS)
    ap.add_argument("--parquet", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.epochs < 3:
        ap.error("--epochs must be >= 3 (the first and the last are not timed)")
    if a.part:
        run_part(a)
        return
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        parquet = str(Path(tmp) / "tiled.parquet")
        write_tiled_parquet(Path(parquet), a.positions)
        local = part(parquet, a, "local")
        cluster = part(parquet, a, "cluster")
    report(a, local, cluster)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
