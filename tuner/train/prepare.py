"""Before a run's first epoch: its kernels warmed, its data loaded or streamed, K and the store.

`Preparation.run` does it in this order, so that every timing in the log measures only its work:

1. The bulk FEN parser is warmed (compiled on a cold cache) before the data is loaded, so that a
   missing dataset is reported before the other kernels compile.
2. A replay run that loads its own data streams it (`tuner.train.stream.DataStream`): with K
   known, every kernel is warmed first (`tuner.train.warmup.warm_up`), and the positions are
   recorded into the store as they are read, or, with ``[training] store_cache``, looked up
   there by the digest of what was read (`tuner.train.storecache`); with ``[loss] k = "fit"``
   K is fitted after the first pass (to the fit sample of the training games, read again) and
   the kernels warmed, then the store recorded in a second pass. Under ``[training] shuffle =
   "blocks"`` the store's order (`tuner.train.stream.record_order`) needs the split: the first
   pass records nothing, and the second gives the positions to a recorder that puts them in
   that order (`tuner.train.record.StoreRecorder`); the cache's key includes the order.
3. Otherwise (eager epochs, or data given to the run) every position is in memory: K is
   fitted if need be, the kernels warmed, the positions put in a blocks run's recording order
   (`tuner.train.stream.in_record_order`), the targets made
   (`tuner.train.targets.blend_targets`) and, for replay epochs, the store recorded once (or
   loaded from the cache).

It returns what the epochs need (`Prepared`); it calls the layers below and nothing of the loop.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from tuner.compiling import CompileWatch, watch_compilation
from tuner.evals.generic import continuous
from tuner.tape.player import FreezeError, Store, return_freed_memory, store_len, store_nbytes
from .config import Config, ConfigError
from .errors import TrainingError
from .optimizer import Optimizer
from .progress import Observer
from .record import StoreRecorder, record_store
from .storecache import store_cache
from .stream import Data, DataDigest, DataStream, in_record_order, load_data
from .targets import LOSS_FORMS, KFitError, blend_targets, fit_k, mse_at
from .warmup import warm_positions, warm_up
from .workers import EagerSource, ReplaySource, split_params


def unplayable(evaluation: str, e: FreezeError) -> TrainingError:
    """The error of a recording of `evaluation` the player refuses (`e`)."""
    return TrainingError(
        f"evaluation {evaluation!r} cannot be played: {e}. Every slot a position reads must be "
        f"a parameter or written by an earlier record of the same position (record constants "
        f"per position with record_const)")


@dataclass
class Prepared:
    """What a run's epochs need: the data, K, and the store (replay) or the targets (eager)."""

    data: Data
    k: float
    store: Store | None
    targets: np.ndarray | None

    def source(self, evaluation, loss: int) -> ReplaySource | EagerSource:
        """The source of the epochs' micro-batch gradients (`tuner.train.workers`)."""
        if self.store is not None:
            return ReplaySource(self.store)
        return EagerSource(evaluation, self.data.positions, self.targets, self.k, loss)


class Preparation:
    """The preparation of a run of `cfg` tuning `evaluation` from parameters `theta` on
    `n_threads` threads, K `k` (None: ``[loss] k = "fit"``), with the run's `observer` and
    `log`; its store cache is the configuration's (`tuner.train.storecache.store_cache`)."""

    def __init__(self, cfg: Config, evaluation, theta: np.ndarray, k: float | None,
                 n_threads: int, observer: Observer, log: Callable[[str], None]):
        self.cfg, self.evaluation, self.theta, self.k = cfg, evaluation, theta, k
        self.n_threads, self.observer, self.log = n_threads, observer, log
        self.stores = store_cache(cfg, evaluation, log)
        self.loss = LOSS_FORMS[cfg["loss"]["function"]]
        self.eager = cfg["training"]["mode"] == "eager"
        self.compiling = CompileWatch()

    def run(self, data: Data | None) -> Prepared:
        """Everything before the first epoch (see the module docstring); `data` None: the
        configuration's, loaded here."""
        with watch_compilation(self.observer.compile_start, self.compiling):
            warm_positions()
        blocks = self.cfg["training"]["shuffle"] == "blocks"  # recorded in a random order
        streamed = data is None and not self.eager
        if streamed and self.k is not None:  # warmed first: the load's time is the data's own
            self.warm(None)
        store = None
        if data is None:
            self.observer.load_start(self.cfg["data"]["train"])
            t0 = time.perf_counter()
            if streamed:  # the positions go into the store as they are read, and are not kept
                data, store = self.stream()
                return_freed_memory()  # (what recording freed: a blocks run's order, say)
            else:
                data = load_data(self.cfg, self.log)
            self.observer.load_end(len(data), time.perf_counter() - t0)
        self.log_split(data)
        if store is not None:
            return Prepared(data, self.k, store, None)
        self.warm(data.fit_sample)
        if blocks:  # after the K fit: the same sample of positions in every mode
            data = in_record_order(data, self.cfg["training"]["shuffle_seed"])
        targets = self.targets(data.results, data.score_cp)
        return Prepared(data, self.k, None if self.eager else self.replay_store(data, targets),
                        targets)

    def log_split(self, data: Data) -> None:
        held = (f"{len(data.val):,} ({data.val_games:,} whole games, none of them trained on)"
                if len(data.val) else "0 (no validation)")
        reg = self.evaluation.registry
        self.log(f"train {len(data.train):,} positions ({data.train_games:,} games), validation "
                 f"{held}; {reg.n_params} parameters ({int((~reg.constant).sum())} tunable); "
                 f"{self.n_threads} thread(s)")

    def warm(self, sample: Callable[[], tuple] | None) -> None:
        """K (fitted to ``sample()``'s positions and results if the configuration says ``k =
        "fit"``; `sample` may be None otherwise) and every kernel warmed (compiled on a cold
        cache, which is logged)."""
        with watch_compilation(self.observer.compile_start, self.compiling):
            if self.k is None:
                self.k = self.fit_k(*sample())
            try:
                warm_up(self.evaluation, self.k, self.loss, self.eager,
                        Optimizer(self.cfg["optimizer"]))
            except FreezeError as e:
                raise unplayable(self.evaluation.name, e) from None
        if self.compiling.compiled:
            self.observer.compile_end(self.compiling.seconds)
            self.log(f"compiled the kernels in {self.compiling.seconds:.1f} s (once: later runs "
                     f"load them from the cache)")

    def fit_k(self, positions: np.ndarray, results: np.ndarray) -> float:
        """``[loss] k = "fit"``: the K that fits the starting parameters to training positions
        `positions` (the `fit_sample` of the training games) with `results`."""
        t0 = time.perf_counter()
        pairs, values = split_params(self.theta, self.evaluation.registry.n_params)
        evals = continuous(self.evaluation, positions, pairs, values)
        try:
            k = fit_k(evals, results)
        except KFitError as e:
            raise ConfigError(f"{self.cfg.path}: [loss] k = \"fit\": {e}") from None
        self.log(f"K fitted to the starting parameters on {len(results):,} training positions: "
                 f"K = {k:.6g} (mean squared error {mse_at(k, evals, results):.6f}; "
                 f"{time.perf_counter() - t0:.2f} s)")
        return k

    def targets(self, results: np.ndarray, score_cp: np.ndarray | None) -> np.ndarray:
        """What the predictions are fitted to (`blend_targets` at the run's K)."""
        try:
            return blend_targets(results, score_cp, self.k, self.cfg["loss"]["score_blend"])
        except ValueError as e:
            raise TrainingError(f"[loss] score_blend: {e}") from None

    def store_key(self, digest: DataDigest) -> str:
        return self.stores.key(digest.digest(), self.k,
                               (self.loss, self.cfg["loss"]["score_blend"]))

    @contextmanager
    def recording(self, expected: int,
                  order: np.ndarray | None = None) -> Iterator[StoreRecorder]:
        """A recorder of the store (`expected` positions, a hint; given in file order and stored
        in `order`, if given: `StoreRecorder`), with the observer's record events (`finish` it
        inside)."""
        self.observer.record_start(expected)
        recorder = StoreRecorder(self.evaluation, self.k, self.n_threads,
                                 stored=expected if order is None else order,
                                 progress=self.observer.record_progress, loss=self.loss)
        try:
            yield recorder
        except FreezeError as e:
            raise unplayable(self.evaluation.name, e) from None
        finally:
            recorder.close()
            self.observer.record_end()

    def finish(self, recorder: StoreRecorder, t0: float) -> Store:
        """The recorder's store (recording started at `t0`), logged."""
        store = recorder.finish()
        self.log_recorded(store, time.perf_counter() - t0)
        return store

    def record_into(self, recorder: StoreRecorder):
        """The sink that records the batches of a pass with their targets."""
        return lambda positions, results, score_cp: recorder.add(
            positions, self.targets(results, score_cp))

    def stream(self) -> tuple[Data, Store]:
        """``[data] train`` streamed into the store (see the module docstring)."""
        tr = self.cfg["training"]
        blocks = tr["shuffle"] == "blocks"
        with DataStream(self.cfg, self.evaluation.trace, self.log) as files:
            digest = DataDigest() if self.stores is not None else None
            store = order = None
            if self.k is not None and digest is None and not blocks:  # record while reading
                t0 = time.perf_counter()
                with self.recording(files.n_rows) as recorder:
                    files.first_pass(self.record_into(recorder))
                    store = self.finish(recorder, t0)
            else:
                files.first_pass(digest.update if digest is not None else None)
            if store is None:
                if self.k is None:
                    self.warm(files.sample)
                if blocks:
                    order = files.store_order(tr["shuffle_seed"])
                n_stored = files.n_positions if order is None else len(order)
                if digest is not None:
                    if order is not None:
                        digest.order(order)
                    store = self.stores.load(self.store_key(digest), n_stored)
                if store is None:
                    t0 = time.perf_counter()
                    with self.recording(files.n_positions, order) as recorder:
                        files.second_pass(self.record_into(recorder))
                        store = self.finish(recorder, t0)
                    if digest is not None:
                        self.stores.keep(store, self.store_key(digest))
            return files.data(order), store

    def replay_store(self, data: Data, targets: np.ndarray) -> Store:
        """Every position of in-memory `data` recorded and frozen for the player (or loaded
        from ``[training] store_cache``)."""
        key = None
        if self.stores is not None:
            digest = DataDigest()
            digest.update(data.positions, data.results, data.score_cp)
            key = self.store_key(digest)
            store = self.stores.load(key, len(data.positions))
            if store is not None:
                return store
        t0 = time.perf_counter()  # after the cache lookup: the recording alone
        self.observer.record_start(len(data.positions))
        try:
            store = record_store(self.evaluation, data.positions, targets, self.k,
                                 self.n_threads, progress=self.observer.record_progress,
                                 loss=self.loss)
        except FreezeError as e:
            raise unplayable(self.evaluation.name, e) from None
        finally:
            self.observer.record_end()
        self.log_recorded(store, time.perf_counter() - t0)
        if key is not None:
            self.stores.keep(store, key)
        return store

    def log_recorded(self, store: Store, seconds: float) -> None:
        n = store_len(store)
        self.log(f"replay: recorded {n:,} positions once in {seconds:.2f} s "
                 f"({store_nbytes(store) / max(1, n):.0f} bytes each, {len(store.t_temps)} "
                 f"record structure(s))")
