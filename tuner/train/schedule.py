"""Learning-rate schedules and freeze stages, as pure functions of the epoch."""
from __future__ import annotations

import fnmatch

import numpy as np


def learning_rate(schedule: dict, base_lr: float, epoch: int) -> float:
    """The learning rate of 0-based `epoch` under a validated ``[schedule]`` section."""
    kind = schedule["type"]
    if kind == "constant":
        return base_lr
    if kind == "exponential":
        return base_lr * schedule["gamma"] ** max(0, epoch - schedule["decay_from_epoch"])
    start = 0
    for seg in schedule["segments"]:
        n = seg["epochs"]
        if epoch < start + n:
            frac = (epoch - start) / n
            return seg["lr_start"] * (seg["lr_end"] / seg["lr_start"]) ** frac
        start += n
    return schedule["segments"][-1]["lr_end"]


def trainable_mask(registry, stages: list, epoch: int) -> np.ndarray:
    """bool[n_params]: entries the optimiser may move at `epoch` (never constants).

    The stage with the largest ``from_epoch <= epoch`` applies: an entry moves if its group name
    matches one of its ``train`` patterns and none of its ``exclude`` patterns. Before the first
    stage, or without stages, every non-constant entry moves.
    """
    mask = ~np.asarray(registry.constant, dtype=bool)
    active = [s for s in stages if s["from_epoch"] <= epoch]
    if not active:
        return mask
    stage = active[-1]
    allowed = np.zeros_like(mask)
    for group in registry.groups:
        name = group.name
        if (any(fnmatch.fnmatchcase(name, p) for p in stage["train"])
                and not any(fnmatch.fnmatchcase(name, p) for p in stage.get("exclude", []))):
            allowed[group.offset: group.offset + group.size] = True
    return mask & allowed


def check_patterns(registry, stages: list) -> None:
    """ValueError if a freeze pattern matches no parameter group (a likely typo)."""
    for i, stage in enumerate(stages):
        for key in ("train", "exclude"):
            for p in stage.get(key, []):
                if not any(fnmatch.fnmatchcase(g.name, p) for g in registry.groups):
                    raise ValueError(f"[freeze] stages[{i}].{key}: pattern {p!r} matches no "
                                     f"parameter of this evaluation")
