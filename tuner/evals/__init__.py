"""Evaluations written against the tape, and their parameter registries.

An evaluation module provides ``registry()`` (a `ParamRegistry`), an ``@njit`` function
``record_eval(tape, acc, pos) -> value index`` that records the continuous White-POV evaluation of
one packed position (see docs/interfaces.md), and ``record_batch(tape, acc, positions, rows, out)``:
the three-line loop recording ``positions[rows[i]]`` into ``out[i]`` that the trainer calls (see the
end of `tuner.evals.clockwork` for why each evaluation writes it). `get_evaluation` finds one by
name.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

#: Evaluation name -> module implementing it.
EVALUATIONS = {"clockwork": "tuner.evals.clockwork", "material": "tuner.evals.material"}


@dataclass(frozen=True)
class Evaluation:
    """An evaluation ready for training: its name, parameter registry and tape recorder."""

    name: str
    registry: Any       # ParamRegistry
    record_eval: Any      # numba dispatcher (tape, acc, pos) -> value index
    record_batch: Any     # numba dispatcher (tape, acc, positions, rows, out) -> None


def get_evaluation(name: str) -> Evaluation:
    """The evaluation called `name`; ValueError listing the known ones otherwise."""
    if name not in EVALUATIONS:
        raise ValueError(f"unknown evaluation {name!r}; known: {', '.join(sorted(EVALUATIONS))}")
    module = importlib.import_module(EVALUATIONS[name])
    return Evaluation(name, module.registry(), module.record_eval, module.record_batch)
