"""Replay through the player: what the store holds, and replay == eager bit for bit, for linear
and non-linear evaluations, including runs in which positions change branch."""
from __future__ import annotations

import re
import time

import numpy as np
import pytest
from numba import njit

import nonlinear_eval
from tuner.evals import EVALUATIONS, Evaluation, EvaluationIndexError, get_evaluation
from tuner.evals import clockwork as cw
from tuner.tape import lin_add, lin_record_pair, new_tape, record_const, record_phase, set_params
from tuner.tape.ops import (F_ADD_CLAMPED_EG, F_ADD_WINNABLE_EG, F_EG_SCALE_BY_SIGN, F_PHASE, F_SIGMOID_SQ_ERR,
                            KERNEL_BITS, record_pair_mul_value, tag)
from tuner.tape.recording import C_RECORDS
from tuner.train.config import validate
from tuner.train.loop import Run, TrainingError
from tuner.tape.player import store_digest
from tuner.train.record import StoreRecorder, record_store
from tuner.train.workers import EagerSource, ReplaySource, Workers

from test_tape_player import operands

K = 0.0025


@pytest.fixture(autouse=True)
def _register_test_evaluation(monkeypatch):
    monkeypatch.setitem(EVALUATIONS, nonlinear_eval.NAME, "nonlinear_eval")


def _column(store, record_tag, j=0):
    """The per-position values of scalar j of the template record with `record_tag`."""
    (r,) = np.flatnonzero(store.t_op == record_tag)
    assert store.t_scol[r, j] >= 0
    return store.scalars[:, store.t_scol[r, j]]


def test_clockwork_store_holds_counts_phase_and_result(tiny):
    """One template; a position's operands are its merged feature counts; its scalars the phase
    fraction and the game result; K, the same for every position, sits in the template."""
    store = record_store(get_evaluation("clockwork"), tiny.positions, tiny.results, K,
                         n_threads=2, micro=100)
    counts, phases = cw.feature_counts(tiny.positions)
    # Slots below 2^10 and counts within +-15: an operand is one u16 word.
    assert len(store.t_temps) == 1 and store.coef_bits[0] > 0 and store.coef.size == 0
    assert store.index.dtype == np.uint16
    slots, coefs = operands(store)
    np.testing.assert_array_equal(_column(store, tag(F_PHASE)), phases / 24)
    np.testing.assert_array_equal(_column(store, tag(F_SIGMOID_SQ_ERR), 1), tiny.results)
    (loss,) = np.flatnonzero(store.t_op == tag(F_SIGMOID_SQ_ERR))
    assert store.t_scol[loss, 0] == -1 and store.t_sconst[loss, 0] == K
    assert store.scalars.shape[1] == 2 and len(store.t_op) == 3  # lincomb, phase, loss
    for i in range(0, len(tiny.positions), 7):
        lo = store.opnd_off[i]
        hi = lo + store.nary[i, 0]
        dense = np.zeros(counts.shape[1], np.int64)
        np.add.at(dense, slots[lo:hi], coefs[lo:hi])
        np.testing.assert_array_equal(dense, counts[i], err_msg=f"position {i}")
        assert len(set(slots[lo:hi].tolist())) == hi - lo  # merged: each index once
        assert np.all(coefs[lo:hi] != 0)                     # zeros dropped


@pytest.mark.parametrize("name", ["clockwork", nonlinear_eval.NAME])
def test_store_is_the_same_for_any_thread_count_and_micro_batch(tiny, name):
    ev = get_evaluation(name)
    a = record_store(ev, tiny.positions, tiny.results, K, n_threads=1, micro=1024)
    b = record_store(ev, tiny.positions, tiny.results, K, n_threads=3, micro=77)
    for field, x, y in zip(a._fields, a, b):
        assert x.dtype == y.dtype and np.array_equal(x, y), field


@pytest.mark.parametrize("name", ["clockwork", nonlinear_eval.NAME])
def test_a_store_recorded_into_an_order_is_the_store_of_the_positions_in_it(tiny, name):
    """`StoreRecorder` given an order (a blocks run's: the positions given in file order, some
    in no part of it): bitwise the store of the ordered positions recorded in that order, for
    any thread count, micro-batch and batches given, across its 64 parts."""
    ev = get_evaluation(name)
    n = len(tiny.results)
    order = np.random.default_rng(3).permutation(n - 10)[: n - 150]  # 150 dropped, the last 10 too
    want = record_store(ev, tiny.positions[order], tiny.results[order], K, n_threads=1)
    for threads, micro, batch in ((1, 1024, n), (2, 77, 500), (3, 5, 1234)):
        recorder = StoreRecorder(ev, K, threads, micro, order)
        for lo in range(0, n, batch):
            recorder.add(tiny.positions[lo: lo + batch], tiny.results[lo: lo + batch])
        got = recorder.finish()
        assert store_digest(got) == store_digest(want), (threads, micro, batch)


class _Refusing:
    """An evaluation that refuses the recordings of `bad` positions (an index error), the first
    of them only after the later ones had time to fail, so that the micro-batches' failures come
    in another order than their positions'."""

    def __init__(self, ev, bad):
        self.ev, self.bad = ev, [p.tobytes() for p in bad]

    def __getattr__(self, name):
        return getattr(self.ev, name)

    def check_recording(self, tape, positions, rows, slots):
        self.ev.check_recording(tape, positions, rows, slots)
        for row in rows:
            if positions[row].tobytes() in self.bad:
                which = self.bad.index(positions[row].tobytes())
                if which == 0:
                    time.sleep(0.3)
                raise EvaluationIndexError(f"bad position {which}")


@pytest.mark.parametrize("ordered", [False, True])
def test_the_error_raised_is_the_first_queued_failure_whatever_fails_first(tiny, ordered):
    """Micro-batches are recorded ahead of the batches given (`RECORD_AHEAD`), on threads that
    finish in any order: the error raised is that of the first micro-batch queued that fails (an
    order the positions given fix), not that of the first to fail in time."""
    ev = get_evaluation("clockwork")
    n = len(tiny.results)
    _, first = np.unique(tiny.positions, axis=0, return_index=True)
    unique = np.sort(first)   # positions that occur once
    bad = tiny.positions[[unique[len(unique) // 4], unique[3 * len(unique) // 4]]]
    stored = np.random.default_rng(5).permutation(n) if ordered else n
    recorder = StoreRecorder(_Refusing(ev, bad), K, 2, 16, stored)
    with pytest.raises(EvaluationIndexError, match="bad position 0"):
        for lo in range(0, n, 300):
            recorder.add(tiny.positions[lo: lo + 300], tiny.results[lo: lo + 300])
        recorder.finish()
    recorder.close()


def perturbed(ev, seed):
    """A flat parameter vector of `ev` (pairs, then values): each default times a factor drawn
    from [0.5, 1.5)."""
    rng = np.random.default_rng(seed)
    reg = ev.registry
    pairs = reg.defaults * rng.uniform(0.5, 1.5, size=reg.defaults.shape)
    values = reg.value_defaults * rng.uniform(0.5, 1.5, size=reg.n_values)
    return np.concatenate([pairs.reshape(-1), values])


def eager_and_replay(ev, data, k, store):
    """The (threads, source) pairs a bitwise comparison goes through: 1 and 2 threads, each with
    the eager source of `data`'s positions and results (at K = `k`) and the replay source of
    `store` (both made anew for each)."""
    for threads in (1, 2):
        yield threads, EagerSource(ev, data.positions, data.results, k)
        yield threads, ReplaySource(store)


@pytest.mark.parametrize("name", ["clockwork", "material", nonlinear_eval.NAME])
def test_replay_equals_eager_bitwise(tiny, name):
    """Loss and gradient of one batch: eager (recorded now) and replay (played from the store)
    agree to the bit, for any thread count; the gradient is not trivially zero."""
    ev = get_evaluation(name)
    store = record_store(ev, tiny.positions, tiny.results, K, n_threads=2, micro=64)
    theta = perturbed(ev, 3)
    batch = np.random.default_rng(4).permutation(len(tiny.positions))[:1500]
    seen = set()
    for threads, source in eager_and_replay(ev, tiny, K, store):
        w = Workers(source, threads, 64, 1500)
        try:
            sse, grad = w.loss_grad(theta, batch)
            val_sse, _ = w.loss_grad(theta, batch, with_grad=False)
        finally:
            w.close()
        assert val_sse == sse and np.count_nonzero(grad) > 0.5 * ev.registry.n_values
        seen.add((sse, grad.tobytes()))
    assert len(seen) == 1


def _branches(ev, theta, positions, clamp_form=F_ADD_CLAMPED_EG):
    """Per position: the sign of eg entering the endgame scale and whether the eg clamp of
    `clamp_form` passes (for the winnable add: with the sign of eg applied to the value)."""
    reg = ev.registry
    tape = new_tape(reg.n_values, reg.n_params, records=64 * len(positions))
    set_params(tape.arena, theta[: 2 * reg.n_params].reshape(-1, 2), theta[2 * reg.n_params:])
    out = np.zeros(len(positions), np.int64)
    ev.record_batch(tape, ev.new_scratch(), positions, np.arange(len(positions)), out)
    rec, arena = tape.rec, tape.arena
    forms = rec.op[: rec.counts[C_RECORDS]] >> KERNEL_BITS
    scaled = np.flatnonzero(forms == F_EG_SCALE_BY_SIGN)
    clamped = np.flatnonzero(forms == clamp_form)
    assert len(scaled) == len(clamped) == len(positions)
    eg = arena.pair_val[rec.lhs[clamped], 1]
    w = arena.val[rec.rhs[clamped]] * (np.sign(eg) if clamp_form == F_ADD_WINNABLE_EG else 1)
    passes = ((eg > 0) & (eg + w > 0)) | ((eg < 0) & (eg + w < 0))
    return arena.pair_val[rec.lhs[scaled], 1] > 0, passes


def _raw(name, mode, init="default", lr=8.0):
    return {"data": {"train": ["tiny"], "validation_fraction": 0.05},
            "evaluation": {"name": name, "init": init},
            "optimizer": {"name": "adamw", "lr": lr},
            "training": {"epochs": 3, "batch_size": 512, "micro_batch_size": 64, "mode": mode}}


@pytest.mark.parametrize("name, lr, clamp_form", [(nonlinear_eval.NAME, 8.0, F_ADD_CLAMPED_EG),
                                                   ("clockwork-10d79e6", 30.0, F_ADD_WINNABLE_EG)])
def test_nonlinear_training_replay_equals_eager_and_positions_change_branch(tmp_path, tiny_data,
                                                                           name, lr, clamp_form):
    """Whole runs, eager and replay, 1 and 2 threads: the same bits, although training moved
    the parameters far enough that positions changed strong side and clamp branch."""
    data = tiny_data
    runs = {}
    for mode, threads in (("eager", 1), ("replay", 1), ("replay", 2)):
        out = tmp_path / f"{mode}-{threads}"
        out.mkdir()
        run = Run(validate(_raw(name, mode, lr=lr), "x"), out, threads=threads,
                  log=lambda s: None)
        start = run.theta.copy()
        run.run(data)
        runs[mode, threads] = run
    final = runs["eager", 1].theta
    for run in runs.values():
        assert run.theta.tobytes() == final.tobytes()
        assert run.history["train_loss"] == runs["eager", 1].history["train_loss"]
    assert np.abs(final - start).max() > 10  # the parameters did move
    ev = get_evaluation(name)
    strong0, clamp0 = _branches(ev, start, data.positions, clamp_form)
    strong1, clamp1 = _branches(ev, final, data.positions, clamp_form)
    assert (strong0 != strong1).sum() > 0, "no position changed its strong side"
    assert (clamp0 != clamp1).sum() > 0, "no position changed its clamp branch"


@njit(cache=True)
def _record_with_shared_leaf(tape, acc, positions, rows, out):
    """Reads, in every position, a constant recorded once by the first: not replayable."""
    shared = record_const(tape, 2.0)
    for i in range(rows.shape[0]):
        lin_add(acc, 0, 1)
        out[i] = record_phase(tape, record_pair_mul_value(tape, lin_record_pair(tape, acc),
                                                          shared), 0.5)


@pytest.mark.parametrize("mode", ["replay", "eager"])
def test_a_recording_that_cannot_be_played_is_refused(tmp_path, monkeypatch, mode):
    """Both modes play frozen recordings, so both refuse one whose positions share a slot, with
    an error naming the evaluation, the position, the record and its op."""
    material = get_evaluation("material")
    bad = Evaluation("shared-leaf", material.registry, material.record_eval,
                     _record_with_shared_leaf, material.new_scratch)
    monkeypatch.setattr("tuner.train.loop.get_evaluation", lambda *spec: bad)
    out = tmp_path / mode
    out.mkdir()
    run = Run(validate(_raw("material", mode), "x"), out, log=lambda s: None)
    with pytest.raises(TrainingError, match=r"'shared-leaf' cannot be played: position \d+, "
                                            r"record \d+ \(tag \d+, pv:mul\): reads a slot"):
        run.run()


def _cached_run(tmp_path, name, cache, k=K):
    raw = _raw("clockwork", "replay", init="zero", lr=5.0)
    raw["training"].update(epochs=1, store_cache=str(cache))
    raw["loss"] = {"k": k}
    out = tmp_path / name
    out.mkdir()
    lines = []
    run = Run(validate(raw, str(tmp_path / "x.toml")), out, log=lines.append)
    run.run()
    return run, [line for line in lines if line.startswith("replay")]


def test_store_cache_is_reused_and_never_trusted_when_damaged(tmp_path):
    cache = tmp_path / "cache"
    first, log = _cached_run(tmp_path, "a", cache)
    assert any("recorded" in line for line in log) and any("kept in" in line for line in log)
    (path,) = cache.glob("store-*.npz")
    second, log = _cached_run(tmp_path, "b", cache)
    assert any("loaded" in line for line in log) and not any("recorded" in line for line in log)
    assert second.theta.tobytes() == first.theta.tobytes()

    data = bytearray(path.read_bytes())
    for damage, reason in ((lambda d: d.__setitem__(len(d) // 2, d[len(d) // 2] ^ 0xFF),
                            "unreadable|corrupted"),
                           (lambda d: d.__delitem__(slice(len(d) // 3, None)), "unreadable")):
        broken = bytearray(data)
        damage(broken)
        path.write_bytes(bytes(broken))
        run, log = _cached_run(tmp_path, f"c{len(broken)}", cache)
        assert any(re.search(reason, line) and "recording again" in line for line in log), log
        assert run.theta.tobytes() == first.theta.tobytes()
        assert path.read_bytes() == bytes(data)  # rebuilt, identical

    other, log = _cached_run(tmp_path, "d", cache, k=0.003)   # another key: another file
    assert any("recorded" in line for line in log) and len(list(cache.glob("*.npz"))) == 2
    stale = [p for p in cache.glob("*.npz") if p != path][0]
    path.write_bytes(stale.read_bytes())                      # a store made for other settings
    run, log = _cached_run(tmp_path, "e", cache)
    assert any("made for other" in line and "recording again" in line for line in log), log
    assert run.theta.tobytes() == first.theta.tobytes()
