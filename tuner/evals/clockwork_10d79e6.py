"""Alias module: the former ``tuner.evals.clockwork_10d79e6``, now `tuner.evals.clockwork.v10d79e6`.

Every name resolves to that module's, but for the former shapes of `feature_counts` (four arrays:
linear, attack_white, attack_black int32[N, 627] and ints int64[N, N_INTS]) and the former flat
names of the enums' members: the group offsets (``PAWN_MAT``, ``WINNABLE_SYM``, ...: members of
`Pair` and `Value`), ``STEP_*`` (`Step`) and ``REC_*`` (`Rec`), as ints.
"""
from __future__ import annotations

from .clockwork import v10d79e6
from .clockwork.v10d79e6 import EVALUATION  # noqa: F401  (the module's evaluation, eagerly)

#: Prefixes of the former flat names of the enums' members.
_PREFIXED = (("STEP_", v10d79e6.Step), ("REC_", v10d79e6.Rec))


def feature_counts(positions):
    """``(linear, attack_white, attack_black, ints)``: `v10d79e6.feature_counts`' sums one by one
    and its ints."""
    counts = v10d79e6.feature_counts(positions)
    return (*(counts.sums[:, k] for k in range(len(v10d79e6.SUMS))), counts.ints)


def __getattr__(name: str):
    for enum in (v10d79e6.Pair, v10d79e6.Value):
        if name in enum.__members__:
            return int(enum[name])
    for prefix, enum in _PREFIXED:
        if name.startswith(prefix) and name[len(prefix):] in enum.__members__:
            return int(enum[name[len(prefix):]])
    return getattr(v10d79e6, name)
