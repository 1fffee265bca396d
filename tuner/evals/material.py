"""A minimal evaluation: material and tempo. The template for writing your own.

An evaluation module ends with ``EVALUATION = Evaluation(...)`` (see `tuner.evals` and
docs/evaluations.md), built from:

* its parameters, a `ParamRegistry` read from a JSON file in the registry schema;
* ``record_eval(tape, acc, pos)``: the White-POV evaluation of one packed position on the tape.
  Linear terms go into the accumulator with ``lin_add(acc, parameter_index, count)``; one
  ``lin_record_pair`` turns them into a single record, and ``record_phase`` blends mg and eg.
  Anything non-linear is recorded with the other ops of `tuner.tape.ops`, never computed with a
  branch on parameter values (a recorded tape must stay valid for any parameters);
* ``record_batch``: the three-line loop below, written in each evaluation module so that Numba
  can cache the compiled trainer.

The working memory ``record_eval`` takes (here ``acc``) is a linear accumulator over the registry's
pairs unless the `Evaluation` is given a ``new_scratch`` making something else (see
`tuner.evals.clockwork.v10d79e6`). Everything else (`tuner eval` and its ``--breakdown``, the
export as C++ in the generic array form) is generic.

A config names it ``[evaluation] name = "material"``, its registered name (`registered_name`); a
module of your own names itself, ``Evaluation("mine", ...)``, and is named by its module path or
file path (docs/tutorial.md). Being linear, this one trains by record-once replay.
"""
from __future__ import annotations

import os
from functools import lru_cache

from numba import njit
from tuner.jit import JIT

from tuner.chess.bitboard import popcount
from tuner.chess.position import PHASE_MAX, W_BLACK, W_META, W_PAWN, W_WHITE, phase
from tuner.tape import lin_add, lin_record_pair, record_phase

from . import Evaluation, registered_name
from .registry import ParamRegistry

PARAMS_PATH = os.path.join(os.path.dirname(__file__), "params", "material.json")
TEMPO = 5  # flat index of the TEMPO pair; piece type t (pawn..queen) is at index t


@lru_cache(maxsize=None)
def registry() -> ParamRegistry:
    """Material and tempo pairs with rough defaults."""
    return ParamRegistry.from_json(PARAMS_PATH)


@njit(**JIT)
def features(pos, acc):
    """Net piece counts (White minus Black) and the tempo; returns the phase (0..24)."""
    for t in range(5):  # pawn, knight, bishop, rook, queen
        pieces = pos[W_PAWN + t]
        lin_add(acc, t, popcount(pos[W_WHITE] & pieces) - popcount(pos[W_BLACK] & pieces))
    lin_add(acc, TEMPO, 1 - 2 * (pos[W_META] & 1))
    return phase(pos)


@njit(**JIT)
def record_eval(tape, acc, pos):
    """Record the continuous White-POV evaluation of `pos`; its value index."""
    ph = features(pos, acc)
    return record_phase(tape, lin_record_pair(tape, acc), ph / PHASE_MAX)


@njit(**JIT)
def record_batch(tape, acc, positions, rows, out):
    """Record the evaluation of ``positions[rows[i]]`` for every i; ``out[i]`` = its value index."""
    for i in range(rows.shape[0]):
        out[i] = record_eval(tape, acc, positions[rows[i]])


EVALUATION = Evaluation(registered_name(__name__), registry(), record_eval, record_batch)
