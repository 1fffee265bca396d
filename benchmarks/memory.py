"""Peak memory of a training run, phase by phase: what `tuner train` holds from Parquet to the end.

One fresh process trains (replay, 1 epoch, 2 threads, the bench's AdamW) on a Parquet file of the
shipped sample tiled to --positions rows (default: the C++ tuner's 6.97 M). At every step of the
run (each log line and progress event) it reads the process's peak resident memory so far
(VmHWM) and its current one (VmRSS) from /proc/self/status, and prints them per position with
the time since loading started; "Parquet to first epoch" is the time from the start of loading
to the start of the first epoch. Then that time's phases: the seconds (wall, and CPU of the
thread that ran them, summed over the threads) spent reading the file's Arrow batches, parsing
and checking them, recording the micro-batches, extracting them (or making the chunk of those
that followed a template), adding them to the store and finishing it, splitting, and the
reader's wait for the recording threads; and the process's CPU time over it (so that a loaded
machine's figures can be told from the run's own).

    .venv/bin/python benchmarks/memory.py [--positions N] [--validation-fraction F]
                                          [--evaluation clockwork] [--mode replay]
                                          [--shuffle positions|blocks] [--block 1024]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import pyarrow.parquet as pq

from tuner.data.loader import DatasetReader
from tuner.tape.player import StoreBuilder
from tuner.train import record, stream

from tuner.train.bench import CPP_BENCH_POSITIONS, write_tiled_parquet
from tuner.train.config import validate
from tuner.train.loop import Run
from tuner.train.progress import Observer


def status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


class Timed:
    """Wall and thread CPU seconds of the phases of the run before its first epoch, summed over
    the threads that ran them: each phase is the calls of one function (replaced by a timed
    one)."""

    def __init__(self):
        self.wall, self.cpu, self.calls = defaultdict(float), defaultdict(float), defaultdict(int)
        self.lock = threading.Lock()
        self.phases: list[str] = []

    def add(self, phase: str, t0: float, c0: float) -> None:
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        with self.lock:
            self.wall[phase] += wall
            self.cpu[phase] += cpu
            self.calls[phase] += 1

    def wrap(self, owner, name: str, phase: str) -> None:
        fn = getattr(owner, name)
        self.phases.append(phase)

        def timed(*args, **kwargs):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.add(phase, t0, c0)

        setattr(owner, name, timed)

    def wrap_batches(self, phase: str) -> None:
        """Arrow's batches, timed one by one (`iter_batches` is a generator)."""
        fn = pq.ParquetFile.iter_batches
        self.phases.append(phase)

        def timed(*args, **kwargs):
            it = fn(*args, **kwargs)
            while True:
                t0, c0 = time.perf_counter(), time.thread_time()
                try:
                    batch = next(it)
                except StopIteration:
                    return
                finally:
                    self.add(phase, t0, c0)
                yield batch

        pq.ParquetFile.iter_batches = timed

    def report(self, n: int) -> None:
        print(f"{'phase':<22} {'wall s':>8} {'CPU s':>8} {'CPU ns/pos':>11} {'calls':>7}")
        for phase in self.phases:
            print(f"{phase:<22} {self.wall[phase]:8.2f} {self.cpu[phase]:8.2f} "
                  f"{self.cpu[phase] / n * 1e9:11.0f} {self.calls[phase]:7}")


def timed_phases() -> Timed:
    """The phases of reading and recording, timed (see `Timed`)."""
    timed = Timed()
    timed.wrap_batches("read (Arrow batches)")
    timed.wrap(DatasetReader, "_parse", "parse + check")
    timed.wrap(record, "record_positions", "record")
    timed.wrap(record, "extract", "extract")
    timed.wrap(record, "followed_chunk", "followed chunk")
    timed.wrap(StoreBuilder, "add", "store add")
    timed.wrap(StoreBuilder, "finish", "store finish")
    timed.wrap(record, "reordered_store", "reorder (blocks)")
    timed.wrap(stream, "split_data", "split")
    timed.wrap(record.StoreRecorder, "wait", "reader waits")
    return timed


class Phases(Observer):
    """Prints the memory at every event of the run (per position of the file)."""

    def __init__(self, n: int):
        self.n = n
        self.t0 = None
        self.first_epoch = None
        self.cpu0 = self.cpu = None  # process CPU seconds at load start / first epoch

    def mark(self, what: str) -> None:
        now = time.perf_counter()
        if self.t0 is None:
            self.t0 = now
        peak, rss = status_kb("VmHWM") * 1024, status_kb("VmRSS") * 1024
        print(f"{now - self.t0:8.2f} s  peak {peak / self.n:6.0f} B/pos  now {rss / self.n:6.0f} "
              f"B/pos  {what}", flush=True)

    def load_start(self, names):
        self.cpu0 = time.process_time()
        self.mark("load start")

    def load_end(self, n_positions, seconds):
        self.mark(f"load end ({n_positions:,} positions, {seconds:.2f} s)")

    def record_start(self, n_positions):
        self.mark("record start")

    def record_end(self):
        self.mark("record end")

    def epoch_start(self, epoch, epochs, n_positions):
        if self.first_epoch is None:
            self.first_epoch, self.cpu = time.perf_counter(), time.process_time()
        self.mark(f"epoch {epoch} start")

    def epoch_end(self):
        self.mark("epoch end")


def child(path: str, n: int, evaluation: str, mode: str, fraction: float, shuffle: str,
          block: int) -> None:
    cfg = validate({"data": {"train": [path], "validation_fraction": fraction},
                    "loss": {"k": 1 / 400},
                    "evaluation": {"name": evaluation, "init": "zero"},
                    "optimizer": {"lr": 10.0},
                    "training": {"epochs": 1, "batch_size": 262_144, "micro_batch_size": 1024,
                                 "threads": 2, "mode": mode, "shuffle": shuffle,
                                 "shuffle_block": block}}, "memory")
    phases = Phases(n)
    timed = timed_phases()
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(cfg, Path(tmp), log=phases.mark, observer=phases)
        run.run()
    phases.mark("end")
    print(f"Parquet to first epoch: {phases.first_epoch - phases.t0:.2f} s; peak "
          f"{status_kb('VmHWM') * 1024 / n:.0f} B/pos ({status_kb('VmHWM') / 2**20:.2f} GB) "
          f"for {n:,} positions")
    print(f"process CPU from Parquet to first epoch: {phases.cpu - phases.cpu0:.2f} s; load "
          f"average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    timed.report(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--positions", type=int, default=CPP_BENCH_POSITIONS)
    ap.add_argument("--evaluation", default="clockwork")
    ap.add_argument("--mode", default="replay", choices=["replay", "eager"])
    ap.add_argument("--validation-fraction", type=float, default=0.0)
    ap.add_argument("--shuffle", default="positions", choices=["positions", "blocks"])
    ap.add_argument("--block", type=int, default=1024, help="[training] shuffle_block")
    ap.add_argument("--parquet", help="use (or create) this file instead of a temporary one")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.parquet, a.positions, a.evaluation, a.mode, a.validation_fraction, a.shuffle,
              a.block)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(a.parquet or Path(tmp) / "tiled.parquet")
        if not path.exists():
            write_tiled_parquet(path, a.positions)
        subprocess.run([sys.executable, __file__, "--child", "--parquet", str(path),
                        "--positions", str(a.positions), "--evaluation", a.evaluation,
                        "--mode", a.mode, "--validation-fraction", str(a.validation_fraction),
                        "--shuffle", a.shuffle, "--block", str(a.block)],
                       check=True)


if __name__ == "__main__":
    main()
