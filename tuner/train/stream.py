"""A replay run's data streamed into its store: no position is held longer than its batch.

After recording, replay training needs only the store (it holds every position's evaluation and
loss, the targets included), the split's index sets, the results and the validation positions
(for the held-out report at the end). So `stream_data` never builds the positions array that
`tuner.train.loop.load_data` builds for eager training; it reads each dataset in Arrow batches
(`tuner.data.loader.DatasetReader`: the same checks, bad-row reports and errors as
`load_dataset`) and passes over the files:

1. Every batch is parsed and checked, its results (and game numbers, until the split) kept and,
   when K is known and no ``[training] store_cache`` is set, its positions recorded into the
   store straight away (`tuner.train.record.StoreRecorder`), in file order: the store is then
   bitwise the one `record_store` makes of the concatenated positions.
2. The split by game (`tuner.train.split`), exactly as `load_data` makes it.
3. ``[loss] k = "fit"``: K is a scalar of every loss record, so it must be known before a
   position is recorded, and the fit sample is a set of training positions, known only after
   the split. The sample's rows are read again (only they are parsed) and K fitted to them,
   as for a loaded run; then the store is recorded in a second pass (step 5).
4. With a store cache: its key is made of digests of the positions, results and scores as they
   streamed (`DataDigest`), K, the loss and the code, so it is known only after the first pass;
   a hit is loaded instead of recorded.
5. Without a store yet (K was fitted, or the cache missed): a second pass records every position.
6. The validation positions are read again (only those rows parsed).

A second pass over a file checks that it still has the same valid rows (DatasetError if not).
"""
from __future__ import annotations

import hashlib
import time
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
import pyarrow as pa

from tuner.data.loader import DatasetReader
from tuner.data.trace import concat_positions, position_arrays
from tuner.tape.player import FreezeError, Store
from .record import StoreRecorder
from .split import group_ids
from .targets import fit_sample

if TYPE_CHECKING:
    from .loop import Data, Run


class DataDigest:
    """Digests of positions, results and scores, fed in any pieces: the same for the same data
    however it is cut (what a store cache's key is made of)."""

    def __init__(self):
        self.parts: list | None = None  # one digest per array (a trace's positions are 5)

    def update(self, positions, results: np.ndarray, score_cp: np.ndarray | None) -> None:
        arrays = position_arrays(positions) + (results, score_cp)
        if self.parts is None:
            self.parts = [hashlib.blake2b(digest_size=16) for _ in arrays]
        for h, arr in zip(self.parts, arrays):
            if arr is not None:
                h.update(np.ascontiguousarray(arr).data)

    def digest(self) -> bytes:
        return b"".join(h.digest() for h in self.parts or ())


class _Labels:
    """What the first pass keeps of every dataset: results (as twice their value, one byte
    each, while the store is being built) and game numbers."""

    def __init__(self, readers: list[DatasetReader]):
        self.halves = np.empty(sum(r.n_rows for r in readers), np.uint8)
        self.games: list[np.ndarray | None] = []
        self.sizes: list[int] = []
        self.n = 0

    def add(self, results: np.ndarray, game: np.ndarray | None) -> None:
        self.halves[self.n: self.n + len(results)] = results * 2  # 0, 1 or 2: exact
        if game is not None:
            self.games[-1][self.sizes[-1]: self.sizes[-1] + len(game)] = game
        self.sizes[-1] += len(results)
        self.n += len(results)

    def start(self, reader: DatasetReader) -> None:
        self.sizes.append(0)
        self.games.append(np.empty(reader.n_rows, np.int64) if reader.with_game else None)

    def end(self) -> None:
        game = self.games[-1]
        if game is not None:
            game.resize(self.sizes[-1], refcheck=False)

    def results(self) -> np.ndarray:
        """float64: every result kept (the byte per position is freed)."""
        results = self.halves[: self.n] * 0.5
        self.halves = None
        return results


def _read(run: Run, readers: list[DatasetReader], recorder: StoreRecorder | None,
          digest: DataDigest | None, labels: _Labels | None) -> None:
    """One pass over every dataset in order: each batch recorded (`recorder`), hashed
    (`digest`), its results and games kept (`labels`, the first pass, which logs each set)."""
    d = run.cfg["data"]
    for reader in readers:
        if labels is not None:
            labels.start(reader)
        for b in reader.batches():
            if labels is not None:
                labels.add(b.results, b.game)
            if digest is not None:
                digest.update(b.positions, b.results, b.score_cp)
            if recorder is not None:
                recorder.add(b.positions, run.targets(b.results, b.score_cp))
        pa.default_memory_pool().release_unused()  # Arrow's allocator keeps freed pages
        if labels is not None:
            labels.end()
            by = "games" if reader.with_game else f"blocks of {d['split_block']:,} positions"
            run.log(f"data: {reader.source}: {reader.kept:,} positions"
                    + (f" ({reader.n_bad:,} bad rows skipped)" if reader.n_bad else "")
                    + f"; split by {by}")


def _positions(readers: list[DatasetReader], sizes: list[int], rows: np.ndarray):
    """The positions of `rows` (sorted indices into the datasets' valid rows, concatenated)."""
    parts, offset = [], 0
    for reader, n in zip(readers, sizes):
        lo, hi = np.searchsorted(rows, [offset, offset + n])
        if hi > lo:
            parts.append(reader.positions(rows[lo:hi] - offset))
        offset += n
    return concat_positions(parts) if parts else readers[0].no_positions()


@contextmanager
def _recording(run: Run, expected: int) -> Iterator[StoreRecorder]:
    """A recorder for `run`'s store, with the observer's record events; a recording the player
    refuses is `Run.unplayable`."""
    tr = run.cfg["training"]
    run.observer.record_start(expected)
    recorder = StoreRecorder(run.evaluation, run.k, run.n_threads, tr["micro_batch_size"],
                             expected, progress=run.observer.record_progress,
                             loss=run.loss_form)
    try:
        yield recorder
    except FreezeError as e:
        raise run.unplayable(e) from None
    finally:
        recorder.close()
        run.observer.record_end()


def _finish(run: Run, recorder: StoreRecorder, t0: float) -> Store:
    """The recorder's store (recording started at `t0`), logged."""
    store = recorder.finish()
    run.log_recorded(store, time.perf_counter() - t0)
    return store


def stream_data(run: Run, prepare: Callable[[Callable[[], tuple]], None]) -> tuple[Data, Store]:
    """``[data] train`` of `run` streamed into its replay store (see the module docstring): the
    data (without its positions; with the validation positions) and the store.

    When the run has no K yet, ``prepare(sample)`` is called before anything is recorded: it
    fits K to the positions and results ``sample()`` returns and warms the kernels. With a K,
    the caller warms them first (`Run.prepare`).
    """
    from .loop import Data, find_data, split_data

    cfg = run.cfg
    d, tr = cfg["data"], cfg["training"]
    with ExitStack() as files:
        readers = [files.enter_context(DatasetReader(found, d["policy"], with_game=True,
                                                     need_scores=cfg["loss"]["score_blend"] > 0,
                                                     trace=run.evaluation.trace))
                   for found in find_data(cfg)]
        expected = sum(r.n_rows for r in readers)
        labels = _Labels(readers)
        digest = DataDigest() if tr["store_cache"] else None
        store = None
        if run.k is not None and digest is None:  # record while reading
            t0 = time.perf_counter()
            with _recording(run, expected) as recorder:
                _read(run, readers, recorder, None, labels)
                store = _finish(run, recorder, t0)
        else:
            _read(run, readers, None, digest, labels)
        results = labels.results()
        groups = group_ids(labels.sizes, labels.games, d["split_block"])
        labels.games = []
        split = split_data(groups, cfg)
        del groups
        if store is None:
            def sample():
                rows = split.train[fit_sample(len(split.train))]
                return _positions(readers, labels.sizes, rows), results[rows]

            if run.k is None:
                prepare(sample)
            if digest is not None:
                store = run.cached_store(run.store_key(digest), len(results))
            if store is None:
                t0 = time.perf_counter()
                with _recording(run, len(results)) as recorder:
                    _read(run, readers, recorder, None, None)
                    store = _finish(run, recorder, t0)
                if digest is not None:
                    run.keep_store(store, run.store_key(digest))
        val_positions = _positions(readers, labels.sizes, split.val)
    return Data(None, results, split.train, split.val, [r.source for r in readers], None,
                split.train_games, split.val_games, val_positions), store
