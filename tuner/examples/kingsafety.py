"""A small non-linear evaluation written outside the package (docs/tutorial.md).

    eval = blend(phase, L + KS(A_white) - KS(A_black))

* L: material of pawn..queen (White minus Black counts) and the tempo of the side to move;
* A_s: side s's attack on the other king: for knights, bishops, rooks and queens of s, how many
  of them attack a square next to that king, times a weight per piece type (a pair each);
* KS(x) = KS_AMPLITUDE * sigmoid(x / 32 + KS_OFFSET / 32), for mg and eg apart: a few attackers
  count little, many count a lot, and the bonus saturates;
* blend: (mg * phase + eg * (24 - phase)) / 24.

Everything is recorded on the tape with its ops, so training moves the amplitude, the offset and
the weights inside the sigmoid as well as the material.
"""
from __future__ import annotations

from numba import njit

from tuner.chess.attacks import (bishop_attacks, king_attacks, knight_attacks, queen_attacks,
                                 rook_attacks)
from tuner.chess.bitboard import lsb, pop_lsb, popcount
from tuner.chess.position import (BISHOP, BLACK, KING, KNIGHT, QUEEN, ROOK, W_BLACK, W_META,
                                  W_PAWN, W_WHITE, WHITE, phase)
from tuner.evals import Evaluation
from tuner.evals.registry import ParamRegistry
from tuner.tape import lin_add, lin_record_pair
from tuner.tape.ops import (record_pair_add, record_pair_div_scalar, record_pair_mul,
                            record_pair_sigmoid, record_pair_sub, record_phase)

# Flat indices of the parameter pairs (the registry below lists them in this order).
MAT = 0                # + t for piece type t, pawn..queen
TEMPO = 5
KING_ATTACK = 6        # + t - KNIGHT for t = knight..queen
KS_AMPLITUDE = 10
KS_OFFSET = 11
KS_SCALE = 32.0        # the sigmoid's fixed input scale
PHASE_MAX = 24

PARAMS = {
    "source": "examples/kingsafety.py", "format": "registry schema", "K": 0.0025,
    "params": [
        {"name": "MAT", "kind": "pair", "shape": [5], "offset": MAT,
         "values": [[100, 120], [320, 300], [330, 320], [500, 550], [950, 1000]]},
        {"name": "TEMPO", "kind": "pair", "shape": [], "offset": TEMPO, "values": [[20, 5]]},
        {"name": "KING_ATTACK", "kind": "pair", "shape": [4], "offset": KING_ATTACK,
         "values": [[24, 4], [20, 4], [28, 6], [40, 8]]},
        {"name": "KS_AMPLITUDE", "kind": "pair", "shape": [], "offset": KS_AMPLITUDE,
         "values": [[120, 30]]},
        {"name": "KS_OFFSET", "kind": "pair", "shape": [], "offset": KS_OFFSET,
         "values": [[-96, -96]]},
    ],
}


@njit(cache=True, nogil=True)
def add_king_attackers(acc, pos, side):
    """Add, for knight..queen, how many pieces of `side` attack the other king's ring."""
    occ = pos[W_WHITE] | pos[W_BLACK]
    ring = king_attacks(lsb(pos[W_WHITE + 1 - side] & pos[W_PAWN + KING]))
    for t in range(KNIGHT, QUEEN + 1):
        pieces = pos[W_WHITE + side] & pos[W_PAWN + t]
        n = 0
        while pieces:
            sq = lsb(pieces)
            pieces = pop_lsb(pieces)
            if t == KNIGHT:
                attacks = knight_attacks(sq)
            elif t == BISHOP:
                attacks = bishop_attacks(sq, occ)
            elif t == ROOK:
                attacks = rook_attacks(sq, occ)
            else:
                attacks = queen_attacks(sq, occ)
            if attacks & ring:
                n += 1
        if n:
            lin_add(acc, KING_ATTACK + t - KNIGHT, n)


@njit(cache=True, nogil=True)
def king_safety(tape, attack, offset32):
    """KS_AMPLITUDE * sigmoid(attack / 32 + KS_OFFSET / 32); offset32 is the recorded offset / 32."""
    z = record_pair_add(tape, record_pair_div_scalar(tape, attack, KS_SCALE), offset32)
    return record_pair_mul(tape, KS_AMPLITUDE, record_pair_sigmoid(tape, z))


@njit(cache=True, nogil=True)
def record_eval(tape, acc, pos):
    """Record the White-POV evaluation of `pos` on the tape; its value slot."""
    for t in range(KING):  # pawn..queen
        pieces = pos[W_PAWN + t]
        lin_add(acc, MAT + t, popcount(pos[W_WHITE] & pieces) - popcount(pos[W_BLACK] & pieces))
    lin_add(acc, TEMPO, 1 - 2 * (pos[W_META] & 1))
    material = lin_record_pair(tape, acc)      # one record; clears the accumulator
    add_king_attackers(acc, pos, WHITE)        # White's attack on Black's king
    attack_white = lin_record_pair(tape, acc)
    add_king_attackers(acc, pos, BLACK)
    attack_black = lin_record_pair(tape, acc)
    offset32 = record_pair_div_scalar(tape, KS_OFFSET, KS_SCALE)
    s = record_pair_add(tape, material, king_safety(tape, attack_white, offset32))
    s = record_pair_sub(tape, s, king_safety(tape, attack_black, offset32))
    return record_phase(tape, s, phase(pos) / PHASE_MAX)


@njit(cache=True, nogil=True)
def record_batch(tape, acc, positions, rows, out):
    """out[i] = the evaluation of positions[rows[i]] (the loop the trainer calls)."""
    for i in range(rows.shape[0]):
        out[i] = record_eval(tape, acc, positions[rows[i]])


EVALUATION = Evaluation("kingsafety", ParamRegistry.from_dict(PARAMS), record_eval, record_batch)
