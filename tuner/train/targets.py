"""What the prediction ``sigmoid(K * eval)`` is fitted to, and the K that scales it.

* The target of a position is its game result, or with ``[loss] score_blend = lambda`` a blend
  with the engine's own score: ``lambda * sigmoid(K * score_cp) + (1 - lambda) * result`` (as
  Stash and Sirius do). Scores make the target less noisy than a single game's result.
* The loss is the squared error ``(p - target)^2`` (Texel's) or the cross-entropy
  ``-(target log p + (1 - target) log(1 - p))``; both are records of `tuner.tape.ops`.
* ``k = "fit"`` chooses K before training: the K that minimises the mean squared error of the
  starting parameters' evaluations against the game results, found by a scan over a log grid and a
  golden-section refinement (deterministic; the approach of texel-tuner and Ethereal). Scores are
  not used for it, since a blended target would itself depend on K.
"""
from __future__ import annotations

import math

import numpy as np

from tuner.tape.ops import LOSS_BY_NAME

#: ``[loss] function`` -> the loss record of each position (the loss forms of the form table).
LOSS_FORMS = dict(LOSS_BY_NAME)
#: The K a config may give and a fit may choose (eval in centipawns: below K_MIN a 10,000 cp
#: evaluation moves the prediction by less than 0.25 %, above K_MAX one centipawn decides it);
#: a fit scans GRID_PER_DECADE points per decade of it.
K_MIN, K_MAX = 1e-5, 1.0
GRID_PER_DECADE = 8
#: A fit uses at most this many training positions (evenly spaced): K is then known to far
#: better than the data's noise, and the fit stays a few seconds on any data set.
MAX_FIT_POSITIONS = 1_000_000


class KFitError(ValueError):
    """K cannot be fitted to these evaluations."""


def sigmoid(x: np.ndarray) -> np.ndarray:
    """The logistic function, without overflow and with full relative precision for x < 0."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def mse_at(k: float, evals: np.ndarray, results: np.ndarray) -> float:
    """Mean of ``(sigmoid(k * evals) - results)^2`` (a fixed-order pairwise sum)."""
    d = sigmoid(k * evals) - results
    return float(np.dot(d, d) / len(d))


def fit_k(evals: np.ndarray, results: np.ndarray) -> float:
    """The K in [K_MIN, K_MAX] minimising `mse_at`; KFitError when the data cannot decide it
    (every evaluation equal) or the minimum lies at an end of the range."""
    evals = np.asarray(evals, np.float64)
    results = np.asarray(results, np.float64)
    if len(evals) == 0 or np.ptp(evals) == 0.0:
        raise KFitError("every position has the same evaluation with the starting parameters, "
                        "so no K fits better than another (init \"zero\"?)")
    lo_exp, hi_exp = math.log10(K_MIN), math.log10(K_MAX)
    grid = np.logspace(lo_exp, hi_exp, int(round((hi_exp - lo_exp) * GRID_PER_DECADE)) + 1)
    losses = [mse_at(k, evals, results) for k in grid]
    best = int(np.argmin(losses))
    if best in (0, len(grid) - 1):
        raise KFitError(f"the best K lies at the end of the range searched ({grid[best]:g}, "
                        f"range {K_MIN:g}..{K_MAX:g}): are the evaluations in a sensible unit?")
    # Golden-section search in log K between the grid neighbours of the best point.
    a, b = math.log(grid[best - 1]), math.log(grid[best + 1])
    inv_phi = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - inv_phi * (b - a), a + inv_phi * (b - a)
    fc, fd = mse_at(math.exp(c), evals, results), mse_at(math.exp(d), evals, results)
    while b - a > 1e-10:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - inv_phi * (b - a)
            fc = mse_at(math.exp(c), evals, results)
        else:
            a, c, fc = c, d, fd
            d = a + inv_phi * (b - a)
            fd = mse_at(math.exp(d), evals, results)
    return math.exp(0.5 * (a + b))


def fit_sample(n: int) -> np.ndarray:
    """Which of `n` training positions a K fit uses: all, or MAX_FIT_POSITIONS evenly spaced."""
    if n <= MAX_FIT_POSITIONS:
        return np.arange(n)
    return np.linspace(0, n - 1, MAX_FIT_POSITIONS).round().astype(np.int64)


def blend_targets(results: np.ndarray, score_cp: np.ndarray | None, k: float,
                  blend: float) -> np.ndarray:
    """``blend * sigmoid(k * score_cp) + (1 - blend) * results``; the results for blend 0."""
    if blend == 0.0:
        return results
    if score_cp is None:
        raise ValueError("a score blend needs engine scores (score_cp) for every position")
    return blend * sigmoid(k * score_cp.astype(np.float64)) + (1.0 - blend) * results
