"""Specialised players (tuner/tape/specialise.py): a store's templates written out as code.

* Every op of the table, in random composite graphs (the generator of test_tape_graphs.py) as the
  positions of one store of several templates: the specialised player gives the interpreter's
  outputs, slots and parameter gradients bit for bit, forward only and with gradients, rows
  shuffled and repeated. One store covers every form, so the suite compiles one module.
* The call table covers every form; a store with too many templates is not specialised; a
  position of a template the player has no block for stops it with `NO_BLOCK`.
* Training: `Workers` with and without a specialised player give the same loss and gradient bits
  on both reference evaluations.
"""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np
import pytest

from tuner.evals import get_evaluation
from tuner.tape import freeze, ops, play
from tuner.tape.specialise import (CALLS, MAX_TEMPLATES, NO_BLOCK, player_source, specialisable,
                                   specialise)
from tuner.train.kernels import replay_chunks
from tuner.train.record import record_store
from tuner.train.workers import ReplaySource, Workers

from test_tape_graphs import N_PP, N_VP, OPS, make_plan
from test_tape_player import assert_same_bits, fresh_arena, record_positions

SEED = 20261201


def covering_plans(n_plans: int, length: int):
    """`n_plans` plans that together use every op of the generator at least once (each op
    code appears in turn, the rest drawn), and the base point they were made at."""
    rng = np.random.default_rng(SEED)
    vparams = rng.uniform(0.5, 1.5, N_VP)
    pparams = rng.uniform(0.5, 1.5, (N_PP, 2))
    codes = list(range(len(OPS)))
    plans = []
    for i in range(n_plans):
        mine = codes[i::n_plans] + [int(c) for c in rng.integers(0, len(OPS), length)]
        rng.shuffle(mine)
        plans.append(make_plan(mine, SEED + i, vparams, pparams))
    return plans, vparams, pparams


@pytest.fixture(scope="module")
def store_and_point():
    plans, vparams, pparams = covering_plans(4, 12)
    # Each plan three times: positions of one template that differ only in their targets.
    positions = [p for p in plans for _ in range(3)]
    targets = np.random.default_rng(SEED).uniform(0, 1, len(positions))
    g, outputs = record_positions(positions, targets, vparams, pparams)
    store = freeze(g.tape.rec, outputs)
    return store, vparams, pparams


def test_every_form_has_its_calls():
    assert sorted(CALLS) == list(range(ops.N_FORMS))


def test_the_store_covers_every_form(store_and_point):
    store = store_and_point[0]
    forms = {int(t) >> ops.KERNEL_BITS for t in store.t_op}
    # Leaves, n-ary records, the loss: every form the graphs record, and the graphs record all.
    assert forms == set(range(ops.N_FORMS)) - {ops.F_SIGMOID_XENT} or forms == set(
        range(ops.N_FORMS))
    assert len(store.t_temps) == 4 and specialisable(store)


@pytest.mark.parametrize("scale", [1e-2, 1.0])
def test_specialised_equals_interpreted_bit_for_bit(store_and_point, scale):
    store, vparams, pparams = store_and_point
    module = specialise(store)
    rng = np.random.default_rng(int(scale * 100))
    new_v = vparams + scale * rng.uniform(-1, 1, N_VP)
    new_p = pparams + scale * rng.uniform(-1, 1, (N_PP, 2))
    n = len(store.tmpl)
    rows = np.array(rng.permutation(n).tolist() + [3, 3], np.int64)
    for with_grad in (False, True):
        results = []
        for player in (play, module.play):
            arena = fresh_arena(store, new_v, new_p)
            outputs = np.zeros((len(rows), store.t_out_slots.shape[1]))
            assert player(store, arena, rows, 0.25, with_grad, outputs) == -1
            results.append((outputs, arena))
        (o1, a1), (o2, a2) = results
        what = f"scale {scale}, with_grad {with_grad}"
        assert_same_bits(o1, o2, what + " outputs")
        for field in ("val", "pair_val", "val_grad", "pair_grad"):
            assert_same_bits(getattr(a1, field), getattr(a2, field), f"{what} {field}")
        if with_grad:
            assert np.any(a1.pair_grad[:N_PP] != 0.0)


def test_a_template_without_a_block_stops_the_player(store_and_point):
    store, vparams, pparams = store_and_point
    module = specialise(store)
    other = store._replace(tmpl=np.full_like(store.tmpl, len(store.t_temps)))
    outputs = np.zeros((1, store.t_out_slots.shape[1]))
    arena = fresh_arena(store, vparams, pparams)
    assert module.play(other, arena, np.zeros(1, np.int64), 1.0, True, outputs) == NO_BLOCK


def test_drivers_are_rebound_to_the_specialised_player(store_and_point):
    store = store_and_point[0]
    source = player_source(store, [replay_chunks])
    assert "def replay_chunks(" in source and "def play(" in source
    assert "from tuner.train.kernels import play" not in source
    assert specialise(store, [replay_chunks]).replay_chunks is not replay_chunks


def test_too_many_templates_are_not_specialised(store_and_point):
    store = store_and_point[0]
    many = store._replace(t_temps=np.zeros((MAX_TEMPLATES + 1, 2), np.int32))
    assert not specialisable(many)
    with pytest.raises(ValueError, match="templates"):
        specialise(many)


@pytest.mark.parametrize("name", ["clockwork", "clockwork-10d79e6"])
def test_workers_give_the_same_bits_with_a_specialised_player(tiny, name):
    ev = get_evaluation(name)
    positions, results = tiny.positions[:3000], tiny.results[:3000]
    store = record_store(ev, positions, results, 1 / 400, 1, micro=256)
    reg = ev.registry
    theta = np.random.default_rng(1).normal(size=2 * reg.n_params + reg.n_values) * 20
    order = np.random.default_rng(2).permutation(len(results))[:2500]
    got = []
    for specialised in (False, True):
        w = Workers(ReplaySource(store, specialised=specialised), 2, 128, len(order))
        assert (w.source.replay_chunks is replay_chunks) != specialised
        sse, grad = w.loss_grad(theta, order)
        got.append((sse, grad.copy()))
        w.close()
    assert got[0][0] == got[1][0]
    assert_same_bits(got[0][1], got[1][1], name)
    assert np.count_nonzero(got[0][1]) > 100


def test_a_read_only_cache_still_gives_a_player(store_and_point, tmp_path, monkeypatch):
    from tuner.tape import specialise as sp

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setattr(sp, "_folder", lambda: blocker / "players")
    store = store_and_point[0]
    name = "tuner_player_" + hashlib.blake2b(player_source(store).encode(),
                                             digest_size=10).hexdigest()
    monkeypatch.delitem(sys.modules, name, raising=False)  # not the one imported already
    module = sp.specialise(store)
    assert Path(module.__file__).parent != blocker / "players" and Path(module.__file__).exists()
    assert module.play is not play
