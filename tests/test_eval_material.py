"""The example evaluation (tuner/evals/material.py): values, gradients, and training through the
same machinery as Clockwork's (eager and replay agree bit for bit)."""
from __future__ import annotations

import numpy as np
import pytest

from tuner.chess.position import W_BLACK, W_META, W_PAWN, W_WHITE
from tuner.data import load_dataset
from tuner.evals import get_evaluation
from tuner.tape import backward, new_accumulator, new_tape, reset, zero_grad
from tuner.train.config import validate
from tuner.train.loop import Run, load_data


@pytest.fixture(scope="module")
def tiny():
    return load_dataset("tiny", quiet=True)


def _expected(positions, params):
    """Material and tempo counts and phase with NumPy, independently of the njit code."""
    pc = lambda x: np.bitwise_count(x).astype(np.int64)  # noqa: E731
    counts = np.zeros((len(positions), 6), np.int64)
    for t in range(5):
        counts[:, t] = (pc(positions[:, W_WHITE] & positions[:, W_PAWN + t])
                        - pc(positions[:, W_BLACK] & positions[:, W_PAWN + t]))
    counts[:, 5] = 1 - 2 * (positions[:, W_META] & np.uint64(1)).astype(np.int64)
    phase = np.minimum(24, pc(positions[:, W_PAWN + 1]) + pc(positions[:, W_PAWN + 2])
                       + 2 * pc(positions[:, W_PAWN + 3]) + 4 * pc(positions[:, W_PAWN + 4]))
    alpha = phase / 24
    value = alpha * (counts @ params[:, 0]) + (1 - alpha) * (counts @ params[:, 1])
    return counts, alpha, value


def test_values_and_gradients(tiny):
    ev = get_evaluation("material")
    params = np.random.default_rng(3).normal(size=(6, 2)) * 100
    counts, alpha, value = _expected(tiny.positions, params)
    t = new_tape(0, 6, records=8)
    t.arena.pair_val[:6] = params
    acc = new_accumulator(6)
    for i in range(0, len(tiny.positions), 13):
        reset(t)
        zero_grad(t)
        v = ev.record_eval(t, acc, tiny.positions[i])
        assert t.arena.val[v] == pytest.approx(value[i], rel=1e-12, abs=1e-9)
        backward(t, v)
        np.testing.assert_allclose(t.arena.pair_grad[:6, 0], alpha[i] * counts[i], atol=1e-12)
        np.testing.assert_allclose(t.arena.pair_grad[:6, 1], (1 - alpha[i]) * counts[i], atol=1e-12)


def test_trains_eager_and_replay_identically(tmp_path):
    raw = {"data": {"train": ["tiny"], "validation_fraction": 0.1},
           "evaluation": {"name": "material", "init": "zero"},
           "optimizer": {"lr": 5.0},
           "training": {"epochs": 3, "batch_size": 500, "micro_batch_size": 100}}
    runs = {}
    for mode in ("eager", "replay"):
        raw["training"]["mode"] = mode
        cfg = validate(raw, "test")
        out = tmp_path / mode
        out.mkdir()
        run = Run(cfg, out, threads=2, log=lambda s: None)
        run.run(load_data(cfg, lambda s: None))
        runs[mode] = run
    assert runs["eager"].params.tobytes() == runs["replay"].params.tobytes()
    losses = runs["replay"].history["train_loss"]
    assert losses[-1] < losses[0]
    # material values come out in the right order of magnitude and sign
    mg = runs["replay"].params[:5, 0]
    assert mg[0] > 0 and mg[4] > mg[0]
