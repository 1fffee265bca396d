"""The epoch loop: data, split, initialisation, optimiser steps, checkpoints and outputs.

A run writes into its output directory:

* ``config.toml``: the configuration it was started with;
* ``train.log``: one line per epoch (also printed);
* ``checkpoint.npz``: after every epoch, atomically: parameters, optimiser state, step and epoch,
  the shuffle RNG state, the loss history and the config digest;
* ``params.json`` and ``params.hpp``: the current parameters (registry JSON, with the
  evaluation's name and the K the run trains with; C++ in the evaluation's export style, the K
  in a comment);
* ``best.json`` and ``best.hpp``: the parameters of the epoch with the lowest validation loss so
  far (the epoch is in the JSON's ``meta``), which is what a run's result usually is: later
  epochs may fit the training games better and the held-out games worse;
* ``loss.csv`` and ``loss.png``: the loss history, at the end.

The validation positions are whole games (`tuner.train.split`). A run ends by comparing, on them,
the loss of the engine's integer evaluation with the best parameters against the starting
parameters: the check an engine author would make with ``tuner eval``.

Resuming from the checkpoint continues bit for bit as if the run had never stopped, and first
brings the outputs up to date with it (a kill between the checkpoint and the outputs leaves them
an epoch behind). One process at a time trains in a directory (tuner/train/rundir.py); every
array of a checkpoint is checked before it is used (tuner/train/checkpoint.py).

The run is made of parts that the loop calls, and that never call it back: the state the
checkpoint holds (`tuner.train.checkpoint.TrainState`), what comes before the first epoch
(warm-up, data, K and the store: `tuner.train.prepare`, which loads or streams the data with
`tuner.train.stream` and keeps stores with `tuner.train.storecache`), the batch gradient
(`tuner.train.workers`), the optimiser (`tuner.train.optimizer`) and the output files
(`tuner.train.outputs`).
"""
from __future__ import annotations

import contextlib
import json
import math
import time
from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np

from tuner.compiling import watch_compilation
from tuner.evals import get_evaluation
from tuner.fileio import WriteError, atomic_write, remove_stale_temps
from .checkpoint import HISTORY_FIELDS, CheckpointError, Expect, TrainState, load_state, save_state
from .config import Config, ConfigError, load_config, require_ray
from .errors import TrainingError
from .heldout import default_theta, integer_evals
from .optimizer import Optimizer
from .outputs import Outputs
from .prepare import Preparation, unplayable
from .progress import Observer
from .pull import Pull
from .rundir import (RUN_META, RunBusyError, RunLock, RunMetaError, claim_new_dir,
                     discard_new_run, read_meta, write_meta)
from .schedule import check_patterns, learning_rate, trainable_mask
from .storecache import store_cache
from .stream import Data, batch_positions, epoch_batches, find_data, load_data
from .targets import mse_at
from tuner.tape.player import FreezeError, return_freed_memory
from .workers import Workers, resolve_threads, split_params

__all__ = ["CHECKPOINT", "HISTORY_FIELDS", "MAX_PARAM", "Data", "Run", "TrainingError",
           "find_data", "initial_params", "load_data", "start_run"]

CHECKPOINT = "checkpoint.npz"
#: Parameters beyond this magnitude mean the run diverged (an engine's integers cannot hold them).
MAX_PARAM = 1e9
#: What `start_run` creates in a new run directory (removed again if the run fails before its
#: first checkpoint).
NEW_RUN_FILES = ("config.toml", RUN_META, "train.log")


def initial_params(cfg: Config, registry) -> np.ndarray:
    """The flat starting vector (pairs, then values) per ``[evaluation] init``; constants always
    hold their defaults."""
    ev = cfg["evaluation"]
    init = ev["init"]
    n, n_values = registry.n_params, registry.n_values
    if init == "zero":
        params, values = np.zeros((n, 2)), np.zeros(n_values)
    elif init == "default":
        params, values = np.array(registry.defaults), np.array(registry.value_defaults)
    elif init == "random":
        rng = np.random.default_rng(ev["random_seed"])
        lo, hi = ev["random_center"] - ev["random_range"], ev["random_center"] + ev["random_range"]
        params = rng.uniform(lo, hi, size=(n, 2))
        values = rng.uniform(lo, hi, size=n_values)
    else:
        from tuner.evals.registry import ParamRegistry
        path = cfg.resolve_path(init)
        if not Path(path).exists():
            raise ConfigError(f"[evaluation] init: no such parameter file {path} (or use "
                              f"'zero', 'default' or 'random')")
        try:
            loaded = ParamRegistry.from_json(path)
        except ValueError as e:  # ParamFileError: names the file and what is wrong
            raise ConfigError(f"[evaluation] init: {e}") from None
        if (loaded.names != registry.names or loaded.n_params != n
                or loaded.n_values != n_values):
            raise ConfigError(f"[evaluation] init: {path} does not hold the parameters of "
                              f"this evaluation")
        params, values = np.array(loaded.defaults), np.array(loaded.value_defaults)
    const = np.asarray(registry.constant, dtype=bool)
    params[const] = registry.defaults[const]
    vconst = np.asarray(registry.value_constant, dtype=bool)
    values[vconst] = registry.value_defaults[vconst]
    return np.concatenate([params.reshape(-1), values])


class Run:
    """One training run in an output directory (new or resumed)."""

    def __init__(self, cfg: Config, out_dir: Path, *, threads: int | None = None,
                 epochs: int | None = None, log: Callable[[str], None] = lambda line: None,
                 observer: Observer | None = None):
        self.cfg = cfg
        tr = cfg["training"]
        self.epochs = epochs if epochs is not None else tr["epochs"]
        self.n_threads = resolve_threads(tr["threads"] if threads is None else threads)
        self.observer = observer if observer is not None else Observer()
        try:
            self.evaluation = get_evaluation(cfg["evaluation"]["name"], cfg.resolve_path("."))
        except ValueError as e:
            raise ConfigError(f"{cfg.path or 'config'}: [evaluation] name: {e}") from None
        self.registry = self.evaluation.registry
        if self.evaluation.trace is not None and tr["mode"] == "eager":
            raise ConfigError(f"{cfg.path or 'config'}: [training] mode = \"eager\": the trace "
                              f"evaluation {self.evaluation.name!r} trains in replay mode")
        try:
            check_patterns(self.registry, cfg["freeze"]["stages"])
        except ValueError as e:
            raise ConfigError(f"{cfg.path}: {e}") from None
        k = None if cfg["loss"]["k"] == "fit" else float(cfg["loss"]["k"])  # fitted in `train`
        #: What the checkpoint holds; everything that changes as the run trains.
        self.state = TrainState.start(initial_params(cfg, self.registry), k, tr["shuffle_seed"])
        self.outputs = Outputs(out_dir, self.evaluation, log)
        self.stores = store_cache(cfg, self.evaluation, self.log)
        self.optimizer = Optimizer(cfg["optimizer"])
        #: ``[cluster]`` (address, workers): workers >= 1 computes the batches on Ray actors.
        self.cluster = (cfg["cluster"]["address"], cfg["cluster"]["workers"])
        if self.cluster[1]:
            require_ray(f"{cfg.path or 'config'}: [cluster] workers = {self.cluster[1]}")
        #: The batch gradient's workers while the epochs run (`Workers` or `ClusterWorkers`).
        self.workers: Workers | None = None
        self.lock = RunLock(self.out)
        self.discard_on_failure = False  # a new run: undo its start if no epoch completes
        #: ``(theta, positions) -> integer_evals(...)`` of the held-out report (a
        #: cross-validation's fold runs share a `tuner.train.heldout.EvalMemo`). A partial, not a
        #: closure over the run: a run dropped unrun is freed at once, and its lock with it.
        self.heldout_evals: Callable[[np.ndarray, np.ndarray], tuple] = partial(
            integer_evals, self.evaluation)
        self.created_dir = False

    # -- what callers read of the state --------------------------------------------------------
    out = property(lambda self: self.outputs.out, doc="The run directory.")
    theta = property(lambda self: self.state.theta, doc="The flat parameter vector.")
    theta0 = property(lambda self: self.state.theta0, doc="Where ``[optimizer] pull`` pulls.")
    k = property(lambda self: self.state.k, doc="K (None until fitted).")
    epoch = property(lambda self: self.state.epoch, doc="Epochs completed.")
    history = property(lambda self: self.state.history, doc="The loss history.")
    best_epoch = property(lambda self: self.state.best_epoch, doc="The best epoch (0: none).")
    best_val = property(lambda self: self.state.best_val, doc="Its validation loss.")
    best_theta = property(lambda self: self.state.best_theta, doc="Its parameters.")

    @property
    def params(self) -> np.ndarray:
        """The pair parameters, float64[n_params, 2] (a view of the flat vector)."""
        return split_params(self.theta, self.registry.n_params)[0]

    @property
    def values(self) -> np.ndarray:
        """The value parameters, float64[n_values] (a view of the flat vector)."""
        return split_params(self.theta, self.registry.n_params)[1]

    def log(self, line: str) -> None:
        self.outputs.log(line)

    def keep_store(self, store, key: str) -> None:
        """`StoreCache.keep` of the run's store cache."""
        self.stores.keep(store, key)

    def cached_store(self, key: str, n_positions: int):
        """`StoreCache.load` of the run's store cache."""
        return self.stores.load(key, n_positions)

    # -- checkpoints -----------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        save_state(self.out / CHECKPOINT, self.state, self.cfg, self.evaluation.name)

    def load_checkpoint(self) -> None:
        path = self.out / CHECKPOINT
        if not path.exists():
            raise TrainingError(
                f"{self.out}: no {CHECKPOINT} to resume from: the run never completed its "
                f"first epoch; start it again with `tuner train --config "
                f"{self.cfg.path or self.out / 'config.toml'} --out {self.out}`")
        expect = Expect(len(self.theta), self.evaluation.name, MAX_PARAM, self.cfg.digest(),
                        json.loads(json.dumps(self.cfg.values)))
        try:
            self.state = load_state(path, expect, self.state.theta0)
        except CheckpointError as e:
            raise TrainingError(str(e)) from None

    def write_outputs(self, best: bool) -> None:
        """params.* (and best.* when this epoch is the `best`) after the checkpoint."""
        self.outputs.write_epoch(self.state, best)

    # -- the loop ----------------------------------------------------------------------------
    def run(self, data: Data | None = None) -> dict:
        """Train from the current epoch to `self.epochs` in the locked run directory; returns the
        final history."""
        _lock(self)
        try:
            if self.epoch >= self.epochs or self.stop_early():
                self.outputs.write_history(self.state)
                why = ("stopped early" if self.epoch < self.epochs else "at epoch "
                       f"{self.epoch} of {self.epochs}")
                self.log(f"nothing to train: the run is {why} (epoch {self.epoch}, best "
                         f"{self.best_epoch}); its outputs are up to date with {CHECKPOINT}"
                         + ("" if self.epoch < self.epochs else
                            f" (give --epochs N with N > {self.epoch} to train further)"))
                return self.history
            return self.train(data)
        except BaseException:
            if self.discard_on_failure and not (self.out / CHECKPOINT).exists():
                discard_new_run(self.out, self.created_dir, NEW_RUN_FILES)
            raise
        finally:
            self.lock.release()

    def stop_early(self) -> bool:
        """Whether ``[training] patience`` epochs have passed without a better validation loss."""
        return self.state.stop_early(self.cfg["training"]["patience"])

    def preparation(self) -> Preparation:
        """What comes before the run's first epoch (`tuner.train.prepare`)."""
        return Preparation(self.cfg, self.evaluation, self.theta, self.k, self.n_threads,
                           self.observer, self.log)

    def train(self, data: Data | None = None) -> dict:
        """The epochs from the current one to `self.epochs` (`data` None: the configuration's)."""
        tr = self.cfg["training"]
        prep = self.preparation()
        if self.cluster[1]:  # the driver records no store (tuner.train.cluster)
            from .cluster import prepare
            ready = prepare(prep, data)
        else:
            ready = prep.run(data)
        self.state.k, data, compiling = ready.k, ready.data, prep.compiling
        before = compiling.seconds
        with watch_compilation(self.observer.compile_start, compiling):
            source = ready.source(self.evaluation, prep.loss)
            bs = batch_positions(tr, len(data.train))
            workers = self.workers = self.make_workers(source, min(tr["micro_batch_size"], bs),
                                                       min(bs, max(1, len(data.train))),
                                                       data.train)
        if source.specialised:
            spent = compiling.seconds - before
            self.log(f"replay: a player specialised for the store's {len(ready.store.t_temps)} "
                     f"template(s)" + (f" (compiled in {spent:.1f} s, once)" if spent else ""))
        try:
            while self.epoch < self.epochs:
                if self.stop_early():
                    self.log(f"early stop after epoch {self.epoch}: the validation loss has not "
                             f"improved for {tr['patience']} epoch(s); best epoch "
                             f"{self.best_epoch} ({self.state.best_val:.6f})")
                    break
                try:
                    stats = self.run_epoch(data, workers)
                except FreezeError as e:  # eager epochs freeze each micro-batch
                    raise unplayable(self.evaluation.name, e) from None
                best = self.state.end_epoch(stats)
                self.save_checkpoint()
                self.write_outputs(best)
                self.observer.epoch_done(stats)
                val = stats["val_loss"]
                self.log(f"epoch {stats['epoch']:4d}/{self.epochs}  train {stats['train_loss']:.6f}"
                         f"  val {'-' if math.isnan(val) else format(val, '.6f')}"
                         f"{' *' if best else '  '}  lr {stats['lr']:.4g}  "
                         f"{stats['seconds']:.2f} s  {stats['positions_per_s']:,.0f} pos/s")
        except BaseException:
            workers.close()
            if (self.out / CHECKPOINT).exists():  # the history of the run kept; a new run
                with contextlib.suppress(OSError):  # without one is discarded, and the error
                    self.outputs.write_history(self.state)  # under way (e.g. the checkpoint's)
            raise                                           # is the one to say
        workers.close()
        return_freed_memory()  # (what the epochs freed, such as the workers' buffers and a
        # position shuffle's order: the loss plot's matplotlib would not reuse it)
        self.outputs.write_history(self.state)
        if len(data.val):
            with watch_compilation(self.observer.compile_start, compiling):
                self.report_heldout(data)
        return self.history

    def use_cluster(self, address: str | None, workers: int | None) -> None:
        """``--cluster ADDRESS --workers N``: what is given replaces ``[cluster]``'s value."""
        self.cluster = (self.cluster[0] if address is None else address,
                        self.cluster[1] if workers is None else workers)

    def make_workers(self, source, micro: int, max_batch: int, train: np.ndarray) -> Workers:
        """The batch gradient's workers: threads of this process, or with ``[cluster] workers``
        Ray actors (`tuner.train.cluster`, `source` the store's `Layout` and `train` its
        training rows), each with `n_threads` threads."""
        segment = self.cfg["training"]["segment"]
        if not self.cluster[1]:
            return Workers(source, self.n_threads, micro, max_batch, segment=segment)
        from .cluster import ClusterWorkers, ShareSpec
        spec = ShareSpec(self.cfg.values, None if self.cfg.path is None else str(self.cfg.path),
                         self.k, self.state.theta0, self.n_threads, micro, max_batch, segment)
        return ClusterWorkers(source, train, spec, self.cluster, self.log)

    def run_epoch(self, data: Data, workers: Workers) -> dict:
        """One epoch of batches of `data`'s training positions (`epoch_batches`), then the validation
        loss; the epoch's `HISTORY_FIELDS`."""
        tr = self.cfg["training"]
        s, e, bs = self.state, self.state.epoch, batch_positions(tr, len(data.train))
        lr = learning_rate(self.cfg["schedule"], self.cfg["optimizer"]["lr"], e)
        mask = trainable_mask(self.registry, self.cfg["freeze"]["stages"], e)
        pull = Pull(self.cfg["optimizer"]["pull"], s.theta0)
        batches = epoch_batches(data.train, s.rng, tr, data.train_is_identity)
        n = len(data.train)
        t0 = time.perf_counter()
        sse_total = []
        shown = 0.0
        self.observer.epoch_start(e + 1, self.epochs, n)
        try:
            for b, batch in enumerate(batches):
                sse, grad = workers.loss_grad(s.theta, batch)
                sse += len(batch) * pull.value(s.theta)  # the batch's objective, summed
                pull.add_gradient(grad, s.theta)
                if not (math.isfinite(sse) and np.isfinite(grad).all()):
                    self.diverged(f"epoch {e + 1}, batch {b + 1}: the loss or its gradient is not "
                                  f"finite (loss {sse / len(batch)!r})")
                self.optimizer.step(s, grad, lr, mask)
                if not np.all(np.abs(s.theta) < MAX_PARAM):  # also catches NaN
                    self.diverged(f"epoch {e + 1}, batch {b + 1}: a parameter left the range "
                                  f"+-{MAX_PARAM:g} (or is not finite)")
                sse_total.append(sse)
                shown += sse  # the progress line's running mean (the epoch's loss: fsum below)
                done = min(n, (b + 1) * bs)
                self.observer.epoch_progress(done, shown / done)
        finally:
            self.observer.epoch_end()
        train_seconds = time.perf_counter() - t0
        val_loss = math.nan
        if len(data.val):
            val_loss = workers.loss_grad(s.theta, data.val, with_grad=False)[0] / len(data.val)
            if not math.isfinite(val_loss):
                self.diverged(f"epoch {e + 1}: the validation loss is {val_loss}")
        return dict(epoch=e + 1, train_loss=math.fsum(sse_total) / n, val_loss=val_loss,
                    lr=lr, seconds=train_seconds, positions_per_s=n / train_seconds)

    def diverged(self, what: str):
        """Stop the run: say what happened and which checkpoint is kept."""
        kept = (f"the last good checkpoint (epoch {self.epoch}) is kept in "
                f"{self.out / CHECKPOINT}" if self.epoch > 0 and (self.out / CHECKPOINT).exists()
                else "no checkpoint was written (no epoch completed)")
        raise TrainingError(f"{what}; training stopped, {kept}. Try a smaller learning rate.")

    def report_heldout(self, data: Data) -> None:
        """Log the held-out games' loss of the best parameters against the starting ones (and the
        engine's defaults), with the engine's integer evaluation where the evaluation has one."""
        if self.best_epoch == 0:
            return
        positions, results = data.held_out(), data.held_out_results()
        start = initial_params(self.cfg, self.registry)
        rows = [("starting parameters", start), (f"tuned (best epoch {self.best_epoch})",
                                                 self.state.best_theta)]
        if self.cfg["evaluation"]["init"] != "default":
            rows.insert(1, ("the engine's defaults", default_theta(self.registry)))
        how, losses = None, []
        for _, theta in rows:
            evals, how = self.heldout_evals(theta, positions)
            losses.append(mse_at(self.k, evals, results))
        self.log(f"held-out games ({data.val_games:,} games, {len(data.val):,} positions), "
                 f"{how}, mean squared error against the results at K = {self.k:.6g}:")
        for (label, _), loss in zip(rows, losses):
            self.log(f"  {label:<26} {loss:.6f}")
        change = (losses[-1] - losses[0]) / losses[0]
        verdict = ("the tune BEAT its starting point" if losses[-1] < losses[0]
                   else "the tune did NOT beat its starting point")
        self.log(f"on held-out games {verdict} ({100 * change:+.2f}%)")


def start_run(config_path: str | None, out: str | None, resume: str | None,
              epochs: int | None, threads: int | None, log=lambda line: None,
              observer: Observer | None = None, changes: dict | None = None) -> Run:
    """Prepare a new run (`config_path`, `out`) or a resumed one (`resume`), holding the lock of
    its directory. Without `epochs`, a resumed run trains to the epochs it was started (or last
    resumed) with. A new run's `changes` (``{section: {key: value}}``) are made to the
    configuration, and its config.toml holds the result (a cross-validation's fold runs)."""
    if resume is not None:
        out_dir = Path(resume)
        try:
            meta = read_meta(out_dir)
        except RunMetaError as e:
            raise TrainingError(str(e)) from None
        cfg = load_config(config_path if config_path is not None else out_dir / "config.toml")
        if config_path is None and "config" in meta:
            # relative paths in the copy mean what they meant originally
            cfg.path = Path(meta["config"])
        target = epochs if epochs is not None else meta.get("epochs")
        run = Run(cfg, out_dir, threads=threads, epochs=target, log=log, observer=observer)
        try:
            _lock(run)
            remove_stale_temps(out_dir)
            run.load_checkpoint()
            run.outputs.refresh(run.state)
            if meta.get("epochs") != run.epochs:
                write_meta(out_dir, epochs=run.epochs)
            run.log(f"resumed from {out_dir / CHECKPOINT} after epoch {run.epoch}, training to "
                    f"epoch {run.epochs}")
        except BaseException:
            run.lock.release()
            raise
        return run
    if config_path is None:
        raise ConfigError("--config is required (or --resume DIR)")
    cfg = load_config(config_path)
    if changes:
        cfg = cfg.with_values(changes)
    out_dir = Path(out) if out else Path("runs") / f"{Path(config_path).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    # everything the config names is checked before anything is created
    run = Run(cfg, out_dir, threads=threads, epochs=epochs, log=log, observer=observer)
    find_data(cfg)  # a missing dataset fails before the run directory exists
    try:
        if out:
            run.created_dir = not out_dir.exists()
            out_dir.mkdir(parents=True, exist_ok=True)
        else:  # a default name is made unique: two runs started in one second both start
            out_dir = claim_new_dir(out_dir)
            run.outputs.out, run.lock, run.created_dir = out_dir, RunLock(out_dir), True
    except OSError as e:
        raise WriteError(out_dir, e) from None
    _lock(run)  # refused: the directory is another process's, leave it alone
    try:
        if (out_dir / CHECKPOINT).exists():
            raise TrainingError(f"{out_dir} already holds a run; use --resume {out_dir} to "
                                f"continue it, or choose another --out")
        run.discard_on_failure = True
        remove_stale_temps(out_dir)
        atomic_write(out_dir / "config.toml", cfg.to_toml().encode() if changes
                     else Path(config_path).read_bytes())
        atomic_write(out_dir / RUN_META, json.dumps({"config": str(cfg.path),
                                                     "epochs": run.epochs}))
        atomic_write(out_dir / "train.log", "")
    except BaseException:
        discard_new_run(out_dir, run.created_dir, NEW_RUN_FILES if run.discard_on_failure else ())
        run.lock.release()
        raise
    return run


def _lock(run: Run) -> None:
    try:
        run.lock.acquire()
    except RunBusyError as e:
        raise TrainingError(str(e)) from None
