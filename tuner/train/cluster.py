"""Data-parallel epochs on Ray: each worker holds a share of the store and computes the gradients of
the micro-batches that fall in it.

A cluster run (``[cluster] workers = N``, or ``tuner train --workers N``) has a *driver* (the
`tuner train` process) and N *workers*, each a Ray actor (`Share`).

**Shares.** The store's rows are cut into *segments* of ``[training] segment`` consecutive rows
(a size that does not depend on N), and every batch, in store order, is cut into micro-batches
every ``micro_batch_size`` positions and at every segment's first row
(`tuner.train.kernels.cut_chunks`), on one machine as on a cluster: no micro-batch holds two
segments' rows. Worker w holds a contiguous range of whole segments (`shares`: as many training
rows each as whole segments allow), reads only its rows from ``[data] train`` (paths every node
reaches; only the Parquet row groups that hold them, only its rows parsed: `read_share`),
records them once (or loads them from ``[training] store_cache``, keyed by a digest of its
rows), and for every batch computes the micro-batches that fall in its range. So a worker holds
1/N of the store, and which worker computed a micro-batch never changes a bit: any number of
workers gives bitwise the same parameters as one machine.

**The driver records no store** (`prepare`): it reads the data once for what the split,
validation and outputs need (the results, the games until the split, the fit sample if K is
fitted, the validation positions for the held-out report), with
`tuner.train.stream.DataStream`, and keeps no position of a training row. It then knows which
file rows every store row is (the files' bad rows; a blocks run's recording order,
`tuner.train.stream.record_order`) and gives each worker its rows: a range (8 bytes), or under
``shuffle = "blocks"`` the rows themselves (8 bytes each, once), with the files' bad rows.

**Per batch** (`ClusterWorkers`, a `tuner.train.workers.Workers` whose `_compute` is the
actors'), the driver sends each worker the parameters and the rows of its micro-batches with
their cuts (8 bytes per position: positions never travel), receives the micro-batch gradients,
and adds them **in micro-batch order** with the same compensated sum as a run on one machine.
The validation loss is computed the same way. A call is two byte strings, the parameters
(float64) and a *job* (`pack_job`: the batch's size, whether gradients are wanted, the cuts and
the rows, int64), and its result one (float64: the micro-batches' losses, then their
gradients): bytes, which Ray sends faster than arrays, each in the call's own message when at
most `INLINE_BYTES` (the setting a local Ray started here is given, `RAY_SYSTEM_CONFIG`), not
through Ray's object store. Everything else (optimiser step, checkpoints, logs, progress,
outputs) stays on the driver, in `tuner.train.loop`.

**Faults.** A worker whose process dies is restarted by Ray (`MAX_RESTARTS`), reads and records
its share again in its constructor, and the batch it was computing is computed again (Ray
retries the actor's call, ``max_task_retries``): the call is a pure function of its arguments,
so the run ends with the same bits. A worker Ray cannot restart ends the run with one line (a
`TrainingError`); the checkpoint of the last completed epoch is kept and ``--resume`` continues.
"""
from __future__ import annotations

import math
import os
import resource
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import ray

from tuner.compiling import watch_compilation
from tuner.errors import error_line
from tuner.data.loader import DatasetReader, file_rows
from tuner.data.trace import concat_positions, take_positions
from tuner.evals import get_evaluation
from .config import Config
from .errors import TrainingError
from .kernels import Batch
from .prepare import Preparation, Prepared
from .progress import Observer
from .stream import Data, DataStream, find_data, record_order
from .warmup import warm_positions
from .workers import Workers, at_least, split_params

#: Times Ray restarts a worker whose process died (and retries the call it was computing).
MAX_RESTARTS = 3
#: The largest argument or result Ray sends in the call's own message rather than through its
#: object store (Ray's ``max_direct_call_object_size``, 100 KB by default): with 2 workers, a
#: worker's job and result for a batch of 16,384 are about 70 and 120 KB, and the object store
#: adds milliseconds to each call (docs/cluster.md).
INLINE_BYTES = 4_000_000
#: Ray's settings for a Ray this process starts (``ray start --head --system-config`` on a
#: cluster's head node; docs/cluster.md).
RAY_SYSTEM_CONFIG = {"max_direct_call_object_size": INLINE_BYTES}
#: A job's fields before its cuts (`pack_job`): the batch's positions, whether gradients are
#: wanted, the micro-batches.
JOB_HEADER = 3


@dataclass(frozen=True)
class Layout:
    """What the driver knows of the store its workers hold between them, without holding it:
    its rows `n_rows` (positions a batch's rows index), the parameters (`n_pairs`, `n_theta`),
    which data rows (indexes into the files' valid rows, concatenated) the store's rows are
    (`rows`: None for the same rows, a blocks run's recording order otherwise), and each file's
    valid rows and bad rows (`files`: ``(n_valid, bad file rows)``). A `Workers` source whose
    micro-batches the workers compute."""

    n_rows: int
    n_pairs: int
    n_theta: int
    rows: np.ndarray | None
    files: list
    specialised = False

    def scratch(self, micro: int) -> None:
        """The driver computes no micro-batch: no scratch."""
        return None

    def share_rows(self, lo: int, hi: int):
        """The data rows of store rows ``lo..hi - 1`` (a range where they are the same)."""
        return range(lo, hi) if self.rows is None else self.rows[lo:hi]


class ClusterPrepared(Prepared):
    """`Prepared` of a cluster run's driver: the data in store order, K, no store or targets, and
    the store's `layout` (its `source`)."""

    def __init__(self, data: Data, k: float, layout: Layout):
        super().__init__(data, k, None, None)
        self.layout = layout

    def source(self, evaluation, loss: int) -> Layout:
        return self.layout


def prepare(prep: Preparation, data: Data | None) -> ClusterPrepared:
    """The driver's preparation (see the module docstring): the configuration's data read for
    its split, K and validation positions, no store recorded."""
    if data is not None:
        raise TrainingError("a cluster run's workers read [data] train themselves: it cannot "
                            "train on data given in memory")
    cfg, evaluation = prep.cfg, prep.evaluation
    with watch_compilation(prep.observer.compile_start, prep.compiling):
        warm_positions()
    if prep.k is not None:
        prep.warm(None)
    prep.observer.load_start(cfg["data"]["train"])
    t0 = time.perf_counter()
    with DataStream(cfg, evaluation.trace, prep.log) as files:
        files.first_pass(None)
        if prep.k is None:
            prep.warm(files.sample)
        data = files.data()
        layout_files = [(n, r.bad_file_rows()) for r, n in zip(files.readers, files.sizes)]
    prep.observer.load_end(len(data), time.perf_counter() - t0)
    prep.log_split(data)
    rows = None
    tr = cfg["training"]
    if tr["shuffle"] == "blocks":  # the store's rows: the training rows shuffled, then the val
        rows = record_order(data.train, data.val, tr["shuffle_seed"])
        n_train = len(data.train)
        data = Data(None, None, np.arange(n_train), np.arange(n_train, len(rows)), data.sources,
                    None, data.train_games, data.val_games, data.val_positions,
                    data.val_results, len(rows))
    reg = evaluation.registry
    layout = Layout(len(data), reg.n_params, 2 * reg.n_params + reg.n_values, rows,
                    layout_files)
    return ClusterPrepared(data, prep.k, layout)


def shares(train: np.ndarray, n_rows: int, segment: int, n_workers: int) -> np.ndarray:
    """Where the workers' shares of a store of `n_rows` rows begin, and the last one ends
    (int64[workers + 1], at segment boundaries): contiguous ranges of whole segments of
    `segment` rows, each with as near 1 / `n_workers` of the training rows `train` (store rows)
    as whole segments allow. Fewer than `n_workers` shares when there are fewer segments (or
    segments with training rows to part)."""
    n_seg = math.ceil(n_rows / segment)
    before = np.concatenate([[0], np.cumsum(np.bincount(train // segment, minlength=n_seg))])
    goals = np.arange(1, n_workers) * (len(train) / n_workers)
    above = np.searchsorted(before, goals)  # the first segment with at least the goal before it
    cuts = above - (goals - before[above - 1] < before[above] - goals)  # or the one before
    cuts = np.unique(np.clip(cuts, 1, n_seg - 1)) if n_seg > 1 else np.zeros(0, np.int64)
    return np.minimum(np.concatenate([[0], cuts * segment, [n_rows]]), n_rows).astype(np.int64)


@dataclass(frozen=True)
class ShareSpec:
    """What every worker is given besides its share: the configuration (`values`, `path`), K
    `k`, the starting parameters `theta` (for the record), its `threads`, and the run's
    `micro`-batch, largest batch (`max_batch`) and `segment`."""

    values: dict
    path: str | None
    k: float
    theta: np.ndarray
    threads: int
    micro: int
    max_batch: int
    segment: int


def read_share(cfg: Config, trace, rows, files: list) -> tuple:
    """``(positions, results, score_cp)`` of data rows `rows` (in that order) of the files of
    ``[data] train`` whose valid and bad rows are `files`: each file's rows read again
    (`DatasetReader.read_rows`: only the row groups holding them)."""
    rows = np.asarray(rows, np.int64)
    order = None if np.all(rows[1:] > rows[:-1]) else np.argsort(rows)  # a blocks run's rows
    wanted = rows if order is None else rows[order]
    parts, offset = [], 0
    for found, (n, bad) in zip(find_data(cfg), files):
        lo, hi = np.searchsorted(wanted, [offset, offset + n])
        if hi > lo:
            with DatasetReader(found, cfg["data"]["policy"], quiet=True, trace=trace,
                               need_scores=cfg["loss"]["score_blend"] > 0) as reader:
                parts.append(reader.read_rows(file_rows(wanted[lo:hi] - offset, bad)))
        offset += n
    positions = concat_positions([p[0] for p in parts])
    results = np.concatenate([p[1] for p in parts])
    scores = None if parts[0][2] is None else np.concatenate([p[2] for p in parts])
    if order is not None:  # back from file order to store order
        back = np.empty_like(order)
        back[order] = np.arange(len(order))
        positions, results = take_positions(positions, back), results[back]
        scores = None if scores is None else scores[back]
    return positions, results, scores


class Share:
    """One worker of a cluster run (a Ray actor): its share of the store recorded from its rows
    of the data, and a pool of `ShareSpec.threads` threads computing
    micro-batches."""

    def __init__(self, spec: ShareSpec, rows, files: list):
        """`rows`: the share's data rows in store order (`Layout.share_rows`); `files`: the
        files' valid and bad rows (`Layout.files`)."""
        cfg = Config(spec.values, None if spec.path is None else Path(spec.path))
        evaluation = get_evaluation(cfg["evaluation"]["name"], cfg.resolve_path("."))
        quiet = lambda line: None  # noqa: E731  (the driver logs the run)
        prep = Preparation(cfg, evaluation, spec.theta, spec.k, spec.threads, Observer(), quiet)
        prep.warm(None)
        t0 = time.perf_counter()
        positions, results, scores = read_share(cfg, evaluation.trace, rows, files)
        t1 = time.perf_counter()
        data = Data(positions, results, np.arange(0), np.arange(0), score_cp=scores)
        targets = prep.targets(results, scores)
        store = None if prep.eager else prep.replay_store(data, targets)
        source = Prepared(data, spec.k, store, targets).source(evaluation, prep.loss)
        self.workers = Workers(source, spec.threads, spec.micro,
                               max(1, min(spec.max_batch, len(results))), segment=spec.segment)
        #: The share's rows, and the seconds it took to read them and to record them.
        self.info = dict(rows=len(results), read=t1 - t0, record=time.perf_counter() - t1)
        w = self.workers  # what `compute` copies its call into, and its result
        self.theta = np.zeros(source.n_theta)
        self.job = np.zeros(JOB_HEADER + w.max_chunks + 1 + len(w.sorted), np.int64)
        self.out = np.zeros(w.max_chunks * (1 + source.n_theta))

    def ready(self) -> dict:
        """Once its share is recorded: the worker's process id (``pid``), the share's rows
        (``rows``) and the seconds it took to read them (``read``) and to record them, or load
        them from the store cache (``record``)."""
        return dict(self.info, pid=os.getpid())

    def peak_mb(self) -> float:
        """The peak resident memory of the worker's process so far, in MB."""
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    def compute(self, theta: bytes, job: bytes) -> bytes:
        """The loss sums and (if the job wants them) gradients of the micro-batches of `job`
        (`pack_job`: rows of the share) at the flat parameters `theta` (float64), in one float64
        array's bytes: the C losses, then (with gradients) the C gradients, row after row."""
        w = self.workers
        theta, job = np.frombuffer(theta, np.float64), np.frombuffer(job, np.int64)
        n, with_grad, c = (int(x) for x in job[:JOB_HEADER])
        n_theta = w.source.n_theta
        # into buffers of the share's own (writable: the kernels' types)
        self.theta[:] = theta
        self.job = at_least(self.job, len(job))
        self.out = at_least(self.out, c * (1 + n_theta * with_grad))
        self.job[: len(job)] = job
        starts = self.job[JOB_HEADER: JOB_HEADER + c + 1]
        rows = self.job[JOB_HEADER + c + 1: len(job)]
        out = self.out[: c * (1 + n_theta * with_grad)]
        grads = out[c:].reshape(c, n_theta) if with_grad else w.chunk_grads
        batch = Batch(rows, starts, 1.0 / n, bool(with_grad), grads, out[:c])
        w.compute_chunks(split_params(self.theta, w.source.n_pairs), batch, np.arange(c))
        return out.tobytes()


def pack_job(rows: np.ndarray, offset: int, cuts: np.ndarray, n: int,
             with_grad: bool) -> bytes:
    """A worker's job (`Share.compute`), an int64 array's bytes: the batch's positions `n`,
    `with_grad`, its C micro-batches, their C + 1 cuts `cuts` (from 0) and their store rows
    `rows` less `offset` (rows of the share)."""
    c = len(cuts) - 1
    job = np.empty(JOB_HEADER + c + 1 + len(rows), np.int64)
    job[:JOB_HEADER] = n, with_grad, c
    np.subtract(cuts, cuts[0], out=job[JOB_HEADER: JOB_HEADER + c + 1])
    np.subtract(rows, offset, out=job[JOB_HEADER + c + 1:])
    return job.tobytes()


class ClusterWorkers(Workers):
    """`Workers` whose micro-batches Ray actors (`Share`) compute, at most `n_workers` of them
    (one per share: `shares`), at `address` (`[cluster] address`); `layout` is the store they
    hold between them (the driver's `Layout`), `train` its training rows (what the shares
    balance), `spec` what each worker is given but its share, and `log` the run's. Starts a
    local Ray (or connects) unless this process already has one."""

    def __init__(self, layout: Layout, train: np.ndarray, spec: ShareSpec, cluster: tuple,
                 log: Callable[[str], None]):
        super().__init__(layout, spec.threads, spec.micro, spec.max_batch, segment=spec.segment)
        address, n_workers = cluster
        #: Where the shares begin (store rows), and the last one ends.
        self.bounds = shares(train, layout.n_rows, spec.segment, n_workers)
        self.started = not ray.is_initialized()
        if self.started:
            local = address == "local"  # a Ray of its own: Ray's settings are this module's
            try:
                ray.init(address=None if local else address, include_dashboard=False,
                         logging_level="WARNING",
                         _system_config=RAY_SYSTEM_CONFIG if local else None)
            except (ConnectionError, RuntimeError, ValueError) as e:
                raise TrainingError(f"[cluster] address = {address!r}: cannot start or reach "
                                    f"Ray: {error_line(e)}") from None
        t0 = time.perf_counter()
        n = len(self.bounds) - 1
        tr = spec.values["training"]  # a store per share: the cache keeps as many per run
        spec = replace(spec, values={**spec.values, "training": {
            **tr, "store_cache_keep": tr["store_cache_keep"] * n}})
        actor = ray.remote(Share).options(
            num_cpus=0, scheduling_strategy="SPREAD", max_restarts=MAX_RESTARTS,
            max_task_retries=MAX_RESTARTS)
        self.actors = [actor.remote(spec, layout.share_rows(lo, hi), layout.files)  # by value
                       for lo, hi in zip(self.bounds[:-1], self.bounds[1:])]
        #: What each worker said when its share was recorded (`Share.ready`).
        self.info = self._get([a.ready.remote() for a in self.actors])
        #: The workers' process ids (the process of worker w is ``pids[w]``).
        self.pids = [i["pid"] for i in self.info]
        fewer = (f" (not {n_workers}: the store has {math.ceil(layout.n_rows / spec.segment)} "
                 f"segment(s) of [training] segment = {spec.segment:,} rows)"
                 if n < n_workers else "")
        log(f"cluster: {n} worker(s) on Ray ({address}, {spec.threads} thread(s) each){fewer} "
            f"read and recorded their shares ({min(i['rows'] for i in self.info):,} to "
            f"{max(i['rows'] for i in self.info):,} positions) in "
            f"{time.perf_counter() - t0:.2f} s")

    def close(self) -> None:
        super().close()
        for a in self.actors:
            ray.kill(a)
        if self.started:
            ray.shutdown()

    def _compute(self, theta: np.ndarray, batch: Batch, n_chunks: int) -> None:
        """Each micro-batch by the worker whose share holds it; the results into ``batch.sse``
        and ``batch.chunk_grads``."""
        starts = batch.starts
        owner = np.searchsorted(self.bounds, batch.order[starts[:n_chunks]], side="right") - 1
        first = np.searchsorted(owner, np.arange(len(self.actors) + 1))  # chunks in store order
        theta = theta.tobytes()  # by value: small, in the call's message
        calls, spans = [], []
        for w, (a, b) in enumerate(zip(first[:-1], first[1:])):
            if b > a:
                calls.append(self.actors[w].compute.remote(theta, pack_job(
                    batch.order[starts[a]:starts[b]], self.bounds[w], starts[a:b + 1],
                    len(batch.order), batch.with_grad)))
                spans.append(slice(a, b))
        for span, result in zip(spans, self._get(calls)):
            c, out = span.stop - span.start, np.frombuffer(result, np.float64)
            batch.sse[span] = out[:c]
            if batch.with_grad:
                batch.chunk_grads[span] = out[c:].reshape(c, -1)

    def _get(self, calls: list):
        """`ray.get(calls)`; a worker Ray could not keep alive (or that failed) as a
        `TrainingError`."""
        try:
            return ray.get(calls)
        except ray.exceptions.RayActorError as e:
            raise TrainingError(f"a cluster worker died and Ray could not restart it (at most "
                                f"{MAX_RESTARTS} restarts): {error_line(e)}; the checkpoint of "
                                f"the last completed epoch is kept (--resume DIR continues)"
                                ) from None
        except ray.exceptions.RayError as e:
            cause = getattr(e, "cause", None) or e
            raise TrainingError(f"a cluster worker failed: {error_line(cause, last=True)}"
                                ) from None
