"""The trace evaluation: an engine's evaluation given by its trace, with no port of its code.

A trace dataset (`tuner.data.trace`, docs/trace.md) lists per position the (parameter index,
count) terms of a linear evaluation, its phase and an endgame scale factor. The evaluation of a
trace row is recorded as the reference evaluations record theirs: every term into the lazy
linear accumulator in the row's order (`lin_add`: a repeated index merged into its first
occurrence), one linear-combination record of the non-zero sums (`lin_record_pair`), the
endgame scaling (`record_eg_scale`) when the row's scale is not 1.0, and the phase blend
(`record_phase`) with ``alpha = phase / phase_max``. A trace written in the order an
evaluation adds its terms (``examples/write_trace.py`` for `tuner.evals.clockwork`) therefore
records exactly that evaluation's records, and trains to the same bits.

Its parameters are the registry JSON beside the trace (pairs only, with ``phase_max``): a
configuration names that file as its evaluation (``[evaluation] name = "mine.json"``), and
`trace_evaluation` makes the `Evaluation` of it.
"""
from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import numpy as np
from numba import njit
from tuner.jit import JIT

from .positions import TraceLayout, TraceRows
from tuner.tape import lin_add, lin_record_pair, record_eg_scale, record_phase

from . import Evaluation
from .registry import ParamFileError, ParamRegistry

#: The suffix of a trace's parameter file: an evaluation spec ending in it names a trace.
SUFFIX = ".json"
#: The scale factor that leaves the endgame half as it is (no record).
UNSCALED = 1.0


@njit(**JIT)
def record_eval(tape, acc, trace, i):
    """Record the evaluation of trace row `i` of `trace` (`TraceRows`); its value slot."""
    for j in range(trace.start[i], trace.start[i + 1]):
        lin_add(acc, trace.index[j], trace.count[j])
    pair = lin_record_pair(tape, acc)
    if trace.scale[i] != UNSCALED:
        pair = record_eg_scale(tape, pair, trace.scale[i])
    return record_phase(tape, pair, trace.alpha[i])


@njit(**JIT)
def record_batch(tape, acc, positions, rows, out):
    """Record the evaluation of trace row ``rows[i]`` for every i; ``out[i]`` = its value slot."""
    for i in range(rows.shape[0]):
        out[i] = record_eval(tape, acc, positions, rows[i])


def layout(registry: ParamRegistry, source: str) -> TraceLayout:
    """What the rows of a trace of `registry`'s parameters are checked against; ParamFileError
    naming `source` when `registry` cannot be a trace's (value parameters, no phase_max)."""
    if registry.n_values:
        raise ParamFileError(f"{source}: a trace's parameters are (mg, eg) pairs; this file "
                             f"has {registry.n_values} value entries")
    phase_max = registry.meta.get("phase_max")
    if (isinstance(phase_max, bool) or not isinstance(phase_max, (int, float))
            or not np.isfinite(phase_max) or phase_max <= 0):
        raise ParamFileError(f"{source}: a trace's parameter file needs \"phase_max\", a "
                             f"number > 0 (the phase of a pure midgame), got {phase_max!r}")
    return TraceLayout(registry.n_params, float(phase_max), source)


@lru_cache(maxsize=None)
def _evaluation(path: str, mtime_ns: int) -> Evaluation:
    registry = ParamRegistry.from_json(path)
    return Evaluation(f"trace:{Path(path).name}", registry, record_eval, record_batch,
                      trace=layout(registry, path))


def trace_evaluation(path: str | os.PathLike) -> Evaluation:
    """The trace evaluation of parameter file `path` (ValueError naming the file and entry if
    it is not a trace's parameter file)."""
    path = Path(path)
    try:
        return _evaluation(str(path), path.stat().st_mtime_ns)
    except FileNotFoundError:
        raise ValueError(f"no such trace parameter file: {path}") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read it: {e.strerror}") from None


__all__ = ["TraceRows", "record_batch", "record_eval", "trace_evaluation"]
