"""The checkpoint file (``checkpoint.npz``): what it holds, and its validation on load.

`FIELDS` is the one description of the file: every array, its kind, its shape and the range of
its values. `write_checkpoint` refuses a state that does not match it; `read_checkpoint` checks
every array of a file against it (a valid zip of the wrong arrays is what a changed evaluation or
an old version leaves) before any of it reaches compiled code. To store something new, add a
line to `FIELDS` (``required=False`` keeps older checkpoints readable).

`TrainState` is what the file holds of a run's progress, as one object (`save_state`,
`load_state`): the parameters, the optimiser's moments and step, the epoch, K, the shuffle RNG,
the best epoch and the loss history. Everything else a checkpoint holds (the configuration's
digest and values, the evaluation's name) says which run the state belongs to.
"""
from __future__ import annotations

import io
import json
import math
import zipfile
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Callable

import numpy as np

from tuner.fileio import atomic_write
from .config import MAX_EPOCHS, RESUME_FREE, Config

#: Optimiser steps beyond this cannot be counted exactly in float64 (AdamW's bias correction).
MAX_STEP = 2 ** 53


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message names the file and the array."""


class Kind(Enum):
    """What an array of the checkpoint holds."""

    FLOAT = "float64"
    INT = "integer"
    TEXT = "text"


@dataclass(frozen=True)
class Expect:
    """What the resuming run needs: its parameter vector's length, its evaluation and the bound
    on parameter magnitudes."""

    n_theta: int
    evaluation: str
    max_param: float
    digest: str   # Config.digest() of the resuming configuration
    config: dict  # its values (JSON types)


#: The loss history's columns (``loss.csv``; ``history_<name>`` in the checkpoint).
HISTORY_FIELDS = ("epoch", "train_loss", "val_loss", "lr", "seconds", "positions_per_s")


#: A shape: a tuple, or a function of (what the run expects, the scalars read so far).
Shape = tuple | Callable[[Expect, dict], tuple]
#: A value check: returns an error text, or None.
Check = Callable[[np.ndarray, Expect, dict], str | None]


@dataclass(frozen=True)
class Field:
    """One array of the checkpoint: its kind, shape, value check and description."""

    kind: Kind
    shape: Shape
    check: Check | None = None
    required: bool = True
    doc: str = ""


def _theta(e: Expect, _: dict) -> tuple:
    return (e.n_theta,)


def _per_epoch(_: Expect, got: dict) -> tuple:
    return (int(got["epoch"]),)


def _finite(a, e, got):
    return None if np.isfinite(a).all() else "holds values that are not finite"


def _params(a, e, got):
    if not np.isfinite(a).all():
        return "holds values that are not finite"
    return None if np.all(np.abs(a) < e.max_param) else f"holds values beyond +-{e.max_param:g}"


def _second_moment(a, e, got):
    return None if (np.isfinite(a).all() and (a >= 0).all()) else "must be finite and >= 0"


def _epoch(a, e, got):
    return None if 1 <= int(a) <= MAX_EPOCHS else f"must be in 1..{MAX_EPOCHS:,}, got {int(a)}"


def _step(a, e, got):
    epoch = int(got["epoch"])
    return (None if epoch <= int(a) <= MAX_STEP else
            f"must be in {epoch}..2^53 (at least one step per epoch), got {int(a)}")


def _epochs_list(a, e, got):
    return None if np.array_equal(a, np.arange(1, int(got["epoch"]) + 1)) else \
        "must count the epochs 1, 2, ..., epoch"


def _k(a, e, got):
    return None if np.isfinite(a) and a > 0 else f"must be a finite number > 0, got {float(a)}"


def _best_epoch(a, e, got):
    epoch = int(got["epoch"])
    return (None if 0 <= int(a) <= epoch else
            f"must be in 0..{epoch} (the epochs done), got {int(a)}")


def _best_val(a, e, got):
    return None if not np.isnan(a) and a >= 0 else f"must be a loss >= 0 (or inf), got {float(a)}"


def _evaluation(a, e, got):
    return None if str(a) == e.evaluation else \
        f"is {str(a)!r}, this run tunes {e.evaluation!r}: the checkpoint is another evaluation's"


def _digest(a, e, got):
    if str(a) == e.digest:
        return None
    old = json.loads(str(got["config"])) if "config" in got else None
    changed = config_differences(old, e.config) if old is not None else []
    what = "; ".join(changed) if changed else f"digest {str(a)} vs {e.digest}"
    return (f"says the checkpoint was made with a different configuration ({what}); only "
            f"[training] {', '.join(sorted(k for _, k in RESUME_FREE))} may change on resume")


def _json(a, e, got):
    try:
        json.loads(str(a))
    except ValueError as err:
        return f"is not JSON ({err})"
    return None


#: Every array of a checkpoint, in the order they are checked (scalars before what depends on
#: them). History columns are added below from `HISTORY_FIELDS`.
FIELDS: dict[str, Field] = {
    "epoch": Field(Kind.INT, (), _epoch, doc="epochs completed"),
    "step": Field(Kind.INT, (), _step, doc="optimiser steps taken"),
    "config": Field(Kind.TEXT, (), _json, required=False,
                    doc="the run's configuration values (JSON), to name what changed"),
    "digest": Field(Kind.TEXT, (), _digest, doc="Config.digest() of the run's configuration"),
    "evaluation": Field(Kind.TEXT, (), _evaluation, doc="the evaluation's name"),
    "rng": Field(Kind.TEXT, (), _json, doc="the shuffle RNG's state (JSON)"),
    "theta": Field(Kind.FLOAT, _theta, _params, doc="parameters (flat: pairs, then values)"),
    "m": Field(Kind.FLOAT, _theta, _finite, doc="first moment / momentum"),
    "v": Field(Kind.FLOAT, _theta, _second_moment, doc="AdamW second moment"),
    "k": Field(Kind.FLOAT, (), _k, doc="K of the loss (given or fitted)"),
    "theta0": Field(Kind.FLOAT, _theta, _params, required=False,
                    doc="the starting parameters, which [optimizer] pull pulls toward"),
    "best_epoch": Field(Kind.INT, (), _best_epoch,
                        doc="epoch of the best validation loss (0: none)"),
    "best_val": Field(Kind.FLOAT, (), _best_val, doc="the best validation loss (inf: none)"),
    "best_theta": Field(Kind.FLOAT, _theta, _params, doc="parameters of the best epoch"),
}
HISTORY_CHECKS: dict[str, Check | None] = {"epoch": _epochs_list, "train_loss": _finite}


def add_history(fields: tuple) -> None:
    """Describe the history columns (``history_<name>``, one value per epoch)."""
    for f in fields:
        FIELDS[f"history_{f}"] = Field(Kind.FLOAT, _per_epoch, HISTORY_CHECKS.get(f),
                                       doc=f"history: {f} per epoch")


add_history(HISTORY_FIELDS)


def _kind_ok(a: np.ndarray, kind: Kind) -> bool:
    if kind is Kind.FLOAT:
        return a.dtype == np.float64
    if kind is Kind.INT:
        return a.dtype.kind in "iu" and a.dtype.itemsize <= 8
    if kind is Kind.TEXT:
        return a.dtype.kind == "U"
    raise AssertionError(f"unknown kind {kind!r}")


def write_checkpoint(path: Path, state: dict) -> None:
    """Write `state` (one entry per field of `FIELDS`) atomically as an ``.npz`` file."""
    missing = [k for k, f in FIELDS.items() if f.required and k not in state]
    unknown = [k for k in state if k not in FIELDS]
    if missing or unknown:
        raise AssertionError(f"checkpoint state does not match FIELDS: missing {missing}, "
                             f"unknown {unknown}")
    buf = io.BytesIO()
    np.savez(buf, **state)
    atomic_write(path, buf.getvalue())


def read_checkpoint(path: Path, expect: Expect) -> dict:
    """Every array of the checkpoint at `path`, checked against `FIELDS`; CheckpointError
    naming the file and the array otherwise."""
    try:
        with np.load(path, allow_pickle=False) as z:
            names = list(z.files)
            unknown = [k for k in names if k not in FIELDS]
            if unknown:
                raise CheckpointError(f"{path}: unknown array(s) {', '.join(unknown)}: the "
                                      f"checkpoint was written by another version of the tuner")
            got = {}
            for key, field in FIELDS.items():
                if key not in names:
                    if field.required:
                        raise CheckpointError(f"{path}: no array {key!r} ({field.doc}): not a "
                                              f"checkpoint of this version of the tuner")
                    continue
                a = z[key]
                shape = field.shape(expect, got) if callable(field.shape) else field.shape
                if not _kind_ok(a, field.kind) or a.shape != shape:
                    raise CheckpointError(
                        f"{path}: {key} is {a.dtype} of shape {a.shape}, expected "
                        f"{field.kind.value} of shape {shape} ({field.doc}): the checkpoint was "
                        f"made for other parameters or by another version")
                err = field.check(a, expect, got) if field.check is not None else None
                if err:
                    raise CheckpointError(f"{path}: {key} {err}")
                got[key] = np.array(a)
            return got
    except CheckpointError:
        raise
    except FileNotFoundError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as e:
        # a damaged file fails in zipfile, zlib or numpy's header parser, in many ways
        raise CheckpointError(f"{path}: unreadable checkpoint ({type(e).__name__}: {e})") from None


def config_differences(old: dict, new: dict) -> list[str]:
    """The keys (other than those free on resume) whose values differ: ``[section] key: old ->
    new``."""
    out = []
    for section in sorted(set(old) | set(new)):
        a, b = old.get(section, {}), new.get(section, {})
        for key in sorted(set(a) | set(b)):
            if (section, key) in RESUME_FREE:
                continue
            va, vb = a.get(key), b.get(key)
            if va != vb:
                out.append(f"[{section}] {key}: {va!r} in the run, {vb!r} now")
    return out


@dataclass
class TrainState:
    """A run's progress: everything its checkpoint holds of it, and all that changes as it
    trains. `theta` is the flat parameter vector (pairs (mg, eg) row-major, then values); `m`
    and `v` the optimiser's moments (SGD uses `m` as its velocity); `theta0` where ``[optimizer]
    pull`` pulls toward; `k` None until fitted (``[loss] k = "fit"``); `best_epoch` 0 until an
    epoch is validated."""

    theta: np.ndarray
    theta0: np.ndarray
    k: float | None
    rng: np.random.Generator
    m: np.ndarray
    v: np.ndarray
    step: int = 0
    epoch: int = 0
    best_epoch: int = 0
    best_val: float = math.inf
    best_theta: np.ndarray | None = None
    history: dict = field(default_factory=lambda: {f: [] for f in HISTORY_FIELDS})

    @classmethod
    def start(cls, theta: np.ndarray, k: float | None, shuffle_seed: int) -> "TrainState":
        """The state before the first epoch, at parameters `theta`."""
        return cls(theta, theta.copy(), k, np.random.default_rng(shuffle_seed),
                   np.zeros_like(theta), np.zeros_like(theta), best_theta=theta.copy())

    def end_epoch(self, stats: dict) -> bool:
        """Count the epoch whose `stats` (`HISTORY_FIELDS`) are given, recording its validation
        loss; whether it is the best so far (NaN, no validation, never is)."""
        self.epoch += 1
        for key in HISTORY_FIELDS:
            self.history[key].append(stats[key])
        val = stats["val_loss"]
        if not val < self.best_val:
            return False
        self.best_val, self.best_epoch = val, self.epoch
        self.best_theta = self.theta.copy()
        return True

    def stop_early(self, patience: int) -> bool:
        """Whether `patience` epochs (0: never) have passed without a better validation loss."""
        return patience > 0 and self.best_epoch > 0 and self.epoch - self.best_epoch >= patience


def save_state(path: Path, state: TrainState, cfg: Config, evaluation: str) -> None:
    """Write `state` of a run of `cfg` tuning `evaluation` as the checkpoint at `path`."""
    write_checkpoint(path, dict(
        theta=state.theta, m=state.m, v=state.v, step=state.step, epoch=state.epoch, k=state.k,
        theta0=state.theta0, best_theta=state.best_theta, best_epoch=state.best_epoch,
        best_val=state.best_val, rng=json.dumps(state.rng.bit_generator.state),
        digest=cfg.digest(), evaluation=evaluation,
        config=json.dumps(cfg.values, sort_keys=True),
        **{f"history_{k}": np.array(v, dtype=np.float64) for k, v in state.history.items()}))


def load_state(path: Path, expect: Expect, theta0: np.ndarray) -> TrainState:
    """The state in the checkpoint at `path`, checked (`read_checkpoint`); `theta0` for a
    checkpoint older than the pull (the configuration's starting parameters)."""
    z = read_checkpoint(path, expect)
    rng = np.random.default_rng()
    try:
        rng.bit_generator.state = json.loads(str(z["rng"]))
    except (TypeError, ValueError, KeyError) as e:
        raise CheckpointError(f"{path}: rng is not a state of the shuffle generator "
                              f"({type(e).__name__}: {e})") from None
    return TrainState(z["theta"], z.get("theta0", theta0), float(z["k"]), rng, z["m"], z["v"],
                      int(z["step"]), int(z["epoch"]), int(z["best_epoch"]),
                      float(z["best_val"]), z["best_theta"],
                      {k: list(z[f"history_{k}"]) for k in HISTORY_FIELDS})
