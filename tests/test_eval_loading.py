"""Naming an evaluation by registry name, module path or file, the errors when that fails, and
the generic commands every evaluation gets (integer eval, --breakdown, --params, C++ export)."""
import json
import math
import os
import shutil
import subprocess
import sys

import chess
import numpy as np
import pytest
from click.testing import CliRunner

import tuner
from shared import DATASETS, REPO
from tuner.chess.fen import parse_fen_list
from tuner.cli import main
from tuner.evals import CPP_ARRAY, CPP_CLOCKWORK, Evaluation, evaluation_of_params, get_evaluation
from tuner.evals.export import round_half_away
from tuner.evals.generic import continuous
from tuner.evals.registry import ParamRegistry
from tuner.tape import backward, new_tape, set_params
from tuner.train.config import ConfigError, load_config
from tuner.train.loop import Run

EXAMPLES = REPO / "examples"
QUEEN_ATTACK = "6k1/5ppp/8/8/8/8/Q4PPP/3R2K1 w - - 0 1"
PIECES = (chess.PAWN, chess.KNIGHT, chess.BISHOP, chess.ROOK, chess.QUEEN)
PHASE_WEIGHT = {chess.KNIGHT: 1, chess.BISHOP: 1, chess.ROOK: 2, chess.QUEEN: 4}


@pytest.fixture
def runner():
    return CliRunner()


def _fens(n=200):
    lines = (DATASETS / "tiny.txt").read_text().splitlines()[:n]
    return [line.split(";")[0] for line in lines]


# -- finding evaluations -----------------------------------------------------------------------

@pytest.mark.parametrize("name, style", [("clockwork", CPP_CLOCKWORK),
                                         ("clockwork-10d79e6", CPP_CLOCKWORK),
                                         ("material", CPP_ARRAY)])
def test_registered_names(name, style):
    ev = get_evaluation(name)
    assert isinstance(ev, Evaluation) and ev.name == name and ev.cpp == style


def test_a_module_path():
    ev = get_evaluation("nonlinear_eval")  # tests/ is on sys.path
    assert ev.name == "nonlinear-test"


def test_a_file_relative_to_a_base_is_imported_once():
    a = get_evaluation("kingsafety.py", EXAMPLES)
    b = get_evaluation(str(EXAMPLES / "kingsafety.py"))
    assert a.name == "kingsafety" and a is b


@pytest.mark.parametrize("source, match", [
    (None, r"no such evaluation file: .*missing\.py"),
    ("X = 1\n", r"noeval\.py: defines no EVALUATION"),
    ("EVALUATION = {'name': 'x'}\n", r"EVALUATION is a dict, not a tuner.evals.Evaluation"),
    ("def broken(:\n", r"importing it failed: .*noeval\.py:1: "),
    ("import no_such_dependency_xyz\n", r"importing it failed: ModuleNotFoundError: .*"
                                        r"no_such_dependency_xyz"),
])
def test_file_errors_say_what_is_wrong(tmp_path, source, match):
    name = "missing.py" if source is None else "noeval.py"
    if source is not None:
        (tmp_path / name).write_text(source)
    with pytest.raises(ValueError, match=match):
        get_evaluation(name, tmp_path)


def test_unknown_name_lists_the_registered_ones():
    with pytest.raises(ValueError, match=r"unknown evaluation 'Clockwork': not a registered "
                                         r"name \(clockwork, clockwork-10d79e6, material\)"):
        get_evaluation("Clockwork")


def test_a_config_names_a_file_beside_it(tmp_path):
    text = (EXAMPLES / "kingsafety.toml").read_text()
    (tmp_path / "a.toml").write_text(text.replace('"kingsafety.py"', '"../examples/x.py"'))
    assert '"../examples/x.py"' in (tmp_path / "a.toml").read_text()
    with pytest.raises(ConfigError, match=r"a\.toml: \[evaluation\] name: no such evaluation "
                                          r"file: .*examples/x\.py"):
        Run(load_config(tmp_path / "a.toml"), tmp_path)
    (tmp_path / "b.toml").write_text(text.replace('"kingsafety.py"',
                                                  f'"{EXAMPLES / "kingsafety.py"}"'))
    run = Run(load_config(tmp_path / "b.toml"), tmp_path)
    assert run.evaluation is get_evaluation("kingsafety.py", EXAMPLES)


# -- the generic commands ----------------------------------------------------------------------

def _material_expected(fens, reg):
    """Material and tempo, blended by phase, counted with python-chess."""
    mat, tempo = reg.defaults[:5], reg.defaults[reg.offset("TEMPO")]  # PAWN..QUEEN, TEMPO
    out = []
    for fen in fens:
        board = chess.Board(fen)
        s = np.array(tempo if board.turn == chess.WHITE else -tempo, dtype=np.float64)
        for t, piece in enumerate(PIECES):
            s = s + mat[t] * (len(board.pieces(piece, chess.WHITE))
                              - len(board.pieces(piece, chess.BLACK)))
        ph = min(24, sum(w * len(board.pieces(p, c)) for p, w in PHASE_WEIGHT.items()
                         for c in chess.COLORS))
        alpha = ph / 24  # as record_phase blends
        out.append(alpha * s[0] + (1 - alpha) * s[1])
    return np.array(out)


def test_generic_evaluate_matches_python_chess():
    ev = get_evaluation("material")
    fens = _fens()
    positions, status = parse_fen_list(fens)
    assert not status.any()
    reg = ev.registry
    values = reg.defaults + 0.37  # fractional: the integer eval rounds the parameters first
    tuned = ParamRegistry.from_dict(json.loads(reg.dumps(values)))
    ie, cont = ev.evaluate_positions(positions, tuned)
    np.testing.assert_allclose(cont, _material_expected(fens, tuned), rtol=0, atol=1e-9)
    rounded = ParamRegistry.from_dict(json.loads(reg.dumps(np.round(values))))
    expect = [round_half_away(x) for x in _material_expected(fens, rounded)]
    assert list(ie) == expect


def test_generic_breakdown_of_a_linear_evaluation_adds_up(runner):
    ev = get_evaluation("material")
    r = runner.invoke(main, ["eval", "-e", "material", "--breakdown", QUEEN_ATTACK])
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines() if line.strip()}
    alpha = 6 / 24  # a queen and a rook
    reg = ev.registry
    for name in ("QUEEN", "ROOK"):  # one of each, White's: contribution = blend weight * value
        mg, eg = reg.defaults[reg.offset(name)]
        assert float(rows[name][2]) == pytest.approx(alpha * mg, abs=1e-4)
        assert float(rows[name][3]) == pytest.approx((1 - alpha) * eg, abs=1e-4)
    assert "PAWN" not in rows  # three pawns each: no gradient
    assert rows["non-linear"][-1] == "0.0000"
    cont = float(next(line for line in r.stdout.splitlines()
                      if line.startswith("continuous eval:")).split()[-1])
    assert cont == pytest.approx(_material_expected([QUEEN_ATTACK], ev.registry)[0], abs=1e-6)


def test_eval_with_params_of_the_material_evaluation(runner, tmp_path):
    ev = get_evaluation("material")
    p = tmp_path / "material.json"
    ev.registry.to_json(ev.registry.defaults * 2, p)
    r = runner.invoke(main, ["eval", "-e", "material", "--params", str(p), QUEEN_ATTACK])
    assert r.exit_code == 0, r.output
    doubled = ParamRegistry.from_json(p)
    expect = round_half_away(_material_expected([QUEEN_ATTACK], doubled)[0])
    assert r.stdout.strip() == f"{QUEEN_ATTACK};{expect}"
    r = runner.invoke(main, ["eval", "-e", "clockwork", "--params", str(p), QUEEN_ATTACK])
    assert r.exit_code != 0
    assert "not the parameters of evaluation 'clockwork': it has 541 pair" in r.stderr


def test_eval_names_an_unknown_evaluation(runner):
    r = runner.invoke(main, ["eval", "-e", "nope.py", QUEEN_ATTACK])
    assert r.exit_code != 0
    assert r.stderr.strip().splitlines()[-1] == "Error: --evaluation: no such evaluation file: nope.py"


def test_export_picks_the_style_of_the_evaluation(runner, tmp_path):
    p = tmp_path / "m.json"
    get_evaluation("material").registry.to_json(None, p)
    r = runner.invoke(main, ["export", str(p)])
    assert r.exit_code == 0, r.output
    assert "namespace material {" in r.stdout and "Clockwork" not in r.stdout
    assert evaluation_of_params(ParamRegistry.from_json(p)).name == "material"
    r = runner.invoke(main, ["export", str(p), "-e", "clockwork"])
    assert r.exit_code != 0 and "not the parameters of evaluation 'clockwork'" in r.stderr


def test_example_gradients_match_finite_differences():
    """The tutorial's evaluation on the tape: d eval / d parameter against central differences
    of the recorded evaluation, for every pair entry, on positions with king attacks."""
    ev = get_evaluation("kingsafety.py", EXAMPLES)
    fens = [QUEEN_ATTACK, "r1b2rk1/ppp2ppp/2n5/3q4/3P4/2NB1N2/PP3PPP/R2Q1RK1 b - - 0 1",
            "r4rk1/ppp2ppp/8/8/3q4/3B4/PP3PPP/R2QR1K1 w - - 0 1"]
    positions, status = parse_fen_list(fens)
    assert not status.any()
    reg = ev.registry
    pairs, values = np.array(reg.defaults), np.array(reg.value_defaults)
    h = 1e-4
    for i, pos in enumerate(positions):
        tape = new_tape(reg.n_values, reg.n_params, records=64)
        set_params(tape.arena, pairs, values)
        out = ev.record_eval(tape, ev.new_scratch(), pos)
        backward(tape, out)
        grad = tape.arena.pair_grad[: reg.n_params].copy()
        assert np.abs(grad[6:10]).sum() > 0  # the king-safety weights are reached
        for k in range(reg.n_params):
            for j in range(2):
                up, down = pairs.copy(), pairs.copy()
                up[k, j] += h
                down[k, j] -= h
                fd = (continuous(ev, positions[i:i + 1], up, values)[0]
                      - continuous(ev, positions[i:i + 1], down, values)[0]) / (2 * h)
                assert math.isclose(grad[k, j], fd, rel_tol=1e-6, abs_tol=1e-6), (fens[i], k, j)


#: In a copy of the package: the tutorial's evaluation of that copy (loaded by path) records the
#: queen attack; prints the evaluation, the module's name, the copy and whether it compiled.
COPY_SCRIPT = """
import sys, numpy as np, tuner
from tuner.chess.fen import parse_fen_list
from tuner.compiling import watch_compilation
from tuner.evals import get_evaluation
from tuner.tape import new_tape, set_params
ev = get_evaluation(str(tuner.ROOT / "examples" / "kingsafety.py"))
positions, _ = parse_fen_list([sys.argv[1]])
tape = new_tape(ev.registry.n_values, ev.registry.n_params, records=64)
set_params(tape.arena, np.array(ev.registry.defaults), np.array(ev.registry.value_defaults))
with watch_compilation(lambda: None) as watch:
    out = ev.record_eval(tape, ev.new_scratch(), positions[0])
print(repr(float(tape.arena.val[out])), ev.record_eval.py_func.__module__, tuner.ROOT,
      watch.compiled)
"""


def test_the_example_of_another_copy_of_the_package_loads_the_cached_machine_code(tmp_path):
    """The package's own example file is cached by the package's sources, shared by every copy
    of them (another clone, an installed wheel): a copy of the package that loads the machine
    code compiled here imports it under the same name, which Numba needs to rebuild the cached
    function (a name derived from its path failed there with ModuleNotFoundError)."""
    ev = get_evaluation("kingsafety.py", EXAMPLES)
    assert ev.record_eval.py_func.__module__ == "tuner.examples.kingsafety"
    positions, _ = parse_fen_list([QUEEN_ATTACK])
    tape = new_tape(ev.registry.n_values, ev.registry.n_params, records=64)
    set_params(tape.arena, np.array(ev.registry.defaults), np.array(ev.registry.value_defaults))
    here = float(tape.arena.val[ev.record_eval(tape, ev.new_scratch(), positions[0])])  # cached
    root = tmp_path / "copy"
    shutil.copytree(tuner.ROOT, root / "tuner",
                    ignore=shutil.ignore_patterns("__pycache__", "samples", "configs"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(PYTHONPATH=str(root), NUMBA_CACHE_DIR=str(tuner.cache_base()))
    r = subprocess.run([sys.executable, "-c", COPY_SCRIPT, QUEEN_ATTACK], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    # the same evaluation, from the copy's file, loaded from what this process cached
    assert r.stdout.split() == [repr(here), "tuner.examples.kingsafety", str(root / "tuner"),
                                "False"]


# -- tuner params: the parameters a run starts from --------------------------------------------

@pytest.mark.parametrize("init", [["--init", "random", "--random-seed", "7", "--random-range",
                                   "30"], ["--init", "default"], []])
def test_params_writes_what_a_run_starts_from(runner, tmp_path, init):
    """`tuner params EVALUATION --init ...` gives, bit for bit, the start of a run whose
    [evaluation] keys say the same (and with no --init, the keys' default: zero)."""
    out = tmp_path / "start.json"
    r = runner.invoke(main, ["params", str(EXAMPLES / "kingsafety.py"), *init, "-o", str(out)])
    assert r.exit_code == 0, r.output
    keys = dict(zip([k.lstrip("-").replace("-", "_") for k in init[::2]], init[1::2]))
    ev = {"name": str(EXAMPLES / "kingsafety.py"), **{k: (v if k == "init" else float(v) if
                                                       k == "random_range" else int(v))
                                                    for k, v in keys.items()}}
    cfg_path = tmp_path / "c.toml"
    cfg_path.write_text('[data]\ntrain = ["tiny"]\n[evaluation]\n'
                        + "".join(f"{k} = {json.dumps(v)}\n" for k, v in ev.items()))
    run = Run(load_config(cfg_path), tmp_path / "run")
    start = ParamRegistry.from_json(out)
    reg = run.registry
    assert start.names == reg.names and start.meta["evaluation"] == "kingsafety"
    assert np.concatenate([start.defaults.reshape(-1), start.value_defaults]).tobytes() == \
        run.theta.tobytes()
    if not init:
        assert not start.defaults.any()
    ev_obj = get_evaluation("kingsafety.py", EXAMPLES)
    ev_obj.check_params(start)  # a parameter file of the evaluation: --params, diff, init


def test_params_of_a_configuration_and_bad_options(runner, tmp_path):
    r = runner.invoke(main, ["params", "--config", str(EXAMPLES / "kingsafety.toml")])
    assert r.exit_code == 0, r.output
    start = ParamRegistry.from_dict(json.loads(r.stdout))
    run = Run(load_config(EXAMPLES / "kingsafety.toml"), tmp_path / "run")
    assert start.defaults.tobytes() == run.params.tobytes() and start.meta["K"] == 0.0025
    r = runner.invoke(main, ["params", "material", "--random-range", "0"])
    assert r.exit_code != 0 and "--random-range" in r.stderr and "(0, 1e+09]" in r.stderr
    r = runner.invoke(main, ["params", "material", "--config", str(EXAMPLES / "kingsafety.toml")])
    assert r.exit_code != 0 and "give neither EVALUATION" in r.stderr
    r = runner.invoke(main, ["params", "nope.py"])
    assert r.exit_code != 0 and "no such evaluation file: nope.py" in r.stderr


# -- export: namespace and line length ---------------------------------------------------------

def test_export_names_the_namespace_after_the_evaluation_and_wraps_long_arrays(runner, tmp_path):
    """A run's best.json of an evaluation of one's own exports in that evaluation's namespace
    (not `best`), and an array of 30 pairs is wrapped to the width of the file's other lines."""
    reg = ParamRegistry.from_dict({"params": [
        {"name": "QUEEN_MOBILITY", "shape": [30], "offset": 0,
         "values": [[-1000 + k, 1000 - k] for k in range(30)]},
        {"name": "PST", "shape": [64], "offset": 30, "values": [[-100, 100]] * 64}]})
    best = tmp_path / "best.json"
    best.write_text(reg.with_meta(evaluation="mine").dumps(note={"K": 0.004, "best_epoch": 3}))
    r = runner.invoke(main, ["export", str(best)])
    assert r.exit_code == 0, r.output
    text = r.stdout
    assert text.startswith("// K: 0.004\n// best_epoch: 3\n")
    assert "namespace mine {" in text and "namespace best" not in text
    lines = text.splitlines()
    start = lines.index("inline constexpr Pair QUEEN_MOBILITY[30] = {")
    body = lines[start + 1:lines.index("};", start)]
    header = [ln for ln in lines if ln.startswith("//")]
    assert len(body) > 1 and max(map(len, body)) <= max(map(len, header))
    assert ", ".join(ln.strip().rstrip(",") for ln in body) == ", ".join(
        f"{{{-1000 + k}, {1000 - k}}}" for k in range(30))
    pst = lines.index("inline constexpr Pair PST[64] = {")
    assert lines[pst + 1].count("{") == 8  # a table keeps a rank a line
    plain = tmp_path / "nameless.json"
    reg.to_json(None, plain)
    r = runner.invoke(main, ["export", str(plain)])
    assert r.exit_code == 0 and "namespace nameless {" in r.stdout and "// K:" not in r.stdout
