"""What `tuner eval` does for an evaluation that brings no commands of its own.

``evaluate``: the continuous evaluation is what ``record_batch`` records on a tape (the tape
computes every record as it is appended); the integer one is that evaluation made with every
parameter rounded like C++ ``std::round``, rounded once more, which is what an engine holding the
exported integers computes when it rounds its final score.

``explain``: one position's ``--breakdown`` from the tape's gradients. Each parameter group's
contribution is ``sum(value * d eval / d value)`` over its entries (mg and eg apart), so for a
linear evaluation (a linear combination and a phase blend) the contributions add up to the
evaluation exactly; what a non-linear evaluation adds beyond that first-order sum is shown as
the remainder.
"""
from __future__ import annotations

import numpy as np

from .positions import position_count
from tuner.tape import TapeFullError, backward, grow, new_tape, reset, set_params

from .export import round_params
from .registry import ParamRegistry

#: Positions recorded per tape when evaluating many.
CHUNK = 4096
#: Initial tape capacity per position (grown on demand).
RECORDS_PER_POSITION = 32
OPERANDS_PER_POSITION = 128


def _tape(evaluation, pairs, values, n: int):
    reg = evaluation.registry
    tape = new_tape(reg.n_values, reg.n_params, records=RECORDS_PER_POSITION * max(n, 1),
                    operands=OPERANDS_PER_POSITION * max(n, 1))
    set_params(tape.arena, pairs, values)
    return tape


def continuous(evaluation, positions: np.ndarray, pairs: np.ndarray,
               values: np.ndarray) -> np.ndarray:
    """float64[N]: the evaluation `record_batch` records for positions uint64[N, 9] (a trace
    evaluation's: trace rows)."""
    n = position_count(positions)
    out = np.empty(n)
    tape = _tape(evaluation, pairs, values, min(n, CHUNK))
    scratch = evaluation.new_scratch()
    slots = np.empty(CHUNK, np.int64)
    lo = 0
    while lo < n:
        rows = np.arange(lo, min(lo + CHUNK, n))
        reset(tape)
        try:
            evaluation.record_batch(tape, scratch, positions, rows, slots)
        except TapeFullError:  # grown, with a fresh scratch (the failed one may hold terms)
            tape, scratch = grow(tape), evaluation.new_scratch()
            continue
        evaluation.check_recording(tape, positions, rows, slots[: rows.size])
        out[rows] = tape.arena.val[slots[: rows.size]]
        lo += rows.size
    return out


def evaluate(evaluation, positions: np.ndarray, registry: ParamRegistry):
    """``(int_eval int64[N], continuous float64[N])`` with `registry`'s values."""
    positions = np.ascontiguousarray(positions, dtype=np.uint64).reshape(-1, 9)
    pairs, values = registry.defaults, registry.value_defaults
    cont = continuous(evaluation, positions, pairs, values)
    rounded = continuous(evaluation, positions, round_params(pairs).astype(np.float64),
                         round_params(values).astype(np.float64))
    return round_params(rounded), cont


def _fmt(x: float) -> str:
    return f"{x:12.4f}"


def explain(evaluation, fen: str, pos: np.ndarray, registry: ParamRegistry, int_eval: int) -> str:
    """Every parameter group's contribution to one position's evaluation (see the module)."""
    pairs, values = registry.defaults, registry.value_defaults
    tape = _tape(evaluation, pairs, values, 1)
    scratch = evaluation.new_scratch()
    rows = np.zeros(1, np.int64)
    slot = np.empty(1, np.int64)
    while True:
        reset(tape)
        try:
            evaluation.record_batch(tape, scratch, pos.reshape(1, 9), rows, slot)
            break
        except TapeFullError:
            tape, scratch = grow(tape), evaluation.new_scratch()
    evaluation.check_recording(tape, pos.reshape(1, 9), rows, slot)
    out = int(slot[0])
    cont = float(tape.arena.val[out])
    backward(tape, out)
    pair_grad = tape.arena.pair_grad[: registry.n_params]
    value_grad = tape.arena.val_grad[: registry.n_values]
    lines = [f"position: {fen}",
             f"{'term':<36} {'entries':>7} {'mg':>12} {'eg':>12}   (value * d eval / d value)"]
    total = 0.0
    for g in registry.groups:
        if g.kind == "value":
            grad = value_grad[g.slice]
            contrib = values[g.slice] * grad
            cells = f"{_fmt(contrib.sum()):>12} {'':>12}"
        else:
            grad = pair_grad[g.slice]
            contrib = pairs[g.slice] * grad
            cells = f"{_fmt(contrib[:, 0].sum())} {_fmt(contrib[:, 1].sum())}"
        if not grad.any():
            continue
        total += float(contrib.sum())
        n_used = int(np.count_nonzero(grad.reshape(grad.shape[0], -1).any(axis=1)))
        lines.append(f"{g.name:<36} {n_used:>7} {cells}")
    lines += [f"{'first-order sum':<44} {_fmt(total)}",
              f"{'non-linear remainder (eval - sum)':<44} {_fmt(cont - total)}",
              f"continuous eval: {cont:.6f}",
              f"integer eval (White POV): {int_eval}"]
    return "\n".join(lines)
