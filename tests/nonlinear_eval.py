"""A small non-linear evaluation for the player's tests: every value-dependent op on one tape.

Material and tempo (a linear combination), then a tunable sigmoid "activation" scaled by a pair
parameter (pair * pair), a gain by a value parameter (pair * value), a clamped eg add of a linear
combination of value parameters, the sign-aware "winnable" add and an endgame scale chosen by the
sign of eg, and the phase blend. The branches of the clamps and of the scale depend on parameter
values, so training moves positions from one branch to another; the ops decide at every sweep.
"""
from __future__ import annotations

from functools import lru_cache

from numba import njit

from tuner.chess.bitboard import popcount
from tuner.chess.position import W_BLACK, W_META, W_PAWN, W_WHITE, phase
from tuner.evals import Evaluation
from tuner.evals.registry import ParamRegistry
from tuner.tape import lin_add, lin_record_pair
from tuner.tape.ops import (operand_mark, push_operand, record_add_clamped_eg, record_add_scalar,
                            record_add_winnable_eg, record_eg_scale_by_sign, record_lincomb_value,
                            record_pair_add, record_pair_div_scalar, record_pair_mul,
                            record_pair_mul_value, record_pair_sigmoid, record_phase)

NAME = "nonlinear-test"
TEMPO, AMPLITUDE = 5, 6            # pair indices; material of piece type t (pawn..queen) is t
CLAMP_PAWNS, CLAMP_BIAS, GAIN, WIN = 0, 1, 2, 3  # value indices

PARAMS = {
    "source": "tests/nonlinear_eval.py", "format": "registry schema", "K": 0.0025,
    "params": [
        {"name": "MAT", "kind": "pair", "shape": [5], "offset": 0,
         "values": [[100, 120], [320, 300], [330, 320], [500, 550], [950, 1000]],
         "constant": [False] * 5},
        {"name": "TEMPO", "kind": "pair", "shape": [], "offset": 5, "values": [[20, 5]],
         "constant": [False]},
        {"name": "AMPLITUDE", "kind": "pair", "shape": [], "offset": 6, "values": [[60, 40]],
         "constant": [False]},
        {"name": "CLAMP", "kind": "value", "shape": [2], "offset": 0, "values": [-6, -20],
         "constant": [False, False]},
        {"name": "GAIN", "kind": "value", "shape": [], "offset": 2, "values": [0.1],
         "constant": [False]},
        {"name": "WIN", "kind": "value", "shape": [], "offset": 3, "values": [-30],
         "constant": [False]},
    ],
}


@lru_cache(maxsize=None)
def registry() -> ParamRegistry:
    return ParamRegistry.from_dict(PARAMS)


@njit(cache=True, nogil=True)
def record_eval(tape, acc, pos):
    white, black = pos[W_WHITE], pos[W_BLACK]
    for t in range(5):
        pieces = pos[W_PAWN + t]
        lin_add(acc, t, popcount(white & pieces) - popcount(black & pieces))
    lin_add(acc, TEMPO, 1 - 2 * (pos[W_META] & 1))
    s = lin_record_pair(tape, acc)
    act = record_pair_mul(tape, AMPLITUDE, record_pair_sigmoid(tape, record_pair_div_scalar(
        tape, s, 200.0)))
    s = record_pair_add(tape, s, act)
    s = record_pair_mul_value(tape, s, record_add_scalar(tape, GAIN, 1.0))
    pawns = popcount(pos[W_PAWN])
    first = operand_mark(tape)
    push_operand(tape, CLAMP_PAWNS, pawns)
    push_operand(tape, CLAMP_BIAS, 1.0)
    s = record_add_clamped_eg(tape, s, record_lincomb_value(tape, first))
    s = record_add_winnable_eg(tape, s, WIN)
    white_pawns = popcount(white & pos[W_PAWN])
    black_pawns = pawns - white_pawns
    s = record_eg_scale_by_sign(tape, s, (8 + white_pawns) / 16, (8 + black_pawns) / 16)
    return record_phase(tape, s, phase(pos) / 24)


@njit(cache=True, nogil=True)
def record_batch(tape, acc, positions, rows, out):
    for i in range(rows.shape[0]):
        out[i] = record_eval(tape, acc, positions[rows[i]])


EVALUATION = Evaluation(NAME, registry(), record_eval, record_batch)
