"""Record-once replay: the stored linear forms, and refusal of evaluations that are not linear."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from numba import njit

from tuner.data import load_dataset
from tuner.evals import get_evaluation
from tuner.evals import clockwork as cw
from tuner.tape import lin_add, lin_record_pair, record_phase, record_sigmoid
from tuner.train.replay import ReplayUnsupported, build_store


@pytest.fixture(scope="module")
def tiny():
    return load_dataset("tiny", quiet=True)


def test_store_holds_each_positions_feature_counts_and_phase(tiny):
    """Replaying a position's terms is its dense feature-count vector; alpha is phase / 24."""
    store = build_store(get_evaluation("clockwork"), tiny.positions, n_threads=2, micro=100)
    counts, phases = cw.feature_counts(tiny.positions)
    assert len(store) == len(tiny.positions) and store.coef.dtype == np.int8
    for i in range(0, len(store), 7):
        lo, hi = store.offsets[i], store.offsets[i + 1]
        dense = np.zeros(counts.shape[1], np.int64)
        np.add.at(dense, store.index[lo:hi].astype(np.int64), store.coef[lo:hi])
        np.testing.assert_array_equal(dense, counts[i], err_msg=f"position {i}")
        assert len(set(store.index[lo:hi].tolist())) == hi - lo  # merged: each index once
        assert np.all(store.coef[lo:hi] != 0)                     # zeros dropped
        assert store.alpha[i] == phases[i] / 24


def test_store_is_the_same_for_any_thread_count_and_micro_batch(tiny):
    ev = get_evaluation("clockwork")
    a = build_store(ev, tiny.positions, n_threads=1, micro=1024)
    b = build_store(ev, tiny.positions, n_threads=3, micro=77)
    for field in ("offsets", "index", "coef", "alpha"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


@njit(cache=True)
def _record_nonlinear(tape, acc, positions, rows, out):
    for i in range(rows.shape[0]):
        lin_add(acc, 0, 1)
        e = record_phase(tape, lin_record_pair(tape, acc), 0.5)
        out[i] = record_sigmoid(tape, e)  # a non-linear record after the blend


def test_nonlinear_evaluation_is_refused(tiny):
    fake = SimpleNamespace(name="nonlinear", registry=SimpleNamespace(n_params=4),
                           record_batch=_record_nonlinear)
    with pytest.raises(ReplayUnsupported, match="nonlinear.*mode = 'eager'"):
        build_store(fake, tiny.positions[:50], n_threads=1, micro=16)
