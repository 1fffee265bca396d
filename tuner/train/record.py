"""Recording positions for training: each position's evaluation and its loss chain on the tape.

The loss is recorded with the position: ``(sigmoid(K * eval) - target)^2`` or the cross-entropy
(`tuner.train.targets`), the target (game result, or its blend with the engine's score) being a
scalar of the record. A micro-batch is recorded in two segments (every evaluation, then every
loss chain; see `tuner.tape.player`), and ``slots[0, i]`` / ``slots[1, i]`` are position i's
evaluation and loss. The eager trainer does this every epoch and sweeps the recording; the replay
trainer does it once per position and freezes the recordings into a store (`StoreRecorder`,
`record_store`).
Both then run the same records through the same sweeps, so they agree bit for bit.
"""
from __future__ import annotations

import math
import queue
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
from numba import njit
from tuner.jit import BORROWED

from tuner.data.trace import concat_positions, position_count, take_positions
from tuner.tape import TapeFullError, grow, new_tape, reset
from tuner.tape.follow import Template, followed_chunk, template_of
from tuner.tape.ops import F_SIGMOID_SQ_ERR, record_loss
from tuner.tape.player import (FreezeError, Store, StoreBuilder, extract, reordered_store,
                               return_freed_memory)

#: Initial tape capacity per position (grown on demand, outside the hot loop).
RECORDS_PER_POSITION = 16
OPERANDS_PER_POSITION = 128
#: Segments of a recorded micro-batch: the evaluations, then the loss chains.
EVAL, LOSS = 0, 1
#: Positions a replay run records on a tape at a time (`StoreRecorder`): the store is the same
#: for any number (tests/test_train_replay.py), but each micro-batch's extraction and addition
#: to the store cost Python work (under the GIL, so that it does not run on two threads at
#: once) that 2048 positions share twice as thinly as 1024 do. More would save more (4096: a
#: quarter) but holds more per thread (measured at 1 M positions of clockwork-10d79e6 on 2
#: threads, benchmarks/memory.py: peak +12 MB at 2048, +40 MB at 4096).
RECORD_MICRO = 2048


@njit(**BORROWED)
def record_losses(tape, slots, results, rows, k, loss):
    """The loss of every position, record form `loss` (one of `tuner.tape.ops.LOSS_FORMS`) with
    K and the target as the record's scalars: ``slots[LOSS, i]`` from ``slots[EVAL, i]``."""
    for i in range(rows.shape[0]):
        slots[LOSS, i] = record_loss(tape, slots[EVAL, i], k, results[rows[i]], loss)


def new_training_tape(registry, micro: int):
    """A tape sized for `micro` positions of an evaluation with `registry`'s parameters. It
    does not evaluate its records as they are appended (``evaluate=False``): training freezes
    and replays them, and never reads the values recording would compute."""
    return new_tape(registry.n_values, registry.n_params,
                    records=micro * RECORDS_PER_POSITION + 8,
                    operands=micro * OPERANDS_PER_POSITION + 8, evaluate=False)


class Labelled(NamedTuple):
    """Positions with what their loss records need: `targets` (float64, one per position), K
    and the loss record form."""

    positions: object  # uint64[n, 9], or a trace's rows
    targets: np.ndarray
    k: float
    loss: int


def record_positions(evaluation, tape, scratch, batch: Labelled, rows, slots):
    """Record ``batch.positions[rows]`` with their losses on `tape` (from empty); ``slots``
    int64[2, n].

    Returns ``(tape, scratch)``: a full tape is grown (and the scratch, which a failed recording
    may have left with terms in it, made anew) and the micro-batch recorded again. An index out
    of range handed to a recorder raises `tuner.evals.EvaluationIndexError` naming the position.
    """
    positions, results, k, loss = batch
    while True:
        reset(tape)
        try:
            evaluation.record_batch(tape, scratch, positions, rows, slots[EVAL])
            record_losses(tape, slots, results, rows, k, loss)
            break
        except TapeFullError:
            tape, scratch = grow(tape), evaluation.new_scratch()
    evaluation.check_recording(tape, positions, rows, slots)
    return tape, scratch


#: Contiguous parts a blocks run's recording order is cut into (`StoreRecorder` given an
#: order): each part's store is built in file order and appended to the store in the order at
#: the end, so the recording holds the store once and one part (1/64 of it) besides.
RECORD_PARTS = 64
#: Times a recording in parts gives the memory it freed back to the system (evenly over the
#: positions given): the parts' arrays come from the C library's heap, among what the recording
#: allocates and frees, and what it freed stays resident between them otherwise (11 bytes a
#: position at the end of 6.97 M of clockwork). Not at every batch: what the next batch
#: allocates would be paged in again (2.1 GB at 6.97 M, +1 s of CPU) for no lower peak.
RECORD_TRIMS = 16
#: The part of a position in no part of the order (dropped: neither trained on nor held out).
NO_PART = np.iinfo(np.uint8).max
#: Positions given to the recording threads and not yet recorded at which `StoreRecorder.add`
#: waits (48 micro-batches of `RECORD_MICRO`): so far ahead the reader may run. A blocks run's
#: parts fill their micro-batches at about the same time (each takes 1/64 of every batch), so
#: its micro-batches come in bursts of `RECORD_PARTS` every few batches; waiting for each batch's
#: recording before the next was read left the threads idle between the bursts (loading
#: 6.97 M positions of clockwork-10d79e6 used 1.37 of 2 cores). This lets the reader read on
#: while they work off a burst, and bounds what it holds ahead of them (about 7 MB of positions).
RECORD_AHEAD = 48 * RECORD_MICRO
#: Positions of a part appended to the store at a time (`tuner.tape.player.reordered_store`):
#: each addition costs Python work that more positions share more thinly.
REORDER_CHUNK = 1 << 16


class _Parts:
    """A recording order `order` (rows of the positions given, in the store's order) cut into
    contiguous parts of `size` positions: `of` (uint8, up to the last row in the order) is each
    position's part (NO_PART: in none; so is every position after it), `local(p)` where the rows
    of part p lie among its positions in the order given."""

    def __init__(self, order: np.ndarray):
        self.order = order
        self.size = max(1, math.ceil(len(order) / RECORD_PARTS))
        self.count = math.ceil(len(order) / self.size)
        self.of = np.full(int(order.max()) + 1 if len(order) else 0, NO_PART, np.uint8)
        for p in range(self.count):
            self.of[order[p * self.size: (p + 1) * self.size]] = p

    def split(self, first: int, n: int) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
        """The `n` positions given from position `first` on, by part: ``(indices, cuts)``,
        the indices (in the order given) of those in a part, part after part, and ``(part, lo,
        hi)`` for every part with some: they are ``indices[lo:hi]``."""
        parts = self.of[first: first + n]  # shorter past the last row in the order: in none
        by_part = np.argsort(parts, kind="stable")
        bounds = np.searchsorted(parts[by_part], np.arange(self.count + 1))
        return by_part[: bounds[-1]], [(p, lo, hi) for p, (lo, hi)
                                        in enumerate(zip(bounds, bounds[1:])) if hi > lo]

    def local(self, p: int) -> np.ndarray:
        """The positions of part p in the store's order, as indices among the part's positions
        in the order given (the rows of its store)."""
        rows = self.order[p * self.size: (p + 1) * self.size]
        local = np.empty(len(rows), np.int64)
        local[np.argsort(rows)] = np.arange(len(rows))
        return local


class _Worker(NamedTuple):
    """What recording a micro-batch works in: a tape, the evaluation's scratch and the slots of
    the positions' outputs (one per thread); the template of the last micro-batch it copied out
    in full, if its positions all had one (`tuner.tape.follow`)."""

    tape: object
    scratch: object
    slots: np.ndarray
    template: Template | None = None


class _Job(NamedTuple):
    """A micro-batch to record: rows ``lo:hi`` of `batch`, into builder `builder`, the first of
    them its `base`-th position (what its errors are numbered from)."""

    builder: int
    batch: Labelled
    lo: int
    hi: int
    base: int


class StoreRecorder:
    """Records positions into a `Store` as they come, batch by batch: what a replay run does
    while it reads its data (`tuner.train.stream`), so that the positions are never all held.

    Every position is recorded once with its loss (record form `loss`, K `k`, the target given
    with it) in micro-batches of `micro` consecutive positions counted from the first one given,
    whatever the batches `add` is called with: a batch's last, partial micro-batch waits for the
    next batch (or `finish`). Micro-batches are recorded on `n_threads` threads and go into the
    store in order as soon as their turn comes (a finished micro-batch waits only for the ones
    before it), so the recordings are never all held at once either; the store is the same for
    any thread count and any batches. With several threads, `add` returns as soon as the batch's
    micro-batches are queued, so that the caller reads the next batch meanwhile; an `add` waits
    only while more than `RECORD_AHEAD` positions are queued or being recorded, `finish` for
    all, and either raises what the first micro-batch queued that failed raised (whichever
    thread failed first). `stored` positions (a hint) size the store's arrays. `progress(n)` is
    called (from the worker threads) after each micro-batch of n positions.

    Given, as `stored`, an order (a blocks run's `tuner.train.stream.record_order`: rows of the
    positions that will be given, in the store's order), the store holds the positions in that
    order, bitwise the store of them given in that order, and positions not in it are dropped.
    The order is cut into `RECORD_PARTS` contiguous parts, each with its own builder (and
    micro-batches) fed its positions in the order given; `finish` appends each part's store,
    permuted into the order, to the store and frees it (`tuner.tape.player.reordered_store`).
    A part's errors number its positions in the order given, from its first.
    """

    def __init__(self, evaluation, k: float, n_threads: int, micro: int = RECORD_MICRO,
                 stored: int | np.ndarray = 0, progress=None, loss: int = F_SIGMOID_SQ_ERR):
        reg = evaluation.registry
        self.evaluation, self.k, self.loss, self.micro = evaluation, k, loss, micro
        self.n_threads, self.progress = n_threads, progress
        ordered = isinstance(stored, np.ndarray)
        self.parts = _Parts(stored) if ordered else None
        self.expected = len(stored) if ordered else stored
        sizes = [self.parts.size] * self.parts.count if ordered else [stored]
        self.builders = [StoreBuilder(reg.n_values, reg.n_params, size) for size in sizes]
        # one (tape, scratch, slots) per thread: a micro-batch takes one that is free
        self.free: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(n_threads):
            self.free.put(_Worker(new_training_tape(reg, micro), evaluation.new_scratch(),
                                  np.zeros((2, micro), np.int64)))
        self.pool = ThreadPoolExecutor(n_threads) if n_threads > 1 else None
        self.lock = threading.Lock()
        self.given = 0                 # positions given
        self.next_trim = 0             # positions given when the next trim is due (parts only)
        self.done = [0] * len(sizes)   # positions of each builder given to the workers
        # each builder's partial micro-batch (positions of any kind)
        self.pending = [(None, np.zeros(0)) for _ in sizes]
        self.queued = 0                # micro-batches given to the workers so far
        self.turn = 0                  # the next of them to go into its builder
        self.ready: dict = {}          # recorded micro-batches waiting for their turn
        self.running: deque = deque()  # (future, positions) of the micro-batches in flight
        self.in_flight = 0             # their positions

    def add(self, positions: np.ndarray, targets: np.ndarray) -> None:
        """Record `positions` (uint64[n, 9], or a trace's rows) with their targets
        (float64[n]), after the ones given before."""
        self.wait(RECORD_AHEAD)
        n = len(targets)
        if self.parts is None:
            parts = [(0, positions, targets)]
        else:
            if self.given >= self.next_trim:  # (`RECORD_TRIMS`)
                return_freed_memory()
                self.next_trim = self.given + max(1, self.expected // RECORD_TRIMS)
            # gathered in one go, part after part, each part then a slice of them (64 small
            # gathers a batch, each a fresh array, made recording in parts a fifth slower)
            rows, cuts = self.parts.split(self.given, n)
            ordered, ordered_targets = take_positions(positions, rows), targets[rows]
            parts = [(p, take_positions(ordered, slice(lo, hi)), ordered_targets[lo:hi])
                     for p, lo, hi in cuts]
        self.given += n
        jobs = []
        for b, positions, targets in parts:
            before = self.pending[b]
            if len(before[1]):
                positions = concat_positions([before[0], positions])
                targets = np.concatenate([before[1], targets])
            whole = len(targets) // self.micro * self.micro
            self.pending[b] = (take_positions(positions, slice(whole, None)), targets[whole:])
            jobs += self._jobs(b, positions, targets, whole)
        self._record(jobs)

    def finish(self) -> Store:
        """The store of every position added (the recorder is spent)."""
        try:
            self.wait()
            pending, self.pending = self.pending, []
            self._record([job for b, (positions, targets) in enumerate(pending)
                          for job in self._jobs(b, positions, targets, len(targets))])
            del pending
            self.wait()
            builders, self.builders = self.builders, None  # their arrays are the stores'
            stores = [builder.finish() for builder in builders]
            del builders
            if self.parts is None:
                return stores[0]
            parts, self.parts = self.parts, None
            parts.of = None  # (every position is in its part's store)
            return reordered_store(stores, map(parts.local, range(parts.count)), self.expected,
                                   REORDER_CHUNK, self.n_threads)
        finally:
            self.close()

    def wait(self, ahead: int = 0) -> None:
        """Until at most `ahead` positions given are still to be recorded (the micro-batches'
        exceptions raised here, the first given first). Micro-batches already recorded at the
        head of the queue are let go too, so that `in_flight` counts only those still to be
        recorded and a failure is raised at the next `add`, not `RECORD_AHEAD` positions later."""
        while self.running and (self.in_flight > ahead or self.running[0][0].done()):
            future, n = self.running.popleft()
            self.in_flight -= n
            future.result()

    def close(self) -> None:
        """Stop the workers and free the tapes (the recorder is spent): whoever still holds the
        recorder (a reference cycle did, until the collector ran) holds no recording."""
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
        self.free = self.running = self.ready = None

    def _jobs(self, b: int, positions, targets: np.ndarray, n: int) -> list[_Job]:
        """The micro-batches of the first `n` of `positions` for builder `b`."""
        batch = Labelled(positions, targets, self.k, self.loss)
        base, self.done[b] = self.done[b], self.done[b] + n
        return [_Job(b, batch, lo, min(n, lo + self.micro), base + lo)
                for lo in range(0, n, self.micro)]

    def _record(self, jobs: list[_Job]) -> None:
        """Queue `jobs` for the workers, after the ones queued before (recorded at once on one
        thread)."""
        for job in jobs:
            if self.pool is None:
                self._work(self.queued, job)
            else:
                n = job.hi - job.lo
                self.running.append((self.pool.submit(self._work, self.queued, job), n))
                self.in_flight += n
            self.queued += 1

    def _work(self, seq: int, job: _Job) -> None:
        """Record micro-batch number `seq` (`job`) on a free tape, and put the recorded ones
        whose turn has come into their builders."""
        w = self.free.get()
        try:
            slots = w.slots[:, : job.hi - job.lo]
            tape, scratch = record_positions(self.evaluation, w.tape, w.scratch, job.batch,
                                             np.arange(job.lo, job.hi), slots)
            w = w._replace(tape=tape, scratch=scratch)
            # (positions of the template of the micro-batch before are copied out without
            # matching them; any other, copied out in full, may give a template to follow)
            part = None if w.template is None else followed_chunk(tape.rec, w.template, slots)
            if part is None:
                try:
                    part = extract(tape.rec, slots, base=job.base)
                except FreezeError as e:
                    if self.parts is None:
                        raise
                    raise FreezeError(f"{e} (positions numbered in part {job.builder} of the "
                                      f"recording order)") from None
                reg = self.evaluation.registry
                w = w._replace(template=template_of(part, reg.n_values, reg.n_params))
        finally:
            self.free.put(w)
        with self.lock:
            self.ready[seq] = (job.builder, part)
            while self.turn in self.ready:
                builder, part = self.ready.pop(self.turn)
                self.builders[builder].add(part)
                self.turn += 1
        if self.progress is not None:
            self.progress(job.hi - job.lo)


def record_store(evaluation, positions: np.ndarray, results: np.ndarray, k: float,
                 n_threads: int, micro: int = RECORD_MICRO, progress=None,
                 loss: int = F_SIGMOID_SQ_ERR) -> Store:
    """Record every position with its loss (record form `loss`, target `results`) once and
    freeze the recordings into a `Store` (a `StoreRecorder` given them all at once)."""
    recorder = StoreRecorder(evaluation, k, n_threads, micro, position_count(positions), progress,
                             loss)
    try:
        recorder.add(positions, results)
    except BaseException:
        recorder.close()
        raise
    return recorder.finish()
