"""`tuner eval` and `tuner export` through click's CliRunner."""
import json

import numpy as np
import pytest
from click.testing import CliRunner

from shared import stderr_lines
from tuner.chess.fen import parse_fen_list
from tuner.cli import main
from tuner.evals import clockwork as cw
from tuner.evals.export import round_params
from tuner.evals.registry import ParamRegistry

START = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
KIWIPETE = "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1"
ENDGAME = "8/3k4/8/1PP3p1/6P1/p4K2/R7/7r w - - 0 45"


@pytest.fixture
def runner():
    return CliRunner()


def test_eval_arguments(runner):
    r = runner.invoke(main, ["eval", START, KIWIPETE, ENDGAME])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"{START};59", f"{KIWIPETE};-58", f"{ENDGAME};318"]


def test_eval_file_with_bad_line(runner, tmp_path):
    f = tmp_path / "in.txt"
    f.write_text(f"{START};w\n"
                 "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNX w KQkq - 0 1;d\n"
                 "\n"
                 f"{ENDGAME}\n"
                 "4k3/8/8/8/8/8/8/8 w - - 0 1\n"
                 f"{KIWIPETE} ; 0.5\n")
    r = runner.invoke(main, ["eval", "--file", str(f)])
    assert r.exit_code != 0
    assert r.stdout.splitlines() == [f"{START};59", f"{ENDGAME};318", f"{KIWIPETE};-58"]
    err = stderr_lines(r)
    assert len(err) == 2
    assert err[0].startswith(f"{f}:2: ") and "piece placement" in err[0]
    assert err[1].startswith(f"{f}:5: ") and "king" in err[1]


def test_eval_names_illegal_positions_per_line(runner, tmp_path):
    f = tmp_path / "illegal.txt"
    f.write_text(f"{START}\n"
                 "4k3/8/8/8/8/8/8/4r1K1 b - - 0 1\n"
                 "4k3/8/8/8/8/8/8/4K3 w KQ - 0 1\n"
                 "4k3/8/8/8/8/8/8/4K3 w - e6 0 1\n"
                 "4k3/8/8/8/8/1P6/PPPPPPPP/4K3 w - - 0 1\n")
    r = runner.invoke(main, ["eval", "--file", str(f)])
    assert r.exit_code != 0
    assert r.stdout.splitlines() == [f"{START};59"]
    assert stderr_lines(r) == [
        f"{f}:2: side to move: Black to move, but White's king on g1 is in check: 'b'",
        f"{f}:3: castling: right 'K' names no White rook on that side of the king on rank 1: 'KQ'",
        f"{f}:4: en passant: e6, but no Black pawn stands on e5 (no double push was just made): "
        "'e6'",
        f"{f}:5: piece placement: White has 9 pawns (at most 8): '4k3/8/8/8/8/1P6/PPPPPPPP/4K3'"]


def test_eval_stdin(runner):
    r = runner.invoke(main, ["eval", "--file", "-"], input=f"{START}\n{ENDGAME};b\n")
    assert r.exit_code == 0
    assert r.stdout.splitlines() == [f"{START};59", f"{ENDGAME};318"]


def test_eval_bad_argument(runner):
    r = runner.invoke(main, ["eval", START, "8/8/8 w - - 0 1"])
    assert r.exit_code != 0
    assert r.stdout.splitlines() == [f"{START};59"]
    assert stderr_lines(r)[0].startswith("arg:2: ")


def test_eval_needs_input(runner):
    r = runner.invoke(main, ["eval"])
    assert r.exit_code == 2


def test_breakdown(runner):
    r = runner.invoke(main, ["eval", "--breakdown", ENDGAME])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "phase: 4/24" in out
    assert "continuous eval: 318.833333" in out
    assert "integer eval (White POV): 318" in out
    assert out.rstrip().endswith(f"{ENDGAME};318")
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line[:1].isupper()}
    assert rows["POTENTIAL_CHECKER_VAL"][1:] == ["+1", "-75", "-3"]
    assert rows["PASSED_PAWN"][1:] == ["[3]+2", "[4]-1", "-2", "-71"]
    total = [line for line in out.splitlines() if line.startswith("total")][0].split()
    assert total[-2:] == ["98", "363"]


def test_eval_with_tuned_params(runner, tmp_path):
    reg = cw.registry()
    vals = reg.defaults * 1.01 + 0.3
    p = tmp_path / "tuned.json"
    reg.to_json(vals, p)
    r = runner.invoke(main, ["eval", "--params", str(p), KIWIPETE, ENDGAME])
    assert r.exit_code == 0, r.output
    pos, _ = parse_fen_list([KIWIPETE, ENDGAME])
    counts, ph = cw.feature_counts(pos)
    ri = round_params(vals)
    expect = [cw.int_eval(int(c.astype(np.int64) @ ri[:, 0]), int(c.astype(np.int64) @ ri[:, 1]), int(q))
              for c, q in zip(counts, ph)]
    assert r.stdout.splitlines() == [f"{KIWIPETE};{expect[0]}", f"{ENDGAME};{expect[1]}"]


def test_eval_bad_params_file(runner, tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"params": [{"name": "X", "shape": [], "offset": 0,
                                         "values": [[1, 2]], "constant": [False]}]}))
    r = runner.invoke(main, ["eval", "--params", str(p), START])
    assert r.exit_code != 0
    assert "541" in r.stderr


def test_export_json_and_cpp(runner, tmp_path):
    reg = cw.registry()
    vals = reg.defaults + np.random.default_rng(5).normal(size=reg.defaults.shape)
    p = tmp_path / "tuned.json"
    reg.to_json(vals, p)
    out = tmp_path / "again.json"
    r = runner.invoke(main, ["export", str(p), "--format", "json", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_text() == p.read_text()
    assert np.array_equal(ParamRegistry.from_json(out).defaults, vals)
    r = runner.invoke(main, ["export", str(p), "--format", "cpp"])
    assert r.exit_code == 0
    assert r.stdout.startswith("#pragma once")
    from tuner.evals.export import to_cpp
    assert r.stdout == to_cpp(reg, vals)


def test_export_missing_file(runner, tmp_path):
    r = runner.invoke(main, ["export", str(tmp_path / "nope.json")])
    assert r.exit_code != 0
