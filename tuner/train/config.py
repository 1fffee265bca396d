"""Training configuration: a TOML file, every key documented and validated.

`SCHEMA` is the single description of the file: each key's type, default and meaning. `load_config`
checks a file against it (an unknown key or a wrong type is a `ConfigError` naming the file, the
key and what is allowed) and `describe` renders it as the reference printed by
``tuner train --help-config``.
"""
from __future__ import annotations

import hashlib
import json
import math
import textwrap
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tuner.errors import ConfigError

from .split import DEFAULT_BLOCK
from .targets import K_MAX, K_MIN, LOSS_FORMS, MAX_FIT_POSITIONS


@dataclass(frozen=True)
class Key:
    """One configuration key: its type(s), default (None: required or optional), and meaning."""

    types: tuple
    default: Any
    doc: str
    check: Callable[[Any], str | None] | None = None  # returns an error text, or None if fine


#: Bounds of the numbers a configuration may hold: beyond them a run cannot be allocated, would
#: not end in any useful time, or learns nothing (see `tuner train --help-config`).
MAX_EPOCHS = 1_000_000
MAX_BATCH = 1 << 26            # positions per optimiser step (67,108,864)
MAX_MICRO_BATCH = 1 << 16      # positions per tape (65,536): a tape per thread is allocated
MAX_THREADS = 256
MAX_STORES = 1_000            # stores a store cache keeps (0: no limit)
MAX_SEED = 2 ** 63 - 1         # numpy seeds are non-negative; TOML integers are 64-bit
#: Largest magnitude of a learning rate, weight decay or initial parameter.
MAX_MAGNITUDE = 1e9
MAX_WORKERS = 4096             # Ray actors of a cluster run
MAX_SEGMENT = 1 << 40          # store rows per segment (a store never has more)
#: The one line that says how to get Ray (clusters and sweeps need it; nothing else does): the
#: error when it is missing, and what the help of an option or key that needs it says.
RAY_MISSING = "Ray is not installed; install it with: pip install 'tuner[ray]'"
RAY_OPTIONAL = "Ray is optional; install it with: pip install 'tuner[ray]'"
#: The fixed values of ``[cluster] address`` (or a Ray client address "ray://HOST:PORT").
CLUSTER_ADDRESSES = ("local", "auto")


def _between(lo, hi, *, lo_open: bool = False, hi_open: bool = False):
    """A check that a number lies in lo..hi (open ends excluded)."""
    def check(x):
        ok = (lo < x if lo_open else lo <= x) and (x < hi if hi_open else x <= hi)
        if not ok and hi == math.inf:
            return f"must be {'>' if lo_open else '>='} {_num(lo)}"
        return None if ok else (f"must be in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}"
                                f"{')' if hi_open else ']'}")
    return check


def _num(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


_positive = _between(0, MAX_MAGNITUDE, lo_open=True)
#: A learning rate may be absurdly large (the run then stops as diverged), never 0 or NaN.
_rate = _between(0, math.inf, lo_open=True)
_non_negative = _between(0, MAX_MAGNITUDE)
_fraction = _between(0, 1, hi_open=True)
_seed = _between(0, MAX_SEED)
_epochs = _between(1, MAX_EPOCHS)
_epoch = _between(0, MAX_EPOCHS)


def _k_value(x):
    if isinstance(x, str):
        return None if x == "fit" else "must be a number or \"fit\""
    return _between(K_MIN, K_MAX)(x)


def check_address(x: str, fixed: tuple[str, ...] = CLUSTER_ADDRESSES) -> str | None:
    """The error of a Ray address that is neither one of `fixed` nor ray://...; None if it is
    fine."""
    ok = x in fixed or (x.startswith("ray://") and len(x) > len("ray://"))
    return None if ok else f"must be {', '.join(map(repr, fixed))} or 'ray://HOST:PORT'"


def require_ray(where: str) -> None:
    """A `ConfigError` at `where` saying how to install Ray, if it is not importable."""
    try:
        import ray  # noqa: F401
    except ImportError:
        raise ConfigError(f"{where}: {RAY_MISSING}") from None


#: ``[training] batch_size`` of the full-batch mode: one step per epoch over every position.
FULL_BATCH = "all"
#: ``[training] shuffle``'s modes (see its help).
SHUFFLES = ("positions", "blocks")
#: The ``[training]`` keys of the block shuffle (`Config.digest` leaves them out under the
#: position shuffle, which they do not change).
SHUFFLE_KEYS = ("shuffle", "shuffle_block")
#: Default ``[training] shuffle``: the block shuffle, which converges as the position shuffle does
#: on the shipped sample at blocks of 64 (within the position shuffle's spread over 3 seeds on the
#: default job's training loss, validation loss and held-out check; better on the from-zero
#: recipe's held-out games) and trains an epoch of 6.97 M positions faster (docs/performance.md,
#: "Block shuffles and full batches").
DEFAULT_SHUFFLE = "blocks"
#: Default ``[training] shuffle_block``: the size that converged as the position shuffle does
#: (blocks of 256 and 1,024 were worse than every position-shuffle seed on the default job's
#: held-out games); a default batch (262,144) is then 4,096 contiguous runs of 64 rows, and a
#: batch of the default job (4,096) still mixes 64 blocks.
DEFAULT_SHUFFLE_BLOCK = 64
#: Default ``[training] segment``: the store rows no micro-batch crosses the end of (the unit of a
#: cluster worker's share). A data set smaller than it has one segment (its runs cut the
#: micro-batches as before segments existed: `Config.digest` leaves the key out at this value);
#: 6.97 M positions have 27, and a batch of 262,144 cut into 256 micro-batches of 1,024 then
#: has about 10 more (266: 10 in each full segment, 6 in the last).
DEFAULT_SEGMENT = 1 << 18


def _batch_size(x):
    if isinstance(x, str):
        return None if x == FULL_BATCH else f"must be an integer or \"{FULL_BATCH}\""
    return _between(1, MAX_BATCH)(x)


def _at_least_one(x):
    return None if x >= 1 else "must be >= 1"


def _blend(x):
    return None if 0 <= x <= 1 else "must be in [0, 1]"


def _one_of(*allowed):
    def check(x):
        return None if x in allowed else f"must be one of {', '.join(map(repr, allowed))}"
    return check


def _str_list(x):
    return None if all(isinstance(s, str) for s in x) else "must be a list of strings"


#: Most folds of a cross-validation.
MAX_FOLDS = 100


def _folds(x):
    return None if x == 0 or 2 <= x <= MAX_FOLDS else f"must be 0 or in 2..{MAX_FOLDS}"


def _pull_list(x):
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in x):
        return "must be a list of numbers"
    bad = [v for v in x if _non_negative(v) or not math.isfinite(v)]
    if bad:
        return f"holds {bad[0]!r}: each must be in [0, {MAX_MAGNITUDE:g}]"
    return None if len(set(x)) == len(x) else "holds a value twice"


NUM = (int, float)
SCHEMA: dict[str, dict[str, Key]] = {
    "data": {
        "train": Key((list, str), None,
                     "Datasets to train on: registered names (looked up as `tuner data list "
                     "--config` shows: the project's datasets/registry.toml first), Parquet "
                     "paths (relative to the config file) or URIs that pyarrow's filesystems "
                     "open (`s3://...`, `gs://...`, `hdfs://...`, `file:///...`; credentials "
                     "from the environment as pyarrow reads them). A registry's `file` may be any "
                     "path, absolute or with `..`: a registry from someone else can point at "
                     "any file you can read. Required.", _str_list),
        "validation_fraction": Key(NUM, 0.05,
                                   "Share of the positions held out for the validation loss. "
                                   "Whole games are held out, never single positions: a game's "
                                   "positions share its result, so a split by position lets the "
                                   "tuner score well on validation by remembering games, and "
                                   "its parameters can get worse on games it never saw while "
                                   "the validation loss says they got better.", _fraction),
        "split_seed": Key((int,), 1, "Seed of the train/validation split (which games are held "
                          "out; >= 0).", _seed),
        "split_block": Key((int,), DEFAULT_BLOCK,
                           "For a dataset without a 'game' column: the validation split holds "
                           "out blocks of this many consecutive positions (file order keeps a "
                           "game's positions together, so only games crossing a block boundary "
                           "can fall on both sides).", _at_least_one),
        "policy": Key((str,), "skip", "Bad rows: 'skip' (drop and report) or 'strict' (fail).",
                      _one_of("skip", "strict")),
    },
    "evaluation": {
        "name": Key((str,), "clockwork",
                    "Evaluation to tune: a registered name (see `tuner.evals`), a module path "
                    "(mypkg.myeval) or a .py file (relative to the config file). A module or "
                    "file is imported, so its code runs with your rights: a configuration from "
                    "someone else runs their code; read what it names before training with it."),
        "init": Key((str,), "zero",
                    "Initial parameters: 'zero', 'default' (the evaluation's shipped values), "
                    "'random' (uniform in random_center +- random_range) or a parameter JSON "
                    "file (relative to the config file). Constants always keep their defaults."),
        "random_range": Key(NUM, 100.0, "Half-width of the 'random' initialisation.", _positive),
        "random_center": Key(NUM, 0.0, "Centre of the 'random' initialisation.",
                             _between(-MAX_MAGNITUDE, MAX_MAGNITUDE)),
        "random_seed": Key((int,), 0, "Seed of the 'random' initialisation (>= 0).", _seed),
    },
    "loss": {
        "k": Key((int, float, str), 1 / 400,
                 "Scale K of the prediction sigmoid(K * eval), or \"fit\": before training, the "
                 "K minimising the mean squared error of the starting parameters against the game "
                 f"results on the training positions (at most {MAX_FIT_POSITIONS:,}, evenly "
                 "spaced); it is logged and kept in the checkpoint. Needs starting parameters "
                 "that tell positions apart (not init \"zero\"). A number must lie in "
                 f"[{K_MIN:g}, {K_MAX:g}]: beyond, sigmoid(K * eval) cannot learn.", _k_value),
        "function": Key((str,), "mse",
                        "'mse': the mean squared error (prediction - target)^2 (Texel's); "
                        "'cross_entropy': -(target log p + (1 - target) log(1 - p)).",
                        _one_of(*LOSS_FORMS)),
        "score_blend": Key(NUM, 0.0,
                           "lambda: the target is lambda * sigmoid(K * score_cp) + (1 - lambda) "
                           "* result, blending the game result with the engine's score where "
                           "the data has one (a dataset without scores is an error for lambda "
                           "> 0). 0: the game result.", _blend),
    },
    "optimizer": {
        "name": Key((str,), "adamw", "'adamw' or 'sgd' (with momentum).", _one_of("adamw", "sgd")),
        "lr": Key(NUM, 10.0, "Base learning rate (the schedule scales it).", _rate),
        "beta1": Key(NUM, 0.9, "AdamW first-moment decay.", _fraction),
        "beta2": Key(NUM, 0.999, "AdamW second-moment decay.", _fraction),
        "eps": Key(NUM, 1e-8, "AdamW denominator epsilon.", _between(0, 1, lo_open=True)),
        "weight_decay": Key(NUM, 0.0, "Decoupled weight decay (per unit learning rate).",
                            _non_negative),
        "momentum": Key(NUM, 0.9, "SGD momentum.", _fraction),
        "pull": Key(NUM, 0.0,
                    "lambda of the pull toward the starting parameters theta0: every batch "
                    "minimises its mean loss + lambda * ||theta - theta0||^2 (not weight decay, "
                    "which pulls toward zero). Keeps a fine-tune on a small sample near the "
                    "parameters it started from; the reported training loss includes the term. "
                    "0: no pull.", _non_negative),
    },
    "schedule": {
        "type": Key((str,), "constant",
                    "'constant'; 'exponential' (lr * gamma^(e - decay_from_epoch) once "
                    "e > decay_from_epoch, e 0-based); or 'piecewise' (consecutive segments "
                    "from the first epoch on, each decaying geometrically from lr_start to "
                    "lr_end over its epochs; the last segment's lr_end holds afterwards).",
                    _one_of("constant", "exponential", "piecewise")),
        "gamma": Key(NUM, 0.91, "Decay factor per epoch of the 'exponential' schedule, in (0, 1].",
                     _between(0, 1, lo_open=True)),
        "decay_from_epoch": Key((int,), 6, "Last epoch (0-based) at the base rate for "
                                "'exponential': the log's epochs 1..decay_from_epoch + 1 run at "
                                "lr, its epoch n after them at lr * gamma^(n - 1 - "
                                "decay_from_epoch).", _epoch),
        "segments": Key((list,), [], "'piecewise' segments: [[schedule.segments]] tables with "
                        "epochs (int > 0), lr_start and lr_end (> 0)."),
    },
    "freeze": {
        "stages": Key((list,), [], "Freeze stages: [[freeze.stages]] tables with from_epoch "
                      "(int), train (glob patterns of parameter names, e.g. '*_MAT') and "
                      "optionally exclude (patterns). From from_epoch (0-based: the log's "
                      "epoch from_epoch + 1; 0 = the first epoch) on, only parameters matching "
                      "train and not exclude move. Without stages, and before the first "
                      "stage, everything moves. Constant parameters never move."),
    },
    "validation": {
        "folds": Key((int,), 0,
                     "Cross-validation by game (0: none): N >= 2 trains N runs, each holding "
                     "out 1/N of the training games, chooses the epoch count (and the pull "
                     "from pulls) with the lowest mean held-out loss over the folds, reports "
                     "each fold's change against the starting parameters with the mean and "
                     "spread, then trains on every training game with the choice. When the "
                     "mean change is not an improvement larger than the spread, best.json / "
                     "best.hpp hold the starting parameters (with a note) instead.",
                     _folds),
        "pulls": Key((list,), [],
                     "Values of [optimizer] pull the cross-validation tries (each with every "
                     "fold); empty: [optimizer] pull only.", _pull_list),
        "fold": Key((int,), 0,
                    "The fold a run holds out (1..folds; 0: none). The cross-validation sets it "
                    "in each fold's own run directory; not for hand use.", _epoch),
    },
    "training": {
        "epochs": Key((int,), 10, f"Number of epochs (at most {MAX_EPOCHS:,}).", _epochs),
        "batch_size": Key((int, str), 262_144, f"Positions per optimiser step (at most "
                          f"{MAX_BATCH:,}), or \"{FULL_BATCH}\": one step per epoch over every "
                          "training position in store order (full batch, what texel-tuner "
                          "does; no shuffle).", _batch_size),
        "micro_batch_size": Key((int,), 1024, "Positions recorded on a tape at once; also the "
                                f"unit of the deterministic gradient reduction (at most "
                                f"{MAX_MICRO_BATCH:,}).", _between(1, MAX_MICRO_BATCH)),
        "threads": Key((int,), 0, f"Worker threads (0 = all cores; at most {MAX_THREADS}). "
                       "Results do not depend on it.", _between(0, MAX_THREADS)),
        "shuffle_seed": Key((int,), 0, "Seed of the per-epoch shuffle (>= 0); with shuffle = "
                            "\"blocks\", also of the store's recording order.", _seed),
        "shuffle": Key((str,), DEFAULT_SHUFFLE,
                       "What an epoch shuffles: 'positions' (every position anew: a batch reads "
                       "scattered rows of the store) or 'blocks': the training positions are "
                       "recorded once in a random order drawn from shuffle_seed, and each epoch "
                       "shuffles blocks of shuffle_block consecutive ones, so that a block is a "
                       "random sample yet contiguous in the store and a batch is read as "
                       "batch_size / shuffle_block contiguous runs (a replay run streams its "
                       "data in two passes, the second recording each position into its part "
                       "of the order). "
                       "The default is 'blocks': at shuffle_block = 64 it converges as "
                       "'positions' does on the shipped sample, and its epochs are faster.",
                       _one_of(*SHUFFLES)),
        "shuffle_block": Key((int,), DEFAULT_SHUFFLE_BLOCK,
                             f"Positions per block of shuffle = \"blocks\" (at most "
                             f"{MAX_BATCH:,}).", _between(1, MAX_BATCH)),
        "segment": Key((int,), DEFAULT_SEGMENT,
                       "Consecutive rows of the store (the positions in the order they are "
                       "recorded) that make a segment: a batch, in store order, is cut into "
                       "micro-batches every micro_batch_size positions and at every segment's "
                       "first row, so no micro-batch holds two segments' positions. A cluster "
                       "worker holds whole segments (at most one worker per segment); a smaller "
                       "segment balances more workers, and adds up to one micro-batch per "
                       f"segment to every batch (at most {MAX_SEGMENT:,}).",
                       _between(1, MAX_SEGMENT)),
        "patience": Key((int,), 0,
                        "Early stopping: stop once the validation loss has not improved on its "
                        "best for this many epochs (0: run every epoch). The best epoch's "
                        "parameters are kept as best.json / best.hpp either way.",
                        _epoch),
        "store_cache": Key((str,), "",
                           "Folder (relative to the config file) where the replay store is kept "
                           "between runs: written once, keyed by a digest of the positions, "
                           "results, K and the evaluation's code; a later run with the same key "
                           "loads it instead of recording. A stale, truncated, corrupted or invalid "
                           "file (every field is checked as a fresh store's) is reported and "
                           "rebuilt. The folder is made 0700; one that another user could write to "
                           "is not used (logged). Empty: record every run."),
        "store_cache_keep": Key((int,), 4, "How many stores ``store_cache`` keeps: writing one "
                                "removes all but the newest this many (a store loaded counts "
                                "as new; 0 keeps all).", _between(0, MAX_STORES)),
        "mode": Key((str,), "replay",
                    "'replay' records each position (its evaluation and loss) once, freezes the "
                    "recordings into a compact store and replays it forward and backward every "
                    "epoch, for any evaluation (several times faster); 'eager' records every "
                    "position again in every epoch (what C++ tuners do; no store in memory). "
                    "Both give bitwise identical results.",
                    _one_of("replay", "eager")),
    },
    "cluster": {
        "address": Key((str,), "local", "Where the workers of a cluster run are: 'local' a Ray "
                       "started on this machine; 'auto' the Ray cluster this machine is part of "
                       "(`ray start`); 'ray://HOST:PORT' a Ray client address. Used when "
                       f"``workers`` >= 1. {RAY_OPTIONAL}.", check_address),
        "workers": Key((int,), 0, "Ray actors that compute the batches' gradients, each from "
                       "its own copy of the data read from ``[data] train`` (paths every node "
                       "reaches); [training] threads is the threads of each. 0: train on this "
                       f"machine only (at most {MAX_WORKERS:,}). Results do not depend on it.",
                       _between(0, MAX_WORKERS)),
    },
}

SEGMENT_KEYS = {"epochs": (int,), "lr_start": NUM, "lr_end": NUM}
STAGE_KEYS = {"from_epoch": (int,), "train": (list,), "exclude": (list,)}
#: Keys that may differ between a run and its resumption (they do not change the result).
RESUME_FREE = {("training", "epochs"), ("training", "threads"), ("training", "mode"),
               ("training", "store_cache"), ("training", "store_cache_keep"),
               ("training", "patience"), ("cluster", "address"), ("cluster", "workers")}


def _type_name(types: tuple) -> str:
    if float in types:  # an integer is a number too
        types = tuple(t for t in types if t is not int)
    names = {int: "integer", float: "number", str: "string", list: "list", bool: "boolean",
             dict: "table"}
    return " or ".join(names[t] for t in types)


def _a(noun: str) -> str:
    """`noun` with its indefinite article: "an integer", "a number"."""
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def _check_type(value, types) -> bool:
    if isinstance(value, bool):
        return bool in types
    if float in types and isinstance(value, int):
        return True
    return isinstance(value, types)


@dataclass(frozen=True)
class DigestOmission:
    """Keys of one section that `Config.digest` leaves out while a key of that section (one of
    them, or another) has a value: keys added after runs existed, left out where they do not
    change what such runs did, so that those runs keep their digest (they resume, their caches
    hold)."""

    section: str
    keys: tuple[str, ...]
    when: str    # the key of `section` whose value decides
    value: Any   # the value at which `keys` are left out


#: Every key `Config.digest` leaves out at a value (a key added later is one more row): the
#: ``segment`` at its default, and the block shuffle's keys under the position shuffle.
DIGEST_OMISSIONS = (
    DigestOmission("training", ("segment",), "segment", DEFAULT_SEGMENT),
    DigestOmission("training", SHUFFLE_KEYS, "shuffle", SHUFFLES[0]),
)


@dataclass
class Config:
    """A validated configuration: ``values[section][key]``, with defaults filled in."""

    values: dict
    path: Path | None = None

    def __getitem__(self, section: str) -> dict:
        return self.values[section]

    def resolve_path(self, p: str) -> Path:
        """A path from the config, relative to the config file's folder."""
        q = Path(p).expanduser()
        return q if q.is_absolute() or self.path is None else self.path.parent / q

    def digest(self) -> str:
        """Hash of everything that determines the result (not epochs, threads or mode)."""
        v = json.loads(json.dumps(self.values))
        for section, key in RESUME_FREE:
            v[section].pop(key, None)
        for left in DIGEST_OMISSIONS:  # decided on the values as they are (not as left out)
            if self.values[left.section].get(left.when) == left.value:
                for key in left.keys:
                    v[left.section].pop(key, None)
        v = {section: keys for section, keys in v.items() if keys}  # [cluster]: all free
        return hashlib.sha256(json.dumps(v, sort_keys=True).encode()).hexdigest()[:16]

    def with_values(self, changes: dict) -> "Config":
        """This configuration with ``changes[section][key]`` set (validated again; the same
        path, so relative paths keep their meaning)."""
        values = json.loads(json.dumps(self.values))
        for section, keys in changes.items():
            values[section].update(keys)
        cfg = validate(values, str(self.path or "config"))
        cfg.path = self.path
        return cfg

    def to_toml(self) -> str:
        """The values as a TOML document that `load_config` reads back to the same values."""
        lines = []
        for section, keys in self.values.items():
            tables = {k: v for k, v in keys.items() if isinstance(v, list) and v
                      and isinstance(v[0], dict)}
            lines.append(f"[{section}]")
            lines.extend(f"{k} = {_toml_value(v)}" for k, v in keys.items() if k not in tables)
            for k, items in tables.items():
                for item in items:
                    lines.append(f"[[{section}.{k}]]")
                    lines.extend(f"{ik} = {_toml_value(iv)}" for ik, iv in item.items())
            lines.append("")
        return "\n".join(lines)


def _toml_value(v) -> str:
    """A TOML literal of a configuration value (string, number, boolean or list of them;
    JSON's string escapes are TOML's, and repr of a finite float is a TOML float)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return str(v)


def _fail(where: str, msg: str):
    raise ConfigError(f"{where}: {msg}")


def _check_table_list(where: str, items, keys: dict, required: set) -> list:
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        _fail(where, "must be a list of tables ([[...]] in TOML)")
    out = []
    for i, item in enumerate(items):
        w = f"{where}[{i}]"
        for k, v in item.items():
            if k not in keys:
                _fail(w, f"unknown key {k!r}; allowed: {', '.join(keys)}")
            if not _check_type(v, keys[k]):
                _fail(f"{w}.{k}", f"must be {_a(_type_name(keys[k]))}, got {v!r}")
        for k in required:
            if k not in item:
                _fail(w, f"missing key {k!r}")
        out.append(dict(item))
    return out


def check_section(where: str, given: dict, keys: dict[str, Key]) -> dict:
    """The table `given` (``where`` names it: "FILE: [section]") checked against `keys`: an
    unknown key, a value of the wrong type, not finite or refused by its key's check, or a
    missing required key is a `ConfigError` naming the file, the section, the key and the value;
    returns the values with the defaults filled in."""
    out = {}
    for k, v in given.items():
        if k not in keys:
            _fail(where, f"unknown key {k!r}; allowed: {', '.join(keys)}")
        key = keys[k]
        if not _check_type(v, key.types):
            _fail(f"{where} {k}", f"must be {_a(_type_name(key.types))}, got {v!r}")
        if isinstance(v, float) and not math.isfinite(v):
            _fail(f"{where} {k}", f"must be finite, got {v!r}")
        err = key.check(v) if key.check is not None else None
        if err:
            _fail(f"{where} {k}", f"{err}, got {v!r}")
        out[k] = v
    for k, key in keys.items():
        if k not in out:
            if key.default is None:
                _fail(where, f"missing required key {k!r}: {key.doc}")
            out[k] = key.default
    return out


def describe_keys(keys: dict[str, Key]) -> list[str]:
    """The reference lines of one section's `keys`: each with its type, default and meaning."""
    lines = []
    for k, key in keys.items():
        default = "required" if key.default is None else f"default {key.default!r}"
        lines.append(f"  {k} ({_type_name(key.types)}, {default})")
        lines.extend(textwrap.wrap(key.doc, 96, initial_indent=" " * 6,
                                   subsequent_indent=" " * 6))
    return lines


def validate(raw: dict, where: str = "config") -> Config:
    """Check `raw` (a parsed TOML document) against `SCHEMA`; fill in defaults."""
    values: dict = {}
    for section in raw:
        if section not in SCHEMA:
            _fail(where, f"unknown section [{section}]; allowed: "
                  + ", ".join(f"[{s}]" for s in SCHEMA))
        if not isinstance(raw[section], dict):
            _fail(where, f"[{section}] must be a table")
    for section, keys in SCHEMA.items():
        values[section] = check_section(f"{where}: [{section}]", raw.get(section, {}), keys)

    if isinstance(values["data"]["train"], str):
        values["data"]["train"] = [values["data"]["train"]]
    if not values["data"]["train"]:
        _fail(f"{where}: [data] train", "must name at least one dataset")
    sched = values["schedule"]
    sched["segments"] = _check_table_list(f"{where}: [schedule] segments", sched["segments"],
                                          SEGMENT_KEYS, set(SEGMENT_KEYS))
    for i, seg in enumerate(sched["segments"]):
        for k, check in (("epochs", _epochs), ("lr_start", _rate), ("lr_end", _rate)):
            err = check(seg[k])  # a NaN fails every comparison, so every range check
            if err:
                _fail(f"{where}: [schedule] segments[{i}].{k}", f"{err}, got {seg[k]!r}")
    if sched["type"] == "piecewise" and not sched["segments"]:
        _fail(f"{where}: [schedule]", "type 'piecewise' needs at least one [[schedule.segments]]")
    stages = _check_table_list(f"{where}: [freeze] stages", values["freeze"]["stages"],
                               STAGE_KEYS, {"from_epoch", "train"})
    for i, st in enumerate(stages):
        for k in ("train", "exclude"):
            if k in st and _str_list(st[k]):
                _fail(f"{where}: [freeze] stages[{i}].{k}", "must be a list of strings")
        st.setdefault("exclude", [])
        err = _epoch(st["from_epoch"])
        if err:
            _fail(f"{where}: [freeze] stages[{i}].from_epoch", f"{err}, got {st['from_epoch']!r}")
    if [s["from_epoch"] for s in stages] != sorted({s["from_epoch"] for s in stages}):
        _fail(f"{where}: [freeze] stages", "from_epoch values must be distinct and increasing")
    values["freeze"]["stages"] = stages
    cv = values["validation"]
    if cv["fold"] > cv["folds"]:
        _fail(f"{where}: [validation] fold", f"must be in 0..folds ({cv['folds']}), got "
              f"{cv['fold']}")
    if values["training"]["patience"] and values["data"]["validation_fraction"] == 0:
        _fail(f"{where}: [training] patience", "early stopping needs validation positions "
              "([data] validation_fraction > 0)")
    return Config(values)


def read_toml(p: Path, kind: str = "configuration") -> dict:
    """The TOML document in file `p` (a `kind` file: "configuration", "sweep"); a missing or
    unreadable file, bytes that are not UTF-8 or text that is not TOML is a `ConfigError` naming
    the file."""
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such {kind} file") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not a text file (byte {e.start} is not UTF-8); a {kind} file "
                          f"is a TOML text file") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{p}: not valid TOML: {e}") from None


def load_config(path: str | Path) -> Config:
    """Read and validate a TOML configuration file."""
    p = Path(path)
    cfg = validate(read_toml(p), str(p))
    cfg.path = p.resolve()
    return cfg


def describe() -> str:
    """The configuration reference: every section and key with type, default and meaning."""
    lines = ["Configuration file reference (TOML). Every key is optional unless marked required.",
             "Epoch numbers in keys (from_epoch, decay_from_epoch) are 0-based: epoch 0 is the "
             "first,", "which the log, loss.csv and loss.png call epoch 1.", ""]
    for section, keys in SCHEMA.items():
        lines.append(f"[{section}]")
        lines.extend(describe_keys(keys))
        lines.append("")
    return "\n".join(lines)
