"""Clockwork's evaluations as one package (tuner/evals/clockwork/): both version modules keep one
contract (the same names, returning the same shapes), the former module paths are aliases with
their former shapes, the registry's names come from the package, and the package's rules (no
function of more than 8 parameters, no ``globals()`` lookups) hold."""
import ast
import importlib
from pathlib import Path

import numpy as np
import pytest

from tuner.chess.fen import parse_fen
from tuner.chess.position import PHASE_MAX
from tuner.evals import EVALUATIONS, get_evaluation, registered_name
from tuner.evals.clockwork import EVALUATIONS as PACKAGE_EVALUATIONS
from tuner.evals.clockwork import cde2ced, common, v10d79e6
from tuner.evals.material import registry as material_registry

VERSIONS = (cde2ced, v10d79e6)
FENS = ("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1",
        "6k1/5ppp/8/3pP3/8/2N5/Q4PPP/3R2K1 w - d6 0 1",
        "8/5k2/8/3K4/8/8/8/8 w - - 0 1")
CONTRACT = ("Pair", "Value", "N_PAIRS", "N_VALUES", "LAYOUT", "PAIR_OFFSETS", "VALUE_OFFSETS",
            "SUMS", "INTS", "PARAMS_PATH", "registry", "check_layout", "load_params",
            "new_scratch", "features", "record_eval", "record_batch", "counts_batch",
            "evaluate_positions", "evaluate_fen", "feature_counts", "explain", "EVALUATION")
PACKAGE = Path(__file__).resolve().parent.parent / "tuner" / "evals" / "clockwork"
MAX_PARAMETERS = 8


@pytest.fixture(scope="module")
def positions():
    return np.stack([parse_fen(f) for f in FENS])


@pytest.mark.parametrize("mod", VERSIONS, ids=lambda m: m.__name__)
def test_every_version_defines_the_contract(mod):
    missing = [name for name in CONTRACT if not hasattr(mod, name)]
    assert not missing


@pytest.mark.parametrize("mod", VERSIONS, ids=lambda m: m.__name__)
def test_the_contract_s_shapes(mod, positions):
    n = len(positions)
    params = mod.load_params()
    assert isinstance(params, common.Params)
    assert params.pairs.shape == (mod.N_PAIRS, 2) and params.values.shape == (mod.N_VALUES,)
    ev = mod.evaluate_positions(positions)
    assert isinstance(ev, common.Evaluated)
    assert [a.shape for a in ev] == [(n,)] * 3
    assert [a.dtype for a in ev] == [np.int64, np.float64, np.int64]
    assert ((0 <= ev.phase) & (ev.phase <= PHASE_MAX)).all()
    counts = mod.feature_counts(positions)
    assert isinstance(counts, common.Counts)
    assert counts.sums.shape == (n, len(mod.SUMS), mod.N_PAIRS) and counts.sums.dtype == np.int32
    assert counts.ints.shape == (n, len(mod.INTS)) and counts.ints.dtype == np.int64
    assert (counts.phase == ev.phase).all()
    assert counts.sums.any()
    for k, fen in enumerate(FENS):
        one = mod.evaluate_fen(fen)
        assert isinstance(one, common.Evaluated)
        assert one == (int(ev.int_eval[k]), float(ev.continuous[k]), int(ev.phase[k]))
        assert [type(v) for v in one] == [int, float, int]


@pytest.mark.parametrize("mod", VERSIONS, ids=lambda m: m.__name__)
def test_the_offsets_table_is_the_registry_s(mod):
    reg = mod.registry()
    for name, off in mod.PAIR_OFFSETS.items():
        assert reg.offset(name) == off and reg.group(name).kind == "pair"
    assert list(mod.VALUE_OFFSETS) == [m.name for m in mod.Value]
    assert len(mod.PAIR_OFFSETS) == len(mod.Pair)
    with pytest.raises(ValueError, match=f"the {mod.EVALUATION.name} evaluation needs "
                                         f"{mod.N_PAIRS} pair"):
        mod.check_layout(material_registry())


def test_the_registry_s_names_come_from_the_package():
    for name, module in PACKAGE_EVALUATIONS.items():
        assert EVALUATIONS[name] == module
        assert registered_name(module) == name
        ev = get_evaluation(name)
        assert ev.name == name and ev is importlib.import_module(module).EVALUATION
    assert get_evaluation("material").name == "material"
    with pytest.raises(ValueError, match="module mine is not a registered evaluation"):
        registered_name("mine")


def test_the_former_clockwork_module_is_an_alias_with_its_former_shapes(positions):
    from tuner.evals import clockwork as cw

    new = cde2ced.evaluate_totals(positions)
    old = cw.evaluate_positions(positions)
    assert len(old) == 5
    for a, b in zip(old, new):
        assert np.array_equal(a, b)
    counts, phases = cw.feature_counts(positions)
    assert np.array_equal(counts, cde2ced.feature_counts(positions).sums[:, 0])
    assert np.array_equal(phases, new.phase)
    assert cw.load_params().shape == (cde2ced.N_PAIRS, 2)
    ie, cont, mg, eg, phase, dense = cw.evaluate_fen(FENS[1])
    assert (ie, cont, phase) == tuple(cde2ced.evaluate_fen(FENS[1]))
    assert (mg, eg) == (float(new.mg[1]), float(new.eg[1]))
    assert np.array_equal(dense, counts[1]) and dense.dtype == np.int64
    assert cw.check_offsets is cde2ced.check_layout
    assert cw.OFFSETS == cde2ced.PAIR_OFFSETS and cw.N_PARAMS == cde2ced.N_PAIRS
    assert cw.KING_PSQT == cde2ced.Pair.KING_PSQT and type(cw.KING_PSQT) is int
    assert cw.record_batch is cde2ced.record_batch and cw.EVALUATION is cde2ced.EVALUATION


def test_the_former_10d79e6_module_is_an_alias_with_its_former_shapes(positions):
    from tuner.evals import clockwork_10d79e6 as ev

    linear, attack_white, attack_black, ints = ev.feature_counts(positions)
    counts = v10d79e6.feature_counts(positions)
    for k, dense in enumerate((linear, attack_white, attack_black)):
        assert np.array_equal(dense, counts.sums[:, k])
    assert np.array_equal(ints, counts.ints)
    assert ev.STEP_EVAL == v10d79e6.Step.EVAL == v10d79e6.N_STEPS - 1
    assert ev.REC_WIN == v10d79e6.Rec.WIN
    assert ev.WINNABLE_BIAS == v10d79e6.Value.WINNABLE_BIAS
    assert ev.KS_ACTIVATION_C == v10d79e6.PAIR_OFFSETS["KING_SAFETY_ACTIVATION.c"]
    assert ev.evaluate_positions is v10d79e6.evaluate_positions
    assert ev.EVALUATION is v10d79e6.EVALUATION
    with pytest.raises(AttributeError):
        ev.STEP_NOTHING  # noqa: B018
    from tuner.evals.common import check_domain, trunc_div
    assert check_domain is common.check_domain and trunc_div is common.trunc_div


def test_the_breakdown_names_every_step():
    b = v10d79e6.breakdown(parse_fen(FENS[1]))
    assert list(b["int"]) == [s.name.lower() for s in v10d79e6.Step]
    assert b["int"]["eval"] == v10d79e6.evaluate_fen(FENS[1]).int_eval
    assert list(b["counts"]) == [*v10d79e6.SUMS, "ints"]


def _functions(path: Path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            yield node


def test_no_function_of_the_package_takes_more_than_8_parameters():
    files = sorted(PACKAGE.rglob("*.py"))
    assert PACKAGE / "cde2ced.py" in files
    wide = []
    for path in files:
        for fn in _functions(path):
            a = fn.args
            n = (len(a.posonlyargs) + len(a.args) + len(a.kwonlyargs) + bool(a.vararg)
                 + bool(a.kwarg))
            if n > MAX_PARAMETERS:
                wide.append(f"{path.name}:{fn.lineno} {getattr(fn, 'name', 'lambda')} ({n})")
    assert not wide


def test_no_module_of_the_package_looks_names_up_in_globals():
    calls = [f"{path.name}:{node.lineno}" for path in sorted(PACKAGE.rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
             and node.func.id in ("globals", "vars")]
    assert not calls
