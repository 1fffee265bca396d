"""Clockwork reference evaluation: exact agreement with the engine's own numbers.

Reference data (tests/data/spec, see tests/shared.py; missing data is a failure):
clockwork-eval-vectors.jsonl (integer eval, mg, eg, phase, continuous tuner eval and every
per-parameter net count of 3,024 positions) and the
conformance files (FEN;white_pov_eval, 15,000 self-play positions).
"""
import json
import os

import numpy as np
import pytest

import shared

from tuner.chess.fen import parse_fen, parse_fen_list
from tuner.evals import clockwork as cw
from tuner.tape import backward, new_accumulator, new_tape, reset, zero_grad

SPEC = str(shared.SPEC)
VECTORS = os.path.join(SPEC, "clockwork-eval-vectors.jsonl")
CONFORMANCE = [os.path.join(SPEC, f"conformance-selfplay-{v}.txt") for v in ("std", "dfrc")]

START = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
KIWIPETE = "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1"
ENDGAME = "8/3k4/8/1PP3p1/6P1/p4K2/R7/7r w - - 0 45"



@pytest.fixture(scope="module")
def reg():
    return cw.registry()


def read_vectors(path):
    """The records of a JSON-lines vectors file and their positions uint64[N, 9] (from each
    record's "fen", every one valid)."""
    with open(path) as f:
        vs = [json.loads(line) for line in f]
    pos, status = parse_fen_list([v["fen"] for v in vs])
    assert not status.any()
    return vs, pos


@pytest.fixture(scope="module")
def vectors():
    vs, pos = read_vectors(VECTORS)
    expected = np.zeros((len(vs), cw.N_PARAMS), np.int32)
    for i, v in enumerate(vs):
        for j, c in v["features"].items():
            expected[i, int(j)] = c
    return dict(
        pos=pos, counts=expected,
        phase=np.array([v["phase"] for v in vs]), mg=np.array([v["mg"] for v in vs]),
        eg=np.array([v["eg"] for v in vs]), white_pov=np.array([v["white_pov"] for v in vs]),
        tuner_eval=np.array([v["tuner_eval"] for v in vs]), fens=[v["fen"] for v in vs])


# ----------------------------------------------------------------------------------- registry

def test_registry_layout(reg):
    assert reg.n_params == cw.N_PARAMS == 541
    assert int(reg.constant.sum()) == 6 and int((~reg.constant).sum()) == 535
    assert len(reg.groups) == 50
    assert list(cw.OFFSETS) == reg.names  # every group, in registration order
    for name, off in cw.OFFSETS.items():
        assert reg.offset(name) == off, name
    # the constants are exactly the index-0 entries of the distance and king-ring tables
    const = {reg.entry_names()[i] for i in np.nonzero(reg.constant)[0]}
    assert const == {f"{n}[0]" for n in ("FRIENDLY_KING_PASSED_PAWN_DISTANCE",
                                          "ENEMY_KING_PASSED_PAWN_DISTANCE", "KNIGHT_KING_RING",
                                          "BISHOP_KING_RING", "ROOK_KING_RING", "QUEEN_KING_RING")}
    assert reg.index("KNIGHT_MOBILITY", 3) == 65
    assert reg.index("KING_PSQT", 63) == 540
    assert tuple(reg.defaults[reg.index("TEMPO_VAL")]) == (59, 15)
    with pytest.raises(IndexError):
        reg.index("KNIGHT_MOBILITY", 9)
    with pytest.raises(KeyError):
        reg.group("NOPE")


def test_shipped_params_equal_spec_file(reg):
    from tuner.evals.registry import ParamRegistry
    spec = ParamRegistry.from_json(os.path.join(SPEC, "clockwork-params.json"))
    assert spec.names == reg.names
    assert np.array_equal(spec.defaults, reg.defaults)
    assert np.array_equal(spec.constant, reg.constant)


# ----------------------------------------------------------------------------------- vectors

def test_vector_feature_counts(vectors, reg):
    counts, phases = cw.feature_counts(vectors["pos"])
    assert np.array_equal(phases, vectors["phase"])
    bad = np.nonzero((counts != vectors["counts"]).any(axis=1))[0]
    if bad.size:
        i = bad[0]
        names = reg.entry_names()
        diff = {names[j]: (int(counts[i, j]), int(vectors["counts"][i, j]))
                for j in np.nonzero(counts[i] != vectors["counts"][i])[0]}
        pytest.fail(f"{bad.size} positions differ; first {vectors['fens'][i]}: (got, engine) {diff}")


def test_vector_totals_and_evals(vectors):
    ie, cont, mg, eg, phase = cw.evaluate_positions(vectors["pos"])
    assert np.array_equal(phase, vectors["phase"])
    assert np.array_equal(mg, vectors["mg"])
    assert np.array_equal(eg, vectors["eg"])
    assert np.array_equal(ie, vectors["white_pov"])
    assert np.max(np.abs(cont - vectors["tuner_eval"])) < 1e-9


@pytest.mark.parametrize("path", CONFORMANCE, ids=["std", "dfrc"])
def test_conformance(path):
    with open(path) as f:
        rows = [line.rstrip("\n").split(";") for line in f if line.strip()]
    pos, status = parse_fen_list([r[0] for r in rows])
    assert not status.any()
    expected = np.array([int(r[1]) for r in rows])
    ie, *_ = cw.evaluate_positions(pos)
    bad = np.nonzero(ie != expected)[0]
    assert bad.size == 0, [(rows[i][0], int(ie[i]), int(expected[i])) for i in bad[:5]]


# ----------------------------------------------------------------------------------- tape

def test_tape_value_and_gradient(vectors, reg):
    """record_eval's value is the continuous eval; backward gives (alpha c, (1 - alpha) c)."""
    n = reg.n_params
    tape = new_tape(0, n, records=8, operands=1024)
    tape.arena.pair_val[:n] = reg.defaults
    acc = new_accumulator(n)
    counts = vectors["counts"]
    alpha = vectors["phase"] / 24.0
    for i in range(len(vectors["fens"])):
        reset(tape)
        zero_grad(tape)
        v = cw.record_eval(tape, acc, vectors["pos"][i])
        assert tape.rec.counts[2] == 2  # one linear-combination record + one phase record
        assert abs(tape.arena.val[v] - vectors["tuner_eval"][i]) < 1e-9
        backward(tape, v)
        g = tape.arena.pair_grad[:n]
        assert np.array_equal(g[:, 0], alpha[i] * counts[i]), vectors["fens"][i]
        assert np.array_equal(g[:, 1], (1 - alpha[i]) * counts[i]), vectors["fens"][i]
        assert acc.count[0] == 0 and not acc.coef.any()


def test_tape_replay_with_other_values(reg):
    """The recorded tape is linear in the parameters: replay with new values = counts . values."""
    from tuner.tape import forward
    n = reg.n_params
    tape = new_tape(0, n, records=8, operands=1024)
    rng = np.random.default_rng(1)
    tape.arena.pair_val[:n] = reg.defaults
    pos = parse_fen(KIWIPETE)
    v = cw.record_eval(tape, new_accumulator(n), pos)
    vals = rng.normal(size=(n, 2)) * 100
    tape.arena.pair_val[:n] = vals
    forward(tape)
    counts, ph = cw.feature_counts(pos.reshape(1, 9))
    a = ph[0] / 24
    expect = a * (counts[0] @ vals[:, 0]) + (1 - a) * (counts[0] @ vals[:, 1])
    assert abs(tape.arena.val[v] - expect) < 1e-9 * max(1.0, abs(expect))


# ----------------------------------------------------------------------------------- worked examples

@pytest.mark.parametrize("fen, phase, mg, eg, ev", [
    (START, 24, 59, 15, 59),
    (KIWIPETE, 24, -58, -2, -58),
    (ENDGAME, 4, 98, 363, 318),
])
def test_worked_examples(fen, phase, mg, eg, ev):
    ie, cont, m, e, p, counts = cw.evaluate_fen(fen)
    assert (ie, m, e, p) == (ev, mg, eg, phase)
    assert abs(cont - (phase / 24 * mg + (1 - phase / 24) * eg)) < 1e-12


def test_worked_example_counts(reg):
    """Selected net counts of docs/reference-eval.md section 9.2 / 9.3."""
    c = cw.evaluate_fen(KIWIPETE)[5]
    assert c[reg.index("BISHOP_PAWNS", 3)] == 1 and c[reg.index("BISHOP_PAWNS", 5)] == 1
    assert c[reg.index("KNIGHT_KING_RING", 2)] == 1 and c[reg.index("BISHOP_KING_RING", 1)] == -1
    assert c[reg.index("PAWN_PUSH_THREAT_KNIGHT")] == -1 and c[reg.index("PAWN_PUSH_THREAT_QUEEN")] == 1
    assert c[reg.index("PAWN_PHALANX", 0)] == 3 and c[reg.index("DEFENDED_PAWN", 0)] == -2
    assert c[reg.index("PAWN_THREAT_KNIGHT")] == -1
    c = cw.evaluate_fen(ENDGAME)[5]
    assert c[reg.index("POTENTIAL_CHECKER_VAL")] == 1
    assert c[reg.index("DEFENDED_PASSED_PUSH", 3)] == 1 and c[reg.index("BLOCKED_PASSED_PAWN", 4)] == -1
    assert c[reg.index("ENEMY_KING_PASSED_PAWN_DISTANCE", 2)] == 2
    assert c[reg.index("ROOK_OPEN_VAL")] == -1 and c[reg.index("ROOK_SEMIOPEN_VAL")] == 1
    assert c[reg.index("KING_PSQT", 42)] == 1 and c[reg.index("KING_PSQT", 51)] == -1


@pytest.mark.parametrize("fen, name, idx, net", [
    # doubled: vertically adjacent pairs only (e2+e4 -> 0, e2+e3+e4 -> 2)
    ("4k3/8/8/8/4P3/8/4P3/4K3 w - - 0 1", "DOUBLED_PAWN_VAL", (), 0),
    ("4k3/8/8/8/4P3/4P3/4P3/4K3 w - - 0 1", "DOUBLED_PAWN_VAL", (), 2),
    # phalanx: c4 d4 e4 -> two hits at index 2
    ("4k3/8/8/8/2PPP3/8/8/4K3 w - - 0 1", "PAWN_PHALANX", (2,), 2),
    # rook a1: a2..a6 (first blocker a6 included, not a7) + b1..e1 (own king included) = 9
    ("4k3/8/P7/8/8/8/8/R3K3 w - - 0 1", "ROOK_MOBILITY", (9,), 1),
    # ...and it defends its own king on the black king's e-file: one potential checker vs Black
    ("4k3/8/P7/8/8/8/8/R3K3 w - - 0 1", "POTENTIAL_CHECKER_VAL", (), -1),
    # bishop pair ignores square colours (two light-squared bishops)
    ("4k3/8/8/8/8/8/8/2B1KB2 w - - 0 1", "BISHOP_PAIR_VAL", (), 1),
    # outpost: knight on d5 defended by c4, no enemy pawn attacks
    ("4k3/8/8/3N4/2P5/8/8/4K3 w - - 0 1", "OUTPOST_KNIGHT_VAL", (), 1),
])
def test_small_features(reg, fen, name, idx, net):
    c = cw.evaluate_fen(fen)[5]
    assert c[reg.index(name, *idx)] == net


# ----------------------------------------------------------------------------------- semantics

def _ref_int_eval(mg, eg, p):
    """docs/reference-eval.md section 5, written independently."""
    def s16(x):
        x &= 0xFFFF
        return x - 0x10000 if x & 0x8000 else x
    packed = (eg * 65536 + mg) & 0xFFFFFFFF
    mg16, eg16 = s16(packed), s16(((packed + 0x8000) & 0xFFFFFFFF) >> 16)
    n = mg16 * p + eg16 * (24 - p)
    q = abs(n) // 24
    return s16(q if n >= 0 else -q)


def test_int_eval_truncation_and_wrap():
    assert cw.int_eval(-13, -60, 1) == -58  # numerator -13 - 23*60 = -1393; -1393/24 -> -58, not -59
    assert cw.int_eval(98, 363, 4) == 318
    rng = np.random.default_rng(7)
    for _ in range(5000):
        mg, eg = (int(x) for x in rng.integers(-200000, 200000, 2))
        p = int(rng.integers(0, 25))
        assert cw.int_eval(mg, eg, p) == _ref_int_eval(mg, eg, p), (mg, eg, p)
    mg = rng.integers(-100000, 100000, 5000)
    eg = rng.integers(-100000, 100000, 5000)
    p = rng.integers(0, 25, 5000)
    out = np.empty(5000, np.int64)
    cw.int_eval_batch(mg.astype(float), eg.astype(float), p, out)
    assert out.tolist() == [_ref_int_eval(int(a), int(b), int(c)) for a, b, c in zip(mg, eg, p)]


def test_sixteen_bit_wrap_on_absurd_material():
    """docs/reference-eval.md section 5: 15 white queens against a bare king wrap to a negative
    engine eval (Black to move: with White to move the position is illegal, Black's king being in
    check)."""
    ie, cont, mg, eg, p, _ = cw.evaluate_fen("QQQQQQQQ/QQQQQQQ1/8/8/8/8/8/k6K b - - 0 1")
    assert mg > 32767 and cont > 0 and ie < 0
    assert ie == _ref_int_eval(int(mg), int(eg), p)


def _colour_flip(pos):
    """Swap colours and mirror vertically; the side to move flips too."""
    p = pos.copy()
    f = p[:, :8].byteswap()
    p[:, 0], p[:, 1] = f[:, 1], f[:, 0]
    p[:, 2:8] = f[:, 2:8]
    p[:, 8] = (pos[:, 8] & ~np.uint64(1)) | (~pos[:, 8] & np.uint64(1))
    return p


def test_colour_flip_antisymmetry():
    """Every net count negates when the position is colour-flipped (tempo included)."""
    with open(CONFORMANCE[1]) as f:
        fens = [line.split(";")[0] for line in f][:2000]
    pos, status = parse_fen_list(fens)
    c1, p1 = cw.feature_counts(pos)
    c2, p2 = cw.feature_counts(_colour_flip(pos))
    assert np.array_equal(p1, p2)
    assert np.array_equal(c1, -c2)


def test_params_rounding_for_integer_eval(reg):
    """With fractional params the integer eval is the engine's after std::round of every value."""
    from tuner.evals.export import round_params
    vals = reg.defaults + 0.5  # every value x.5 -> rounds away from zero
    pos = parse_fen_list([KIWIPETE, ENDGAME])[0]
    ie, cont, mg, eg, ph = cw.evaluate_positions(pos, vals)
    r = round_params(vals)
    counts, _ = cw.feature_counts(pos)
    for i in range(2):
        m = int(counts[i].astype(np.int64) @ r[:, 0])
        e = int(counts[i].astype(np.int64) @ r[:, 1])
        assert ie[i] == _ref_int_eval(m, e, int(ph[i]))
        assert mg[i] == pytest.approx(counts[i] @ vals[:, 0])
    ie0, *_ = cw.evaluate_positions(pos, r.astype(float))
    assert np.array_equal(ie, ie0)


def test_evaluate_fen_rejects(reg):
    with pytest.raises(ValueError):
        cw.evaluate_fen("not a fen")
