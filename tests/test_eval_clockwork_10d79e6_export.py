"""The 10d79e6 parameters: registry JSON with value parameters (exact round trips), the C++
export in the engine's own eval_constants.hpp layout (parsed back), and `tuner eval` /
`tuner export` on this evaluation."""
import json
import re

import numpy as np
import pytest
from click.testing import CliRunner

import shared

from tuner.cli import main
from tuner.evals import clockwork as cw
from tuner.evals import clockwork_10d79e6 as ev
from tuner.evals.export import cpp_round, export, round_params, to_cpp
from tuner.evals.registry import ParamRegistry

HEAD = shared.SPEC / "clockwork-head"
ENDGAME = "8/3k4/8/1PP3p1/6P1/p4K2/R7/7r w - - 0 45"
KIWIPETE = "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1"


@pytest.fixture(scope="module")
def reg():
    return ev.registry()


def _random(reg, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.normal(size=(reg.n_params, 2)) * 300
    p[::5] = np.round(p[::5])
    p[1] = (-0.0, 2.5)
    p[2] = (-0.3, 0.49999999999999994)
    v = rng.normal(size=reg.n_values) * 100
    v[0] = -0.25
    v[1] = 7.0
    return p, v


# ----------------------------------------------------------------------------------- registry JSON

def test_shipped_json_is_the_spec_file(reg):
    with open(HEAD / "clockwork-head-params.json") as f:
        spec = json.load(f)
    with open(ev.PARAMS_PATH) as f:
        text = f.read()
    assert json.loads(text) == spec
    assert reg.to_json() == text
    assert reg.value_defaults.tolist() == [-19, 101, 84, 88, -387]
    assert tuple(reg.defaults[ev.KS_ACTIVATION_A]) == (1361, 846)
    assert tuple(reg.defaults[ev.KS_ACTIVATION_C]) == (-21, 0)


def test_json_round_trip_with_values(reg, tmp_path):
    p, v = _random(reg)
    path = tmp_path / "tuned.json"
    text = reg.to_json(p, path, value_values=v)
    assert path.read_text() == text
    back = ParamRegistry.from_json(path)
    assert back.defaults.view(np.int64).tolist() == p.view(np.int64).tolist()      # bit-exact
    assert back.value_defaults.view(np.int64).tolist() == v.view(np.int64).tolist()
    assert back.names == reg.names and [g.kind for g in back.groups] == [g.kind for g in reg.groups]
    assert np.array_equal(back.constant, reg.constant)
    assert np.array_equal(back.value_constant, reg.value_constant)
    assert [g.extra for g in back.groups] == [g.extra for g in reg.groups]
    assert back.meta == reg.meta
    assert back.to_json() == text                       # a fixed point
    d = json.loads(text)
    assert d["total_value_entries"] == 5 and d["constant_value_entries"] == 0
    values = [g for g in d["params"] if g["kind"] == "value"]
    assert [g["name"] for g in values] == back.value_entry_names()
    assert all(isinstance(x, (int, float)) for g in values for x in g["values"])  # scalars, not pairs


def test_value_groups_in_registration_order():
    d = {"total_pair_entries": 3, "total_value_entries": 3,
         "params": [{"name": "P", "shape": [2], "offset": 0, "values": [[1, 2], [3, 4]]},
                    {"name": "V", "kind": "value", "shape": [2], "offset": 0, "values": [5, 6.5],
                     "constant": [False, True]},
                    {"name": "Q", "kind": "pair", "shape": [], "offset": 2, "values": [[7, 8]]},
                    {"name": "W", "kind": "value", "shape": [], "offset": 2, "values": [9]}]}
    r = ParamRegistry.from_dict(d)
    assert r.names == ["P", "V", "Q", "W"] and [g.name for g in r.pair_groups] == ["P", "Q"]
    assert (r.n_params, r.n_values) == (3, 3) and r.value_defaults.tolist() == [5, 6.5, 9]
    assert r.value_constant.tolist() == [False, True, False] and r.index("W") == 2
    assert r.entry_names() == ["P[0]", "P[1]", "Q"] and r.value_entry_names() == ["V[0]", "V[1]", "W"]
    assert r.values_of(r.value_defaults, "V").tolist() == [5, 6.5]
    assert r.values_of(r.defaults, "P").tolist() == [[1, 2], [3, 4]]
    assert r.group_of(1, "value").name == "V" and r.group_of(2).name == "Q"
    assert r.group_ids().tolist() == [0, 0, 2]
    back = ParamRegistry.from_dict(json.loads(r.to_json()))
    assert back.names == r.names and back.value_defaults.tolist() == [5, 6.5, 9]


@pytest.mark.parametrize("change, message", [
    (lambda d: d["params"][1].update(values=[[5, 5], [6, 6]]), "number"),
    (lambda d: d["params"][0].update(values=[1, 2]), "pair"),
    (lambda d: d["params"][1].update(kind="triple"), "kind"),
    (lambda d: d.update(total_value_entries=4), "total_value_entries"),
    (lambda d: d["params"][3].update(offset=1), "offset"),
])
def test_bad_value_entries(change, message):
    d = {"total_value_entries": 3,
         "params": [{"name": "P", "shape": [2], "offset": 0, "values": [[1, 2], [3, 4]]},
                    {"name": "V", "kind": "value", "shape": [2], "offset": 0, "values": [5, 6]},
                    {"name": "Q", "shape": [], "offset": 2, "values": [[7, 8]]},
                    {"name": "W", "kind": "value", "shape": [], "offset": 2, "values": [9]}]}
    change(d)
    with pytest.raises(ValueError, match=message):
        ParamRegistry.from_dict(d)


# ----------------------------------------------------------------------------------- C++

_CELL = r"(C?S)\((-?\d+), (-?\d+)\)"


def _parse_cpp(text):
    """name -> list of (kind, mg, eg) for pairs, (kind, v) for values; sigmoid -> its 4 ints."""
    out = {}
    for m in re.finditer(r"inline const (?:PParam|std::array<PParam, (\d+)>|std::array<std::array"
                         r"<PParam, (\d+)>, (\d+)>) (\w+)\s*=\s*(.*?);\n", text, re.S):
        size, cols, rows, name, body = m.groups()
        cells = [(k, int(a), int(b)) for k, a, b in re.findall(_CELL, body)]
        n = int(size) if size else int(cols) * int(rows) if cols else 1
        assert len(cells) == n, name
        out[name] = cells
    for m in re.finditer(r"inline VParam (\w+) = (C?V)\((-?\d+)\);", text):
        out[m.group(1)] = [(m.group(2), int(m.group(3)))]
    for m in re.finditer(r"inline TunableSigmoid<(\d+)> (\w+)\(\n {8}(-?\d+), (-?\d+), (-?\d+), "
                         r"(-?\d+)\n\);", text):
        assert m.group(1) == "32"
        a0, a1, c0, c1 = (int(x) for x in m.groups()[2:])
        out[m.group(2) + ".a"] = [("S", a0, a1)]
        out[m.group(2) + ".c"] = [("S", c0, c1)]
    return out


def test_cpp_round_trip(reg):
    p, v = _random(reg, 3)
    text = to_cpp(reg, p, value_values=v)
    parsed = _parse_cpp(text)
    assert list(parsed) != [] and sorted(parsed) == sorted(reg.names)
    rp, rv = round_params(p), round_params(v)
    for g in reg.groups:
        got = parsed[g.name]
        if g.kind == "value":
            assert [x for _, x in got] == rv[g.slice].tolist(), g.name
            assert [k == "CV" for k, _ in got] == list(g.constant)
        else:
            assert [(a, b) for _, a, b in got] == [tuple(x) for x in rp[g.slice].tolist()], g.name
            assert [k == "CS" for k, _, _ in got] == list(g.constant)
    # std::round prints negative zeros as -0; the sigmoid's std::lround never does
    assert "S(-0, 3)" in text and "V(-0)" in text and cpp_round(-0.0) == "-0" == cpp_round(-0.4)
    assert cpp_round(0.4) == "0" and cpp_round(-0.5) == "-1"


def test_cpp_defaults_in_the_engine_layout(reg):
    """The defaults print as the engine's own src/eval_constants.hpp at 10d79e6 does (its
    negative zeros aside: the JSON holds 0); a few of its lines verbatim."""
    text = to_cpp(reg)
    for line in ["inline const PParam PAWN_MAT   = S(197, 498);",
                 "inline const PParam BISHOP_XRAY_PAWNS   = S(-13, -3);",
                 "inline const PParam RESTRICTED_SQUARES = S(19, 7);",
                 "inline const std::array<PParam, 2> KNIGHT_ON_QUEEN = {\n    S(21, -18), S(30, -7),\n};",
                 "inline const std::array<std::array<PParam, 7>, 4> KING_SHELTER = {{\n"
                 "  {{ S(17, -20), S(-6, 5), S(-3, -10), S(8, -17), S(12, -29), S(7, -58), S(-5, -50), }},",
                 "    S(-255, -497),  S(-250, 52),    S(-269, -69),   S(30, 22),      S(-94, 43),     "
                 "S(-263, 79),    S(-362, 112),   S(-347, -388),  //",
                 "inline TunableSigmoid<32> KING_SAFETY_ACTIVATION(\n        1361, 846, -21, 0\n);\n\n"
                 "inline VParam WINNABLE_PAWNS = V(-19);",
                 "inline VParam WINNABLE_BIAS = V(-387);\n\n// clang-format on\n}  // namespace Clockwork\n"]:
        assert line in text, line
    assert text.startswith('#pragma once\n\n#include "eval_types.hpp"\n\nnamespace Clockwork {\n')
    assert len(text.splitlines()) == 207


def test_export_dispatch_and_cli(reg, tmp_path):
    p, v = _random(reg, 4)
    path = tmp_path / "tuned.json"
    reg.to_json(p, path, value_values=v)
    assert export(reg, p, "cpp", tmp_path / "a.hpp", v) == (tmp_path / "a.hpp").read_text()
    r = CliRunner().invoke(main, ["export", str(path), "--format", "cpp"])
    assert r.exit_code == 0, r.output
    assert r.stdout == to_cpp(reg, p, value_values=v)
    out = tmp_path / "again.json"
    r = CliRunner().invoke(main, ["export", str(path), "--format", "json", "-o", str(out)])
    assert r.exit_code == 0 and out.read_text() == path.read_text()
    pairs_only = ParamRegistry.from_dict({"params": [{"name": "X", "shape": [], "offset": 0,
                                                      "values": [[1, 2]]},
                                                     {"name": "Y", "kind": "value", "shape": [],
                                                      "offset": 0, "values": [3]}]})
    with pytest.raises(ValueError, match="value parameters"):
        to_cpp(pairs_only)


# ----------------------------------------------------------------------------------- tuner eval

def test_eval_cli_endgames_file():
    """`tuner eval --evaluation clockwork-10d79e6 --file` prints the conformance file back."""
    path = HEAD / "conformance-endgames.txt"
    r = CliRunner().invoke(main, ["eval", "--evaluation", "clockwork-10d79e6", "--file", str(path)])
    assert r.exit_code == 0, r.output
    want = path.read_text().splitlines()
    got = r.stdout.splitlines()
    matched = sum(a == b for a, b in zip(got, want))
    print(f"tuner eval: {matched} / {len(want)} lines matched")
    assert matched == len(want) == len(got) == 3000


def test_eval_cli_breakdown():
    r = CliRunner().invoke(main, ["eval", "-e", "clockwork-10d79e6", "--breakdown", ENDGAME])
    assert r.exit_code == 0, r.output
    out = r.stdout
    for text in ["A_W: White's attack on Black's king", "A_B: Black's attack on White's king",
                 "act, integer (table)", "winnable w = -129.000000 (integer, sign of eg applied: -129)",
                 "eg after winnable: continuous 587.998885, integer 588",
                 "integer applies 103", "phase: 4/24", "continuous eval: 403.419960",
                 "integer eval (White POV): 403"]:
        assert text in out, text
    assert out.rstrip().endswith(f"{ENDGAME};403")
    rows = {}
    for line in out.splitlines():
        if line[:1].isupper():
            rows.setdefault(line.split()[0], []).append(line.split()[1:])
    assert rows["TEMPO_VAL"] == [["+1", "69", "51"]]
    assert rows["KING_SHELTER"][0] == ["[2,0]+1", "[3,0]+2", "10", "15"]    # A_W, then A_B
    assert rows["KING_SHELTER"][1][:3] == ["[1,3]+1", "[2,0]+1", "[3,0]+1"]


def test_eval_cli_params(reg, tmp_path):
    p = reg.defaults * 1.01 + 0.3
    v = reg.value_defaults * 0.9
    path = tmp_path / "tuned.json"
    reg.to_json(p, path, value_values=v)
    r = CliRunner().invoke(main, ["eval", "-e", "clockwork-10d79e6", "--params", str(path),
                                  KIWIPETE, ENDGAME])
    assert r.exit_code == 0, r.output
    want = [ev.evaluate_fen(f, p, v)[0] for f in (KIWIPETE, ENDGAME)]
    assert want != [ev.evaluate_fen(f)[0] for f in (KIWIPETE, ENDGAME)]
    assert r.stdout.splitlines() == [f"{KIWIPETE};{want[0]}", f"{ENDGAME};{want[1]}"]
    # a parameter file of the other evaluation is refused, naming the layout
    r = CliRunner().invoke(main, ["eval", "-e", "clockwork-10d79e6", "--params",
                                  cw.PARAMS_PATH,
                                  ENDGAME])
    assert r.exit_code != 0 and "627" in r.stderr
