"""Cross-validation by game (``[validation] folds = N``): does a tune beat its starting point on
games it never saw, by more than chance?

A run's own validation games are few (a sample of a few thousand games holds out a few hundred),
and on so few games the loss of the same parameters differs by more than a fine-tune changes it.
The cross-validation cuts the training games into N folds (`tuner.train.split.fold_of`: whole
games, about equal positions, seeded) and trains N runs, each on all folds but one, for every
pull of ``[validation] pulls``. Then:

1. **The choice.** Each fold run records its held-out loss after every epoch; the epoch count
   and the pull with the lowest mean over the folds are chosen (the first such, in the grid's
   order and fewest epochs on a tie).
2. **The report.** For each pull at its best epoch count: each fold's change of the held-out
   mean squared error (the engine's integer evaluation, `tuner.train.heldout`) against the
   starting parameters, their mean and spread (the sample standard deviation over the folds).
   The choice is made on the same folds, so the chosen row is slightly optimistic.
3. **Do no harm.** When the chosen row's mean is an improvement larger than its spread, a final
   run trains on every training game with the chosen pull and epochs, and its parameters are
   the result; otherwise the result is the starting parameters, with a note saying why.

A cross-validation's directory holds ``config.toml``, ``run.json`` and ``train.log`` like a run's,
``pull-J/fold-I/`` (ordinary run directories: their config.toml says which fold they hold out;
each also keeps ``thetas.npy``, the parameters after every epoch, and its loss history in
``loss.csv`` but no ``loss.png``: matplotlib took longer to draw the 15 pictures of the default
job than its folds took to train an epoch), ``final/`` (when a tune is kept: an ordinary run,
``loss.png`` included), ``cv.json`` (the figures of the report) and ``best.json`` / ``best.hpp``
(the result).
The fold runs share one replay store through ``[training] store_cache`` (``store/`` unless the
configuration names one): the positions are recorded once, not once per fold. The datasets are
read once too (`CrossValidation.loaded`, every position in memory): each fold run is handed its
split of them (`tuner.train.stream.refold`), and the report splits its folds' held-out positions
from the same load; the engine's evaluations of the held-out positions are made once for all the
runs of a fold and the report (`tuner.train.heldout.EvalMemo`: the starting parameters are every
pull's, and the report evaluates again the parameters a run reported).

Every fold is an ordinary, deterministic run, so the cross-validation gives the same bits for any
thread count; killed, it resumes (``--resume DIR``, or the same command again) skipping the
finished folds and continuing the one that was running from its checkpoint. A fold is a
`FoldTask`, and `run_fold` runs one anywhere: the ``backend`` of `CrossValidation.run` runs the
list of them (by default one after another, `in_order`), so a backend that runs one fold per
task on a cluster plugs in there.
"""
from __future__ import annotations

import io
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from tuner.fileio import WriteError, atomic_write
from .config import Config, ConfigError, load_config
from .heldout import EvalMemo
from .errors import TrainingError
from .loop import CHECKPOINT, Run, start_run
from .progress import Observer
from .rundir import RUN_META, RunMetaError, read_meta
from .stream import Data, find_data, load_data, refold
from .targets import mse_at

#: The figures of a cross-validation's report (JSON), in its directory.
RESULT = "cv.json"
#: A fold run's parameters after every epoch, float64[epochs, parameters].
THETAS = "thetas.npy"
#: The replay store the fold runs share, when the configuration keeps none.
STORE = "store"


@dataclass(frozen=True)
class FoldTask:
    """One run of a cross-validation: all a backend needs to run it, here or elsewhere."""

    pull: float
    fold: int          # 1..folds; 0: the final run on every training game
    out: Path          # its run directory
    config: Path       # the configuration file the cross-validation was started from
    changes: dict = field(hash=False)  # what the run changes in it (`Config.with_values`)
    epochs: int = 1
    label: str = ""    # how the log names it


@dataclass
class FoldResult:
    """A finished fold run: its held-out loss after every epoch (the tape's evaluation), its
    parameters after every epoch and its K."""

    task: FoldTask
    val_loss: np.ndarray
    thetas: np.ndarray
    k: float


class _Snapshots(Observer):
    """Passes every event to `inner` and keeps the run's parameters after every epoch in
    `THETAS` (written after the checkpoint: a kill between the two leaves it one epoch behind,
    which `attach` makes up from the checkpoint on resume)."""

    def __init__(self, inner: Observer):
        self.inner = inner
        self.run: Run | None = None
        self.thetas: list[np.ndarray] = []

    def attach(self, run: Run) -> None:
        self.run = run
        path = run.out / THETAS
        kept = list(np.load(path)) if path.exists() and run.epoch else []
        if len(kept) == run.epoch - 1:
            kept.append(run.theta.copy())
        if len(kept) != run.epoch:
            raise TrainingError(f"{path}: holds {len(kept)} epoch(s) of parameters, the "
                                f"checkpoint {run.epoch}; delete {run.out} to run the fold again")
        self.thetas = kept
        self._save()

    def _save(self) -> None:
        buf = io.BytesIO()
        np.save(buf, np.array(self.thetas, np.float64).reshape(len(self.thetas),
                                                                len(self.run.theta)))
        atomic_write(self.run.out / THETAS, buf.getvalue())

    def epoch_done(self, stats: dict) -> None:
        self.thetas.append(self.run.theta.copy())
        self._save()
        self.inner.epoch_done(stats)


def _forward(name: str):
    return lambda self, *args: getattr(self.inner, name)(*args)


for _name in [n for n in vars(Observer) if not n.startswith("_") and n != "epoch_done"]:
    setattr(_Snapshots, _name, _forward(_name))


def run_fold(task: FoldTask, threads: int | None, log: Callable[[str], None] = lambda s: None,
             observer: Observer | None = None, data: Data | None = None,
             memo: EvalMemo | None = None) -> FoldResult:
    """Run (or resume, or just read, when it is done) the run of `task`: on `data` (every
    training game loaded, `load_data`: split here as the fold's run splits it) or, None, on the
    data it reads itself; its held-out report's evaluations remembered in `memo` (shared by the
    runs of a cross-validation)."""
    snapshots = _Snapshots(observer if observer is not None else Observer())
    if (task.out / CHECKPOINT).exists():
        run = start_run(None, None, str(task.out), task.epochs, threads, log=log,
                        observer=snapshots)
    else:
        run = start_run(str(task.config), str(task.out), None, task.epochs, threads, log=log,
                        observer=snapshots, changes=task.changes)
    run.outputs.draws_loss_plot = task.fold == 0  # the final run's picture only
    if memo is not None:
        run.heldout_evals = lambda theta, positions: memo.evals(task.fold, theta, positions)
    try:
        snapshots.attach(run)
    except BaseException:
        run.lock.release()
        raise
    run.run(None if data is None else refold(data, run.cfg))
    return FoldResult(task, np.array(run.history["val_loss"], np.float64),
                      np.array(snapshots.thetas), float(run.k))


def in_order(tasks: list[FoldTask], run_one: Callable[[FoldTask], FoldResult]) -> list[FoldResult]:
    """The default backend: every task in this process, one after another."""
    return [run_one(t) for t in tasks]


@dataclass
class PullRow:
    """One pull's cross-validated figures at its best epoch count."""

    pull: float
    epochs: int
    mean_val: float      # the folds' mean held-out loss (tape) after `epochs`
    changes: list[float]  # each fold's relative change of the integer evaluation's error
    mean: float = math.nan
    spread: float = math.nan

    def __post_init__(self):
        c = np.array(self.changes)
        self.mean = float(c.mean())
        self.spread = float(c.std(ddof=1)) if len(c) > 1 else math.inf


def improves(row: PullRow) -> bool:
    """Whether `row` is an improvement larger than the folds' spread."""
    return row.mean < 0 and -row.mean > row.spread


def _pct(x: float) -> str:
    return f"{100 * x:+.2f}%"


class CrossValidation:
    """A cross-validation in its directory (new or resumed): `run` does it all."""

    def __init__(self, config_path: str | None, out: str | None, resume: str | None,
                 epochs: int | None, threads: int | None, log: Callable[[str], None],
                 observer: Observer | None = None):
        if resume is not None:
            self.out = Path(resume)
            try:
                meta = read_meta(self.out)
            except RunMetaError as e:
                raise TrainingError(str(e)) from None
            self.config_path = Path(meta["config"])
            cfg = load_config(self.out / "config.toml")
            cfg.path = self.config_path
            epochs = epochs if epochs is not None else meta.get("epochs")
        else:
            self.config_path = Path(config_path)
            cfg = load_config(self.config_path)
            self.out = Path(out) if out else Path("runs") / (f"{self.config_path.stem}-cv-"
                                                              f"{time.strftime('%Y%m%d-%H%M%S')}")
        if cfg["validation"]["folds"] < 2 or cfg["validation"]["fold"]:
            raise ConfigError(f"{cfg.path}: [validation] folds must be >= 2 (and fold 0) for a "
                              f"cross-validation")
        find_data(cfg)  # a missing dataset fails before the directory exists
        self.cfg = cfg
        self.threads = threads
        self.observer = observer
        self.log_fn = log
        self.host = Run(cfg, self.out, threads=threads, epochs=epochs, log=log)
        self.epochs = self.host.epochs
        self.new = resume is None
        self.data: Data | None = None  # every training game, loaded once (`loaded`)
        self.memo = EvalMemo(self.host.evaluation)  # the held-out evaluations, made once

    def log(self, line: str) -> None:
        self.host.log(line)

    def _start(self) -> None:
        """Create (or, resumed, lock) the directory."""
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WriteError(self.out, e) from None
        self.host.lock.acquire()
        meta = read_meta(self.out)
        if self.new:
            if meta or (self.out / CHECKPOINT).exists():
                raise TrainingError(f"{self.out} already holds a run; use --resume {self.out} "
                                    f"to continue it, or choose another --out")
            atomic_write(self.out / "config.toml", self.config_path.read_bytes())
            atomic_write(self.out / "train.log", "")
        elif not meta.get("cv"):
            raise TrainingError(f"{self.out}: not a cross-validation's directory")
        atomic_write(self.out / RUN_META, json.dumps({"config": str(self.cfg.path),
                                                      "epochs": self.epochs, "cv": True}))

    def _changes(self, pull: float, fold: int, epochs: int) -> dict:
        tr = self.cfg["training"]
        store = tr["store_cache"] or str((self.out / STORE).resolve())
        changes = {"optimizer": {"pull": pull}, "validation": {"fold": fold},
                   "training": {"patience": 0, "store_cache": store, "epochs": epochs}}
        if fold == 0:  # the final run is an ordinary run, not another cross-validation
            changes["validation"].update(folds=0, pulls=[])
        return changes

    def tasks(self) -> list[FoldTask]:
        """Every fold run of every pull, in order."""
        v = self.cfg["validation"]
        pulls = v["pulls"] or [self.cfg["optimizer"]["pull"]]
        return [FoldTask(float(p), i, self.out / f"pull-{j + 1}" / f"fold-{i}", self.config_path,
                         self._changes(float(p), i, self.epochs), self.epochs,
                         f"pull {p:g}, fold {i}/{v['folds']}")
                for j, p in enumerate(pulls) for i in range(1, v["folds"] + 1)]

    def loaded(self) -> Data:
        """Every training game, loaded (once) for the fold runs and the report."""
        if self.data is None:
            self.data = load_data(self.cfg, self.log)
        return self.data

    def _run_one(self, task: FoldTask) -> FoldResult:
        self.log(f"cross-validation: {task.label}: {task.out}")
        return run_fold(task, self.threads, self._prefixed(task.label), self.observer,
                        self.loaded(), self.memo)

    def _prefixed(self, label: str) -> Callable[[str], None]:
        """A run's log lines, also in the cross-validation's log, prefixed by `label`."""
        return lambda line: self.log(f"[{label}] {line}")

    def run(self, backend: Callable[[list[FoldTask], Callable], list[FoldResult]] = in_order
            ) -> dict:
        """The folds (run by `backend`), the report, the final run and best.json / best.hpp;
        returns `RESULT`'s content."""
        try:
            self._start()
            folds = self.cfg["validation"]["folds"]
            results = backend(self.tasks(), self._run_one)
            rows = self.rows(results, folds)
            chosen = min(rows, key=lambda r: r.mean_val)  # the first of equals: grid order
            summary = self.report(rows, chosen, folds)
            if improves(chosen):
                final = run_fold(FoldTask(chosen.pull, 0, self.out / "final", self.config_path,
                                          self._changes(chosen.pull, 0, chosen.epochs),
                                          chosen.epochs, "final"),
                                 self.threads, self._prefixed("final"),
                                 self.observer, self.loaded(), self.memo)
                theta, what = final.thetas[-1], "tuned"
            else:
                theta, what = self.host.theta0, "starting parameters"
            note = {"result": what, "cross_validated_change": f"{_pct(chosen.mean)} +- "
                    f"{100 * chosen.spread:.2f}% over {folds} folds",
                    "pull": chosen.pull, "epochs": chosen.epochs}
            if what != "tuned":
                note["why"] = ("the folds' mean change is not an improvement larger than their "
                               "spread: a tune would fit noise, not the engine")
            self.host.outputs.write_params("best", theta, self.host.k, note=note)
            summary["result"] = what
            atomic_write(self.out / RESULT, json.dumps(summary, indent=1))
            verdict = "an" if what == "tuned" else "NOT an"
            kept = "tuned parameters" if what == "tuned" else what
            self.log(f"result: the {kept} in {self.out / 'best.json'} and .hpp; cross-validated "
                     f"change {note['cross_validated_change']}, {verdict} improvement larger "
                     f"than the folds' spread")
            return summary
        finally:
            self.host.lock.release()

    def rows(self, results: list[FoldResult], folds: int) -> list[PullRow]:
        """Each pull's best epoch count (lowest mean held-out loss over the folds) and the
        folds' changes of the integer evaluation's error there."""
        # fold -> (held-out positions, results), split once for all the pulls from the data
        # the fold runs were given (their evaluations: `self.memo`, shared with the runs)
        by_fold: dict[int, tuple] = {}
        rows = []
        for start in range(0, len(results), folds):
            group = results[start: start + folds]
            n = min(len(r.val_loss) for r in group)
            curve = [math.fsum(r.val_loss[e] for r in group) / folds for e in range(n)]
            best = int(np.argmin(curve))
            changes = []
            for r in group:
                if r.task.fold not in by_fold:
                    by_fold[r.task.fold] = self._held_out(r.task)
                positions, y = by_fold[r.task.fold]
                start_loss = mse_at(r.k, self._evals(r.task.fold, self.host.theta0, positions), y)
                changes.append(mse_at(r.k, self._evals(r.task.fold, r.thetas[best], positions), y)
                               / start_loss - 1)
            rows.append(PullRow(group[0].task.pull, best + 1, curve[best], changes))
        return rows

    def _held_out(self, task: FoldTask) -> tuple[np.ndarray, np.ndarray]:
        data = refold(self.loaded(), self.cfg.with_values(task.changes))
        return data.held_out(), data.held_out_results()

    def _evals(self, fold: int, theta: np.ndarray, positions: np.ndarray) -> np.ndarray:
        """The engine's evaluation of `positions`, fold `fold`'s held-out ones, at `theta`
        (`integer_evals`, remembered)."""
        evals, self.how = self.memo.evals(fold, theta, positions)
        return evals

    def report(self, rows: list[PullRow], chosen: PullRow, folds: int) -> dict:
        """Log the folds' figures and the verdict; the summary for `RESULT`."""
        self.log(f"cross-validation by game, {folds} folds: each fold's change of the held-out "
                 f"mean squared error ({self.how}) against the starting parameters, at the "
                 f"epoch count with the lowest mean held-out loss over the folds:")
        for r in rows:
            self.log(f"  pull {r.pull:<8g} {r.epochs:3d} epoch(s): "
                     + " ".join(_pct(c) for c in r.changes)
                     + f"  mean {_pct(r.mean)} +- {100 * r.spread:.2f}%"
                     + ("  <- chosen" if r is chosen else ""))
        change = f"{_pct(chosen.mean)} +- {100 * chosen.spread:.2f}% (spread over {folds} folds)"
        if improves(chosen):
            self.log(f"cross-validated change {change}: an improvement larger than the folds' "
                     f"spread; training on every training game with pull {chosen.pull:g} for "
                     f"{chosen.epochs} epoch(s)")
        else:
            self.log(f"cross-validated change {change}: NOT an improvement larger than the "
                     f"folds' spread, so a tune would only fit noise: best.json / best.hpp hold "
                     f"the STARTING parameters")
        return {"folds": folds, "how": self.how,
                "pulls": [dict(pull=r.pull, epochs=r.epochs, mean_val_loss=r.mean_val,
                               changes=r.changes, mean=r.mean, spread=r.spread) for r in rows],
                "chosen": dict(pull=chosen.pull, epochs=chosen.epochs),
                "improves": improves(chosen)}


def is_cross_validation(cfg: Config) -> bool:
    """Whether `cfg` asks for a cross-validation (not one of its fold runs)."""
    return cfg["validation"]["folds"] >= 2 and cfg["validation"]["fold"] == 0


def is_cross_validation_dir(directory: str | Path) -> bool:
    """Whether `directory` holds a cross-validation (its run.json says so)."""
    try:
        return bool(read_meta(Path(directory)).get("cv"))
    except RunMetaError:
        return False
