"""Parameter registry JSON I/O and the C++ / JSON exporters."""
import json
import re

import numpy as np
import pytest

from tuner.evals import clockwork as cw
from tuner.evals.export import export, round_half_away, round_params, to_cpp, to_json
from tuner.evals.registry import ParamRegistry


@pytest.fixture(scope="module")
def reg():
    return cw.registry()


def _random_values(reg, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(reg.n_params, 2)) * 300
    v[::7] = np.round(v[::7])            # some integral values
    v[1, 0] = -0.0
    v[2] = (2.5, -2.5)                   # halves
    v[3] = (0.49999999999999994, -1e-300)
    v[4] = (1e17 + 2, -3.0000000000000004)
    return v


def test_default_json_is_the_shipped_file(reg):
    with open(cw.PARAMS_PATH) as f:
        assert reg.to_json() == f.read()


def test_json_round_trip_exact(reg, tmp_path):
    v = _random_values(reg)
    path = tmp_path / "tuned.json"
    text = to_json(reg, v, path)
    assert path.read_text() == text
    back = ParamRegistry.from_json(path)
    assert back.defaults.view(np.int64).tolist() == v.view(np.int64).tolist()  # bit-exact
    assert back.names == reg.names
    assert np.array_equal(back.constant, reg.constant)
    assert [g.offset for g in back.groups] == [g.offset for g in reg.groups]
    assert back.meta == reg.meta
    # same schema as clockwork-params.json
    d = json.loads(text)
    with open(cw.PARAMS_PATH) as f:
        ref = json.load(f)
    assert set(d) == set(ref)
    assert [set(p) for p in d["params"]] == [set(p) for p in ref["params"]]
    # and a second round trip is a fixed point
    assert back.to_json() == text


def test_json_rejects_bad_values(reg):
    v = np.array(reg.defaults)
    v[0, 0] = np.nan
    with pytest.raises(ValueError):
        reg.to_json(v)
    with pytest.raises(ValueError):
        reg.to_json(v[:10])


def test_round_half_away():
    cases = {2.5: 3, -2.5: -3, 0.5: 1, -0.5: -1, 1.4999999999999998: 1, 0.49999999999999994: 0,
             -0.49999999999999994: 0, 3.0: 3, -7.5: -8, 2.0 ** 60: 2 ** 60,
             -(2.0 ** 60) - 256: -(2 ** 60) - 256, -0.0: 0}
    for x, r in cases.items():
        assert round_half_away(x) == r, x
    assert round_params(np.array([[2.5, -2.5]])).tolist() == [[3, -3]]


_S = re.compile(r"\b(C?S)\((-?\d+), (-?\d+)\)")


def _parse_cpp(text):
    """name -> list of (kind, mg, eg) from the exported header."""
    out = {}
    for m in re.finditer(r"inline const (?:PParam|std::array<PParam, (\d+)>) (\w+)\s*=\s*(.*?);",
                         text, re.S):
        size, name, body = m.groups()
        vals = [(k, int(a), int(b)) for k, a, b in _S.findall(body)]
        if size is not None:
            assert len(vals) == int(size), name
        out[name] = vals
    return out


def test_cpp_round_trip(reg):
    v = _random_values(reg, 3)
    text = to_cpp(reg, v)
    parsed = _parse_cpp(text)
    assert list(parsed) == reg.names
    r = round_params(v)
    for g in reg.groups:
        got = parsed[g.name]
        assert [(a, b) for _, a, b in got] == [tuple(x) for x in r[g.slice].tolist()], g.name
        assert [k == "CS" for k, _, _ in got] == list(g.constant), g.name
    assert text.count("CS(") == 6
    assert "inline const PParam TEMPO_VAL" in text
    assert "inline const std::array<PParam, 48> PAWN_PSQT = {" in text


def test_cpp_tables_eight_a_line(reg):
    text = to_cpp(reg)
    block = text.split("std::array<PParam, 64> KNIGHT_PSQT = {\n")[1].split("};")[0]
    lines = block.strip("\n").split("\n")
    assert len(lines) == 8 and all(len(_S.findall(line)) == 8 for line in lines)
    # defaults print as the engine's own values
    assert "S(-403, -162)," in lines[0]
    assert "inline const PParam PAWN_MAT" in text and "= S(291, 312);" in text
    assert "CS(0, 0), S(13, 101)" in text


def test_export_dispatch(reg, tmp_path):
    p = tmp_path / "out.hpp"
    assert export(reg, reg.defaults, "cpp", p) == p.read_text()
    with pytest.raises(ValueError):
        export(reg, reg.defaults, "yaml")


def test_registry_lookup_helpers(reg):
    g = reg.group_of(reg.index("QUEEN_MOBILITY", 27))
    assert g.name == "QUEEN_MOBILITY" and g.size == 28
    assert reg.values_of(reg.defaults, "KING_MOBILITY").shape == (9, 2)
    assert reg.entry_names()[0] == "PAWN_MAT" and reg.entry_names()[17] == "PAWN_PHALANX[0]"
    ids = reg.group_ids()
    assert ids[0] == 0 and ids[-1] == len(reg.groups) - 1


# -- the generic array form --------------------------------------------------------------------

_DECL = re.compile(r"^inline constexpr (Pair|int) (\w+)((?:\[\d+\])*) = (.*?);$", re.M | re.S)


def _parse_array_cpp(text):
    """{identifier: (type, dims, nested lists)} of every declaration of the array form."""
    out = {}
    for ctype, ident, dims, init in _DECL.findall(text):
        as_json = re.sub(r",(\s*[\]}])", r"\1", init.replace("{", "[").replace("}", "]"))
        out[ident] = (ctype, tuple(int(d) for d in re.findall(r"\d+", dims)), json.loads(as_json))
    return out


@pytest.mark.parametrize("name", ["clockwork", "clockwork-10d79e6", "material", "kingsafety"])
def test_array_form_reads_back_as_the_rounded_values(name):
    """Every group of any shape and kind, parsed back from the C++ text, is the rounded values;
    names are made identifiers (KING_SAFETY_ACTIVATION.a) and constants listed."""
    from shared import REPO
    from tuner.evals import get_evaluation
    from tuner.evals.export import cpp_identifier, to_array_cpp

    ev = get_evaluation("kingsafety.py", REPO / "examples") if name == "kingsafety" \
        else get_evaluation(name)
    r = ev.registry
    v = _random_values(r, seed=3) if r.n_params > 5 else r.defaults * 1.3
    vv = np.random.default_rng(4).normal(size=r.n_values) * 50
    text = to_array_cpp(r, v, vv, ev.name)
    assert f"namespace {cpp_identifier(ev.name)} {{" in text and "Clockwork" not in text
    decls = _parse_array_cpp(text)
    assert list(decls) == [cpp_identifier(g.name) for g in r.groups]
    iv, ivv = round_params(v), round_params(vv)
    for g in r.groups:
        ctype, dims, init = decls[cpp_identifier(g.name)]
        assert dims == tuple(g.shape)
        if g.kind == "value":
            assert ctype == "int"
            assert np.array_equal(np.array(init).reshape(-1), ivv[g.slice])
        else:
            assert ctype == "Pair"
            assert np.array_equal(np.array(init).reshape(-1, 2), iv[g.slice])
    if any(any(g.constant) for g in r.groups):
        assert "// not tuned" in text


def test_array_form_refuses_names_that_collide():
    from tuner.evals.export import to_array_cpp

    reg = ParamRegistry.from_dict({"params": [
        {"name": "A.b", "shape": [], "offset": 0, "values": [[1, 2]]},
        {"name": "A_b", "shape": [], "offset": 1, "values": [[3, 4]]}]})
    with pytest.raises(ValueError, match=r"'A.b' and 'A_b' both become the C\+\+ name A_b"):
        to_array_cpp(reg)
