"""Learning-rate schedules and freeze stages, as pure functions of the epoch."""
from __future__ import annotations

import fnmatch

import numpy as np

from tuner.evals.registry import VALUE


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


def _flat_slice(registry, group) -> slice:
    """Where a parameter group's entries sit in the flat parameter vector (pairs (mg, eg)
    row-major, then values)."""
    if group.kind == VALUE:
        base = 2 * registry.n_params
        return slice(base + group.offset, base + group.offset + group.size)
    return slice(2 * group.offset, 2 * (group.offset + group.size))


def trainable_mask(registry, stages: list, epoch: int) -> np.ndarray:
    """bool[2 n_params + n_values]: entries of the flat parameter vector the optimiser may move
    at `epoch` (never constants).

    The stage with the largest ``from_epoch <= epoch`` applies: an entry moves if its group name
    matches one of its ``train`` patterns and none of its ``exclude`` patterns. Before the first
    stage, or without stages, every non-constant entry moves.
    """
    mask = ~np.concatenate([np.repeat(np.asarray(registry.constant, dtype=bool), 2),
                            np.asarray(registry.value_constant, dtype=bool)])
    active = [s for s in stages if s["from_epoch"] <= epoch]
    if not active:
        return mask
    stage = active[-1]
    allowed = np.zeros_like(mask)
    for group in registry.groups:
        name = group.name
        if (any(fnmatch.fnmatchcase(name, p) for p in stage["train"])
                and not any(fnmatch.fnmatchcase(name, p) for p in stage.get("exclude", []))):
            allowed[_flat_slice(registry, group)] = True
    return mask & allowed


def check_patterns(registry, stages: list) -> None:
    """ValueError if a freeze pattern matches no parameter group (a likely typo)."""
    for i, stage in enumerate(stages):
        for key in ("train", "exclude"):
            for p in stage.get(key, []):
                if not any(fnmatch.fnmatchcase(g.name, p) for g in registry.groups):
                    raise ValueError(f"[freeze] stages[{i}].{key}: pattern {p!r} matches no "
                                     f"parameter of this evaluation")
