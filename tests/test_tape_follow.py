"""Following a template (tuner/tape/follow.py): a tape that follows the template of a micro-batch
already recorded writes no records, and the chunk it gives is field for field the one extracting
a full recording gives; positions that do not follow it (another structure, another position's
temporary, a bad index, a wide coefficient, a list of temporaries) are recorded again in full,
so the store, and the error raised, are the same as without following."""
from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import nonlinear_eval
import tuner.train.record as record
from tuner.evals import Evaluation, EvaluationIndexError, get_evaluation
from tuner.tape import new_accumulator, new_tape
from tuner.tape.follow import follow_segment, followed_chunk, following, template_of
from tuner.tape.ops import (F_SIGMOID_SQ_ERR, operand_mark, push_operand, record_add,
                            record_add_scalar, record_lincomb_value)
from tuner.tape.player import FreezeError, extract, store_digest
from tuner.tape.recording import C_RECORDS, FS_ON
from tuner.train.record import (FOLLOW_MISSES, Labelled, StoreRecorder, new_training_tape,
                                record_positions)

K = 1 / 400
MICRO = 16


def _recorded(ev, tape, scratch, batch, rows, template=None):
    slots = np.zeros((2, len(rows)), np.int64)
    tape, scratch = record_positions(ev, tape, scratch, batch, rows, slots, template)
    return tape, scratch, slots


@pytest.mark.parametrize("name", ["clockwork", "clockwork-10d79e6", "nonlinear"])
def test_a_followed_chunk_is_the_chunk_extracted(tiny, name):
    ev = nonlinear_eval.EVALUATION if name == "nonlinear" else get_evaluation(name)
    reg = ev.registry
    batch = Labelled(tiny.positions, tiny.results, K, F_SIGMOID_SQ_ERR)
    tape, scratch = new_training_tape(reg, 256), ev.new_scratch()
    tape, scratch, slots = _recorded(ev, tape, scratch, batch, np.arange(256))
    template = template_of(extract(tape.rec, slots), reg.n_values, reg.n_params, 256)
    assert template is not None
    rows = np.arange(1000, 1256)
    tape, scratch, slots = _recorded(ev, following(tape, template), scratch, batch, rows,
                                     template)
    assert tape.rec.counts[C_RECORDS] == 0  # (it wrote no record)
    got = followed_chunk(tape, template, slots)
    assert got is not None
    tape, scratch, slots = _recorded(ev, tape, scratch, batch, rows)
    want = extract(tape.rec, slots)
    for field in want._fields:
        a, b = getattr(got, field), getattr(want, field)
        assert a.dtype == b.dtype and np.array_equal(a, b), field


class _Failing:
    """An evaluation whose recordings all fail their check."""

    def __init__(self, ev):
        self.ev = ev

    def __getattr__(self, name):
        return getattr(self.ev, name)

    def check_recording(self, tape, positions, rows, slots):
        raise RuntimeError("refused")


def test_a_tape_follows_only_what_it_can_and_stops_when_recording_fails(tiny):
    """Not more positions than its arrays have room for, never on a tape that evaluates its
    records; and a recording that fails leaves the tape recording in full."""
    ev = nonlinear_eval.EVALUATION
    reg = ev.registry
    batch = Labelled(tiny.positions, tiny.results, K, F_SIGMOID_SQ_ERR)
    tape, scratch, slots = _recorded(ev, new_training_tape(reg, 64), ev.new_scratch(), batch,
                                     np.arange(64))
    template = template_of(extract(tape.rec, slots), reg.n_values, reg.n_params, 64)
    tape = following(tape, template)
    with pytest.raises(ValueError, match="over 65 positions"):
        follow_segment(tape, 0, 65)
    evaluating = new_tape(reg.n_values, reg.n_params, records=1024, operands=8192)
    with pytest.raises(ValueError, match="evaluating: True"):
        follow_segment(following(evaluating, template), 0, 8)
    with pytest.raises(RuntimeError, match="refused"):
        record_positions(_Failing(ev), tape, scratch, batch, np.arange(64), slots, template)
    assert tape.follow.state[FS_ON] == 0


# Ways positions may fail to follow (`_variant`): from row `FROM` on (micro-batches of MICRO,
# so the first two are recorded, and followed, before).
PLAIN, VARYING, CROSS, BAD_INDEX, WIDE, TEMP_LIST = range(6)
FROM = 100
GAIN = nonlinear_eval.GAIN


@njit(cache=True, nogil=True)
def _variant(tape, acc, pos, row, before, mode):
    """nonlinear_eval's evaluation plus a list and an add, every position alike but: from row
    FROM on, every fifth position has one record more (VARYING), each position adds the one
    before's output (CROSS), row FROM adds slot 10^6 (BAD_INDEX) or a coefficient of 300
    (WIDE); with TEMP_LIST the list holds the evaluation's own (temporary) slot."""
    v = nonlinear_eval.record_eval(tape, acc, pos)
    first = operand_mark(tape)
    if mode == TEMP_LIST:
        push_operand(tape, v, 1.0)
    else:
        push_operand(tape, 0, 300.0 if mode == WIDE and row == FROM else 1.0)
    v = record_add(tape, v, record_lincomb_value(tape, first))
    rhs = GAIN
    if mode == CROSS and row >= FROM and before >= 0:
        rhs = before
    if mode == BAD_INDEX and row == FROM:
        rhs = 10 ** 6
    v = record_add(tape, v, rhs)
    if mode == VARYING and row >= FROM and row % 5 == 0:
        v = record_add_scalar(tape, v, 1.0)
    return v


@njit(cache=True, nogil=True)
def _variant_batch(tape, scratch, positions, rows, out):
    """`_variant` of every row; the scratch is (accumulator, [mode])."""
    acc, mode = scratch[0], scratch[1][0]
    for i in range(rows.shape[0]):
        out[i] = _variant(tape, acc, positions[rows[i]], rows[i], out[i - 1] if i else -1, mode)


def _evaluation(mode: int) -> Evaluation:
    """`_variant` as an evaluation (the mode in its scratch: one compiled recorder for all)."""
    reg = nonlinear_eval.registry()
    return Evaluation(f"follow-test-{mode}", reg, nonlinear_eval.record_eval, _variant_batch,
                      new_scratch=lambda: (new_accumulator(reg.n_params), np.array([mode])))


def _store_or_error(ev, tiny, threads, monkeypatch, misses):
    """The store (digest) `StoreRecorder` records of the first 300 positions, or the error it
    raises; and how many micro-batches followed a template, and how many did not."""
    calls = {"followed": 0, "missed": 0}

    def counted(*args):
        ch = followed_chunk(*args)
        calls["followed" if ch is not None else "missed"] += 1
        return ch

    monkeypatch.setattr(record, "followed_chunk", counted)
    monkeypatch.setattr(record, "FOLLOW_MISSES", misses)
    recorder = StoreRecorder(ev, K, threads, MICRO, 300)
    try:
        recorder.add(tiny.positions[:300], tiny.results[:300])
        return store_digest(recorder.finish()), calls
    except (EvaluationIndexError, FreezeError) as e:
        recorder.close()
        return f"{type(e).__name__}: {e}", calls


@pytest.mark.parametrize("mode", [PLAIN, VARYING, CROSS, BAD_INDEX, WIDE, TEMP_LIST])
@pytest.mark.parametrize("threads", [1, 2])
def test_positions_that_do_not_follow_are_recorded_in_full(tiny, monkeypatch, mode, threads):
    """The same store or error with following as without; on one thread, the micro-batches
    before row FROM followed their first one's template and the one with it did not (on two,
    which tape records which micro-batch varies)."""
    ev = _evaluation(mode)
    want, calls = _store_or_error(ev, tiny, threads, monkeypatch, 0)
    assert calls == {"followed": 0, "missed": 0}
    got, calls = _store_or_error(ev, tiny, threads, monkeypatch, FOLLOW_MISSES)
    assert got == want
    if mode in (CROSS, BAD_INDEX):
        assert want.startswith("FreezeError" if mode == CROSS else "EvaluationIndexError")
    if mode == TEMP_LIST:  # never followed: each tape gives up after FOLLOW_MISSES
        assert calls["followed"] == 0 and 1 <= calls["missed"] <= threads * FOLLOW_MISSES
    elif threads == 1:
        assert calls["followed"] >= FROM // MICRO - 1
        assert (calls["missed"] == 0) == (mode == PLAIN)
    elif mode == PLAIN:  # (some tape records two of the micro-batches, and follows in the 2nd)
        assert calls["followed"] >= 1 and calls["missed"] == 0
