"""The plain-Python reference of Clockwork's 10d79e6 evaluation (tests/reference_clockwork_10d79e6.py)
against the engine's own data, and the compiled evaluation (tuner.evals.clockwork.v10d79e6) against
the reference on positions the shared data does not contain: random games that prefer promotions
and pawn pushes (extra queens, three bishops, ...), from tests/test_eval_reference.py's generator."""
import json
import random

import chess
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.chess.fen import parse_fen

import shared
import reference_clockwork_10d79e6 as ref
from test_eval_reference import random_game_positions

HEAD = shared.SPEC / "clockwork-head"
EVERY = 10   # sample every 10th line: 1,800 conformance lines and 403 vectors, a few seconds
CONFORMANCE = {"conformance-selfplay-std.txt": 10_000, "conformance-selfplay-dfrc.txt": 5_000,
               "conformance-endgames.txt": 3_000}


def _sample(path):
    with open(path) as f:
        lines = [line.strip() for line in f if line.strip()]
    return lines, lines[::EVERY]


def test_reference_reproduces_conformance_sample():
    for name, n_lines in CONFORMANCE.items():
        lines, sample = _sample(HEAD / name)
        assert len(lines) == n_lines, name
        matched, wrong = 0, []
        for line in sample:
            fen, value = line.rsplit(";", 1)
            got = ref.reference_eval(chess.Board(fen, chess960=True))["white_pov"]
            if got == int(value):
                matched += 1
            else:
                wrong.append((fen, int(value), got))
        assert matched == len(sample) == -(-n_lines // EVERY), (name, matched, wrong[:5])


def test_reference_reproduces_grad_vectors_sample():
    """white_pov exactly and the tuning build's continuous value within 1e-9."""
    with open(HEAD / "clockwork-head-grad-vectors.jsonl") as f:
        vectors = [json.loads(line) for line in f]
    assert len(vectors) == 4024
    sample = vectors[::EVERY]
    matched, wrong = 0, []
    for v in sample:
        r = ref.reference_eval(chess.Board(v["fen"], chess960=True))
        if r["white_pov"] == v["white_pov"] and abs(r["continuous"] - v["tuner_eval"]) <= 1e-9:
            matched += 1
        else:
            wrong.append((v["fen"], v["white_pov"], r["white_pov"], v["tuner_eval"], r["continuous"]))
    assert matched == len(sample) == 403, wrong[:5]


def test_reference_sigmoid_table_constants():
    """docs/reference-eval-head.md N1 for the defaults a = (1361, 846), c = (-21, 0): range
    [-117 - c, 117 - c], the 16.16 scale 71417 and saturation near 2.5 % / 97.5 % of a. At range_max
    the index is 254 with frac 65434/65536, so the top saturates just below values[255]."""
    for a, c in ((1361, -21), (846, 0)):
        table = ref.sigmoid_table(a, c)
        lo, hi, scale, values = table
        assert (lo, hi, scale) == (-117 - c, 117 - c, 71417)
        assert values[0] == round(a / 40) and values[-1] == round(a * 39 / 40)
        assert ref.sigmoid_lookup(-30000, table) == ref.sigmoid_lookup(lo, table) == values[0]
        top = values[254] + (((values[255] - values[254]) * 65434) >> 16)
        assert ref.sigmoid_lookup(30000, table) == ref.sigmoid_lookup(hi, table) == top


def _in_domain(board):
    """The evaluation's domain: one king per side, no pawn on rank 1 or 8. Legal game positions
    always are; asserted rather than filtered so that a generator change cannot hide positions."""
    return (len(board.pieces(chess.KING, chess.WHITE)) == 1
            and len(board.pieces(chess.KING, chess.BLACK)) == 1
            and not board.pawns & (chess.BB_RANK_1 | chess.BB_RANK_8))


def _compiled(fens, params=None, value_params=None):
    """(integer white_pov, continuous, phase) of each FEN from the compiled evaluation: one
    batch (the parameters are converted once, not for each position), checked against
    ``evaluate_fen`` (one FEN, what a user calls) on the first."""
    from tuner.evals import clockwork_10d79e6 as compiled
    positions = []
    for fen in fens:
        pos = parse_fen(fen)
        compiled.check_domain(pos)
        positions.append(pos)
    ie, cont, phase = compiled.evaluate_positions(np.stack(positions), params, value_params)
    got = [(int(i), float(c), int(p)) for i, c, p in zip(ie, cont, phase)]
    assert tuple(compiled.evaluate_fen(fens[0], params, value_params)) == got[0]
    return got


def _check_compiled(boards, pairs=None, values=None):
    assert boards
    ref_params = None if pairs is None else (pairs, values)
    fens = [b.fen() for b in boards]
    for b, fen, (got_int, got_cont, phase) in zip(boards, fens, _compiled(fens, pairs, values)):
        assert _in_domain(b), fen
        r = ref.reference_eval(b, ref_params)
        assert got_int == r["white_pov"], (fen, got_int, r["white_pov"])
        assert abs(got_cont - r["continuous"]) <= 1e-9, (fen, got_cont, r["continuous"])
        assert phase == r["phase"], (fen, phase, r["phase"])


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2 ** 32 - 1))
def test_compiled_matches_reference_on_random_promotion_games(seed):
    _check_compiled(random_game_positions(seed))


def test_compiled_matches_reference_on_promotion_heavy_games():
    """A fixed set of games with the strongest promotion bias (many queens, under-promotions)."""
    boards = [b for seed in range(6) for b in random_game_positions(1000 + seed, plies=200,
                                                                    promote_bias=1.0)]
    assert sum(len(b.pieces(chess.QUEEN, c)) >= 2 for b in boards for c in (True, False)) > 0
    _check_compiled(boards)


def test_compiled_matches_reference_with_other_integer_parameters():
    """Perturbed integer parameters (a seeded RNG): other sigmoid tables (a, c), other winnable
    values and other linear weights must give the same engine and tuner values in both."""
    rng = random.Random(0x10D79E6)
    layout = ref.param_layout()
    n_pairs = sum(size for _, kind, _, size in layout if kind == "pair")
    n_values = sum(size for _, kind, _, size in layout if kind == "value")
    defaults = ref.default_params()
    boards = [b for seed in range(3) for b in random_game_positions(2000 + seed)]
    for trial in range(3):
        pairs = np.zeros((n_pairs, 2))
        values = np.zeros(n_values)
        for name, kind, off, _size in layout:
            for i, v in enumerate(defaults[name]):
                if kind == "value":
                    values[off + i] = v + rng.randint(-60, 60)
                elif name == "KING_SAFETY_ACTIVATION.a":
                    pairs[off + i] = [v[0] + rng.randint(-400, 400), v[1] + rng.randint(-400, 400)]
                elif name == "KING_SAFETY_ACTIVATION.c":
                    pairs[off + i] = [v[0] + rng.randint(-40, 40), v[1] + rng.randint(-40, 40)]
                else:
                    pairs[off + i] = [v[0] + rng.randint(-15, 15), v[1] + rng.randint(-15, 15)]
        _check_compiled(boards[trial::3], pairs, values)
