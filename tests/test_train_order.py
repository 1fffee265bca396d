"""Access order and store building (issue 12): a batch's positions are played in store order,
and the replay store is built in place as the micro-batches are recorded.

* `store_order` sorts distinct rows like `np.sort` (and says when a row repeats), leaving its
  bitmap clean for the next batch.
* The loss and gradient of a batch depend on which positions form it, not on the order it lists
  them in: every permutation of a batch gives the same bits, eager and replay, 1 and 2 threads
  (before, the positions were taken in the shuffled order, and their rounding followed it).
* `rows_kind` tells rows outside the store, rows in increasing order (taken as they are) and
  others; `cut_chunks` cuts where a division by the segment says a segment ends, and
  `reduce_chunks`, reading the chunks row after row, gives each parameter's compensated sum over
  the chunks in chunk order, as a sum parameter by parameter does.
* `StoreBuilder` fed one chunk at a time, with too small a size hint (the arrays grow) or none,
  equals the store built from all chunks at once, and `record_store` gives the same store for
  any thread count and micro-batch size.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.data import load_dataset
from tuner.evals import get_evaluation
from tuner.tape.ops import F_SIGMOID_SQ_ERR, neumaier_add
from tuner.tape.player import StoreBuilder, build_store, extract
from tuner.train.kernels import (ROWS_INCREASING, ROWS_OUTSIDE, ROWS_UNORDERED,
                                 WORD_BITS, cut_chunks, reduce_chunks, rows_kind, store_order)
from tuner.train.record import Labelled, new_training_tape, record_positions, record_store
from tuner.train.workers import Workers

from test_train_replay import eager_and_replay, perturbed

K = 0.0025


@pytest.fixture(scope="module")
def tiny():
    return load_dataset("tiny", quiet=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5000), max_size=300), st.booleans())
def test_store_order_sorts_distinct_rows_and_detects_repeats(rows, unique):
    rows = np.array(sorted(set(rows)) if unique else rows, np.int64)
    np.random.default_rng(len(rows)).shuffle(rows)
    bits = np.zeros(5000 // WORD_BITS + 1, np.uint64)
    out = np.full(len(rows), -1, np.int64)
    k = store_order(rows, bits, out)
    distinct = np.unique(rows)
    assert k == len(distinct)
    assert out[:k].tolist() == distinct.tolist()
    assert not bits.any()


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-2, 5001), max_size=300))
def test_rows_kind_says_outside_increasing_or_unordered(rows):
    rows = np.array(rows, np.int64)
    kind = rows_kind(rows, 5000)
    if len(rows) and (rows.min() < 0 or rows.max() >= 5000):
        assert kind == ROWS_OUTSIDE
    elif np.all(np.diff(rows) > 0):
        assert kind == ROWS_INCREASING
    else:
        assert kind == ROWS_UNORDERED


def _cut_by_division(order, micro, segment):
    """The cuts of `cut_chunks`, each row's segment found by a division."""
    starts, first = [0], 0
    for i in range(1, len(order)):
        if i - first == micro or order[i] // segment != order[i - 1] // segment:
            starts.append(i)
            first = i
    return starts + [len(order)] if len(order) else [0]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5000), max_size=400), st.integers(1, 50),
       st.sampled_from([1, 7, 64, 500, 1 << 40, np.iinfo(np.int64).max]))
def test_cut_chunks_ends_chunks_where_a_division_says_the_segment_ends(rows, micro, segment):
    order = np.array(sorted(rows), np.int64)
    starts = np.empty(len(order) + 1, np.int64)
    n = cut_chunks(order, micro, segment, starts)
    assert starts[: n + 1].tolist() == _cut_by_division(order.tolist(), micro, segment)
    # rows in any order, every one in one segment (`Workers` that keep the order given)
    unordered = np.array(rows, np.int64)
    if len(rows) and segment > 5000:
        n = cut_chunks(unordered, micro, segment, starts)
        assert starts[: n + 1].tolist() == list(range(0, len(rows), micro)) + [len(rows)]


@pytest.mark.parametrize("n_params", [1, 7, 1082])
def test_reduce_chunks_sums_each_parameter_in_chunk_order(n_params):
    rng = np.random.default_rng(n_params)
    # Magnitudes far apart, so that another order or no compensation would round differently.
    grads = rng.normal(0, 1, (37, n_params)) * 10.0 ** rng.integers(-8, 9, (37, n_params))
    out = np.full(n_params, np.nan)
    reduce_chunks(grads, 30, out)  # the last rows are not this batch's
    for i in range(n_params):
        s = c = 0.0
        for ch in range(30):
            s, c = neumaier_add(s, c, grads[ch, i])
        assert out[i] == s + c


@pytest.mark.parametrize("name", ["clockwork", "clockwork-10d79e6"])
def test_batch_gradient_does_not_depend_on_the_order_of_its_rows(tiny, name):
    ev = get_evaluation(name)
    store = record_store(ev, tiny.positions, tiny.results, K, n_threads=2, micro=64)
    theta = perturbed(ev, 1)
    batch = np.random.default_rng(2).permutation(len(tiny.positions))[:700]
    seen = set()
    for threads, source in eager_and_replay(ev, tiny, K, store):
        w = Workers(source, threads, 64, len(batch) + 5)
        try:
            for perm_seed in (3, 4):
                rows = np.random.default_rng(perm_seed).permutation(batch)
                sse, grad = w.loss_grad(theta, rows)
                seen.add((sse, grad.tobytes()))
            # A batch naming a row twice is sorted plainly: its result is its sorted one's.
            twice = np.concatenate([batch[:5], batch])
            sse, grad = w.loss_grad(theta, twice)
            ref = w.loss_grad(theta, np.sort(twice))
        finally:
            w.close()
        assert np.count_nonzero(grad) > 0 and (sse, grad.tobytes()) == (ref[0], ref[1].tobytes())
    assert len(seen) == 1


def _stores_equal(a, b):
    for name, x, y in zip(a._fields, a, b):
        assert x.dtype == y.dtype and x.shape == y.shape, name
        assert np.array_equal(x.view(np.uint8) if x.dtype.kind == "f" else x,
                              y.view(np.uint8) if y.dtype.kind == "f" else y), name


@pytest.mark.parametrize("name", ["clockwork", "clockwork-10d79e6"])
def test_store_builder_grows_and_equals_one_build(tiny, name):
    ev = get_evaluation(name)
    reg = ev.registry
    micro = 100
    n = 450
    tape, scratch = new_training_tape(reg, micro), ev.new_scratch()
    chunks = []
    for lo in range(0, n, micro):
        rows = np.arange(lo, min(n, lo + micro), dtype=np.int64)
        slots = np.zeros((2, len(rows)), np.int64)
        tape, scratch = record_positions(ev, tape, scratch, Labelled(
            tiny.positions, tiny.results, K, F_SIGMOID_SQ_ERR), rows, slots)
        chunks.append(extract(tape.rec, slots, base=lo))
    whole = build_store(chunks, reg.n_values, reg.n_params)
    for hint in (0, 1, n // 3):
        builder = StoreBuilder(reg.n_values, reg.n_params, hint)
        for ch in chunks:
            builder.add(ch)
        _stores_equal(builder.finish(), whole)
    threaded = record_store(ev, tiny.positions[:n], tiny.results[:n], K, n_threads=2, micro=37)
    _stores_equal(threaded, whole)
