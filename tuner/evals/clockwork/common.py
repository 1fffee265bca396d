"""What Clockwork's evaluations share: integer score semantics, masks, the layout check, the
contract's return types and the breakdown table.

* The engine's integer score semantics (njit): a ``PScore`` is one 32-bit integer ``eg * 65536 +
  mg`` (wrapping), read back as two 16-bit halves; C++ division truncates toward zero.
* `add_nonzero`: `lin_add` for counts that are often zero, so that they never reach the tape.
* `PHASE_MAX` (`tuner.chess.position`'s) and the relative-rank masks both versions use.
* `Layout`: an evaluation's offsets table (its `Pair` and `Value` enums), checked against a
  registry by `Layout.check`; `Layout.load_params` is every version's `load_params`.
* `Params`, `Evaluated`, `Counts`: what every version's `load_params`, `evaluate_positions` /
  `evaluate_fen` and `feature_counts` return (the contract of `tuner.evals.clockwork`).
* `check_domain`: the positions both evaluations define.
* `group_rows`, `TABLE_HEAD`, `fmt_pair`: the rows of the ``tuner eval --breakdown`` text.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

import numpy as np
from numba import njit
from tuner.jit import INLINE

from tuner.chess.bitboard import BACK_RANKS, RANK_1, RANK_2, RANK_3, RANK_4, RANK_5, RANK_6
from tuner.chess.position import PHASE_MAX, W_BLACK, W_KING, W_PAWN, W_WHITE
from tuner.tape import lin_add

from ..registry import ParamRegistry

__all__ = ["PHASE_MAX", "U64", "U0", "U1", "U8", "RANKS_2_3", "RANKS_4_6", "RANKS_1_5", "s16",
           "pack_score", "add_packed", "sub_packed", "score_mg", "score_eg", "trunc_div",
           "add_nonzero", "check_domain", "Layout", "Params", "Evaluated", "Counts", "group_rows",
           "fmt_pair", "TABLE_HEAD", "positions_array"]

U64 = np.uint64
#: uint64 0, 1 and 8 (one rank's shift) for the compiled code: mixing uint64 with signed integers
#: makes Numba promote to float64.
U0 = U64(0)
U1 = U64(1)
U8 = U64(8)
#: Relative ranks 2 and 3 of a side in its own frame (its "early" pawns).
RANKS_2_3 = RANK_2 | RANK_3
#: Relative ranks 4, 5, 6 (outpost squares).
RANKS_4_6 = RANK_4 | RANK_5 | RANK_6
#: Relative ranks 1 to 5 (the king flank's ranks).
RANKS_1_5 = RANK_1 | RANK_2 | RANK_3 | RANK_4 | RANK_5

_MASK16 = 0xFFFF
_SIGN16 = 0x8000
_MASK32 = 0xFFFFFFFF
_HALF = 16


@njit(**INLINE)
def s16(x):
    """x narrowed to a signed 16-bit integer (two's complement wrap), as int64."""
    x = np.int64(x) & _MASK16
    return x - (_MASK16 + 1) if x >= _SIGN16 else x


@njit(**INLINE)
def pack_score(mg, eg):
    """The engine's packed score ``eg * 65536 + mg`` modulo 2^32 (as a non-negative int64).
    Packing is linear modulo 2^32, so sums of packed scores are packed sums."""
    return (np.int64(eg) * (_MASK16 + 1) + np.int64(mg)) & _MASK32


@njit(**INLINE)
def add_packed(a, b):
    """Packed a + b (32-bit wrap)."""
    return (a + b) & _MASK32


@njit(**INLINE)
def sub_packed(a, b):
    """Packed a - b (32-bit wrap)."""
    return (a - b) & _MASK32


@njit(**INLINE)
def score_mg(packed):
    """``PScore::mg()``: the low 16 bits, signed."""
    return s16(packed)


@njit(**INLINE)
def score_eg(packed):
    """``PScore::eg()``: the high 16 bits after rounding by the low half's sign, signed."""
    return s16(((packed + _SIGN16) & _MASK32) >> _HALF)


@njit(**INLINE)
def trunc_div(num, den):
    """C++ integer division (truncates toward zero) of int64 num by a positive den."""
    q = abs(num) // den
    return -q if num < 0 else q


@njit(**INLINE)
def add_nonzero(acc, index, coef):
    """lin_add for counts that are often zero: skip them, so they never reach the tape."""
    if coef != 0:
        lin_add(acc, index, coef)


def check_domain(pos) -> None:
    """Raise ValueError for positions the engine's evaluation does not define
    (docs/reference-eval.md section 10): not exactly one king per colour, or pawns on the first or
    last rank."""
    pos = np.asarray(pos, dtype=np.uint64)
    white, black, pawns, kings = (int(pos[W_WHITE]), int(pos[W_BLACK]), int(pos[W_PAWN]),
                                  int(pos[W_KING]))
    for name, side in (("white", white), ("black", black)):
        n = bin(side & kings).count("1")
        if n != 1:
            raise ValueError(f"{name} has {n} kings (the evaluation needs exactly one per side)")
    if pawns & int(BACK_RANKS):
        raise ValueError("pawn on the first or last rank (outside the evaluation's domain)")


def positions_array(positions) -> np.ndarray:
    """Positions as a C-contiguous uint64[N, 9] array (one position may be given as uint64[9])."""
    return np.ascontiguousarray(positions, dtype=np.uint64).reshape(-1, 9)


# ---------------------------------------------------------------------------------------------
# The offsets table and the contract's return types.


@dataclass(frozen=True)
class Layout:
    """An evaluation's parameter layout, declared once: the flat offset of every pair group it
    indexes (`pairs`, an IntEnum whose member names are the JSON group names, but for those in
    `json_names`) and of every value group (`values`), and the sizes the registry must have."""

    evaluation: str
    pairs: type[IntEnum]
    values: type[IntEnum]
    n_pairs: int
    n_values: int
    json_names: tuple[tuple[str, str], ...] = ()

    def pair_offsets(self) -> dict[str, int]:
        """JSON group name -> flat pair offset, in registration order."""
        rename = dict(self.json_names)
        return {rename.get(m.name, m.name): int(m) for m in self.pairs}

    def value_offsets(self) -> dict[str, int]:
        """JSON group name -> flat value offset, in registration order."""
        return {m.name: int(m) for m in self.values}

    def check(self, reg: ParamRegistry) -> None:
        """Raise ValueError if `reg` does not have the layout this evaluation indexes into."""
        if reg.n_params != self.n_pairs or reg.n_values != self.n_values:
            raise ValueError(f"the {self.evaluation} evaluation needs {self.n_pairs} pair and "
                             f"{self.n_values} value entries, registry has {reg.n_params} and "
                             f"{reg.n_values}")
        for offsets, kind in ((self.pair_offsets(), "pair"), (self.value_offsets(), "value")):
            for name, off in offsets.items():
                if name not in reg or reg.group(name).kind != kind or reg.offset(name) != off:
                    raise ValueError(f"{kind} parameter {name}: expected flat offset {off}")

    def read(self, path) -> ParamRegistry:
        """The registry of the parameter file `path`, checked to have this layout (`check`)."""
        reg = ParamRegistry.from_json(path)
        self.check(reg)
        return reg

    def load_params(self, default: ParamRegistry, params=None, value_params=None) -> Params:
        """An evaluation's `load_params`: `Params` (pairs float64[n_pairs, 2], values
        float64[n_values]) of a ParamRegistry or JSON path (checked to have this layout), or of
        arrays of pair and value parameters checked against the registry `default`, whose
        values stand in for those not given (None)."""
        if isinstance(params, (str, os.PathLike)):
            params = ParamRegistry.from_json(params)
        if isinstance(params, ParamRegistry):
            self.check(params)
            return Params(np.array(params.defaults), np.array(params.value_defaults))
        pairs = np.array(default.defaults) if params is None else default.check_values(params)
        values = (np.array(default.value_defaults) if value_params is None
                  else default.check_value_values(value_params))
        return Params(pairs, values)


class Params(NamedTuple):
    """`load_params`: the parameter values an evaluation computes with."""

    pairs: np.ndarray   # float64[n_pairs, 2]
    values: np.ndarray  # float64[n_values]


class Evaluated(NamedTuple):
    """`evaluate_positions` (arrays, one entry per position) and `evaluate_fen` (scalars)."""

    int_eval: np.ndarray    # int64: the engine's integer evaluation, White's point of view
    continuous: np.ndarray  # float64: the tuner's continuous evaluation (what the tape records)
    phase: np.ndarray       # int64: the phase, 0..PHASE_MAX


class Counts(NamedTuple):
    """`feature_counts`: every integer input of positions uint64[N, 9]."""

    sums: np.ndarray   # int32[N, n_sums, n_pairs]: net counts of each pair sum (`SUMS` names them)
    ints: np.ndarray   # int64[N, n_ints]: the other integer inputs (`INTS` names them)
    phase: np.ndarray  # int64[N]


# ---------------------------------------------------------------------------------------------
# The breakdown table (`explain`).


def _fmt_num(x) -> str:
    x = float(x)
    return str(int(x)) if x.is_integer() else f"{x:.4f}"


def fmt_pair(p) -> str:
    """An (mg, eg) pair in the breakdown's two columns."""
    return f"{_fmt_num(p[0]):>10} {_fmt_num(p[1]):>10}"


def group_rows(groups, counts, values):
    """Table rows `name  net counts  mg  eg` of the groups with non-zero counts; their total."""
    rows = []
    total = np.zeros(2)
    for g in groups:
        cg = counts[g.slice]
        if not cg.any():
            continue
        contrib = cg.astype(np.float64) @ values[g.slice]
        total += contrib
        if g.shape:
            desc = " ".join(f"[{','.join(str(int(k)) for k in np.unravel_index(i, g.shape))}]"
                            f"{int(cg[i]):+d}" for i in np.nonzero(cg)[0])
        else:
            desc = f"{int(cg[0]):+d}"
        rows.append(f"{g.name:<36} {desc:<34} {fmt_pair(contrib)}")
    return rows, total


#: The breakdown table's header row.
TABLE_HEAD = f"{'term':<36} {'net counts':<34} {'mg':>10} {'eg':>10}"
