"""Evaluations written against the tape: the `Evaluation` interface and finding one by name.

An evaluation is a module that defines ``EVALUATION``, an `Evaluation`: its name, parameter
registry, the ``@njit`` recorders the trainer calls, and what the commands need besides
(`tuner eval`'s integer evaluation and ``--breakdown`` text, the C++ export style). Only the
recorders are required; the rest has generic defaults that work for any evaluation. The contract,
with a worked example, is docs/evaluations.md; docs/tutorial.md writes one outside the package.

`get_evaluation` accepts a registered name (`EVALUATIONS`), a module path (``mypkg.myeval``,
importable from ``sys.path``), a file path (``path/to/myeval.py``, relative to `base`) or a
trace's parameter file (``path/to/mine.json``: the trace evaluation, `tuner.evals.trace`).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from tuner import ROOT
from tuner.errors import TunerError
from tuner.tape import LinearAccumulator, new_accumulator
from tuner.tape.linear import accumulator_problem
from tuner.tape.ops import E_OPERAND_LIST, index_error
from tuner.tape.player import position_ranges

from .clockwork import EVALUATIONS as CLOCKWORK_EVALUATIONS
from .registry import ParamRegistry

#: The material evaluation's entry (a module, not a package, so declared here).
MATERIAL_EVALUATIONS = {"material": f"{__name__}.material"}

#: Registered evaluation name -> module implementing it, from the packages' declarations (each
#: evaluation module takes its `Evaluation`'s name from here, `registered_name`).
EVALUATIONS = {**CLOCKWORK_EVALUATIONS, **MATERIAL_EVALUATIONS}
#: The module attribute holding an evaluation module's `Evaluation`.
ATTRIBUTE = "EVALUATION"
#: C++ export styles (`tuner.evals.export`): Clockwork's ``eval_constants.hpp`` (in the layout of
#: the parameters' engine commit), or the generic array form documented in docs/evaluations.md.
CPP_CLOCKWORK = "clockwork"
CPP_ARRAY = "array"
CPP_STYLES = (CPP_CLOCKWORK, CPP_ARRAY)
#: Prefix of the module names under which evaluation files are imported.
FILE_MODULE_PREFIX = "tuner_evaluation_file_"


class EvaluationIndexError(TunerError, ValueError):
    """An evaluation handed a recorder an index out of range (a `lin_add` parameter index, an
    op's operand slot); the message names the evaluation, the position (FEN), the index and the
    parameter it falls past."""


class ScratchError(TunerError, TypeError):
    """An evaluation's ``new_scratch()`` returned a linear accumulator the recorders cannot use:
    one not shaped as `tuner.tape.new_accumulator` makes them (`lin_add`, compiled for speed,
    does not check, and would write past its arrays); the message names the evaluation, the
    accumulator's place in the scratch and what is wrong with it."""


def _accumulators(x, where: str):
    """``(place, accumulator)`` of every `LinearAccumulator` in `x`, itself or inside its tuples
    (a NamedTuple's fields by name, ``where.name``; a tuple's items by index, ``where[i]``)."""
    if isinstance(x, LinearAccumulator):
        yield where, x
    elif isinstance(x, tuple):
        names = getattr(x, "_fields", None)
        for i, item in enumerate(x):
            yield from _accumulators(item, f"{where}.{names[i]}" if names else f"{where}[{i}]")


@dataclass(frozen=True)
class _CheckedScratch:
    """An evaluation's `new_scratch`, whose every result is checked (`_accumulators`,
    `accumulator_problem`): a scratch is made once a thread (and again when a tape grows), so
    the check costs nothing beside recording."""

    name: str
    make: Callable[[], Any]

    def __call__(self):
        scratch = self.make()
        for where, acc in _accumulators(scratch, "new_scratch()"):
            problem = accumulator_problem(acc)
            if problem is not None:
                raise ScratchError(f"evaluation {self.name!r}: {where} is a LinearAccumulator "
                                   f"that lin_add cannot use: {problem}; make it with "
                                   f"tuner.tape.new_accumulator(n_params)")
        return scratch


@dataclass(frozen=True)
class Evaluation:
    """An evaluation: what training needs (the first five fields) and what the commands need.

    * ``registry``: its parameters (`ParamRegistry`; its defaults are the shipped values);
    * ``record_eval(tape, scratch, pos) -> value slot`` and ``record_batch(tape, scratch,
      positions, rows, out)`` (``out[i] = record_eval(..., positions[rows[i]])``): Numba
      dispatchers, see docs/evaluations.md;
    * ``new_scratch()``: a fresh per-thread working memory for them (default: a linear
      accumulator over the registry's pairs);
    * ``evaluate(positions, registry) -> (int_eval int64[N], continuous float64[N], ...)``: the
      engine's integer evaluation with `registry`'s values and the tuner's continuous one, White's
      point of view (default: `tuner.evals.generic.evaluate`, the continuous evaluation recorded
      on the tape; the "integer" one rounds the evaluation made with rounded parameters);
    * ``explain(fen, pos, registry, int_eval) -> str``: the ``tuner eval --breakdown`` text of one
      position (default: `tuner.evals.generic.explain`, every parameter group's contribution
      ``value * d eval / d value`` taken from the tape's gradients);
    * ``cpp``: the C++ export style, one of `CPP_STYLES` (default: the generic array form);
    * ``trace``: None for an evaluation of boards (its positions are uint64[N, 9] from FENs);
      the `tuner.data.trace.TraceLayout` of a trace evaluation (`tuner.evals.trace`), whose
      positions are the rows of trace datasets (`tuner.data.trace.TraceRows`).
    """

    name: str
    registry: ParamRegistry
    record_eval: Any
    record_batch: Any
    new_scratch: Callable[[], Any] | None = None
    evaluate: Callable[..., tuple] | None = None
    explain: Callable[[str, np.ndarray, ParamRegistry, int], str] | None = None
    cpp: str = CPP_ARRAY
    trace: Any = None

    def __post_init__(self):
        if not isinstance(self.registry, ParamRegistry):
            raise TypeError(f"evaluation {self.name!r}: registry must be a ParamRegistry, got "
                            f"{type(self.registry).__name__}")
        if self.cpp not in CPP_STYLES:
            raise ValueError(f"evaluation {self.name!r}: unknown C++ export style {self.cpp!r} "
                             f"(expected one of {', '.join(CPP_STYLES)})")
        for field in ("record_eval", "record_batch"):
            if not hasattr(getattr(self, field), "py_func"):
                raise TypeError(f"evaluation {self.name!r}: {field} must be an @njit function")
        if self.new_scratch is None:
            object.__setattr__(self, "new_scratch",
                               partial(new_accumulator, self.registry.n_params))
        elif not isinstance(self.new_scratch, _CheckedScratch):
            object.__setattr__(self, "new_scratch", _CheckedScratch(self.name, self.new_scratch))

    def check_params(self, registry: ParamRegistry) -> None:
        """Raise ValueError unless `registry` (e.g. a tuned file) has this evaluation's layout:
        the same groups (name, kind, shape, offset) in the same order."""
        mine, theirs = _layout(self.registry), _layout(registry)
        if mine == theirs:
            return
        own = self.registry
        if (own.n_params, own.n_values) != (registry.n_params, registry.n_values):
            raise ValueError(f"not the parameters of evaluation {self.name!r}: it has "
                             f"{own.n_params} pair and {own.n_values} value entries, the file "
                             f"{registry.n_params} and {registry.n_values}")
        for a, b in zip(mine, theirs):
            if a != b:
                raise ValueError(f"not the parameters of evaluation {self.name!r}: expected "
                                 f"group {_describe(a)}, found {_describe(b)}")
        raise ValueError(f"not the parameters of evaluation {self.name!r}: expected "
                         f"{len(mine)} parameter groups, found {len(theirs)}")

    def check_recording(self, tape, positions: np.ndarray, rows: np.ndarray,
                        outputs: np.ndarray) -> None:
        """Raise EvaluationIndexError if recording ``positions[rows]`` on `tape` handed a
        recorder an index out of range (the tape's index error word, `tuner.tape.recording`).
        ``outputs`` (int64[n], or int64[S, n] for S segments) are the value slots that end each
        position's records, which tell whose records the bad one is among."""
        bad = index_error(tape.rec)
        if bad is None:
            return
        from tuner.chess.fen import to_fen

        outputs = np.ascontiguousarray(outputs, dtype=np.int64).reshape(-1, len(rows))
        ranges = np.zeros(outputs.shape + (2,), np.int64)
        position_ranges(tape.rec, outputs, ranges)
        hit = np.flatnonzero((ranges[..., 0] <= bad.record) & (bad.record < ranges[..., 1]))
        where = ("position " + repr(to_fen(positions[rows[hit[0] % len(rows)]])) if len(hit)
                 else f"one of the {len(rows)} positions recorded")
        text = f"evaluation {self.name!r}, {where}: {bad.describe()}"
        if bad.code != E_OPERAND_LIST:
            text += f"; index {bad.index} is {self.registry.describe_index(bad.index, bad.kind)}"
        raise EvaluationIndexError(text)

    def evaluate_positions(self, positions: np.ndarray, registry: ParamRegistry):
        """``(int_eval int64[N], continuous float64[N])`` of positions uint64[N, 9] with the
        values of `registry` (checked against this evaluation's layout)."""
        self.check_params(registry)
        if self.trace is not None:
            raise ValueError(f"evaluation {self.name!r} evaluates trace rows, not positions "
                             f"(a trace has no boards)")
        if self.evaluate is None:
            from .generic import evaluate
            return evaluate(self, positions, registry)
        return tuple(self.evaluate(positions, registry)[:2])

    def breakdown(self, fen: str, pos: np.ndarray, registry: ParamRegistry, int_eval: int) -> str:
        """The ``tuner eval --breakdown`` text of one position."""
        if self.explain is None:
            from .generic import explain
            return explain(self, fen, pos, registry, int_eval)
        return self.explain(fen, pos, registry, int_eval)

    def to_cpp(self, registry: ParamRegistry, values=None, value_values=None) -> str:
        """C++ source of `registry`'s parameters (``values`` / ``value_values`` when given) in
        this evaluation's export style."""
        from .export import to_cpp_style
        return to_cpp_style(self.cpp, registry, values, value_values, self.name)


def registered_name(module: str) -> str:
    """The name under which the module `module` (its ``__name__``) is registered in
    `EVALUATIONS`: what a built-in evaluation's `Evaluation` is called."""
    for name, path in EVALUATIONS.items():
        if path == module:
            return name
    raise ValueError(f"module {module} is not a registered evaluation")


def _layout(registry: ParamRegistry) -> list:
    return [(g.name, g.kind, tuple(g.shape), g.offset) for g in registry.groups]


def _describe(group) -> str:
    name, kind, shape, offset = group
    return f"{name} ({kind}, shape {list(shape)}, offset {offset})"


def _is_file(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def file_module_name(resolved: Path) -> str:
    """The name a ``.py`` evaluation file (a resolved path) is imported under. A file of the
    package (the tutorial's ``tuner/examples/kingsafety.py``) takes its name in the package: its
    machine code is cached by the package's sources, shared by every copy of them (another clone,
    an installed wheel), and Numba rebuilds a cached function's globals by importing the module
    of that name. Any other file takes a name derived from its path, as its cache is per path."""
    try:
        inside = resolved.relative_to(ROOT).with_suffix("").parts
    except ValueError:
        digest = hashlib.blake2b(str(resolved).encode(), digest_size=6).hexdigest()
        return f"{FILE_MODULE_PREFIX}{resolved.stem}_{digest}"
    return ".".join(("tuner", *inside))


def _import_file(path: Path) -> ModuleType:
    """The module of file `path`, imported once per process (under `file_module_name`)."""
    resolved = path.resolve()
    name = file_module_name(resolved)
    if name in sys.modules:
        return sys.modules[name]
    if not resolved.is_file():
        raise ValueError(f"no such evaluation file: {path}")
    spec = importlib.util.spec_from_file_location(name, resolved)
    if spec is None or spec.loader is None:
        raise ValueError(f"{path}: not a Python file (an evaluation file ends in .py)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: Numba and dataclasses look it up
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        del sys.modules[name]
        raise ValueError(f"{path}: importing it failed: {_error_text(e)}") from None
    return module


def _import_module(spec: str) -> ModuleType:
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as e:
        if e.name is not None and (spec == e.name or spec.startswith(e.name + ".")):
            raise ValueError(f"unknown evaluation {spec!r}: not a registered name "
                             f"({', '.join(sorted(EVALUATIONS))}), and no module of that name "
                             f"(a file path must end in .py)") from None
        raise ValueError(f"{spec}: importing it failed: {_error_text(e)}") from None
    except Exception as e:
        raise ValueError(f"{spec}: importing it failed: {_error_text(e)}") from None


def _error_text(e: Exception) -> str:
    if isinstance(e, SyntaxError):
        return f"{e.filename}:{e.lineno}: {e.msg}"
    return f"{type(e).__name__}: {e}"


def get_evaluation(spec: str, base: str | os.PathLike | None = None) -> Evaluation:
    """The evaluation `spec` names: a registered name, a module path or a ``.py`` file (relative
    to `base`, e.g. the config's folder; default the working directory). ValueError saying what
    was wrong otherwise (no such file or module, no ``EVALUATION`` in it, not an `Evaluation`)."""
    if spec in EVALUATIONS:
        module, where = importlib.import_module(EVALUATIONS[spec]), EVALUATIONS[spec]
    elif spec.endswith(".json"):
        from .trace import trace_evaluation

        path = Path(spec).expanduser()
        return trace_evaluation(path if path.is_absolute() or base is None
                                else Path(base) / path)
    elif _is_file(spec):
        path = Path(spec).expanduser()
        if not path.is_absolute() and base is not None:
            path = Path(base) / path
        module, where = _import_file(path), str(path)
    else:
        module, where = _import_module(spec), spec
    if not hasattr(module, ATTRIBUTE):
        raise ValueError(f"{where}: defines no {ATTRIBUTE} (an evaluation module ends with "
                         f"`{ATTRIBUTE} = Evaluation(...)`, see docs/evaluations.md)")
    ev = getattr(module, ATTRIBUTE)
    if not isinstance(ev, Evaluation):
        raise ValueError(f"{where}: {ATTRIBUTE} is a {type(ev).__name__}, not a "
                         f"tuner.evals.Evaluation")
    return ev


def evaluation_of_params(registry: ParamRegistry) -> Evaluation | None:
    """The registered evaluation whose parameter layout `registry` has, or None."""
    for name in EVALUATIONS:
        ev = get_evaluation(name)
        if _layout(ev.registry) == _layout(registry):
            return ev
    return None
