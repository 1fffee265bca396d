"""The pull toward the starting parameters: ``[optimizer] pull = lambda``.

A batch's objective is its mean loss plus ``lambda * ||theta - theta0||^2``, theta0 the run's
starting parameters (``[evaluation] init``, kept in the checkpoint). Unlike weight decay, which
pulls every parameter toward zero, it keeps a fine-tune near the parameters it started from: the
ones a small sample cannot pin down stay where tens of millions of positions put them.

The term is over parameters, not positions, so it is not recorded per position: its gradient
``2 lambda (theta - theta0)`` is added, element by element, to the batch's reduced gradient (the
gradient of the batch's *mean* loss, `tuner.train.workers.Workers.loss_grad`), and ``lambda *
||theta - theta0||^2`` (an exact sum, `math.fsum`) to the batch's mean loss. Both are
elementwise or exactly rounded, so they do not depend on threads or on the epoch mode, and the
objective is the same whatever the batch size: each batch minimises its own mean loss plus the
same pull.
"""
from __future__ import annotations

import math

import numpy as np


class Pull:
    """``lam * ||theta - theta0||^2`` and its gradient (flat parameter vectors)."""

    def __init__(self, lam: float, theta0: np.ndarray):
        self.lam = float(lam)
        self.theta0 = np.array(theta0, dtype=np.float64)

    def value(self, theta: np.ndarray) -> float:
        """``lam * ||theta - theta0||^2``, exactly rounded (0 without a pull)."""
        if self.lam == 0.0:
            return 0.0
        d = theta - self.theta0
        return self.lam * math.fsum(d * d)

    def add_gradient(self, grad: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """``grad += 2 lam (theta - theta0)`` in place (nothing without a pull); returns `grad`."""
        if self.lam != 0.0:
            grad += (2.0 * self.lam) * (theta - self.theta0)
        return grad
