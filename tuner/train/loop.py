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
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from tuner import cachedir
from tuner.compiling import CompileWatch, watch_compilation
from tuner.data import load_dataset
from tuner.data.registry import Resolved, resolve
from tuner.evals import get_evaluation
from tuner.evals.export import cpp_comments
from tuner.errors import TunerError
from tuner.evals.generic import continuous
from tuner.fileio import WriteError, atomic_write, remove_stale_temps
from .checkpoint import CheckpointError, Expect, add_history, read_checkpoint, write_checkpoint
from .config import Config, ConfigError, load_config
from .kernels import adamw_step, sgd_step
from .progress import Observer
from .pull import Pull
from .schedule import check_patterns, learning_rate, trainable_mask
from .split import Split, fold_of, group_ids, split_by_group
from .targets import LOSS_FORMS, KFitError, blend_targets, fit_k, fit_sample, mse_at
from tuner.tape.player import FreezeError, load_store, save_store, store_len, store_nbytes
from .record import LOSS, record_store
from .stream import DataDigest, stream_data
from .heldout import default_theta, integer_evals
from .rundir import (RUN_META, RunBusyError, RunLock, RunMetaError, claim_new_dir,
                     discard_new_run, read_meta, write_meta)
from .warmup import warm_positions, warm_up
from .workers import Workers, resolve_threads, split_params

CHECKPOINT = "checkpoint.npz"
#: Parameters beyond this magnitude mean the run diverged (an engine's integers cannot hold them).
MAX_PARAM = 1e9
HISTORY_FIELDS = ("epoch", "train_loss", "val_loss", "lr", "seconds", "positions_per_s")
add_history(HISTORY_FIELDS)
#: A replay store in ``[training] store_cache`` (`Run.keep_store`), and the temporary files of
#: its writes (`tuner.fileio.remove_stale_temps`).
STORE_NAME = "store-{key}.npz"
STORE_GLOB = STORE_NAME.format(key="*")


def evict_stores(folder: Path, keep: int) -> list[Path]:
    """Remove all but the `keep` newest (by modification time) stores in `folder`; 0 keeps all.
    Returns what was removed."""
    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except FileNotFoundError:  # removed meanwhile by another run
            return -1.0
    stores = sorted(folder.glob(STORE_GLOB), key=mtime, reverse=True)
    old = stores[keep:] if keep else []
    for p in old:
        p.unlink(missing_ok=True)
    return old


#: What `start_run` creates in a new run directory (removed again if the run fails before its
#: first checkpoint).
NEW_RUN_FILES = ("config.toml", RUN_META, "train.log")


class TrainingError(TunerError, RuntimeError):
    """A run that cannot start or continue; the message says why and what was kept."""


@dataclass
class Data:
    """Training and validation positions (indices into one concatenated array), split by game
    (`tuner.train.split`)."""

    positions: np.ndarray | None  # None: streamed into a replay store (tuner/train/stream.py)
    results: np.ndarray
    train: np.ndarray
    val: np.ndarray
    sources: list = field(default_factory=list)
    score_cp: np.ndarray | None = None  # engine scores, loaded for a score blend
    train_games: int = 0
    val_games: int = 0
    val_positions: np.ndarray | None = None  # ``positions[val]`` where `positions` is None

    def __len__(self) -> int:
        return len(self.results)

    def held_out(self) -> np.ndarray:
        """The validation positions, uint64[len(val), 9]."""
        return self.val_positions if self.positions is None else self.positions[self.val]


def find_data(cfg: Config) -> list[Resolved]:
    """The files of ``[data] train`` (tuner.data.registry's lookup order; checksums checked)."""
    return [resolve(name, config=cfg.path) for name in cfg["data"]["train"]]


def split_data(groups: np.ndarray, cfg: Config) -> Split:
    """The ``[data]`` split of positions in `groups` (`group_ids`); TrainingError when no
    training position is left."""
    d = cfg["data"]
    split = split_by_group(groups, d["validation_fraction"], d["split_seed"])
    cv = cfg["validation"]  # a cross-validation fold's run: its fold held out (tuner/train/cv.py)
    try:
        split = fold_of(split, groups, cv["folds"], cv["fold"], d["split_seed"])
    except ValueError as e:
        raise TrainingError(f"[validation] folds: {e}") from None
    if len(split.train) < 1:
        raise TrainingError("no training positions left after the validation split")
    return split


def load_data(cfg: Config, log: Callable[[str], None]) -> Data:
    """Load every dataset of ``[data] train`` and hold out whole games for validation (every
    position in memory: what eager training and the tests use; a replay run streams its data,
    `tuner.train.stream`)."""
    d = cfg["data"]
    blend = cfg["loss"]["score_blend"] > 0
    positions, results, scores, games, sources = [], [], [], [], []
    for found in find_data(cfg):
        ds = load_dataset(found, policy=d["policy"], with_game=True, need_scores=blend)
        by = "games" if ds.game is not None else f"blocks of {d['split_block']:,} positions"
        log(f"data: {ds.source}: {len(ds):,} positions"
            + (f" ({ds.n_bad:,} bad rows skipped)" if ds.n_bad else "") + f"; split by {by}")
        positions.append(ds.positions)
        results.append(ds.results)
        scores.append(ds.score_cp)
        games.append(ds.game)
        sources.append(ds.source)
    groups = group_ids([len(r) for r in results], games, d["split_block"])
    if len(positions) > 1:  # one dataset is used as loaded: no copy of it
        positions, results = np.concatenate(positions), np.concatenate(results)
    else:
        positions, results = positions[0], results[0]
    score_cp = np.concatenate(scores) if blend else None
    split = split_data(groups, cfg)
    return Data(positions, results, split.train, split.val, sources, score_cp,
                split.train_games, split.val_games)


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
        self.out = Path(out_dir)
        self.log_fn = log
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
        self.theta = initial_params(cfg, self.registry)
        self.theta0 = self.theta.copy()  # where [optimizer] pull pulls toward (tuner/train/pull.py)
        self.k = None if cfg["loss"]["k"] == "fit" else float(cfg["loss"]["k"])  # fitted in run
        self.loss_form = LOSS_FORMS[cfg["loss"]["function"]]
        self.best_epoch = 0  # 0: no epoch validated yet
        self.best_val = math.inf
        self.best_theta = self.theta.copy()
        self.no_cpp = False  # set once the evaluation turned out to have no C++ export
        self.m = np.zeros_like(self.theta)
        self.v = np.zeros_like(self.theta)
        self.step = 0
        self.epoch = 0
        self.rng = np.random.default_rng(tr["shuffle_seed"])
        self.history = {f: [] for f in HISTORY_FIELDS}
        self.lock = RunLock(self.out)
        self.discard_on_failure = False  # a new run: undo its start if no epoch completes
        self.created_dir = False

    @property
    def params(self) -> np.ndarray:
        """The pair parameters, float64[n_params, 2] (a view of the flat vector)."""
        return split_params(self.theta, self.registry.n_params)[0]

    @property
    def values(self) -> np.ndarray:
        """The value parameters, float64[n_values] (a view of the flat vector)."""
        return split_params(self.theta, self.registry.n_params)[1]

    # -- logging and files -------------------------------------------------------------------
    def log(self, line: str) -> None:
        self.log_fn(line)
        path = self.out / "train.log"
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as e:
            raise WriteError(path, e) from None

    def save_checkpoint(self) -> None:
        state = dict(theta=self.theta, m=self.m, v=self.v, step=self.step, epoch=self.epoch,
                     k=self.k, theta0=self.theta0, best_theta=self.best_theta, best_epoch=self.best_epoch,
                     best_val=self.best_val,
                     rng=json.dumps(self.rng.bit_generator.state),
                     digest=self.cfg.digest(), evaluation=self.evaluation.name,
                     config=json.dumps(self.cfg.values, sort_keys=True),
                     **{f"history_{k}": np.array(v, dtype=np.float64)
                        for k, v in self.history.items()})
        write_checkpoint(self.out / CHECKPOINT, state)

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
            z = read_checkpoint(path, expect)
        except CheckpointError as e:
            raise TrainingError(str(e)) from None
        try:
            self.rng.bit_generator.state = json.loads(str(z["rng"]))
        except (TypeError, ValueError, KeyError) as e:
            raise TrainingError(f"{path}: rng is not a state of the shuffle generator "
                                f"({type(e).__name__}: {e})") from None
        self.theta = z["theta"]
        self.m, self.v = z["m"], z["v"]
        self.step, self.epoch = int(z["step"]), int(z["epoch"])
        self.k = float(z["k"])
        if "theta0" in z:  # older checkpoints: the config's init, as before
            self.theta0 = z["theta0"]
        self.best_theta = z["best_theta"]
        self.best_epoch, self.best_val = int(z["best_epoch"]), float(z["best_val"])
        self.history = {k: list(z[f"history_{k}"]) for k in HISTORY_FIELDS}

    def write_params(self, stem: str = "params", theta: np.ndarray | None = None,
                     note: dict | None = None) -> None:
        """``stem.json`` and ``stem.hpp`` of `theta` (default: the current parameters). The JSON
        names the evaluation and holds the K the run trains with (fitted or given) as ``"K"``;
        its ``"note"`` (K, then `note`) is also the C++'s first comment lines."""
        pairs, values = split_params(self.theta if theta is None else theta,
                                     self.registry.n_params)
        note = {"K": self.k, **(note or {})}
        registry = self.registry.with_meta(evaluation=self.evaluation.name, K=self.k)
        atomic_write(self.out / f"{stem}.json",
                     registry.dumps(pairs, value_values=values, note=note))
        try:
            cpp = self.evaluation.to_cpp(self.registry, pairs, values)
        except ValueError as e:  # no C++ layout for this evaluation: say so once
            if not self.no_cpp:
                self.log(f"no params.hpp: {e}")
            self.no_cpp = True
            return
        atomic_write(self.out / f"{stem}.hpp", cpp_comments(note) + cpp)

    def write_history(self) -> None:
        h = self.history
        lines = [",".join(HISTORY_FIELDS)]
        for i in range(len(h["epoch"])):
            lines.append(",".join(f"{h[k][i]:.10g}" for k in HISTORY_FIELDS))
        atomic_write(self.out / "loss.csv", "\n".join(lines) + "\n")
        if h["epoch"]:
            from .plot import write_loss_plot  # matplotlib (40 MB) loaded only when it draws

            write_loss_plot(self.out / "loss.png", h, best_epoch=self.best_epoch or None,
                            title=f"{self.evaluation.name} loss")

    # -- the loop ----------------------------------------------------------------------------
    def optimizer_step(self, grad: np.ndarray, lr: float, mask: np.ndarray) -> None:
        o = self.cfg["optimizer"]
        self.step += 1
        if o["name"] == "adamw":
            adamw_step(self.theta, grad, self.m, self.v, mask, lr, o["beta1"], o["beta2"],
                       o["eps"], o["weight_decay"], self.step)
        else:
            sgd_step(self.theta, grad, self.m, mask, lr, o["momentum"], o["weight_decay"])

    def run_epoch(self, data: Data, targets: np.ndarray, workers: Workers) -> dict:
        tr, k = self.cfg["training"], self.k
        e = self.epoch
        lr = learning_rate(self.cfg["schedule"], self.cfg["optimizer"]["lr"], e)
        mask = trainable_mask(self.registry, self.cfg["freeze"]["stages"], e)
        pull = Pull(self.cfg["optimizer"]["pull"], self.theta0)
        order = data.train[self.rng.permutation(len(data.train))]
        bs = tr["batch_size"]
        n_batches = math.ceil(len(order) / bs)
        t0 = time.perf_counter()
        sse_total = []
        shown = 0.0
        self.observer.epoch_start(e + 1, self.epochs, len(order))
        try:
            for b in range(n_batches):
                batch = order[b * bs:(b + 1) * bs]
                sse, grad = workers.loss_grad(self.theta, data.positions, targets, batch, k)
                sse += len(batch) * pull.value(self.theta)  # the batch's objective, summed
                pull.add_gradient(grad, self.theta)
                if not (math.isfinite(sse) and np.isfinite(grad).all()):
                    self.diverged(f"epoch {e + 1}, batch {b + 1}: the loss or its gradient is not "
                                  f"finite (loss {sse / len(batch)!r})")
                self.optimizer_step(grad, lr, mask)
                if not np.all(np.abs(self.theta) < MAX_PARAM):  # also catches NaN
                    self.diverged(f"epoch {e + 1}, batch {b + 1}: a parameter left the range "
                                  f"+-{MAX_PARAM:g} (or is not finite)")
                sse_total.append(sse)
                shown += sse  # the progress line's running mean (the epoch's loss: fsum below)
                done = min(len(order), (b + 1) * bs)
                self.observer.epoch_progress(done, shown / done)
        finally:
            self.observer.epoch_end()
        train_seconds = time.perf_counter() - t0
        train_loss = math.fsum(sse_total) / len(order)
        val_loss = math.nan
        if len(data.val):
            val_sse, _ = workers.loss_grad(self.theta, data.positions, targets, data.val, k,
                                           with_grad=False)
            val_loss = val_sse / len(data.val)
            if not math.isfinite(val_loss):
                self.diverged(f"epoch {e + 1}: the validation loss is {val_loss}")
        return dict(epoch=e + 1, train_loss=train_loss, val_loss=val_loss, lr=lr,
                    seconds=train_seconds, positions_per_s=len(order) / train_seconds)

    def diverged(self, what: str):
        """Stop the run: say what happened and which checkpoint is kept."""
        kept = (f"the last good checkpoint (epoch {self.epoch}) is kept in "
                f"{self.out / CHECKPOINT}" if self.epoch > 0 and (self.out / CHECKPOINT).exists()
                else "no checkpoint was written (no epoch completed)")
        raise TrainingError(f"{what}; training stopped, {kept}. Try a smaller learning rate.")

    def unplayable(self, e: FreezeError) -> TrainingError:
        return TrainingError(
            f"evaluation {self.evaluation.name!r} cannot be played: {e}. Every slot a position "
            f"reads must be a parameter or written by an earlier record of the same position "
            f"(record constants per position with record_const)")

    def store_key(self, digest: DataDigest) -> str:
        """What a replay store depends on: the positions, results and scores (`digest`), K,
        the loss (form and score blend) and the evaluation's code."""
        import tuner

        h = hashlib.blake2b(digest_size=16)
        h.update(digest.digest())
        h.update(repr((self.k, self.loss_form, self.cfg["loss"]["score_blend"])).encode())
        module = sys.modules[self.evaluation.record_batch.py_func.__module__]
        h.update(Path(module.__file__).read_bytes())
        h.update(tuner.source_digest().encode())
        return h.hexdigest()

    def store_folder(self) -> Path:
        """``[training] store_cache`` as a private folder (`tuner.cachedir.private_folder`: made
        0700, refused if another user could write to it), rid of the temporary files that killed
        writes left."""
        folder = cachedir.private_folder(
            self.cfg.resolve_path(self.cfg["training"]["store_cache"]))
        remove_stale_temps(folder, STORE_GLOB)
        return folder

    def cached_store(self, key: str, n_positions: int):
        """The store of `n_positions` positions ``[training] store_cache`` keeps for `key`, or
        None (missing, or unusable: logged). It must pass the validation of a fresh one for
        this run's evaluation (`tuner.tape.player.validate_store`)."""
        t0 = time.perf_counter()
        try:
            cache = self.store_folder() / STORE_NAME.format(key=key)
            cachedir.open_private(cache).close()
        except FileNotFoundError:
            return None
        except OSError as e:
            self.log(f"replay: store cache {cachedir.describe(e)}; recording")
            return None
        reg = self.evaluation.registry
        try:
            store = load_store(cache, key, reg.n_values, reg.n_params, n_positions, LOSS + 1)
        except FreezeError as e:
            self.log(f"replay: store cache {e}; recording again")
            return None
        with contextlib.suppress(OSError):
            os.utime(cache)  # now the newest: the last one evicted
        self.log(f"replay: loaded the store of {store_len(store):,} positions from {cache} in "
                 f"{time.perf_counter() - t0:.2f} s")
        return store

    def keep_store(self, store, key: str) -> None:
        """Save `store` in ``[training] store_cache`` for `key`, then remove all but the newest
        ``store_cache_keep`` stores there (a failure is only logged)."""
        try:
            folder = self.store_folder()
            cache = folder / STORE_NAME.format(key=key)
            save_store(store, cache, key)
            os.chmod(cache, cachedir.FILE_MODE)
            self.log(f"replay: store kept in {cache}")
            for old in evict_stores(folder, self.cfg["training"]["store_cache_keep"]):
                self.log(f"replay: removed the older store {old}")
        except OSError as e:
            self.log(f"replay: could not keep the store in {self.cfg['training']['store_cache']}: "
                     f"{cachedir.describe(e)}")

    def replay_store(self, data: Data, targets: np.ndarray):
        """Every position of in-memory `data` recorded and frozen for the player (or loaded
        from ``[training] store_cache``); None for eager epochs. (A run that loads its own data
        streams it into the store instead: `tuner.train.stream`.)"""
        tr = self.cfg["training"]
        if tr["mode"] == "eager":
            return None
        key = None
        if tr["store_cache"]:
            digest = DataDigest()
            digest.update(data.positions, data.results, data.score_cp)
            key = self.store_key(digest)
            store = self.cached_store(key, len(data.positions))
            if store is not None:
                return store
        t0 = time.perf_counter()  # after the cache lookup: the recording alone
        self.observer.record_start(len(data.positions))
        try:
            store = record_store(self.evaluation, data.positions, targets, self.k,
                                 self.n_threads, tr["micro_batch_size"],
                                 progress=self.observer.record_progress, loss=self.loss_form)
        except FreezeError as e:
            raise self.unplayable(e) from None
        finally:
            self.observer.record_end()
        self.log_recorded(store, time.perf_counter() - t0)
        if key is not None:
            self.keep_store(store, key)
        return store

    def log_recorded(self, store, seconds: float) -> None:
        n = store_len(store)
        self.log(f"replay: recorded {n:,} positions once in {seconds:.2f} s "
                 f"({store_nbytes(store) / max(1, n):.0f} bytes each, {len(store.t_temps)} "
                 f"record structure(s))")

    def targets(self, results: np.ndarray, score_cp: np.ndarray | None) -> np.ndarray:
        """What the predictions are fitted to (`blend_targets` at the run's K)."""
        try:
            return blend_targets(results, score_cp, self.k, self.cfg["loss"]["score_blend"])
        except ValueError as e:
            raise TrainingError(f"[loss] score_blend: {e}") from None

    def fit_k(self, positions: np.ndarray, results: np.ndarray) -> float:
        """``[loss] k = "fit"``: the K that fits the starting parameters to training positions
        `positions` (the `fit_sample` of the training games) with `results`."""
        t0 = time.perf_counter()
        evals = continuous(self.evaluation, positions, self.params, self.values)
        try:
            k = fit_k(evals, results)
        except KFitError as e:
            raise ConfigError(f"{self.cfg.path}: [loss] k = \"fit\": {e}") from None
        self.log(f"K fitted to the starting parameters on {len(results):,} training positions: "
                 f"K = {k:.6g} (mean squared error {mse_at(k, evals, results):.6f}; "
                 f"{time.perf_counter() - t0:.2f} s)")
        return k

    def prepare(self, compiling: CompileWatch, warm: tuple, sample) -> None:
        """What recording needs: K (fitted to ``sample()``'s positions and results if the
        config says ``k = "fit"``; `sample` may be None otherwise) and every kernel warmed on
        `warm` (`warm_positions`; compiled on a cold cache, which is logged)."""
        with watch_compilation(self.observer.compile_start, compiling):
            if self.k is None:
                self.k = self.fit_k(*sample())
            try:
                warm_up(self, *warm)
            except FreezeError as e:
                raise self.unplayable(e) from None
        if compiling.compiled:
            self.observer.compile_end(compiling.seconds)
            self.log(f"compiled the kernels in {compiling.seconds:.1f} s (once: later runs load "
                     f"them from the cache)")

    def improved(self, val: float) -> bool:
        """Record epoch `self.epoch`'s validation loss; whether it is the best so far."""
        if not val < self.best_val:  # NaN (no validation) never improves
            return False
        self.best_val, self.best_epoch = val, self.epoch
        self.best_theta = self.theta.copy()
        return True

    def write_best(self) -> None:
        """best.json and best.hpp: the parameters of the best validation epoch."""
        self.write_params("best", self.best_theta,
                          note={"best_epoch": self.best_epoch, "validation_loss": self.best_val})

    def refresh_outputs(self) -> None:
        """params.* and best.* from the state (on resume: a kill after the checkpoint may have
        left them an epoch behind it)."""
        self.write_params()
        if self.best_epoch:
            self.write_best()

    def stop_early(self) -> bool:
        """Whether ``[training] patience`` epochs have passed without a better validation loss."""
        patience = self.cfg["training"]["patience"]
        return patience > 0 and self.best_epoch > 0 and self.epoch - self.best_epoch >= patience

    def run(self, data: Data | None = None) -> dict:
        """Train from the current epoch to `self.epochs` in the locked run directory; returns the
        final history."""
        _lock(self)
        try:
            if self.epoch >= self.epochs or self.stop_early():
                self.write_history()
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

    def train(self, data: Data | None = None) -> dict:
        """The epochs from the current one to `self.epochs`."""
        compiling = CompileWatch()  # every kernel warms before anything is timed
        with watch_compilation(self.observer.compile_start, compiling):
            warm = warm_positions()
        tr = self.cfg["training"]
        store = targets = None
        streamed = data is None and tr["mode"] != "eager"
        if streamed and self.k is not None:  # warmed first: the load's time is the data's own
            self.prepare(compiling, warm, None)
        if data is None:
            self.observer.load_start(self.cfg["data"]["train"])
            t0 = time.perf_counter()
            if streamed:  # the positions go into the store as they are read, and are not kept
                data, store = stream_data(self, lambda sample: self.prepare(compiling, warm,
                                                                             sample))
            else:
                data = load_data(self.cfg, self.log)
            self.observer.load_end(len(data), time.perf_counter() - t0)
        held = (f"{len(data.val):,} ({data.val_games:,} whole games, none of them trained on)"
                if len(data.val) else "0 (no validation)")
        self.log(f"train {len(data.train):,} positions ({data.train_games:,} games), validation "
                 f"{held}; "
                 f"{self.registry.n_params} parameters "
                 f"({int((~self.registry.constant).sum())} tunable); {self.n_threads} thread(s)")
        if store is None:
            def sample():
                rows = data.train[fit_sample(len(data.train))]
                return data.positions[rows], data.results[rows]

            self.prepare(compiling, warm, sample)
            targets = self.targets(data.results, data.score_cp)
            store = self.replay_store(data, targets)
        before = compiling.seconds
        with watch_compilation(self.observer.compile_start, compiling):
            workers = Workers(self.evaluation, self.n_threads, min(tr["micro_batch_size"],
                              tr["batch_size"]), min(tr["batch_size"], max(1, len(data.train))),
                              store=store, loss=self.loss_form)
        if workers.specialised:
            spent = compiling.seconds - before
            self.log(f"replay: a player specialised for the store's {len(store.t_temps)} "
                     f"template(s)" + (f" (compiled in {spent:.1f} s, once)" if spent else ""))
        try:
            while self.epoch < self.epochs:
                if self.stop_early():
                    self.log(f"early stop after epoch {self.epoch}: the validation loss has not "
                             f"improved for {tr['patience']} epoch(s); best epoch "
                             f"{self.best_epoch} ({self.best_val:.6f})")
                    break
                try:
                    stats = self.run_epoch(data, targets, workers)
                except FreezeError as e:  # eager epochs freeze each micro-batch
                    raise self.unplayable(e) from None
                self.epoch += 1
                for key in HISTORY_FIELDS:
                    self.history[key].append(stats[key])
                val = stats["val_loss"]
                best = self.improved(val)
                self.save_checkpoint()
                self.write_params()
                if best:
                    self.write_best()
                self.observer.epoch_done(stats)
                self.log(f"epoch {stats['epoch']:4d}/{self.epochs}  train {stats['train_loss']:.6f}"
                         f"  val {'-' if math.isnan(val) else format(val, '.6f')}"
                         f"{' *' if best else '  '}  lr {stats['lr']:.4g}  "
                         f"{stats['seconds']:.2f} s  {stats['positions_per_s']:,.0f} pos/s")
        except BaseException:
            workers.close()
            if (self.out / CHECKPOINT).exists():  # the history of the run kept; a new run
                with contextlib.suppress(OSError):  # without one is discarded, and the error
                    self.write_history()  # under way (e.g. the checkpoint's) is the one to say
            raise
        workers.close()
        self.write_history()
        if len(data.val):
            with watch_compilation(self.observer.compile_start, compiling):
                self.report_heldout(data)
        return self.history

    def report_heldout(self, data: Data) -> None:
        """Log the held-out games' loss of the best parameters against the starting ones (and the
        engine's defaults), with the engine's integer evaluation where the evaluation has one."""
        if self.best_epoch == 0:
            return
        positions, results = data.held_out(), data.results[data.val]
        start = initial_params(self.cfg, self.registry)
        rows = [("starting parameters", start), (f"tuned (best epoch {self.best_epoch})",
                                                 self.best_theta)]
        if self.cfg["evaluation"]["init"] != "default":
            rows.insert(1, ("the engine's defaults", default_theta(self.registry)))
        how, losses = None, []
        for _, theta in rows:
            evals, how = integer_evals(self.evaluation, theta, positions)
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
            run.refresh_outputs()
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
            run.out, run.lock, run.created_dir = out_dir, RunLock(out_dir), True
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
