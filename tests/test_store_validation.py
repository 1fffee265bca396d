"""A kept replay store is validated before a player sees it (tuner.tape.player.validate_store).

The content digest of a store cache proves nothing (anyone can recompute it), so every store
`load_store` reads must pass the checks a freshly frozen one passes; a store that fails is
refused in one line naming the file and the field, and the run records again.

* Fresh stores pass: both Clockwork evaluations' stores of `tiny`, and random graphs (the
  generator of test_tape_graphs.py) frozen as positions.
* The corruptions that crashed or misled the trainer before (each with its digest recomputed):
  refused in one line naming the file and the field, the run records again and ends with the
  parameters of an undamaged cache.
* Property: any single element of any field set to any value of its dtype (or a field cut
  short), digest recomputed: the run refuses the file and records again, or trains to the
  bitwise-identical parameters; never a crash. The exceptions are the elements that hold what
  the positions *are* (`MEANINGFUL`): a scalar, an operand within range (or the split of the
  operand words into slot and coefficient), a template constant such as K, the loss's form, the
  earlier value a record reads. Any value of those makes a store freezing could have
  made from other data, which no check of the file alone can tell from the original; those runs
  must still finish with finite parameters.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tuner.evals import get_evaluation
from tuner.tape import freeze
from tuner.tape.player import (FreezeError, Store, load_store, save_store, store_digest,
                               validate_store)
from tuner.train.config import validate
from tuner.train.loop import Data, Run
from tuner.train.record import LOSS, record_store

from test_tape_graphs import N_PP, N_VP, SETTINGS, plans
from test_tape_player import record_positions

pytestmark = pytest.mark.usefixtures("no_loss_plot")  # conftest.py: no loss.png drawn

K = 0.0025
#: Positions of the stores the runs below keep (a few hundred: each run takes well under 1 s).
N = 300


@pytest.fixture(scope="module")
def small(tiny) -> Data:
    """The first `N` positions of `tiny`, every 15th held out."""
    rows = np.arange(N)
    return Data(tiny.positions[:N].copy(), tiny.results[:N].copy(), rows[rows % 15 != 0],
                rows[::15], ["tiny[:300]"])


def _counts(name, n=None):
    reg = get_evaluation(name).registry
    return reg.n_values, reg.n_params, n, LOSS + 1


# ------------------------------------------------------------------------------------------------
# Fresh stores pass.
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["clockwork", "clockwork-10d79e6"])
def test_stores_of_both_clockwork_evaluations_pass(tiny, name):
    store = record_store(get_evaluation(name), tiny.positions, tiny.results, K, n_threads=2,
                         micro=100)
    validate_store(store, *_counts(name, len(tiny.positions)))
    with pytest.raises(FreezeError, match="field params"):  # for another evaluation
        validate_store(store, 0, 3)
    with pytest.raises(FreezeError, match="field tmpl: shape"):  # for other positions
        validate_store(store, *_counts(name, len(tiny.positions) + 1)[:3])


@settings(SETTINGS, max_examples=10)
@given(st.lists(plans(), min_size=2, max_size=3))
def test_random_graphs_frozen_as_positions_pass(plan_list):
    g, outputs = record_positions([p[0] for p in plan_list], np.linspace(0, 1, len(plan_list)),
                                  plan_list[0][1], plan_list[0][2])
    validate_store(freeze(g.tape.rec, outputs), N_VP, N_PP, len(plan_list), 2)


# ------------------------------------------------------------------------------------------------
# Runs with a kept store.
# ------------------------------------------------------------------------------------------------

def _run(tmp_path, data, cache, name="clockwork"):
    """One epoch on `data` keeping its store in `cache`: (parameters, the run's replay lines)."""
    raw = {"data": {"train": ["unused"]}, "evaluation": {"name": name, "init": "zero"},
           "optimizer": {"name": "adamw", "lr": 5.0}, "loss": {"k": K},
           "training": {"epochs": 1, "batch_size": 128, "micro_batch_size": 64,
                        "mode": "replay", "store_cache": str(cache)}}
    out = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
    out.mkdir()
    lines = []
    run = Run(validate(raw, str(tmp_path / "x.toml")), out, log=lines.append)
    run.run(data)
    return run.theta.copy(), [line for line in lines if line.startswith("replay")]


def _read(path) -> tuple[Store, str]:
    with np.load(path) as z:
        return Store(**{f: z[f].copy() for f in Store._fields}), str(z["key"])


class Kept:
    """A run's kept store: its file, the store, and the parameters the undamaged cache gives."""

    def __init__(self, tmp_path, data, name="clockwork"):
        self.tmp, self.data, self.name = tmp_path, data, name
        self.cache = tmp_path / "cache"
        self.theta, log = _run(tmp_path, data, self.cache, name)
        assert any("recorded" in line for line in log), log
        (self.path,) = self.cache.glob("store-*.npz")
        self.bytes = self.path.read_bytes()
        self.store, self.key = _read(self.path)

    def run_with(self, store: Store):
        """Train from the cache holding `store` (its digest recomputed): (params, log)."""
        save_store(store, self.path, self.key)
        return _run(self.tmp, self.data, self.cache, self.name)


@pytest.fixture(scope="module")
def kept(tmp_path_factory, small):
    return Kept(tmp_path_factory.mktemp("kept"), small)


def _set(store: Store, field: str, change) -> Store:
    arr = getattr(store, field).copy()
    change(arr, store)
    return store._replace(**{field: arr})


#: The corruptions of the issue: what each did before validation (digest recomputed each time).
CASES = {
    # aborted in LLVM after "done", with changed parameters
    "index-out-of-range": ("index", lambda a, s: a.__setitem__(
        slice(None, None, 1000), np.uint16(s.params[1] << s.coef_bits[0]))),
    # trained to silently wrong parameters, exit 0
    "index-all-ones": ("index", lambda a, s: a.__setitem__(slice(None), 0xFFFF)),
    # segfaulted
    "opnd_off-end": ("opnd_off", lambda a, s: a.__setitem__(-1, a[-1] + int(1e9))),
    "t_out-huge": ("t_out", lambda a, s: a.__setitem__(0, int(1e8))),
    # a ValueError traceback, then a segfault
    "params-pairs": ("params", lambda a, s: a.__setitem__(1, 100)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_corrupted_store_with_a_recomputed_digest_is_refused(kept, monkeypatch, case):
    """Played by the specialised player, as stores of real size are (the interpreter plays
    these small ones otherwise): before validation, three of these segfaulted and two trained
    to other parameters."""
    monkeypatch.setattr("tuner.train.workers.SPECIALISE_FROM", 0)
    field, change = CASES[case]
    bad = _set(kept.store, field, change)
    assert store_digest(bad) != store_digest(kept.store)
    theta, log = kept.run_with(bad)
    assert any(f"field {field}" in line and "recording again" in line for line in log), log
    assert any("recorded" in line for line in log)
    assert theta.tobytes() == kept.theta.tobytes()
    assert kept.path.read_bytes() == kept.bytes  # the store kept again, as it was
    save_store(bad, kept.path, kept.key)
    with pytest.raises(FreezeError) as e:
        load_store(kept.path, kept.key, *_counts("clockwork", N))
    msg = str(e.value)
    assert str(kept.path) in msg and f"field {field}" in msg and "\n" not in msg, msg


# ------------------------------------------------------------------------------------------------
# Property: any element of any field, any value.
# ------------------------------------------------------------------------------------------------

#: The fields that hold what the positions are (see the module docstring): ``t_lhs`` / ``t_rhs``
#: say which earlier value a record reads (another one within range is another evaluation's
#: record); ``coef_bits`` is how each operand word splits into slot and coefficient (another
#: width within range reads the same words as other operands).
MEANINGFUL = {"scalars", "index", "t_sconst", "t_op", "t_lhs", "t_rhs", "coef_bits"}


def _element_values(dtype, was) -> st.SearchStrategy:
    """Any value of `dtype`, favouring small ones and those next to `was` (off by one)."""
    if dtype == np.bool_:
        return st.booleans()
    if dtype.kind == "f":
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                         st.sampled_from([np.nextafter(was, np.inf), np.nextafter(was, -np.inf)]))
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    return st.one_of(st.integers(max(lo, int(was) - 2), min(hi, int(was) + 2)),
                     st.integers(max(lo, -2), min(hi, 2)), st.integers(lo, hi))


@st.composite
def corruptions(draw, store: Store):
    """(field, flat position or None to cut the field short, value)."""
    field = draw(st.sampled_from([f for f in Store._fields if getattr(store, f).size]))
    arr = getattr(store, field).reshape(-1)
    if draw(st.integers(0, 9)) == 0:
        return field, None, None
    pos = draw(st.integers(0, arr.size - 1))
    return field, pos, draw(_element_values(arr.dtype, arr[pos]))


@pytest.fixture(scope="module")
def kept10d(tmp_path_factory, small):
    return Kept(tmp_path_factory.mktemp("kept10d"), small, "clockwork-10d79e6")


@pytest.mark.parametrize("which", ["clockwork", "clockwork-10d79e6"])
def test_any_corruption_is_refused_or_changes_nothing(request, which):
    kept = request.getfixturevalue("kept" if which == "clockwork" else "kept10d")

    outcomes = set()

    @settings(max_examples=12, deadline=None, derandomize=True, database=None,
              phases=(Phase.explicit, Phase.generate),
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(corruptions(kept.store))
    def check(corruption):
        field, pos, value = corruption
        arr = getattr(kept.store, field)
        if pos is None:
            bad_arr = arr[:-1].copy()
        else:
            bad_arr = arr.copy()
            bad_arr.reshape(-1)[pos] = value
        bad = kept.store._replace(**{field: bad_arr})
        theta, log = kept.run_with(bad)
        what = f"{field}[{pos}] = {value!r}: {log}"
        refused = any("recording again" in line for line in log)
        outcomes.add(refused)
        if refused:
            assert any(str(kept.path) in line and "field" in line for line in log), what
            assert theta.tobytes() == kept.theta.tobytes(), what
            assert kept.path.read_bytes() == kept.bytes, what
        else:
            assert any("loaded" in line for line in log), what
            if field in MEANINGFUL:
                assert np.all(np.isfinite(theta)), what
            else:
                assert theta.tobytes() == kept.theta.tobytes(), what

    check()
    assert outcomes == {True, False}  # some corruptions were refused, some loaded
