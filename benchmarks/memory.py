"""Peak memory of a training run, phase by phase: what `tuner train` holds from Parquet to the end.

One fresh process trains (replay, 1 epoch, 2 threads, the bench's AdamW) on a Parquet file of the
shipped sample tiled to --positions rows (default: the C++ tuner's 6.97 M). At every step of the
run (each log line and progress event) it reads the process's peak resident memory so far
(VmHWM) and its current one (VmRSS) from /proc/self/status, and prints them per position with
the time since loading started; "Parquet to first epoch" is the time from the start of loading
to the start of the first epoch.

    .venv/bin/python benchmarks/memory.py [--positions N] [--validation-fraction F]
                                          [--evaluation clockwork] [--mode replay]
"""
import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tuner.train.bench import CPP_BENCH_POSITIONS, write_tiled_parquet
from tuner.train.config import validate
from tuner.train.loop import Run
from tuner.train.progress import Observer


def status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


class Phases(Observer):
    """Prints the memory at every event of the run (per position of the file)."""

    def __init__(self, n: int):
        self.n = n
        self.t0 = None
        self.first_epoch = None

    def mark(self, what: str) -> None:
        now = time.perf_counter()
        if self.t0 is None:
            self.t0 = now
        peak, rss = status_kb("VmHWM") * 1024, status_kb("VmRSS") * 1024
        print(f"{now - self.t0:8.2f} s  peak {peak / self.n:6.0f} B/pos  now {rss / self.n:6.0f} "
              f"B/pos  {what}", flush=True)

    def load_start(self, names):
        self.mark("load start")

    def load_end(self, n_positions, seconds):
        self.mark(f"load end ({n_positions:,} positions, {seconds:.2f} s)")

    def record_start(self, n_positions):
        self.mark("record start")

    def record_end(self):
        self.mark("record end")

    def epoch_start(self, epoch, epochs, n_positions):
        self.first_epoch = self.first_epoch or time.perf_counter()
        self.mark(f"epoch {epoch} start")

    def epoch_end(self):
        self.mark("epoch end")


def child(path: str, n: int, evaluation: str, mode: str, fraction: float) -> None:
    cfg = validate({"data": {"train": [path], "validation_fraction": fraction},
                    "loss": {"k": 1 / 400},
                    "evaluation": {"name": evaluation, "init": "zero"},
                    "optimizer": {"lr": 10.0},
                    "training": {"epochs": 1, "batch_size": 262_144, "micro_batch_size": 1024,
                                 "threads": 2, "mode": mode}}, "memory")
    phases = Phases(n)
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(cfg, Path(tmp), log=phases.mark, observer=phases)
        run.run()
    phases.mark("end")
    print(f"Parquet to first epoch: {phases.first_epoch - phases.t0:.2f} s; peak "
          f"{status_kb('VmHWM') * 1024 / n:.0f} B/pos ({status_kb('VmHWM') / 2**20:.2f} GB) "
          f"for {n:,} positions")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--positions", type=int, default=CPP_BENCH_POSITIONS)
    ap.add_argument("--evaluation", default="clockwork")
    ap.add_argument("--mode", default="replay", choices=["replay", "eager"])
    ap.add_argument("--validation-fraction", type=float, default=0.0)
    ap.add_argument("--parquet", help="use (or create) this file instead of a temporary one")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.parquet, a.positions, a.evaluation, a.mode, a.validation_fraction)
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(a.parquet or Path(tmp) / "tiled.parquet")
        if not path.exists():
            write_tiled_parquet(path, a.positions)
        subprocess.run([sys.executable, __file__, "--child", "--parquet", str(path),
                        "--positions", str(a.positions), "--evaluation", a.evaluation,
                        "--mode", a.mode, "--validation-fraction", str(a.validation_fraction)],
                       check=True)


if __name__ == "__main__":
    main()
