"""Building a store chunk by chunk in its own layout (`StoreBuilder` in tuner/tape/player.py).

The builder packs each chunk's operands into u16 words as it comes and keeps only the scalar
columns seen to vary, so it has to decide from the chunks so far what the whole decides at once.
Whatever the chunks, the store must be the one freezing every position as one recording gives,
bit for bit:

* operands: words repacked when a later chunk's coefficients need more bits, unpacked (slots and
  coefficients apart) from the first chunk whose slot or coefficient does not fit 16 bits with
  them, or whose coefficients are not integers;
* scalars: a column equal over the first chunks that differs in a later one (its value written
  into the rows before), columns found to vary out of record order (put back in order), several
  templates each with its own columns;
* and a builder holding packed operands never holds their coefficients apart.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.tape import new_tape, ops
from tuner.tape.player import StoreBuilder, extract, freeze, gatherable, reordered_store

#: Pair parameters of the test tapes: slots up to 0x10000 (one past what a u16 holds).
N_PAIRS = 0x10001


def record(tape, position) -> int:
    """One position ``(kind, s, alpha, terms)``: mul_scalar of value parameter 0 by `s`, a
    lincomb_pair of `terms` (pair slot, coefficient) blended by phase `alpha`, their sum; kind 1
    adds an exp (another template)."""
    kind, s, alpha, terms = position
    a = ops.record_mul_scalar(tape, 0, s)
    first = ops.operand_mark(tape)
    for slot, coef in terms:
        ops.push_operand(tape, slot, coef)
    b = ops.record_phase(tape, ops.record_lincomb_pair(tape, first), alpha)
    out = ops.record_add(tape, a, b)
    return ops.record_exp(tape, out) if kind else out


def recorded(positions):
    tape = new_tape(1, N_PAIRS, records=8 * len(positions) + 8,
                    operands=sum(len(p[3]) for p in positions) + 8)
    outs = [record(tape, p) for p in positions]
    return tape, np.array([outs], np.int64)


def built(positions, cuts, hint: int = 0):
    """The store of `positions` fed to a `StoreBuilder` in chunks cut at `cuts`."""
    builder = StoreBuilder(1, N_PAIRS, hint)
    bounds = [0, *sorted(set(cuts)), len(positions)]
    for lo, hi in zip(bounds, bounds[1:]):
        if hi > lo:
            tape, outs = recorded(positions[lo:hi])
            builder.add(extract(tape.rec, outs, base=lo))
    return builder.finish()


def whole(positions):
    """The store of `positions` frozen as one recording."""
    tape, outs = recorded(positions)
    return freeze(tape.rec, outs)


def assert_same_store(a, b):
    for name, x, y in zip(a._fields, a, b):
        assert x.dtype == y.dtype and x.shape == y.shape, (name, x.dtype, x.shape, y.dtype, y.shape)
        assert x.tobytes() == y.tobytes(), name


def test_coefficients_widening_in_a_later_chunk_repack_the_words_before():
    positions = [(0, 1.5, 0.25, [(0, 1.0), (3, -2.0)]), (0, 1.5, 0.25, [(5, 3.0)]),
                 (0, 1.5, 0.25, [(2, 300.0), (1, -1.0)]), (0, 1.5, 0.25, [(7, -1000.0)])]
    store = built(positions, [1, 2, 3])
    assert store.coef_bits[0] == 11 and store.coef.size == 0
    assert_same_store(store, whole(positions))


@pytest.mark.parametrize("late", [
    [(0x3FF, 32.0)],             # 10 slot bits and 7 coefficient bits: more than 16
    [(0x10000, 1.0)],            # a slot beyond u16
    [(1, 0.5)],                  # not an integer
    [(1, 40000.0)],              # an integer beyond i16
])
def test_a_later_chunk_that_does_not_fit_unpacks_the_words_before(late):
    positions = [(0, 1.0, 0.5, [(0x3FF, 1.0), (2, -3.0)]), (0, 1.0, 0.5, [(4, 31.0)]),
                 (0, 1.0, 0.5, late), (0, 1.0, 0.5, [(1, 2.0)])]
    store = built(positions, [2, 3])
    assert store.coef_bits[0] == 0 and store.coef.size == 5
    assert_same_store(store, whole(positions))


def test_a_scalar_that_varies_only_late_and_out_of_order_is_a_column_in_record_order():
    # s (mul_scalar, the first scalar) varies only from the fourth position on, alpha (phase)
    # from the second: found in the order alpha, s; stored in the order s, alpha.
    positions = [(0, 2.0, 0.25, [(0, 1.0)]), (0, 2.0, 0.5, [(1, 1.0)]),
                 (0, 2.0, 0.25, [(2, 1.0)]), (0, -1.0, 0.25, [(3, 1.0)]),
                 (0, 2.0, 0.75, [(0, 1.0)])]
    store = built(positions, [1, 2, 3, 4])
    assert store.scalars.shape == (5, 2)
    assert store.scalars[:, 0].tolist() == [2.0, 2.0, 2.0, -1.0, 2.0]
    assert store.scalars[:, 1].tolist() == [0.25, 0.5, 0.25, 0.25, 0.75]
    assert_same_store(store, whole(positions))


def test_templates_keep_their_own_columns_found_in_any_chunk():
    positions = [(0, 2.0, 0.25, [(0, 1.0)]), (1, 3.0, 0.5, [(1, 2.0)]),
                 (1, 3.0, 0.75, [(2, 1.0)]), (0, 2.0, 0.25, [(3, -1.0)]),
                 (1, -3.0, 0.75, [(0, 1.0)]), (0, 2.5, 0.25, [(1, 4.0)])]
    store = built(positions, [2, 4, 5], hint=2)
    assert len(store.t_temps) == 2
    assert_same_store(store, whole(positions))


def test_packed_operands_never_have_their_coefficients_apart():
    builder = StoreBuilder(1, N_PAIRS)
    for lo in range(0, 40, 10):
        positions = [(0, 1.0, 0.5, [(j % 9, float(j - 20 + lo))]) for j in range(10)]
        tape, outs = recorded(positions)
        builder.add(extract(tape.rec, outs, base=lo))
        assert builder.operands.coef is None
    assert builder.finish().coef_bits[0] > 0


SCALARS = st.sampled_from([1.0, -2.0, 0.5])
COEFS = st.sampled_from([1.0, -1.0, 2.0, 7.0, -64.0, 300.0, -20000.0, 0.5])
SLOTS = st.sampled_from([0, 1, 5, 0x3F, 0x1FF, 0xFFFF, 0x10000])
POSITION = st.tuples(st.integers(0, 1), SCALARS, SCALARS,
                     st.lists(st.tuples(SLOTS, COEFS), max_size=4))


@settings(max_examples=80, deadline=None)
@given(st.lists(POSITION, min_size=1, max_size=12), st.lists(st.integers(1, 11), max_size=6),
       st.integers(0, 20))
def test_any_chunks_build_the_store_of_the_whole(positions, cuts, hint):
    assert_same_store(built(positions, [c for c in cuts if c < len(positions)], hint),
                      whole(positions))


@settings(max_examples=80, deadline=None)
@given(st.lists(POSITION, min_size=1, max_size=12), st.randoms(use_true_random=False),
       st.integers(1, 4), st.integers(1, 5))
def test_stores_of_parts_reordered_are_the_store_of_the_positions_in_that_order(
        positions, rnd, n_parts, chunk):
    """`reordered_store` of parts (each built in its own order, chunk by chunk), taken in any
    order, `chunk` positions at a time: the store of the positions in that order, whatever the
    parts' own templates, scalar columns and operand packing."""
    order = list(range(len(positions)))
    rnd.shuffle(order)
    size = -(-len(order) // n_parts)
    parts = [order[lo: lo + size] for lo in range(0, len(order), size)]
    stores = [built([positions[i] for i in sorted(part)], [2, 5]) for part in parts]
    local = [np.argsort(np.argsort(part)) for part in parts]   # each row's place in its store
    store = reordered_store(stores, iter(local), len(order), chunk)
    assert stores == [None] * len(parts)   # each part freed once its positions are in
    assert_same_store(store, whole([positions[i] for i in order]))


@pytest.mark.parametrize("late", [[(0x10000, 1.0)], [(1, 0.5)], [(0x3FF, 32.0)],
                                  [(1, 40000.0)], [(2, 300.0)]])
def test_a_packed_part_joins_a_part_that_is_not_in_the_dtypes_of_the_whole(late):
    """A part whose operands are packed (i8 coefficients) and one that cannot be (a slot beyond
    u16, a fraction, too many bits, beyond i16) or needs wider coefficients (i16): the store's
    coefficients are in the dtype the whole gives them (i8 unless a part needs more)."""
    positions = [(0, 1.0, 0.5, [(3, 1.0), (2, -3.0)]), (0, 1.0, 0.5, [(4, 31.0)]),
                 (0, 1.0, 0.5, late), (0, 1.0, 0.5, [(1, 2.0)])]
    for order in ([0, 1, 2, 3], [2, 3, 0, 1], [1, 2, 0, 3]):
        parts = [order[:2], order[2:]]
        stores = [built([positions[i] for i in sorted(part)], []) for part in parts]
        local = [np.argsort(np.argsort(part)) for part in parts]
        store = reordered_store(stores, iter(local), 4, 3)
        assert_same_store(store, whole([positions[i] for i in order]))


def test_parts_alike_are_gathered_into_the_store_of_the_whole():
    """Parts of one template whose scalar columns and operand packing agree are `gatherable`:
    `reordered_store` gathers them (no builder), and the store is still the whole's, bit for
    bit; parts that differ in either are not."""
    rng = np.random.default_rng(4)
    positions = [(0, 2.0, float(rng.choice([0.25, 0.5, 0.75])),
                  [(int(rng.integers(0, 9)), float(c)) for c in rng.choice([-3.0, 1.0, 3.0], 3)]
                  + [(1, -3.0), (2, 3.0)]) for _ in range(30)]
    order = list(rng.permutation(len(positions)))
    parts = [order[lo: lo + 10] for lo in range(0, 30, 10)]
    stores = [built([positions[i] for i in sorted(part)], [4]) for part in parts]
    assert gatherable(stores) and stores[0].coef_bits[0] > 0 and stores[0].scalars.shape[1] == 1
    local = [np.argsort(np.argsort(part)) for part in parts]
    store = reordered_store(stores, iter(local), len(order), 7)
    assert stores == [None] * len(parts)
    assert_same_store(store, whole([positions[i] for i in order]))
    # A part whose constant column has another value, or whose coefficients need more bits
    for changed in ((0, 2.5, 0.25, [(1, -3.0)]), (0, 2.0, 0.25, [(1, -40.0)])):
        other = [built([positions[i] for i in sorted(part)], []) for part in parts[:2]]
        other.append(built([positions[i] for i in sorted(parts[2])][:-1] + [changed], []))
        assert not gatherable(other)


def test_gathered_parts_refuse_rows_that_are_not_an_order_of_their_positions():
    positions = [(0, 2.0, 0.5, [(1, 1.0)]) for _ in range(6)]
    for bad in ([0, 0, 1], [0, 1], [0, 1, 3], [-1, 0, 1]):
        stores = [built(positions[:3], []), built(positions[3:], [])]
        assert gatherable(stores)
        with pytest.raises(ValueError, match="not an order of its 3 positions"):
            reordered_store(stores, iter([np.array(bad), np.arange(3)]), 6, 2)
