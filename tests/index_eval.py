"""A user evaluation with a wrong index, for the index checks' tests: material and tempo (six
pairs: MAT[5], TEMPO), one index of which is off by `OFFSET` (a placeholder the tests replace
before writing the file). `WHERE` picks the recorder it is handed to: ``lin_add`` (the tempo's
parameter index) or ``op`` (an op's operand: the tempo pair added to the linear combination with
record_pair_add). The tests write it as a file of their own and name that file, as a user names
an evaluation of theirs (docs/evaluations.md).
"""
from __future__ import annotations

from numba import njit

from tuner.chess.bitboard import popcount
from tuner.chess.position import W_BLACK, W_META, W_PAWN, W_WHITE, phase
from tuner.evals import Evaluation
from tuner.evals.registry import ParamRegistry
from tuner.tape import lin_add, lin_record_pair
from tuner.tape.ops import record_pair_add, record_phase

NAME = "index-test"
OFFSET = 0               # replaced by the tests: TEMPO + OFFSET is the index handed over
WHERE = "lin_add"        # replaced by the tests: "lin_add" or "op"
TEMPO = 5

PARAMS = {
    "source": "tests/index_eval.py", "format": "registry schema", "K": 0.0025,
    "params": [
        {"name": "MAT", "kind": "pair", "shape": [5], "offset": 0,
         "values": [[100, 120], [320, 300], [330, 320], [500, 550], [950, 1000]]},
        {"name": "TEMPO", "kind": "pair", "shape": [], "offset": TEMPO, "values": [[20, 5]]},
    ],
}
BY_LIN_ADD = WHERE == "lin_add"


@njit(cache=True, nogil=True)
def record_eval(tape, acc, pos):
    white, black = pos[W_WHITE], pos[W_BLACK]
    for t in range(5):
        pieces = pos[W_PAWN + t]
        lin_add(acc, t, popcount(white & pieces) - popcount(black & pieces))
    stm = 1 - 2 * (pos[W_META] & 1)
    if BY_LIN_ADD:
        lin_add(acc, TEMPO + OFFSET, stm)
        s = lin_record_pair(tape, acc)
    else:
        lin_add(acc, TEMPO, stm)
        s = record_pair_add(tape, lin_record_pair(tape, acc), TEMPO + OFFSET)
    return record_phase(tape, s, phase(pos) / 24)


@njit(cache=True, nogil=True)
def record_batch(tape, acc, positions, rows, out):
    for i in range(rows.shape[0]):
        out[i] = record_eval(tape, acc, positions[rows[i]])


EVALUATION = Evaluation(NAME, ParamRegistry.from_dict(PARAMS), record_eval, record_batch)
