"""The optimiser of ``[optimizer]``: one step of a run's state (`TrainState`) along a gradient."""
from __future__ import annotations

import numpy as np

from .checkpoint import TrainState
from .kernels import AdamW, adamw_step, sgd_step


class Optimizer:
    """AdamW (``name = "adamw"``) or SGD with momentum (``"sgd"``), with the settings of a
    validated ``[optimizer]`` section."""

    def __init__(self, settings: dict):
        self.adamw = settings["name"] == "adamw"
        self.hyper = AdamW(float(settings["beta1"]), float(settings["beta2"]),
                           float(settings["eps"]), float(settings["weight_decay"]))
        self.momentum = settings["momentum"]
        self.weight_decay = settings["weight_decay"]

    def step(self, state: TrainState, grad: np.ndarray, lr: float, mask: np.ndarray) -> None:
        """Move `state.theta` along `grad` at learning rate `lr` where `mask` is true; counts
        the step."""
        state.step += 1
        if self.adamw:
            adamw_step(state.theta, grad, state.m, state.v, mask, lr, self.hyper, state.step)
        else:
            sgd_step(state.theta, grad, state.m, mask, lr, self.momentum, self.weight_decay)
