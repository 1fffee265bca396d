"""Sweeps (``tuner sweep --config sweep.toml``): many ordinary runs over one base configuration,
ranked by their validation loss.

A sweep file's ``[sweep]`` table names a base configuration (a shipped name or a file, validated
like ``tuner train``'s) and, in ``[sweep.values]``, the keys to vary (``"optimizer.lr" = [1.0,
4.0]``): every combination (``mode = "grid"``) or ``trials`` random draws with a ``seed``
(``mode = "random"``: each key from its list, or from a ``{low, high, log}`` range). Every
trial's configuration is checked before anything runs; a bad value is a `ConfigError` naming the
sweep file, the key and the value.

Each trial is an ordinary run directory, ``trial-NNN/`` in the sweep's directory, started by
`tuner.train.loop.start_run` exactly as ``tuner train`` starts one (its config.toml holds the
trial's values). The trials share one replay store (``store/``, unless the base configuration
keeps one elsewhere): positions are recorded once for every trial whose K and evaluation agree.
A finished trial leaves `TRIAL_RESULT` (its row of the table) in its directory.

Where the trials run: one after another in this process (`in_order`, no Ray needed), or as Ray
tasks (`on_ray`) on a local Ray (``cluster = "local"``) or a cluster (``"auto"``,
``"ray://HOST:PORT"``), each reserving ``cpus_per_trial`` CPUs and training with that many
threads. Ray retries a task whose worker died (its ``max_retries``); the retried task resumes
the trial from its checkpoint. Runs are deterministic, so the table is bitwise the same either
way. No scheduler of Ray Tune stops trials early: whether one stops a trial depends on when the
others report, so the table would depend on timing and a resumed sweep could differ from an
uninterrupted one; a trial stops early by its own ``[training] patience`` instead.

A killed sweep resumes with the same command: finished trials (`TRIAL_RESULT` present) are
skipped, an unfinished trial with a checkpoint is resumed from it (a resumed run is bit for bit
the uninterrupted one, and its finished epochs are not redone), and one killed before its first
checkpoint is started again. The sweep's directory then holds `RESULTS_CSV` and `RESULTS_PNG`.
"""
from __future__ import annotations

import csv
import io
import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from tuner.errors import error_line
from tuner.fileio import WriteError, atomic_write, read_json
from .config import CLUSTER_ADDRESSES, NUM, RAY_MISSING, RAY_OPTIONAL, SCHEMA, ConfigError, Key, _a, _between, \
    _check_type, _fail, _one_of, _type_name, check_address, check_section, describe_keys, load_config, \
    read_toml
from .loop import CHECKPOINT, TrainingError, find_data, start_run
from .progress import Observer
from .rundir import RunBusyError, RunLock

#: Files of a sweep's directory: the sweep file as started, the trial list (checked on resume),
#: the ranked table and its picture; in each trial's directory, its row once it has finished.
SWEEP_COPY = "sweep.toml"
SWEEP_META = "sweep.json"
RESULTS_CSV = "results.csv"
RESULTS_PNG = "results.png"
TRIAL_RESULT = "trial.json"
#: The replay store the trials share, when the base configuration keeps none.
STORE = "store"
#: Most trials a sweep may have (a grid's product grows fast).
MAX_TRIALS = 10_000
#: Most CPUs a trial may reserve on a cluster.
MAX_CPUS = 1024
#: The sections a sweep may not vary: a cross-validation is not a trial.
NOT_SWEPT = ("validation",)
#: The fixed values of ``[sweep] cluster``: '' (this process, no Ray) and a cluster run's.
CLUSTERS = ("", *CLUSTER_ADDRESSES)
#: The table's columns after the trial's name and its swept keys.
RESULT_FIELDS = ("best_val_loss", "best_epoch", "epochs", "train_loss", "val_loss", "status")

SWEEP_SCHEMA: dict[str, Key] = {
    "config": Key((str,), None, "The base configuration: the name of a shipped one (`tuner "
                  "configs`) or a TOML file (relative to the sweep file). Required. It needs "
                  "validation positions ([data] validation_fraction > 0): trials are ranked by "
                  "their best validation loss."),
    "mode": Key((str,), "grid", "'grid': every combination of the values (the last key varies "
                "fastest); 'random': `trials` draws, each key from its list or range.",
                _one_of("grid", "random")),
    "trials": Key((int,), 0, f"'random': the number of draws (1..{MAX_TRIALS:,}).",
                  _between(0, MAX_TRIALS)),
    "seed": Key((int,), 0, "'random': the seed of the draws (>= 0).", _between(0, 2 ** 63 - 1)),
    "cluster": Key((str,), "", "Where the trials run: '' (default) one after another in this "
                   "process; 'local' a Ray started on this machine; 'auto' the Ray cluster this "
                   "machine is part of (`ray start`); 'ray://HOST:PORT' a Ray client address. "
                   f"{RAY_OPTIONAL}.", lambda x: check_address(x, CLUSTERS)),
    "cpus_per_trial": Key((int,), 1, "With a cluster: CPUs each trial reserves, and the threads "
                          "it trains with (results do not depend on it).",
                          _between(1, MAX_CPUS)),
    "values": Key((dict,), None, "[sweep.values]: the keys to vary, as \"section.key\" = "
                  "[value, ...] (or the table [sweep.values.section] with key = [...]). "
                  "'random' also takes a range {low = A, high = B, log = false} for a number key "
                  "(an integer key draws integers). Any key of the training configuration but "
                  "[validation]'s. Required."),
}


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file: its base configuration and the trials, in order."""

    path: Path                 # the sweep file
    base: Path                 # the base configuration file
    keys: tuple[str, ...]      # the swept keys, "section.key", in the file's order
    trials: tuple[Trial, ...]
    cluster: str
    cpus_per_trial: int
    out: Path                  # the sweep's directory


@dataclass(frozen=True)
class Trial:
    """One run of a sweep: all a backend needs to run it, here or on a Ray worker."""

    name: str          # trial-NNN: its directory's name and its row's
    values: dict       # "section.key" -> value, the swept keys' values
    out: Path          # its run directory (absolute)
    config: Path       # the base configuration file
    store: str         # the replay store folder the trials share ([training] store_cache)
    threads: int | None = None  # None: the base configuration's [training] threads

    def changes(self) -> dict:
        """`values`, and the shared store, as `Config.with_values` takes them."""
        out: dict = {"training": {"store_cache": self.store}}
        for dotted, v in self.values.items():
            section, key = dotted.split(".")
            out.setdefault(section, {})[key] = v
        return out


def _flatten(table: dict, prefix: str = "") -> dict:
    """``{"optimizer": {"lr": [..]}}`` and ``{"optimizer.lr": [..]}`` alike as dotted keys (a
    range table, with `low`, stays a value)."""
    out = {}
    for k, v in table.items():
        dotted = f"{prefix}{k}"
        if isinstance(v, dict) and "low" not in v and "high" not in v:
            out.update(_flatten(v, dotted + "."))
        else:
            out[dotted] = v
    return out


def _schema_key(where: str, dotted: str) -> Key:
    parts = dotted.split(".")
    if len(parts) != 2 or parts[0] not in SCHEMA or parts[1] not in SCHEMA[parts[0]]:
        _fail(where, f"{dotted!r} is not a configuration key (\"section.key\"; see `tuner train "
                     f"--help-config`)")
    if parts[0] in NOT_SWEPT:
        _fail(where, f"{dotted!r}: a sweep does not vary [{parts[0]}] (a cross-validation is "
                     f"not a trial)")
    return SCHEMA[parts[0]][parts[1]]


def _range(where: str, key: Key, spec: dict) -> dict:
    """A checked ``{low, high, log}`` range for a number key."""
    allowed = {"low", "high", "log"}
    extra = set(spec) - allowed
    if extra:
        _fail(where, f"unknown range key {sorted(extra)[0]!r}; allowed: low, high, log")
    if "low" not in spec or "high" not in spec:
        _fail(where, f"a range needs low and high, got {spec!r}")
    integer = float not in key.types
    if not any(t in key.types for t in (int, float)):
        _fail(where, f"a range is for a number key; this one takes {_a(_type_name(key.types))}")
    kind = (int,) if integer else NUM
    for k in ("low", "high"):
        if not _check_type(spec[k], kind) or not math.isfinite(spec[k]):
            _fail(where, f"{k} must be {'an integer' if integer else 'a finite number'}, got "
                         f"{spec[k]!r}")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        _fail(where, f"log must be true or false, got {log!r}")
    if not spec["low"] < spec["high"]:
        _fail(where, f"low must be < high, got low = {spec['low']!r}, high = {spec['high']!r}")
    if log and spec["low"] <= 0:
        _fail(where, f"a log range needs low > 0, got {spec['low']!r}")
    return {"low": spec["low"], "high": spec["high"], "log": log, "integer": integer}


def _draw(rng: np.random.Generator, spec):
    """One random value of a key: from its list, or its range."""
    if isinstance(spec, list):
        return spec[int(rng.integers(len(spec)))]
    lo, hi = spec["low"], spec["high"]
    if spec["log"]:
        x = math.exp(rng.uniform(math.log(lo), math.log(hi)))
        return min(max(round(x), lo), hi) if spec["integer"] else x
    return int(rng.integers(lo, hi + 1)) if spec["integer"] else float(rng.uniform(lo, hi))


def _combinations(raw: dict, values: dict) -> list[dict]:
    """The swept keys' values of every trial, in order."""
    keys = list(values)
    if raw["mode"] == "grid":
        return [dict(zip(keys, combo)) for combo in itertools.product(*values.values())]
    rng = np.random.default_rng(raw["seed"])
    return [{k: _draw(rng, values[k]) for k in keys} for _ in range(raw["trials"])]


def load_sweep(path: str | Path, out: str | Path, cluster: str | None = None) -> Sweep:
    """Read and validate the sweep file `path`, its base configuration and every trial's
    configuration (trial directories under `out`; `cluster`, if given, instead of the file's);
    a `ConfigError` names the file, the key and the value that is wrong."""
    p = Path(path)
    raw = read_toml(p, "sweep")
    extra = [s for s in raw if s != "sweep"]
    if extra or not isinstance(raw.get("sweep"), dict):
        _fail(str(p), f"a sweep file holds one table, [sweep]{f'; not [{extra[0]}]' if extra else ''}")
    table = raw["sweep"]
    got = check_section(f"{p}: [sweep]", table, SWEEP_SCHEMA)
    if got["mode"] == "random" and got["trials"] < 1:
        _fail(f"{p}: [sweep] trials", f"mode 'random' needs trials >= 1, got {got['trials']!r}")
    if got["mode"] == "grid" and "trials" in table:
        _fail(f"{p}: [sweep] trials", "is for mode 'random' (a grid runs every combination)")
    if cluster is None:
        cluster = got["cluster"]  # checked with the table
    elif check_address(cluster, CLUSTERS):
        _fail("--cluster", f"{check_address(cluster, CLUSTERS)}, got {cluster!r}")

    from tuner.shipped import find_config
    named = p.parent / got["config"]
    try:
        base = find_config(str(named) if named.is_file() else got["config"])
        cfg = load_config(base)
    except ConfigError as e:
        raise ConfigError(f"{p}: [sweep] config = {got['config']!r}: {e}") from None
    if cfg["data"]["validation_fraction"] == 0:
        _fail(f"{p}: [sweep] config = {got['config']!r}", "trials are ranked by validation loss: "
              "the base configuration needs [data] validation_fraction > 0")
    if cfg["validation"]["folds"]:
        _fail(f"{p}: [sweep] config = {got['config']!r}", "is a cross-validation ([validation] "
              "folds); a trial is an ordinary run")

    values = {}
    for dotted, v in _flatten(got["values"]).items():
        where = f"{p}: [sweep.values] {dotted!r}"
        key = _schema_key(where, dotted)
        if isinstance(v, dict):
            if got["mode"] != "random":
                _fail(where, f"a range {v!r} is for mode 'random'; a grid takes a list")
            v = _range(where, key, v)
        elif not isinstance(v, list) or not v:
            _fail(where, f"must be a non-empty list of values, got {v!r}")
        values[dotted] = v
    if not values:
        _fail(f"{p}: [sweep.values]", "names no key to vary")
    combos = _combinations(got, values)
    if len(combos) > MAX_TRIALS:
        _fail(f"{p}: [sweep.values]", f"the grid has {len(combos):,} trials, more than "
                                      f"{MAX_TRIALS:,}")
    out = Path(out).resolve()
    width = max(3, len(str(len(combos))))
    threads = got["cpus_per_trial"] if cluster else None
    store = cfg["training"]["store_cache"] or str(out / STORE)
    trials = tuple(Trial(f"trial-{i + 1:0{width}d}", combo, out / f"trial-{i + 1:0{width}d}",
                         base, store, threads) for i, combo in enumerate(combos))
    from tuner.data import DatasetError
    find_data(cfg)  # a missing dataset fails before the sweep's directory exists
    for t in trials:
        try:
            trial_cfg = cfg.with_values(t.changes())
            if "data.train" in values:
                find_data(trial_cfg)
        except (ConfigError, DatasetError) as e:
            shown = ", ".join(f"{k} = {json.dumps(v)}" for k, v in t.values.items())
            raise ConfigError(f"{p}: [sweep.values] {t.name} ({shown}): {e}") from None
    return Sweep(p, base, tuple(values), trials, cluster, got["cpus_per_trial"], out)


def describe_sweep() -> str:
    """The sweep file reference: every key of [sweep] with type, default and meaning."""
    return "\n".join(["Sweep file reference (TOML): one table, [sweep].", "",
                      *describe_keys(SWEEP_SCHEMA)])


# -- running trials ----------------------------------------------------------------------------
def run_trial(trial: Trial, log: Callable[[str], None] = lambda line: None,
              observer: Observer | None = None) -> dict:
    """Run `trial` (or resume it from its checkpoint; or read its row, when it has finished);
    write and return its row: the swept values, the best validation loss and its epoch, the
    epochs done, the last epoch's losses and ``status`` ("done", or the error that stopped it)."""
    done = trial.out / TRIAL_RESULT
    if done.exists():
        return read_json(done, ConfigError)
    row = {"trial": trial.name, **trial.values}
    if (trial.out / CHECKPOINT).exists():
        run = start_run(None, None, str(trial.out), None, trial.threads, log=log,
                        observer=observer)
    else:
        run = start_run(str(trial.config), str(trial.out), None, None, trial.threads, log=log,
                        observer=observer, changes=trial.changes())
    try:
        run.log(f"sweep trial {trial.name}: "
                + ", ".join(f"{k} = {json.dumps(v)}" for k, v in trial.values.items()))
        history = run.run()  # releases the lock, however it ends
    except TrainingError as e:  # diverged, unplayable ...: deterministic, so not run again
        run.lock.release()
        row.update(best_val_loss=math.nan, best_epoch=run.best_epoch, epochs=run.epoch,
                   train_loss=math.nan, val_loss=math.nan, status=f"failed: {e}")
        trial.out.mkdir(parents=True, exist_ok=True)  # a run that never checkpointed removed it
    except BaseException:
        run.lock.release()
        raise
    else:
        row.update(best_val_loss=float(run.best_val), best_epoch=run.best_epoch, epochs=run.epoch,
                   train_loss=float(history["train_loss"][-1]),
                   val_loss=float(history["val_loss"][-1]), status="done")
    atomic_write(done, json.dumps(row))
    return row


def in_order(sweep: Sweep, trials: list[Trial], log: Callable[[str], None],
             observer: Observer | None, done: Callable[[dict], None]) -> None:
    """The default backend: every trial in this process, one after another."""
    for t in trials:
        log(f"sweep: {t.name}: {t.out}")
        done(run_trial(t, lambda line, name=t.name: log(f"[{name}] {line}"), observer))


def import_ray(sweep: Sweep):
    """The `ray` module; a `ConfigError` saying how to install it when it is not there."""
    try:
        import ray
    except ImportError:
        raise ConfigError(f"{sweep.path}: cluster = {sweep.cluster!r}: {RAY_MISSING}") from None
    return ray


def on_ray(sweep: Sweep, trials: list[Trial], log: Callable[[str], None],
           observer: Observer | None, done: Callable[[dict], None]) -> None:
    """Every trial as a Ray task reserving ``cpus_per_trial`` CPUs, on the sweep's cluster (or
    the Ray this process has already started); rows are reported as tasks finish. `observer` is
    not used: a trial's progress stays on its worker (its train.log has every line)."""
    ray = import_ray(sweep)
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=None if sweep.cluster == "local" else sweep.cluster,
                     include_dashboard=False, logging_level="WARNING")
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise TrainingError(f"{sweep.path}: [sweep] cluster = {sweep.cluster!r}: cannot "
                                f"start or reach Ray: {error_line(e)}") from None
    try:
        task = ray.remote(run_trial).options(num_cpus=sweep.cpus_per_trial)
        pending = {task.remote(t): t for t in trials}
        log(f"sweep: {len(pending)} trial(s) submitted to Ray ({sweep.cpus_per_trial} CPU(s) "
            f"each)")
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            trial = pending.pop(ready[0])
            try:
                row = ray.get(ready[0])
            except ray.exceptions.RayError as e:
                cause = getattr(e, "cause", None) or e
                raise TrainingError(f"{trial.name}: {str(cause).splitlines()[-1]}") from None
            done(row)
    finally:
        if started:
            ray.shutdown()


def _same_trials(a: list, b: list) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def run_sweep(sweep_path: str | Path, out: str | Path | None = None, *,
              cluster: str | None = None, log: Callable[[str], None] = lambda line: None,
              observer: Observer | None = None) -> tuple[list[dict], Sweep]:
    """Run (or resume) the sweep of file `sweep_path` in `out` (default ``sweeps/<file's
    stem>``): every unfinished trial, then the ranked table (`RESULTS_CSV`, `RESULTS_PNG`);
    returns the ranked rows and the sweep. `cluster` overrides the file's ``[sweep] cluster``."""
    out = Path(out) if out is not None else Path("sweeps") / Path(sweep_path).stem
    sweep = load_sweep(sweep_path, out, cluster)
    if sweep.cluster:
        import_ray(sweep)  # before the directory exists
    trials_meta = [{"name": t.name, "values": t.values} for t in sweep.trials]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise WriteError(out, e) from None
    lock = RunLock(out)
    try:
        lock.acquire()
    except RunBusyError:
        raise TrainingError(f"{out}: another tuner sweep runs in this directory") from None
    try:
        meta_path = out / SWEEP_META
        if meta_path.exists():
            meta = read_json(meta_path, TrainingError)
            if not _same_trials(meta.get("trials"), trials_meta):
                raise TrainingError(f"{out}: holds another sweep (its trials are not those of "
                                    f"{sweep.path}); choose another --out")
        else:
            atomic_write(out / SWEEP_COPY, sweep.path.read_bytes())
            atomic_write(meta_path, json.dumps({"base": str(sweep.base), "keys": sweep.keys,
                                                "trials": trials_meta}, indent=1))
        rows = {}
        todo = []
        for t in sweep.trials:
            if (t.out / TRIAL_RESULT).exists():
                rows[t.name] = read_json(t.out / TRIAL_RESULT, TrainingError)
            else:
                todo.append(t)
        if rows:
            resumed = [t.name for t in todo if (t.out / CHECKPOINT).exists()]
            log(f"sweep: resumed; {len(rows)} trial(s) finished, not run again"
                + (f"; continuing {', '.join(resumed)} from its checkpoint" if resumed else ""))

        def done(row: dict) -> None:
            rows[row["trial"]] = row
            log(f"sweep: {row['trial']} {row['status']}" + (
                f": best validation loss {row['best_val_loss']:.6f} (epoch {row['best_epoch']})"
                if row["status"] == "done" else ""))

        backend = on_ray if sweep.cluster else in_order
        if todo:
            backend(sweep, todo, log, observer, done)
        ranked = rank([rows[t.name] for t in sweep.trials])
        write_results(out, ranked, sweep.keys)
        return ranked, sweep
    finally:
        lock.release()


# -- the table ---------------------------------------------------------------------------------
def rank(rows: list[dict]) -> list[dict]:
    """`rows` ordered by best validation loss (failed trials last; equals in trial order), each
    with its ``rank`` (1 = best)."""
    order = sorted(range(len(rows)), key=lambda i: (math.isnan(rows[i]["best_val_loss"]),
                                                    rows[i]["best_val_loss"], i))
    return [{"rank": r + 1, **rows[i]} for r, i in enumerate(order)]


def cell(v) -> str:
    """A value as the table writes it: floats exactly (``repr``, which reads back to the same
    bits), lists and tables as JSON."""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, dict, bool)):
        return json.dumps(v)
    return str(v)


def columns(keys: tuple[str, ...]) -> list[str]:
    """The table's columns for the swept `keys`."""
    return ["rank", "trial", *keys, *RESULT_FIELDS]


def results_csv(ranked: list[dict], keys: tuple[str, ...]) -> str:
    """The ranked table as CSV text."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns(keys))
    for row in ranked:
        w.writerow([cell(row[c]) for c in columns(keys)])
    return buf.getvalue()


def format_table(ranked: list[dict], keys: tuple[str, ...]) -> str:
    """The ranked table for a terminal: aligned columns, losses with 6 decimals."""
    def text(c, v):
        if isinstance(v, float) and c in RESULT_FIELDS:
            return "-" if math.isnan(v) else f"{v:.6f}"
        return cell(v) if not isinstance(v, float) else f"{v:g}"

    cols = columns(keys)
    cells = [cols] + [[text(c, row[c]) for c in cols] for row in ranked]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cols))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in cells)


def write_results(out: Path, ranked: list[dict], keys: tuple[str, ...]) -> None:
    """`RESULTS_CSV` and `RESULTS_PNG` (validation loss against each swept key) in `out`."""
    atomic_write(out / RESULTS_CSV, results_csv(ranked, keys))
    from tuner.plots.sweep import write_sweep_plot  # matplotlib loaded only when it draws
    write_sweep_plot(out / RESULTS_PNG, ranked, keys)
