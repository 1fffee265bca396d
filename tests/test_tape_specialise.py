"""Specialised players (tuner/tape/specialise.py): a store's templates written out as code.

* Every form of the table (`tuner.tape.ops.FORM_TABLE`, each loss form too), in random composite
  graphs (the generator of test_tape_graphs.py) as the positions of one store of two
  templates: the specialised player gives the interpreter's outputs, slots and parameter
  gradients bit for bit, forward only and with gradients, rows shuffled and repeated. One small
  store covers every form, and one compiled module serves every test (the suite compiles one).
* Every row's calls name its functions with as many arguments as they take; each call of the
  generated text is labelled with its record's tag and passes no integer literal (its integers
  in the interpreter's types, `ARG_TYPES`, so that the interpreter's compiled form functions
  serve it); a store with too many templates is not
  specialised; a position of a template the player has no block for stops it with `NO_BLOCK`.
* Drivers are compiled again from their own code with ``play`` bound to the specialised player,
  never copied by source; one that does not call ``play`` is refused.
* A generated module that fails to run is not left in `sys.modules`; the generated file's path
  and its templates are logged at debug level.
* Training: `Workers` with and without a specialised player give the same loss and gradient bits
  (the material evaluation: a small one to compile).
"""
from __future__ import annotations

import ast
import hashlib
import inspect
import logging
import sys
from pathlib import Path

import numpy as np
import pytest

from tuner.evals import get_evaluation
from tuner.tape import Graph, Value, freeze, ops, play
from tuner.tape.specialise import (ARG_TYPES, MAX_TEMPLATES, NO_BLOCK, inlined_call,
                                   player_source, specialisable, specialise,
                                   template_summary)
from tuner.train.kernels import Batch, replay_chunks
from tuner.train.record import record_store
from tuner.train.workers import ReplaySource, Workers

from test_tape_graphs import N_PP, N_VP, OPS, make_plan, record_plan
from test_tape_player import K, assert_same_bits, fresh_arena

SEED = 20261202  # (its plans cover every form: `test_the_store_covers_every_form`)
#: Templates of the store (a plan each).
N_TEMPLATES = 2


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


def record_positions(plans, targets, vparams, pparams):
    """Position i: plan i's evaluation (segment 0), then its loss of form ``LOSS_FORMS[i % 2]``
    times 0.5 (segment 1). The graph and the ``outputs`` of `freeze`."""
    g = Graph(N_VP, N_PP, records=sum(len(p) for p in plans) + 8 * len(plans))
    g.tape.arena.val[:N_VP] = vparams
    g.tape.arena.pair_val[:N_PP] = pparams
    outs = [record_plan(steps, vparams, pparams, g)[1][-1] for steps in plans]
    losses = [Value(g, ops.record_loss(g.tape, o.index, K, y,
                                       ops.LOSS_FORMS[i % len(ops.LOSS_FORMS)])) * 0.5
              for i, (o, y) in enumerate(zip(outs, targets))]
    return g, np.array([[o.index for o in outs], [x.index for x in losses]], np.int64)


@pytest.fixture(scope="module")
def store_and_point():
    plans, vparams, pparams = covering_plans(N_TEMPLATES, 2)
    # Plan i with loss form i (`record_positions`: two templates, every form between them; the
    # fewer templates, the less the specialised player takes to compile), each twice: positions
    # that differ only in their targets.
    assert len(plans) == len(ops.LOSS_FORMS)
    positions = [p for _ in range(2) for p in plans]
    targets = np.random.default_rng(SEED).uniform(0, 1, len(positions))
    g, outputs = record_positions(positions, targets, vparams, pparams)
    store = freeze(g.tape.rec, outputs)
    return store, vparams, pparams


@pytest.fixture(scope="module")
def module(store_and_point):
    """The specialised module of the store, with the replay driver: compiled once for the file."""
    return specialise(store_and_point[0], [replay_chunks])


def test_every_row_calls_its_functions_with_their_arguments():
    for f, row in enumerate(ops.FORM_TABLE):
        for fn, args, backward in ((row.fwd, row.fwd_args, False), (row.bwd, row.bwd_args, True)):
            if fn is None:
                assert f in (ops.F_CONST, ops.F_CONST_PAIR) and not args
                continue
            n = len(inspect.signature(fn.py_func).parameters)
            assert len(args.split(", ")) == n, (row.name, args)
            assert ops.call(f, backward).startswith(fn.__name__ + "(")


def test_the_store_covers_every_form(store_and_point):
    store = store_and_point[0]
    forms = {int(t) >> ops.KERNEL_BITS for t in store.t_op}
    # Leaves, n-ary records, both losses: every form of the table.
    assert forms == set(range(ops.N_FORMS)), set(ops.FORM_NAMES) - {ops.FORM_NAMES[f] for f in forms}
    assert len(store.t_temps) == N_TEMPLATES and specialisable(store)


def test_the_generated_calls_are_labelled_with_their_tags(store_and_point):
    store = store_and_point[0]
    source = player_source(store)
    for op in set(int(t) for t in store.t_op):
        assert f"  # {ops.tag_name(op)}\n" in source
    assert "import inspect" not in source and "def replay_chunks" not in source
    summary = template_summary(store)
    assert summary.count("template ") == N_TEMPLATES and ops.tag_name(int(store.t_op[0])) in summary


def test_the_generated_calls_pass_no_integer_literal(store_and_point):
    # Numba types an integer literal by its value: a form function called with one would be
    # compiled again for that call instead of reusing the interpreter's version of it (one it
    # inlines compiles nothing of its own).
    tree = ast.parse(player_source(store_and_point[0]))
    compiled = {name for name in ops.form_functions() if not inlined_call(getattr(ops, name))}
    calls = [c for c in ast.walk(tree) if isinstance(c, ast.Call)
             and isinstance(c.func, ast.Name) and c.func.id in compiled]
    assert {c.func.id for c in calls} >= {row.fwd.__name__ for row in ops.FORM_TABLE} & compiled
    for c in calls:
        bare = [ast.unparse(x) for x in c.args if isinstance(x, ast.Constant)
                and type(x.value) is int]
        assert not bare, (ast.unparse(c), bare)
    casts = {ast.unparse(x.func) for c in calls for x in c.args if isinstance(x, ast.Call)}
    assert casts == {f"np.{t}" for t in ARG_TYPES.values()}


@pytest.mark.parametrize("scale", [1e-2, 1.0])
def test_specialised_equals_interpreted_bit_for_bit(store_and_point, module, scale):
    store, vparams, pparams = store_and_point
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


def test_a_template_without_a_block_stops_the_player(store_and_point, module):
    store, vparams, pparams = store_and_point
    other = store._replace(tmpl=np.full_like(store.tmpl, len(store.t_temps)))
    outputs = np.zeros((1, store.t_out_slots.shape[1]))
    arena = fresh_arena(store, vparams, pparams)
    assert module.play(other, arena, np.zeros(1, np.int64), 1.0, True, outputs) == NO_BLOCK


def test_drivers_are_rebound_to_the_specialised_player(store_and_point, module):
    driver = module.replay_chunks
    assert driver is not replay_chunks and driver.py_func.__code__ is replay_chunks.py_func.__code__
    assert driver.py_func.__globals__["play"] is module.play
    assert replay_chunks.py_func.__globals__["play"] is play
    assert driver.py_func.__qualname__ == f"replay_chunks__{module.__name__}"
    assert specialise(store_and_point[0], [replay_chunks]).replay_chunks is driver
    # The rebound driver plays the specialised player: a position of a template it has no block
    # for stops it (the interpreter's driver plays it).
    store, vparams, pparams = store_and_point
    other = store._replace(tmpl=np.full_like(store.tmpl, len(store.t_temps)))
    one = np.zeros(1, np.int64)
    with pytest.raises(ValueError, match="unknown record tag"):
        batch = Batch(one, np.array([0, 1]), 1.0, False, np.zeros((1, 2 * N_PP + N_VP)),
                      np.zeros(1))
        driver(other, fresh_arena(store, vparams, pparams), batch, one, np.zeros(1, np.int64),
               np.zeros((1, 2)))


def test_a_driver_that_does_not_call_play_is_refused(store_and_point, module):
    from tuner.train.kernels import store_order

    with pytest.raises(ValueError, match="does not call play"):
        specialise(store_and_point[0], [store_order])


def test_a_module_that_fails_to_run_is_not_left_imported(store_and_point, monkeypatch, tmp_path):
    from tuner.tape import specialise as sp

    monkeypatch.setattr(sp, "_folder", lambda: tmp_path / "players")
    broken = player_source(store_and_point[0]) + "\nraise RuntimeError('broken on purpose')\n"
    monkeypatch.setattr(sp, "player_source", lambda st: broken)
    name = "tuner_player_" + hashlib.blake2b(broken.encode(), digest_size=10).hexdigest()
    with pytest.raises(RuntimeError, match="broken on purpose"):
        sp.specialise(store_and_point[0])
    assert name not in sys.modules and (tmp_path / "players" / f"{name}.py").exists()


def test_the_generated_file_and_its_templates_are_logged(store_and_point, monkeypatch, tmp_path,
                                                          caplog):
    from tuner.tape import specialise as sp

    monkeypatch.setattr(sp, "_folder", lambda: tmp_path / "players")
    store = store_and_point[0]
    name = "tuner_player_" + hashlib.blake2b(player_source(store).encode(),
                                             digest_size=10).hexdigest()
    monkeypatch.delitem(sys.modules, name, raising=False)  # not the one imported already
    with caplog.at_level(logging.DEBUG, logger="tuner.tape.specialise"):
        module = sp.specialise(store)
    (message,) = [r.getMessage() for r in caplog.records if r.name == "tuner.tape.specialise"]
    assert str(tmp_path / "players" / f"{name}.py") in message and module.__file__ in message
    assert template_summary(store) in message


def test_too_many_templates_are_not_specialised(store_and_point):
    store = store_and_point[0]
    many = store._replace(t_temps=np.zeros((MAX_TEMPLATES + 1, 2), np.int32))
    assert not specialisable(many)
    with pytest.raises(ValueError, match="templates"):
        specialise(many)


def test_workers_give_the_same_bits_with_a_specialised_player(tiny):
    ev = get_evaluation("material")
    positions, results = tiny.positions[:600], tiny.results[:600]
    store = record_store(ev, positions, results, 1 / 400, 1, micro=128)
    reg = ev.registry
    theta = np.random.default_rng(1).normal(size=2 * reg.n_params + reg.n_values) * 20
    order = np.random.default_rng(2).permutation(len(results))[:500]
    got = []
    for specialised in (False, True):
        w = Workers(ReplaySource(store, specialised=specialised), 2, 64, len(order))
        assert (w.source.replay_chunks is replay_chunks) != specialised
        sse, grad = w.loss_grad(theta, order)
        got.append((sse, grad.copy()))
        w.close()
    assert got[0][0] == got[1][0]
    assert_same_bits(got[0][1], got[1][1], "material")
    assert np.count_nonzero(got[0][1]) > 10


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
