"""The arena: values and gradients, parameters first. It holds no records.

An `Arena` is a namedtuple of four NumPy arrays, so `@njit` code receives it as one argument:

* value slots: ``val`` and ``val_grad`` (f64, stored apart);
* pair slots: ``pair_val`` and ``pair_grad`` (f64, shape (n, 2): column 0 is mg, column 1 is eg).

The first value and pair slots are the parameters; the rest are the temporaries of whatever
recording runs in it. A recording (`tuner.tape.recording`) says which slots it uses; the sweeps of
`tuner.tape.ops` read and write an arena given beside it. The recorder (`Tape`) owns one arena for
the records it is writing; the player (`tuner.tape.player`) gives each thread one small arena,
parameters plus one position's temporaries, and replays any stored position in it.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Arena(NamedTuple):
    """Values and gradients of value slots and (mg, eg) pair slots; parameters first."""

    val: np.ndarray        # float64[V]
    val_grad: np.ndarray   # float64[V]
    pair_val: np.ndarray   # float64[P, 2]
    pair_grad: np.ndarray  # float64[P, 2]


def new_arena(values: int, pairs: int) -> Arena:
    """An arena of `values` value slots and `pairs` pair slots, all zero."""
    return Arena(np.zeros(values), np.zeros(values), np.zeros((pairs, 2)), np.zeros((pairs, 2)))


def set_params(arena: Arena, pair_params: np.ndarray, value_params: np.ndarray | None = None) -> None:
    """Write parameter values into the leading slots."""
    arena.pair_val[: len(pair_params)] = pair_params
    if value_params is not None and len(value_params):
        arena.val[: len(value_params)] = value_params
