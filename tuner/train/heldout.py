"""The check an engine author makes of a tune: the engine's own (integer) evaluation of positions
from games the tuner never saw, with the tuned parameters against the starting ones."""
from __future__ import annotations

import numpy as np

from tuner.evals.export import round_params
from tuner.evals.generic import continuous
from tuner.evals.registry import ParamRegistry
from .workers import split_params


def default_theta(registry) -> np.ndarray:
    """The evaluation's shipped parameters as one flat vector (pairs, then values)."""
    return np.concatenate([np.asarray(registry.defaults, np.float64).reshape(-1),
                           np.asarray(registry.value_defaults, np.float64)])


def integer_evals(evaluation, theta: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, str]:
    """The evaluation of `positions` at the flat parameters `theta` as the engine computes it,
    and how it was computed: the evaluation's own ``evaluate`` (`tuner.evals.Evaluation`: the
    engine's integer evaluation, parameters rounded as the engine's constants are) where it has
    one, else the tape's evaluation with the parameters rounded to integers."""
    reg = evaluation.registry
    pairs, values = split_params(np.asarray(theta, np.float64), reg.n_params)
    if evaluation.evaluate is not None:
        with_params = ParamRegistry.from_dict(reg.to_dict(pairs, value_values=values))
        ie = evaluation.evaluate(positions, with_params)[0]
        return ie.astype(np.float64), "the engine's integer evaluation"
    return (continuous(evaluation, positions, round_params(pairs).astype(np.float64),
                       round_params(values).astype(np.float64)),
            "the evaluation with parameters rounded to integers")


class EvalMemo:
    """`integer_evals` of `evaluation` remembered per held-out set and parameters: a
    cross-validation's runs of one fold (one per pull) evaluate its held-out positions at the
    same starting parameters, and its report evaluates again parameters a run reported."""

    def __init__(self, evaluation):
        self.evaluation = evaluation
        self.done: dict[tuple, tuple[np.ndarray, str]] = {}

    def evals(self, held_out: int, theta: np.ndarray, positions: np.ndarray
              ) -> tuple[np.ndarray, str]:
        """`integer_evals` of `positions` (the held-out set numbered `held_out`) at `theta`."""
        key = (held_out, np.asarray(theta, np.float64).tobytes())
        if key not in self.done:
            self.done[key] = integer_evals(self.evaluation, theta, positions)
        return self.done[key]
