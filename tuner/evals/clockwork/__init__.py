"""Clockwork's hand-crafted evaluations: one module per engine version, one contract.

* `tuner.evals.clockwork.cde2ced` (evaluation ``clockwork``): engine commit cde2ced, linear in
  its parameters (docs/reference-eval.md);
* `tuner.evals.clockwork.v10d79e6` (evaluation ``clockwork-10d79e6``): engine commit 10d79e6,
  not linear (docs/reference-eval-head.md);
* `tuner.evals.clockwork.common`: what they share (integer score packing, masks, ``PHASE_MAX``,
  the `Layout` check, the contract's return types, the breakdown table).

The contract: every version module defines the same names, with the same signatures and
returning the same shapes (N positions, uint64[N, 9]; one position may be given as uint64[9]):

========================================================  ========================================
``Pair``, ``Value``                                       IntEnums: the flat offset of every pair
                                                          and value group it indexes (the offsets
                                                          table, declared once)
``N_PAIRS``, ``N_VALUES``, ``LAYOUT``                      the registry's sizes; the `Layout`
``PAIR_OFFSETS``, ``VALUE_OFFSETS``                       JSON group name -> flat offset
``SUMS``, ``INTS``                                        names of `Counts.sums`' rows and of
                                                          `Counts.ints`' columns
``PARAMS_PATH``, ``registry()``                           the shipped parameters
``check_layout(reg)``                                     ValueError unless `reg` has the layout
``load_params(params=None, value_params=None)``           `Params` (pairs, values): the defaults,
                                                          a registry, a JSON path or arrays
``new_scratch()``                                         the per-thread working memory
``features(pos, scratch) -> phase``                       njit: every integer input into scratch
``record_eval(tape, scratch, pos) -> slot``               njit: the continuous evaluation recorded
``record_batch(tape, scratch, positions, rows, out)``     njit: ``record_eval`` over rows
``counts_batch(positions, scratch, sums, ints, phases)``  njit: dense counts (`feature_counts`)
``evaluate_positions(positions, params, value_params)``   `Evaluated` (int_eval int64[N],
                                                          continuous float64[N], phase int64[N])
``evaluate_fen(fen, params, value_params)``               `Evaluated` of one FEN (int, float, int)
``feature_counts(positions)``                             `Counts` (sums int32[N, S, N_PAIRS],
                                                          ints int64[N, I], phase int64[N])
``explain(fen, pos, registry, int_eval) -> str``          the ``tuner eval --breakdown`` text
``EVALUATION``                                            its `tuner.evals.Evaluation`
========================================================  ========================================

Beyond the contract a version keeps what only it has (cde2ced: ``int_eval``, ``evaluate_totals``
with the MG and EG totals, ``feature_trace``; 10d79e6: ``int_steps`` and its ``Step`` enum,
``breakdown``, ``sigmoid_table``, ``integer_params``).

`EVALUATIONS` (evaluation name -> module) is this package's entry in `tuner.evals.EVALUATIONS`:
an evaluation is declared here once, and its `Evaluation` takes its name from here.

Aliases: imported as ``tuner.evals.clockwork``, this package is also the former module of that
name (the cde2ced evaluation): every name of it resolves, with its former return shapes, through
`tuner.evals.clockwork.legacy`. ``tuner.evals.clockwork_10d79e6`` is the alias module of 10d79e6.
"""
from __future__ import annotations

import importlib

#: Evaluation name -> the module implementing it (each defines ``EVALUATION``).
EVALUATIONS = {"clockwork": f"{__name__}.cde2ced",
               "clockwork-10d79e6": f"{__name__}.v10d79e6"}


def __getattr__(name: str):
    """Aliases: the former module ``tuner.evals.clockwork`` (`tuner.evals.clockwork.legacy`)."""
    if name.startswith("__"):
        raise AttributeError(name)
    legacy = importlib.import_module(f"{__name__}.legacy")
    return getattr(legacy, name)
