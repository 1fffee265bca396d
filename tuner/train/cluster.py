"""Data-parallel epochs on Ray: the micro-batch gradients of every batch computed by Ray actors.

A cluster run (``[cluster] workers = N``, or ``tuner train --workers N``) has N *workers*, each
a Ray actor (`Share`) that reads the data from ``[data] train`` itself (paths every node
reaches: a shared filesystem, or any URI pyarrow's filesystems open), records its store once (or
loads it from ``[training] store_cache``) and then, for every batch, computes the gradients of
the micro-batches it is given. The driver (`ClusterWorkers`, a `tuner.train.workers.Workers`
whose `_compute` is the actors') sends each worker the rows of its micro-batches (their indexes,
8 bytes each: positions never travel) and the parameters, receives the micro-batch gradients,
and adds them **in micro-batch order** with the same compensated sum as a run on one machine:
which worker computed which micro-batch never changes a bit, so any number of workers gives
bitwise the same parameters. Everything else (optimiser step, checkpoints, validation, logs,
progress, outputs) stays on the driver, in `tuner.train.loop`.

**Which rows a worker holds.** A batch is a shuffled draw from every training row, taken in
store order and cut into micro-batches of consecutive rows of that order, so a micro-batch's
rows can be anywhere in the store, and which ones changes with every batch. Shares of the store
that micro-batches could be formed within would change the micro-batches, hence the rounding of
the sum, unless the run on one machine formed them the same way. So every worker holds the
whole store and computes the micro-batches ``c % N == w``: the same bits as one machine for any
N. The cost: each worker reads and records every position (in parallel: the wall time of one
recording, N times the work and N times the memory, a store per node); what scales with N is
the epochs' computation, which is what a long run spends its time on.

**Faults.** A worker whose process dies is restarted by Ray (`MAX_RESTARTS`), records its store
again in its constructor, and the batch it was computing is computed again (Ray retries the
actor's call, ``max_task_retries``): the call is a pure function of its arguments, so the run
ends with the same bits. A worker Ray cannot restart ends the run with one line (a
`TrainingError`); the checkpoint of the last completed epoch is kept and ``--resume`` continues.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import ray

from tuner.evals import get_evaluation
from .config import Config
from .errors import TrainingError
from .kernels import Batch
from .prepare import Preparation
from .progress import Observer
from .storecache import StoreCache
from .workers import Workers, split_params

#: Times Ray restarts a worker whose process died (and retries the call it was computing).
MAX_RESTARTS = 3


@dataclass(frozen=True)
class ShareSpec:
    """What a worker needs to record the run's store: the configuration (`values`, `path`), K
    `k`, the starting parameters `theta` (for the record), its `threads`, and the `micro`-batch
    and largest batch (`max_batch`) of the run's `Workers`."""

    values: dict
    path: str | None
    k: float
    theta: np.ndarray
    threads: int
    micro: int
    max_batch: int


class Share:
    """One worker of a cluster run (a Ray actor): the run's store recorded from the data its
    configuration names, and a pool of `ShareSpec.threads` threads computing micro-batches."""

    def __init__(self, spec: ShareSpec):
        from pathlib import Path
        cfg = Config(spec.values, None if spec.path is None else Path(spec.path))
        evaluation = get_evaluation(cfg["evaluation"]["name"], cfg.resolve_path("."))
        quiet = lambda line: None  # noqa: E731  (the driver logs the run)
        stores = StoreCache(cfg, evaluation, quiet) if cfg["training"]["store_cache"] else None
        prep = Preparation(cfg, evaluation, spec.theta, spec.k, spec.threads, Observer(), quiet,
                           stores)
        ready = prep.run(None)
        source = ready.source(evaluation, prep.loss)
        self.workers = Workers(source, spec.threads, spec.micro, spec.max_batch)

    def ready(self) -> int:
        """The worker's process id, once its store is recorded."""
        return os.getpid()

    def compute(self, theta: np.ndarray, rows: np.ndarray, n: int, with_grad: bool):
        """The loss sums and (if `with_grad`) gradients of the micro-batches whose rows,
        one after another, are `rows` (every one `micro` rows but a last shorter one), of a
        batch of `n` positions, at the flat parameters `theta`."""
        w = self.workers
        theta, rows = np.array(theta), np.array(rows)  # writable: the kernels' own types
        chunks = np.arange(math.ceil(len(rows) / w.micro))
        sse = np.zeros(len(chunks))
        batch = Batch(rows, w.micro, 1.0 / n, with_grad, w.chunk_grads, sse)
        w.compute_chunks(split_params(theta, w.source.n_pairs), batch, chunks)
        return sse, (w.chunk_grads[: len(chunks)] if with_grad else None)


class ClusterWorkers(Workers):
    """`Workers` whose micro-batches `n_workers` Ray actors compute (`Share`), at `address`
    (`[cluster] address`); `source` is the driver's (its sizes; it computes nothing) and `log`
    the run's. Starts a local Ray (or connects) unless this process already has one."""

    def __init__(self, source, spec: ShareSpec, address: str, n_workers: int,
                 log: Callable[[str], None]):
        super().__init__(source, spec.threads, spec.micro, spec.max_batch)
        self.started = not ray.is_initialized()
        if self.started:
            try:
                ray.init(address=None if address == "local" else address,
                         include_dashboard=False, logging_level="WARNING")
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise TrainingError(f"[cluster] address = {address!r}: cannot start or reach "
                                    f"Ray: {str(e).splitlines()[0]}") from None
        t0 = time.perf_counter()
        actor = ray.remote(Share).options(
            num_cpus=0, scheduling_strategy="SPREAD", max_restarts=MAX_RESTARTS,
            max_task_retries=MAX_RESTARTS)
        self.actors = [actor.remote(spec) for _ in range(n_workers)]  # by value: restartable
        #: The workers' process ids (the process of worker w is ``pids[w]``).
        self.pids = self._get([a.ready.remote() for a in self.actors])
        log(f"cluster: {n_workers} worker(s) on Ray ({address}, {spec.threads} thread(s) "
            f"each) read and recorded the data in {time.perf_counter() - t0:.2f} s")

    def close(self) -> None:
        super().close()
        for a in self.actors:
            ray.kill(a)
        if self.started:
            ray.shutdown()

    def _compute(self, theta: np.ndarray, batch: Batch, n_chunks: int) -> None:
        """Micro-batch c by worker ``c % n_workers``; the results into ``batch.sse`` and
        ``batch.chunk_grads``."""
        n, m = len(self.actors), batch.micro
        shares = [np.arange(w, n_chunks, n) for w in range(min(n, n_chunks))]
        theta_ref = ray.put(theta)
        calls = [self.actors[w].compute.remote(
            theta_ref, np.concatenate([batch.order[c * m:(c + 1) * m] for c in chunks]),
            len(batch.order), batch.with_grad) for w, chunks in enumerate(shares)]
        for chunks, (sse, grads) in zip(shares, self._get(calls)):
            batch.sse[chunks] = sse
            if grads is not None:
                batch.chunk_grads[chunks] = grads

    def _get(self, calls: list):
        """`ray.get(calls)`; a worker Ray could not keep alive (or that failed) as a
        `TrainingError`."""
        try:
            return ray.get(calls)
        except ray.exceptions.RayActorError as e:
            raise TrainingError(f"a cluster worker died and Ray could not restart it (at most "
                                f"{MAX_RESTARTS} restarts): {_first_line(e)}; the checkpoint of "
                                f"the last completed epoch is kept (--resume DIR continues)"
                                ) from None
        except ray.exceptions.RayError as e:
            cause = getattr(e, "cause", None) or e
            raise TrainingError(f"a cluster worker failed: {_first_line(cause, last=True)}"
                                ) from None


def _first_line(e: BaseException, last: bool = False) -> str:
    """The first (or `last`) non-empty line of `e`'s text."""
    lines = [line for line in str(e).splitlines() if line.strip()] or [type(e).__name__]
    return lines[-1 if last else 0].strip()
