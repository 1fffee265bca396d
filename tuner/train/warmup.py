"""Warming a run's kernels on two positions before anything is timed.

Every compiled kernel a run calls (bulk FEN parsing, the evaluation's recorder, the loss, the
player's freeze and sweeps, the optimiser step) is called once here on a three-position input
(the parser first, before the data is loaded; the rest after). On a
cold cache (the first run of these sources, or of an edited evaluation file) that is where Numba
compiles them, announced by the caller; on a warm one it loads their machine code from the cache.
Either way the load, record and epoch timings that follow measure only the work itself. The
kernels run on arrays of their own (a zero parameter vector and its fresh optimiser state), so
the run's state is never touched.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from tuner.chess.fen import parse_fen_array
from tuner.data.trace import TraceLayout, TraceRows
from .checkpoint import TrainState
from .optimizer import Optimizer
from .record import record_store
from .workers import EagerSource, ReplaySource, Workers

#: Three positions in micro-batches of two: a full micro-batch and a partial one, whose slot
#: arrays are views of another layout (Numba compiles each layout apart). The kernels' types do
#: not depend on the positions themselves.
WARM_FENS = ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
             "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R b KQkq - 0 1",
             "8/3k4/8/1PP3p1/6P1/p4K2/R7/7r w - - 0 45")
WARM_RESULTS = (1.0, 0.5, 0.0)
WARM_MICRO = 2


def warm_positions() -> tuple[np.ndarray, np.ndarray]:
    """`WARM_FENS` and `WARM_RESULTS` as arrays, parsed by the loader's bulk FEN parser (which
    this warms: a run calls it before loading its data, so that a missing dataset is reported
    before the other kernels compile)."""
    positions, _ = parse_fen_array(pa.array(WARM_FENS))
    return positions, np.array(WARM_RESULTS)


def warm_trace(layout: TraceLayout) -> TraceRows:
    """Three trace rows of `layout` for a trace evaluation's kernels: one scaled, one merging a
    repeated index, one without terms."""
    last = layout.n_params - 1
    return TraceRows(np.array([1.0, 0.5, 0.0]), np.array([1.0, 0.5, 1.0]),
                     np.array([0, 1, 4, 4], np.int64), np.array([0, last, 0, last], np.int32),
                     np.array([1, 2, -1, 1], np.int64))


def warm_up(evaluation, k: float, loss: int, eager: bool, optimizer: Optimizer) -> None:
    """Call every kernel a run of `evaluation` (K `k`, loss record form `loss`; `eager` or
    replay epochs) will call, on `warm_positions()` (a trace evaluation's on `warm_trace`), and
    `optimizer`'s step."""
    positions, results = warm_positions()
    n = len(positions)
    if evaluation.trace is not None:
        positions = warm_trace(evaluation.trace)
    source = (EagerSource(evaluation, positions, results, k, loss) if eager else
              ReplaySource(record_store(evaluation, positions, results, k, 1, WARM_MICRO,
                                        loss=loss), specialised=False))
    workers = Workers(source, 1, WARM_MICRO, n)
    reg = evaluation.registry
    state = TrainState.start(np.zeros(2 * reg.n_params + reg.n_values), k, 0)
    try:
        rows = np.arange(n)
        _, grad = workers.loss_grad(state.theta, rows)
        workers.loss_grad(state.theta, rows, with_grad=False)
        optimizer.step(state, np.zeros_like(grad), 0.0, np.zeros(len(grad), dtype=bool))
    finally:
        workers.close()
