"""Aliases: the names of the former module ``tuner.evals.clockwork`` (the cde2ced evaluation, now
`tuner.evals.clockwork.cde2ced`), which the package `tuner.evals.clockwork` still answers.

Each returns what it returned before the package's contract: `check_offsets` is `check_layout`,
`load_params` the pair values alone, `evaluate_positions` five arrays, `feature_counts` the counts
int32[N, n_params] and the phases, `evaluate_fen` six values; `OFFSETS`, `N_PARAMS` and the
group offsets (``PAWN_MAT``, ...: the members of `Pair`, as ints) keep their names. Any other name
is the one of `tuner.evals.clockwork.cde2ced`.
"""
from __future__ import annotations

import numpy as np

from . import cde2ced
from .cde2ced import N_PAIRS, PAIR_OFFSETS, check_layout

#: Alias of `cde2ced.N_PAIRS`.
N_PARAMS = N_PAIRS
#: Alias of `cde2ced.PAIR_OFFSETS`.
OFFSETS = PAIR_OFFSETS
#: Alias of `cde2ced.check_layout`.
check_offsets = check_layout


def load_params(params=None) -> np.ndarray:
    """float64[n_params, 2] values: `cde2ced.load_params(params).pairs`."""
    return cde2ced.load_params(params).pairs


def evaluate_positions(positions, params=None):
    """``(int_eval, continuous, mg, eg, phase)`` arrays: `cde2ced.evaluate_totals` as a tuple."""
    return tuple(cde2ced.evaluate_totals(positions, params))


def feature_counts(positions):
    """``(counts int32[N, n_params], phases int64[N])``: `cde2ced.feature_counts`'s one sum."""
    counts = cde2ced.feature_counts(positions)
    return counts.sums[:, 0], counts.phase


def evaluate_fen(fen: str, params=None):
    """``(int_eval, continuous_eval, mg, eg, phase, counts)`` of one FEN, White's point of view;
    ``counts`` is the dense int64[n_params] vector of net feature counts."""
    pos = cde2ced.parse_fen(fen)
    cde2ced.check_domain(pos)
    t = cde2ced.evaluate_totals(pos, params)
    counts, _ = feature_counts(pos)
    return (int(t.int_eval[0]), float(t.continuous[0]), float(t.mg[0]), float(t.eg[0]),
            int(t.phase[0]), counts[0].astype(np.int64))


def __getattr__(name: str):
    if name in cde2ced.Pair.__members__:
        return int(cde2ced.Pair[name])
    return getattr(cde2ced, name)
