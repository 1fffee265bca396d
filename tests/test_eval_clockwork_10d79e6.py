"""Clockwork's 10d79e6 evaluation (tuner/evals/clockwork/v10d79e6.py) against the engine's own data.

Reference data (tests/data/spec/clockwork-head, see tests/shared.py; missing data is a failure): the
conformance files (FEN;white_pov_eval: 10,000 standard and 5,000 DFRC self-play positions, 3,000
endgames) and clockwork-head-grad-vectors.jsonl (4,024 positions: the engine's integer eval, its
tuning build's continuous eval and the gradient of that with respect to every pair and value
parameter). Also: finite differences of the tape's gradient, replay with other parameters, the
colour-flip symmetry and the integer pipeline's pieces (sigmoid table, rounding).
"""

import numpy as np
import pytest

import shared
from test_eval_clockwork import _colour_flip, read_vectors

from tuner.chess.fen import parse_fen, parse_fen_list
from tuner.evals import clockwork_10d79e6 as ev
from tuner.evals import get_evaluation
from tuner.tape import backward, forward, reset, zero_grad

HEAD = shared.SPEC / "clockwork-head"
VECTORS = HEAD / "clockwork-head-grad-vectors.jsonl"
CONFORMANCE = {"conformance-selfplay-std.txt": 10_000, "conformance-selfplay-dfrc.txt": 5_000,
               "conformance-endgames.txt": 3_000}
GRAD_RTOL = 1e-6   # the engine's tape keeps scalar operands in f32 (README "Gradient caveats")
GRAD_ATOL = 1e-9

ENDGAME = "8/3k4/8/1PP3p1/6P1/p4K2/R7/7r w - - 0 45"
# Positions of the vectors file for the finite-difference checks, by what they exercise.
FD_POSITIONS = {
    "clamp active, eg > 0": "8/5k2/p2K2p1/1p5p/2b4P/P4P2/6P1/4B3 w - - 0 1",
    "clamp active, eg < 0": "8/3R4/P4k1p/7K/8/6p1/6r1/8 b - - 0 1",
    "eg < 0": "5r2/p4pk1/2pb4/8/1p2rN2/4p3/PPPB4/3K4 w - - 0 3",
    "middlegame": "r2q1rk1/3n1p2/2pp3p/1pb1p1p1/p3P3/P1NP1N1P/RPP2PP1/5QK1 b - - 0 2",
    "endgame": ENDGAME,
}


@pytest.fixture(scope="module")
def vectors():
    vs, pos = read_vectors(VECTORS)
    grad = np.zeros((len(vs), ev.N_PAIRS, 2))
    value_grad = np.zeros((len(vs), ev.N_VALUES))
    for i, v in enumerate(vs):
        for j, g in v["grad"].items():
            grad[i, int(j)] = g
        for j, g in v.get("value_grad", {}).items():
            value_grad[i, int(j)] = g
    return dict(pos=pos, fens=[v["fen"] for v in vs], grad=grad, value_grad=value_grad,
                white_pov=np.array([v["white_pov"] for v in vs]),
                tuner_eval=np.array([v["tuner_eval"] for v in vs]))


def _tape(pairs=None, values=None, positions=1):
    p, v = ev.load_params(pairs, values)
    return ev.new_eval_tape(p, v, positions)


def _value(tape, k):
    return tape.arena.val[k]


# ----------------------------------------------------------------------------------- engine data

@pytest.mark.parametrize("name", sorted(CONFORMANCE))
def test_conformance(name):
    """Every line of the conformance files: the integer eval, White's point of view."""
    with open(HEAD / name) as f:
        rows = [line.rstrip("\n").split(";") for line in f if line.strip()]
    assert len(rows) == CONFORMANCE[name]
    pos, status = parse_fen_list([r[0] for r in rows])
    assert not status.any()
    expected = np.array([int(r[1]) for r in rows])
    ie, _, _ = ev.evaluate_positions(pos)
    matched = int((ie == expected).sum())
    print(f"{name}: {matched} / {len(rows)} matched")
    bad = np.nonzero(ie != expected)[0]
    assert matched == len(rows), [(rows[i][0], int(ie[i]), int(expected[i])) for i in bad[:5]]


def test_grad_vectors_values(vectors):
    """white_pov is our integer eval; the continuous eval (recorded on the tape) is within 1e-9
    of the engine tuner's, on all 4,024 positions."""
    ie, cont, _ = ev.evaluate_positions(vectors["pos"])
    assert int((ie == vectors["white_pov"]).sum()) == len(ie) == 4024
    assert np.max(np.abs(cont - vectors["tuner_eval"])) < 1e-9


def test_grad_vectors_gradients(vectors):
    """After backward every pair and value gradient matches the engine tuner's within 1e-6
    relative (1e-9 absolute near zero), on all 4,024 positions."""
    tape = _tape()
    scratch = ev.new_scratch()
    arena = tape.arena
    matched = 0
    for i in range(len(vectors["fens"])):
        reset(tape)
        zero_grad(tape)
        k = ev.record_eval(tape, scratch, vectors["pos"][i])
        assert abs(_value(tape, k) - vectors["tuner_eval"][i]) < 1e-9, vectors["fens"][i]
        backward(tape, k)
        want, want_v = vectors["grad"][i], vectors["value_grad"][i]
        got, got_v = arena.pair_grad[:ev.N_PAIRS], arena.val_grad[:ev.N_VALUES]
        ok = (np.all(np.abs(got - want) <= GRAD_RTOL * np.abs(want) + GRAD_ATOL)
              and np.all(np.abs(got_v - want_v) <= GRAD_RTOL * np.abs(want_v) + GRAD_ATOL))
        if not ok:
            j = int(np.argmax(np.abs(got - want).max(axis=1)))
            pytest.fail(f"{vectors['fens'][i]}: pair {j} {got[j]} vs {want[j]}; "
                        f"values {got_v} vs {want_v}")
        matched += 1
    print(f"gradients: {matched} / {len(vectors['fens'])} positions matched")
    assert matched == 4024


# ----------------------------------------------------------------------------------- the tape

def _steps(fen, pairs=None, values=None):
    tape = _tape(pairs, values)
    scratch = ev.new_scratch()
    k = ev.record_eval(tape, scratch, parse_fen(fen))
    arena = tape.arena
    return tape, k, {name: arena.pair_val[scratch.steps[idx]].copy()
                     for name, idx in (("s", ev.REC_S), ("win", ev.REC_WIN))}


def test_fd_positions_cover_the_branches():
    fens = FD_POSITIONS
    for label in ("clamp active, eg > 0", "clamp active, eg < 0"):
        _, _, st = _steps(fens[label])
        assert st["s"][1] != 0 and st["win"][1] == 0, label
        assert (st["s"][1] > 0) == ("eg > 0" in label), label
    _, _, st = _steps(fens["eg < 0"])
    assert st["s"][1] < 0 and st["win"][1] < 0


def test_gradient_finite_differences():
    """Central differences of the recorded value against backward, for pair parameters of L,
    of both king-attack sums and of the sigmoid (a, c), and for the five value parameters."""
    reg = ev.registry()
    rng = np.random.default_rng(11)
    base_p, base_v = ev.load_params()
    h = 1e-3
    for label, fen in FD_POSITIONS.items():
        tape, k, _ = _steps(fen)
        zero_grad(tape)
        backward(tape, k)
        arena = tape.arena
        grad, vgrad = arena.pair_grad[:ev.N_PAIRS].copy(), arena.val_grad[:ev.N_VALUES].copy()
        counts = ev.feature_counts(parse_fen(fen).reshape(1, 9))
        used = np.nonzero(np.abs(counts[0][0]) + np.abs(counts[1][0]) + np.abs(counts[2][0]))[0]
        picks = list(rng.choice(used, size=min(12, used.size), replace=False))
        picks += [ev.KS_ACTIVATION_A, ev.KS_ACTIVATION_C, ev.TEMPO_VAL]
        for j in picks:
            for col in range(2):
                up, down = base_p.copy(), base_p.copy()
                up[j, col] += h
                down[j, col] -= h
                fd = (_value(*_steps(fen, up, base_v)[:2]) - _value(*_steps(fen, down, base_v)[:2])) / (2 * h)
                assert fd == pytest.approx(grad[j, col], rel=1e-6, abs=1e-7), \
                    (label, reg.entry_names()[j], col)
        for j in range(ev.N_VALUES):
            up, down = base_v.copy(), base_v.copy()
            up[j] += h
            down[j] -= h
            fd = (_value(*_steps(fen, base_p, up)[:2]) - _value(*_steps(fen, base_p, down)[:2])) / (2 * h)
            assert fd == pytest.approx(vgrad[j], rel=1e-6, abs=1e-7), (label, j)
        if label.startswith("clamp active"):
            assert not vgrad.any() and not grad[:, 1].any() and grad[:, 0].any(), label


def test_replay_with_other_parameters_decides_again(vectors):
    """A recorded tape replayed with other parameter values gives what recording with those
    values gives, also where the values flip the sign of eg (winnable's sign, the strong side)
    or move the clamp: the choices are made inside the ops, never when recording."""
    rng = np.random.default_rng(5)
    base_p, base_v = ev.load_params()
    flips = 0
    for fen in list(FD_POSITIONS.values()) + vectors["fens"][:40]:
        tape, k, st0 = _steps(fen)
        for trial in range(3):
            p = base_p * rng.uniform(0.5, 1.5, base_p.shape)
            p[:, 1] *= -1 if trial == 0 else 1      # mirror every eg value: eg changes sign
            v = base_v * rng.uniform(0.0, 3.0, base_v.shape)
            tape.arena.pair_val[:ev.N_PAIRS] = p
            tape.arena.val[:ev.N_VALUES] = v
            forward(tape)
            fresh, k2, st = _steps(fen, p, v)
            assert _value(tape, k) == pytest.approx(_value(fresh, k2), rel=1e-12, abs=1e-9), fen
            flips += np.sign(st["s"][1]) != np.sign(st0["s"][1])
    assert flips > 0


def test_record_batch_and_evaluation_entry():
    e = get_evaluation("clockwork-10d79e6")
    assert e.registry is ev.registry() and e.record_batch is ev.record_batch
    scratch = e.new_scratch()
    assert isinstance(scratch, ev.Scratch)
    fens = [ENDGAME, FD_POSITIONS["middlegame"], FD_POSITIONS["eg < 0"]]
    pos, _ = parse_fen_list(fens)
    tape = _tape(positions=2)
    out = np.empty(2, np.int64)
    e.record_batch(tape, scratch, pos, np.array([2, 0]), out)
    _, cont, _ = ev.evaluate_positions(pos)
    assert [_value(tape, k) for k in out] == pytest.approx([cont[2], cont[0]], abs=1e-12)
    assert get_evaluation("clockwork").new_scratch().coef.shape == (541,)


# ----------------------------------------------------------------------------------- semantics

def test_colour_flip_symmetry():
    """The colour-flipped position: linear counts negate, the two king-attack sums swap, the
    alphas swap, and both evaluations negate."""
    with open(HEAD / "conformance-selfplay-dfrc.txt") as f:
        fens = [line.split(";")[0] for line in f][:2000]
    pos, _ = parse_fen_list(fens)
    flipped = _colour_flip(pos)
    lin, aw, ab, ints = ev.feature_counts(pos)
    lin2, aw2, ab2, ints2 = ev.feature_counts(flipped)
    assert np.array_equal(lin, -lin2) and np.array_equal(aw, ab2) and np.array_equal(ab, aw2)
    assert np.array_equal(ints[:, :ev.N_VALUES], ints2[:, :ev.N_VALUES])
    assert np.array_equal(ints[:, ev.INT_ALPHA_WHITE], ints2[:, ev.INT_ALPHA_BLACK])
    assert np.array_equal(ints[:, ev.INT_PHASE], ints2[:, ev.INT_PHASE])
    ie, cont, _ = ev.evaluate_positions(pos)
    ie2, cont2, _ = ev.evaluate_positions(flipped)
    assert np.array_equal(ie, -ie2)
    assert np.max(np.abs(cont + cont2)) < 1e-9


def test_sigmoid_table_defaults():
    """N1 for a = (1361, 846), c = (-21, 0): range [-117 - c, 117 - c], scale 71417, the ends
    saturating at lround(a / 40) and near lround(39 a / 40)."""
    table = ev.sigmoid_table((1361, 846), (-21, 0))
    for j, (a, c) in enumerate(((1361, -21), (846, 0))):
        row = table[j]
        assert (row[ev.T_MIN], row[ev.T_MAX], row[ev.T_SCALE]) == (-117 - c, 117 - c, 71417)
        values = row[ev.T_VALUES:]
        assert values[0] == round(a / 40) and values[-1] == round(a * 39 / 40)
        assert ev._lookup(-30000, row) == ev._lookup(-117 - c, row) == values[0]
        assert ev._lookup(30000, row) == values[254] + (((values[255] - values[254]) * 65434) >> 16)


def test_fractional_params_round_like_the_engine():
    """The integer eval with fractional parameters is the eval with the values std::round'ed."""
    from tuner.evals.export import round_params
    p, v = ev.load_params()
    p = p + 0.5            # every x.5 rounds away from zero
    v = v - 0.5
    pos, _ = parse_fen_list([ENDGAME, FD_POSITIONS["middlegame"], FD_POSITIONS["eg < 0"]])
    ie, cont, _ = ev.evaluate_positions(pos, p, v)
    ie0, cont0, _ = ev.evaluate_positions(pos, round_params(p).astype(float),
                                          round_params(v).astype(float))
    assert np.array_equal(ie, ie0) and not np.array_equal(cont, cont0)


def test_evaluate_fen_and_breakdown():
    ie, cont, phase = ev.evaluate_fen(ENDGAME)
    assert (ie, phase) == (403, 4)
    b = ev.breakdown(parse_fen(ENDGAME))
    assert b["int"]["eval"] == ie and b["cont"]["eval"] == pytest.approx(cont, abs=1e-12)
    assert b["tempo"] == (69, 51)
    assert b["int"]["alpha"] == b["counts"]["ints"][ev.INT_ALPHA_WHITE]   # eg > 0: White strong
    with pytest.raises(ValueError):
        ev.evaluate_fen("4k3/8/8/8/8/8/8/8 w - - 0 1")


def test_registry_layout():
    reg = ev.registry()
    assert (reg.n_params, reg.n_values, len(reg.groups)) == (627, 5, 71)
    assert [g.kind for g in reg.groups].count("value") == 5 == len(reg.value_groups)
    for name, off in ev.PAIR_OFFSETS.items():
        assert reg.offset(name) == off and reg.group(name).kind == "pair", name
    assert reg.value_entry_names() == list(ev.VALUE_OFFSETS)
    assert reg.index("KING_SHELTER", 3, 6) == ev.BLOCKED_SHELTER_STORM - 1
    assert dict(reg.group("KING_SAFETY_ACTIVATION.a").extra) == {"sigmoid_B": int(ev.KS_SCALE)}
