"""A tape made with ``evaluate=False`` (what training records on): the same recording as an
evaluating tape, index errors noted the same, but no record evaluated in its arena."""
from __future__ import annotations

import numpy as np
import pytest

from tuner.chess.fen import parse_fen_list
from tuner.evals import get_evaluation
from tuner.tape import new_tape, ops
from tuner.tape import recording as R
from tuner.tape.player import extract, store_digest, build_store
from tuner.train.record import Labelled, record_positions

FENS = ["rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1",
        "r1bq1rk1/pp2bppp/2n1pn2/3p4/2PP4/2N1PN2/PP1B1PPP/R2QKB1R w KQ - 0 8",
        "8/5k2/3p4/1p1Pp2p/pP2Pp1P/P4P1K/8/8 b - - 0 50",
        "6k1/5ppp/8/8/8/8/1q3PPP/3R2K1 w - - 0 30"]


def _recorded(ev, evaluate: bool):
    positions, _ = parse_fen_list(FENS)
    n = len(positions)
    tape = new_tape(ev.registry.n_values, ev.registry.n_params, records=32 * n,
                    operands=128 * n, evaluate=evaluate)
    tape.arena.pair_val[: ev.registry.n_params] = 1.0  # values the records would read
    slots = np.zeros((2, n), np.int64)
    batch = Labelled(positions, np.full(n, 0.5), 1 / 400, ops.F_SIGMOID_SQ_ERR)
    tape, _ = record_positions(ev, tape, ev.new_scratch(), batch, np.arange(n), slots)
    return tape, slots


@pytest.mark.parametrize("name", ["clockwork", "clockwork-10d79e6"])
def test_same_recording_no_values(name):
    ev = get_evaluation(name)
    (full, s_full), (bare, s_bare) = _recorded(ev, True), _recorded(ev, False)
    np.testing.assert_array_equal(s_full, s_bare)
    c = full.rec.counts
    assert list(c[: R.C_EVALUATE]) == list(bare.rec.counts[: R.C_EVALUATE])
    for f in ("op", "out", "lhs", "rhs", "scalar"):
        np.testing.assert_array_equal(getattr(full.rec, f)[: c[R.C_RECORDS]],
                                      getattr(bare.rec, f)[: c[R.C_RECORDS]])
    for f in ("opnd_index", "opnd_coef"):
        np.testing.assert_array_equal(getattr(full.rec, f)[: c[R.C_OPERANDS]],
                                      getattr(bare.rec, f)[: c[R.C_OPERANDS]])
    # the evaluating tape computed its temporaries, the other left them as they were (zero)
    n_vp, n_pp = c[R.C_VALUE_PARAMS], c[R.C_PAIR_PARAMS]
    assert np.any(full.arena.val[n_vp: c[R.C_VALUES]] != 0)
    assert not np.any(bare.arena.val[n_vp:]) and not np.any(bare.arena.pair_val[n_pp:])
    freeze = [build_store([extract(t.rec, s)], ev.registry.n_values, ev.registry.n_params)
              for t, s in ((full, s_full), (bare, s_bare))]
    assert store_digest(freeze[0]) == store_digest(freeze[1])


def test_index_error_noted_without_evaluating():
    bare = new_tape(0, 2, records=4, evaluate=False)
    ops.record_pair_add(bare, 0, 7)
    bad = ops.index_error(bare.rec)
    assert bad is not None and (bad.index, bad.limit) == (7, 2)
