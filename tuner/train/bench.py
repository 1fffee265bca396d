"""`tuner bench`: a fixed, timed training run with a deterministic signature; the shipped sample
tiled to any size, for the benchmarks in ``benchmarks/``."""
from __future__ import annotations

import hashlib
import resource
import statistics
from collections.abc import Callable
from pathlib import Path
import tempfile

import numpy as np

from .config import validate
from .loop import Run
from .progress import Observer
from .stream import Data

#: The shipped sample: what the scale benchmarks tile (390,968 positions).
SAMPLE = ("selfplay-std", "selfplay-dfrc")
#: The size of the C++ tuner's benchmark: the sample tiled to 6.97 M positions.
CPP_BENCH_POSITIONS = 6_970_000

#: The fixed run. Changing it changes every signature: do so deliberately.
BENCH_CONFIG = {
    "evaluation": {"name": "clockwork", "init": "zero"},
    "loss": {"k": 1 / 400},
    "optimizer": {"name": "adamw", "lr": 10.0},
    "schedule": {"type": "constant"},
    "training": {"batch_size": 16_384, "micro_batch_size": 1024, "shuffle_seed": 0,
                 "shuffle": "positions"},  # the mode the signature was taken in (not the default)
}


def signature(params: np.ndarray) -> int:
    """A 48-bit integer fingerprint of the exact parameter bits."""
    digest = hashlib.sha256(np.ascontiguousarray(params, dtype="<f8").tobytes()).digest()
    return int.from_bytes(digest[:6], "big")


class _Timings(Observer):
    """The compile and load figures of the bench run; `announce()` when compiling starts."""

    def __init__(self, announce: Callable[[], None]):
        self.announce = announce
        self.compile_s = None
        self.load_s = 0.0
        self.n = 0

    def compile_start(self) -> None:
        self.announce()

    def compile_end(self, seconds: float) -> None:
        self.compile_s = seconds

    def load_end(self, n_positions: int, seconds: float) -> None:
        self.n, self.load_s = n_positions, seconds


def run_bench(dataset: str, epochs: int, threads: int, mode: str,
              report: Callable[[str], None], announce: Callable[[], None] = lambda: None) -> int:
    """Run the fixed bench on `dataset`; its lines (timings, then ``Bench: <signature>``) go to
    `report` as they are known, `announce()` is called before a compilation. Returns the
    signature."""
    raw = dict(BENCH_CONFIG, data={"train": [dataset], "validation_fraction": 0.0})
    raw["training"] = dict(raw["training"], epochs=epochs, threads=threads, mode=mode)
    cfg = validate(raw, "bench")
    lines: list[str] = []
    timings = _Timings(announce)
    with tempfile.TemporaryDirectory() as tmp:
        run = Run(cfg, Path(tmp), log=lines.append, observer=timings)
        history = run.run()
    n = timings.n  # no validation split: every position trains
    secs = history["seconds"]
    med = statistics.median(secs)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    if timings.compile_s is not None:
        report(f"compiled the kernels first (a cold cache) in {timings.compile_s:.1f} s, "
                   f"not counted below")
    report(f"dataset {dataset}: {n:,} positions (loaded in {timings.load_s:.2f} s), "
               f"{run.n_threads} thread(s), {epochs} epoch(s), batch 16,384")
    for line in lines:
        if line.startswith(("replay", "eager")):
            report(line)
    report("s/epoch: " + ", ".join(f"{s:.3f}" for s in secs) + f" (median {med:.3f})")
    report(f"positions/s: {n / med:,.0f}   peak memory: {peak_mb:,.0f} MB")
    report(f"final train loss: {history['train_loss'][-1]:.8f}")
    sig = signature(run.theta)
    report(f"Bench: {sig}")
    return sig


def sample_table():
    """The shipped sample as one Arrow table (fen, result), in `SAMPLE` order."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tuner.data.registry import resolve

    return pa.concat_tables([pq.read_table(resolve(name).path, columns=["fen", "result"])
                             for name in SAMPLE])


def write_tiled_parquet(path: Path, n: int) -> None:
    """The shipped sample repeated (and cut) to `n` rows, written as Parquet at `path`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = sample_table()
    reps = -(-n // len(table))
    pq.write_table(pa.concat_tables([table] * reps).slice(0, n), path)


def tiled_data(n: int) -> Data:
    """The shipped sample tiled to `n` positions, every one a training position."""
    from tuner.data import load_dataset

    parts = [load_dataset(name, quiet=True) for name in SAMPLE]
    pos = np.concatenate([p.positions for p in parts])
    res = np.concatenate([p.results for p in parts])
    reps = -(-n // len(res))
    pos, res = np.tile(pos, (reps, 1))[:n], np.tile(res, reps)[:n]
    return Data(pos, res, np.arange(n), np.arange(0), ["tiled sample"])
