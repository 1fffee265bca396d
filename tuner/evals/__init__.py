"""Evaluations written against the tape, and their parameter registries.

An evaluation module provides ``registry()`` (a `ParamRegistry`), an ``@njit`` function
``record_eval(tape, scratch, pos) -> value index`` that records the continuous White-POV evaluation
of one packed position (see docs/interfaces.md), ``record_batch(tape, scratch, positions, rows,
out)``: the three-line loop recording ``positions[rows[i]]`` into ``out[i]`` that the trainer calls
(see the end of `tuner.evals.clockwork` for why each evaluation writes it), and optionally
``new_scratch()``: the per-thread working memory both take (default: a linear accumulator over the
registry's pairs). `get_evaluation` finds one by name.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable

from tuner.tape import new_accumulator

#: Evaluation name -> module implementing it.
EVALUATIONS = {"clockwork": "tuner.evals.clockwork",
               "clockwork-10d79e6": "tuner.evals.clockwork_10d79e6",
               "material": "tuner.evals.material"}


@dataclass(frozen=True)
class Evaluation:
    """An evaluation ready for training: its name, parameter registry, tape recorder and the
    factory of the scratch the recorder takes (one per thread)."""

    name: str
    registry: Any       # ParamRegistry
    record_eval: Any      # numba dispatcher (tape, scratch, pos) -> value index
    record_batch: Any     # numba dispatcher (tape, scratch, positions, rows, out) -> None
    new_scratch: Callable[[], Any]  # () -> a fresh scratch for record_eval / record_batch


def get_evaluation(name: str) -> Evaluation:
    """The evaluation called `name`; ValueError listing the known ones otherwise."""
    if name not in EVALUATIONS:
        raise ValueError(f"unknown evaluation {name!r}; known: {', '.join(sorted(EVALUATIONS))}")
    module = importlib.import_module(EVALUATIONS[name])
    reg = module.registry()
    new_scratch = getattr(module, "new_scratch", None) or partial(new_accumulator, reg.n_params)
    return Evaluation(name, reg, module.record_eval, module.record_batch, new_scratch)
