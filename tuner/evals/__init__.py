"""Evaluations written against the tape, and their parameter registries.

An evaluation module provides ``registry()`` (a `ParamRegistry`), an ``@njit`` function
``record_eval(tape, acc, pos) -> value index`` that records the continuous White-POV evaluation of
one packed position (see docs/interfaces.md), and ``chunk_loss_grad``: the trainer's micro-batch
kernel, a few lines calling its ``record_eval`` and `tuner.train.kernels` (see the end of
`tuner.evals.clockwork`). `get_evaluation` finds one by name.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

#: Evaluation name -> module implementing it.
EVALUATIONS = {"clockwork": "tuner.evals.clockwork"}


@dataclass(frozen=True)
class Evaluation:
    """An evaluation ready for training: its name, parameter registry and tape recorder."""

    name: str
    registry: Any       # ParamRegistry
    record_eval: Any      # numba dispatcher (tape, acc, pos) -> value index
    chunk_loss_grad: Any  # numba dispatcher: the micro-batch kernel bound to record_eval


def get_evaluation(name: str) -> Evaluation:
    """The evaluation called `name`; ValueError listing the known ones otherwise."""
    if name not in EVALUATIONS:
        raise ValueError(f"unknown evaluation {name!r}; known: {', '.join(sorted(EVALUATIONS))}")
    module = importlib.import_module(EVALUATIONS[name])
    return Evaluation(name, module.registry(), module.record_eval, module.chunk_loss_grad)
