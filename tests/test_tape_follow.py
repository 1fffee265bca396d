"""Following a template (tuner/tape/follow.py): the chunk made of a recording whose positions
follow the template of a micro-batch copied out before is field for field the one `extract`
copies out of it; a recording that does not follow it (another structure, another position's
temporary, a bad index, a wide coefficient, a list of temporaries) is copied out in full, so
the store, and the error raised, are the same as without following."""
from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import nonlinear_eval
import tuner.train.record as record
from tuner.evals import Evaluation, EvaluationIndexError, get_evaluation
from tuner.tape import new_accumulator
from tuner.tape.follow import followed_chunk, template_of
from tuner.tape.ops import (F_SIGMOID_SQ_ERR, operand_mark, push_operand, record_add,
                            record_add_scalar, record_lincomb_value)
from tuner.tape.player import FreezeError, extract, store_digest
from tuner.train.record import Labelled, StoreRecorder, new_training_tape, record_positions

K = 1 / 400
MICRO = 16


def _recorded(ev, tape, scratch, batch, rows):
    slots = np.zeros((2, len(rows)), np.int64)
    tape, scratch = record_positions(ev, tape, scratch, batch, rows, slots)
    return tape, scratch, slots


@pytest.mark.parametrize("name", ["clockwork", "clockwork-10d79e6", "nonlinear"])
def test_a_followed_chunk_is_the_chunk_extracted(tiny, name):
    ev = nonlinear_eval.EVALUATION if name == "nonlinear" else get_evaluation(name)
    reg = ev.registry
    batch = Labelled(tiny.positions, tiny.results, K, F_SIGMOID_SQ_ERR)
    tape, scratch = new_training_tape(reg, 256), ev.new_scratch()
    tape, scratch, slots = _recorded(ev, tape, scratch, batch, np.arange(256))
    template = template_of(extract(tape.rec, slots), reg.n_values, reg.n_params)
    assert template is not None
    for rows in (np.arange(1000, 1256), np.arange(3000, 3100)):  # (a shorter one too)
        tape, scratch, slots = _recorded(ev, tape, scratch, batch, rows)
        got, want = followed_chunk(tape.rec, template, slots), extract(tape.rec, slots)
        assert got is not None
        for field in want._fields:
            a, b = getattr(got, field), getattr(want, field)
            assert a.dtype == b.dtype and np.array_equal(a, b), field
        assert followed_chunk(tape.rec, template, slots[:, :-1]) is None  # (one position less)


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


def _store_or_error(ev, tiny, threads, monkeypatch, follow: bool):
    """The store (digest) `StoreRecorder` records of the first 300 positions, or the error it
    raises; and how many micro-batches followed a template, and how many did not (with
    `follow` False, no template is ever made)."""
    calls = {"followed": 0, "missed": 0}

    def counted(*args):
        ch = followed_chunk(*args)
        calls["followed" if ch is not None else "missed"] += 1
        return ch

    monkeypatch.setattr(record, "followed_chunk", counted)
    monkeypatch.setattr(record, "template_of", template_of if follow else lambda *args: None)
    recorder = StoreRecorder(ev, K, threads, MICRO, 300)
    try:
        recorder.add(tiny.positions[:300], tiny.results[:300])
        return store_digest(recorder.finish()), calls
    except (EvaluationIndexError, FreezeError) as e:
        recorder.close()
        return f"{type(e).__name__}: {e}", calls


@pytest.mark.parametrize("mode", [PLAIN, VARYING, CROSS, BAD_INDEX, WIDE, TEMP_LIST])
@pytest.mark.parametrize("threads", [1, 2])
def test_positions_that_do_not_follow_are_copied_out_in_full(tiny, monkeypatch, mode, threads):
    """The same store or error with following as without; on one thread, the micro-batches
    before row FROM followed their first one's template and the one with it did not (on two,
    which tape records which micro-batch varies)."""
    ev = _evaluation(mode)
    want, calls = _store_or_error(ev, tiny, threads, monkeypatch, False)
    assert calls == {"followed": 0, "missed": 0}
    got, calls = _store_or_error(ev, tiny, threads, monkeypatch, True)
    assert got == want
    if mode in (CROSS, BAD_INDEX):
        assert want.startswith("FreezeError" if mode == CROSS else "EvaluationIndexError")
    if mode == TEMP_LIST:  # a template every time, never followed
        assert calls["followed"] == 0 and calls["missed"] >= 1
    elif threads == 1:  # (a bad index is reported by the recording, before any chunk)
        assert calls["followed"] >= FROM // MICRO - 1
        assert (calls["missed"] == 0) == (mode in (PLAIN, BAD_INDEX))
    elif mode == PLAIN:  # (some tape records two of the micro-batches, and follows in the 2nd)
        assert calls["followed"] >= 1 and calls["missed"] == 0
