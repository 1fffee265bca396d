"""`tuner bench`: a fixed, timed training run with a deterministic signature."""
from __future__ import annotations

import hashlib
import resource
import statistics
import time
from pathlib import Path
import tempfile

import click
import numpy as np

from .config import validate
from .loop import Run, load_data

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


def run_bench(dataset: str, epochs: int, threads: int, mode: str = "replay") -> int:
    raw = dict(BENCH_CONFIG, data={"train": [dataset], "validation_fraction": 0.0})
    raw["training"] = dict(raw["training"], epochs=epochs, threads=threads, mode=mode)
    cfg = validate(raw, "bench")
    lines: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        data = load_data(cfg, lambda s: None)
        load_s = time.perf_counter() - t0
        run = Run(cfg, Path(tmp), log=lines.append)
        history = run.run(data)
    n = len(data.train)
    secs = history["seconds"]
    med = statistics.median(secs)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    click.echo(f"dataset {dataset}: {n:,} positions (loaded in {load_s:.2f} s), "
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
