"""`tuner bench`: a fixed, timed training run with a deterministic signature."""
from __future__ import annotations

import hashlib
import resource
import statistics
from collections.abc import Callable
from pathlib import Path
import tempfile

import click
import numpy as np

from .config import validate
from .loop import Run
from .progress import Observer

#: The fixed run. Changing it changes every signature: do so deliberately.
BENCH_CONFIG = {
    "evaluation": {"name": "clockwork", "init": "zero"},
    "loss": {"k": 1 / 400},
    "optimizer": {"name": "adamw", "lr": 10.0},
    "schedule": {"type": "constant"},
    "training": {"batch_size": 16_384, "micro_batch_size": 1024, "shuffle_seed": 0},
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


def run_bench(dataset: str, epochs: int, threads: int, mode: str = "replay",
              announce: Callable[[], None] = lambda: None) -> int:
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
        click.echo(f"compiled the kernels first (a cold cache) in {timings.compile_s:.1f} s, "
                   f"not counted below")
    click.echo(f"dataset {dataset}: {n:,} positions (loaded in {timings.load_s:.2f} s), "
               f"{run.n_threads} thread(s), {epochs} epoch(s), batch 16,384")
    for line in lines:
        if line.startswith(("replay", "eager")):
            click.echo(line)
    click.echo("s/epoch: " + ", ".join(f"{s:.3f}" for s in secs) + f" (median {med:.3f})")
    click.echo(f"positions/s: {n / med:,.0f}   peak memory: {peak_mb:,.0f} MB")
    click.echo(f"final train loss: {history['train_loss'][-1]:.8f}")
    sig = signature(run.theta)
    click.echo(f"Bench: {sig}")
    return sig
