"""Exporting parameter values: C++ source and registry JSON (``to_json``).

Every evaluation declares its C++ style (`tuner.evals.Evaluation.cpp`); `to_cpp_style` writes it:
Clockwork's (``to_cpp``) or the generic array form (``to_array_cpp``, below and in
docs/evaluations.md).

``to_cpp`` writes paste-ready source in the style of Clockwork's ``src/eval_constants.hpp``.
A registry whose groups are exactly those of a known engine header (`ENGINE_HEADERS`: the one of
commit 10d79e6, with its value parameters and the king-safety sigmoid) is written in that header's
own layout, line for line as the engine's tuner prints it (``S(mg, eg)``, ``V(v)``, tables eight
entries a line, ``std::array<std::array<..>>`` blocks, ``TunableSigmoid<B> NAME(a, a, c, c)``).
Any other registry of pairs is written generically: scalars as ``inline const PParam NAME =
S(mg, eg);``, arrays as ``inline const std::array<PParam, N> NAME = { S(..), ... };``,
piece-square tables eight entries a line. Constant (never tuned) entries are ``CS(..)`` /
``CV(..)``. Values are rounded to integers like C++ ``std::round`` (half away from zero), which is
what the engine's tuner prints after every epoch (``std::lround`` for the sigmoid's arguments).
"""
from __future__ import annotations

import math
import re

import numpy as np

from tuner.fileio import atomic_write
from . import CPP_ARRAY, CPP_CLOCKWORK, CPP_STYLES
from .registry import ParamRegistry


def round_half_away(x: float) -> int:
    """``std::round``: nearest integer, halves away from zero (exact for every finite double)."""
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"cannot round non-finite value {x}")
    a = abs(x)
    r = math.floor(a)
    if a - r >= 0.5:  # exact: a and r share exponent range, the difference is representable
        r += 1
    return int(-r if x < 0 else r)


def round_params(values) -> np.ndarray:
    """Values of any shape (e.g. float64[n, 2]) rounded with ``std::round`` semantics, as int64."""
    v = np.asarray(values, dtype=np.float64)
    out = np.empty(v.shape, dtype=np.int64)
    flat_in, flat_out = v.reshape(-1), out.reshape(-1)
    for i in range(flat_in.size):
        flat_out[i] = round_half_away(flat_in[i])
    return out


def _is_table(g) -> bool:
    return g.name.endswith("_PSQT") or (len(g.shape) == 1 and g.shape[0] in (48, 64))


def to_cpp(registry: ParamRegistry, values=None, namespace: str = "Clockwork",
           value_values=None) -> str:
    """Clockwork ``eval_constants.hpp`` source for ``values`` (float64[n_params, 2]) and
    ``value_values`` (float64[n_values]); defaults where None. See the module docstring."""
    v = registry.defaults if values is None else registry.check_values(values)
    vv = registry.value_defaults if value_values is None else registry.check_value_values(value_values)
    template = header_template(registry)
    if template is not None:
        return _fill_template(template, registry, v, vv, namespace)
    if registry.n_values:
        raise ValueError("value parameters can only be exported in the layout of a known engine "
                         f"header ({', '.join(ENGINE_HEADERS)})")
    return _generic_cpp(registry, v, namespace)


def _generic_cpp(registry: ParamRegistry, values, namespace: str) -> str:
    """eval_constants.hpp-style source of a pairs-only registry (scalars and 1-D arrays)."""
    iv = round_params(values)
    const = registry.constant

    def s(i: int) -> str:
        return f"{'CS' if const[i] else 'S'}({iv[i, 0]}, {iv[i, 1]})"

    out = ["#pragma once", "", '#include "eval_types.hpp"', "", f"namespace {namespace} {{", "",
           "// clang-format off"]
    groups = registry.groups
    k = 0
    while k < len(groups):
        g = groups[k]
        if not g.shape:
            # a run of scalars: align the '=' like the engine's header does
            run = [g]
            while k + len(run) < len(groups) and not groups[k + len(run)].shape:
                run.append(groups[k + len(run)])
            width = max(len(x.name) for x in run)
            for x in run:
                out.append(f"inline const PParam {x.name.ljust(width)} = {s(x.offset)};")
            k += len(run)
            out.append("")
            continue
        if len(g.shape) != 1:
            raise ValueError(f"{g.name}: only scalars and 1-D arrays can be exported to C++")
        n = g.size
        out.append(f"inline const std::array<PParam, {n}> {g.name} = {{")
        cells = [s(i) + "," for i in range(g.offset, g.stop)]
        if _is_table(g):
            w = max(len(c) for c in cells) + 1
            for r in range(0, n, 8):
                out.append("    " + "".join(c.ljust(w) for c in cells[r:r + 8]).rstrip() + "  //")
        else:
            out.append("    " + " ".join(cells))
        out.append("};")
        k += 1
    while out and out[-1] == "":
        out.pop()
    out += ["// clang-format on", "}", ""]
    return "\n".join(out)


def to_json(registry: ParamRegistry, values=None, path=None, value_values=None) -> str:
    """Registry-schema JSON for ``values`` (exact round trip through ``ParamRegistry.from_json``)."""
    return registry.to_json(values, path, value_values)


# ---------------------------------------------------------------------------------------------
# The generic array form: any registry, pairs and values, any shape. One declaration per
# parameter group, in registry order:
#
#   inline constexpr Pair NAME = {mg, eg};              a scalar pair
#   inline constexpr Pair NAME[5] = { {mg, eg}, ... };  an array (C arrays, row-major, any rank;
#                                                       64-entry tables eight entries a line)
#   inline constexpr int NAME = v;                      a value (int NAME[n] for arrays)
#
# inside ``namespace <evaluation name>`` with a ``struct Pair { int mg; int eg; };``. Values are
# rounded like std::round; a comment ``// not tuned: ...`` lists the constant entries of a group.
# Arrays other than 64-entry tables are wrapped at LINE_WIDTH characters.
# Group names become identifiers by replacing every other character with '_'.

ARRAY_INDENT = " " * 4
TABLE_SIZE = 64        # a group of this many entries is a board table: eight entries a line
TABLE_ROW = 8
#: Other arrays are wrapped to the width of the rest of the file (its comment lines).
LINE_WIDTH = 80
PAIR_STRUCT = ("struct Pair {", "    int mg;", "    int eg;", "};")


def cpp_identifier(name: str) -> str:
    """`name` as a C++ identifier: other characters become '_', a leading digit gets one."""
    ident = re.sub(r"\W", "_", name, flags=re.ASCII)
    return "_" + ident if ident[:1].isdigit() else ident


def _wrapped(cells: list, indent: str) -> list:
    """``cell,`` items on lines of at most `LINE_WIDTH` characters (a longer item alone)."""
    lines, line = [], indent
    for c in cells:
        item = c + ","
        if line != indent and len(line) + 1 + len(item) > LINE_WIDTH:
            lines.append(line)
            line = indent
        line += item if line == indent else " " + item
    return lines + [line]


def _nested(cells: list, shape: tuple, indent: str, table: bool) -> list:
    """Initializer lines of `cells` (strings, row-major) with `shape` (rank >= 1): a board table
    a rank a line, other arrays wrapped at `LINE_WIDTH`."""
    if len(shape) == 1:
        if not table:
            return _wrapped(cells, indent)
        return [indent + " ".join(c + "," for c in cells[r:r + TABLE_ROW])
                for r in range(0, len(cells), TABLE_ROW)]
    step = len(cells) // shape[0]
    out = []
    for r in range(shape[0]):
        out.append(indent + "{")
        out += _nested(cells[r * step:(r + 1) * step], shape[1:], indent + ARRAY_INDENT, table)
        out.append(indent + "},")
    return out


def to_array_cpp(registry: ParamRegistry, values=None, value_values=None,
                 name: str = "tuned") -> str:
    """The generic array form (see above) of `registry`'s parameters, in namespace `name`."""
    v = round_params(registry.defaults if values is None else registry.check_values(values))
    vv = round_params(registry.value_defaults if value_values is None
                      else registry.check_value_values(value_values))
    namespace = cpp_identifier(name)
    out = [f"// Parameters of the evaluation {name!r}, written by `tuner export` in the generic",
           "// array form (docs/evaluations.md): pairs {mg, eg} and values, rounded like",
           "// std::round; arrays have the registry's shapes, row-major.",
           "#pragma once", "", f"namespace {namespace} {{", "", *PAIR_STRUCT, ""]
    seen = {}
    for g in registry.groups:
        ident = cpp_identifier(g.name)
        if ident in seen:
            raise ValueError(f"parameter groups {seen[ident]!r} and {g.name!r} both become the "
                             f"C++ name {ident}")
        seen[ident] = g.name
        if g.kind == "value":
            ctype, cells = "int", [str(x) for x in vv[g.slice]]
        else:
            ctype, cells = "Pair", [f"{{{a}, {b}}}" for a, b in v[g.slice]]
        if all(g.constant):
            out.append("// not tuned")
        elif any(g.constant):
            out.append("// not tuned: entries " + ", ".join(
                str(i) for i, c in enumerate(g.constant) if c))
        if not g.shape:
            out.append(f"inline constexpr {ctype} {ident} = {cells[0]};")
            continue
        dims = "".join(f"[{n}]" for n in g.shape)
        out.append(f"inline constexpr {ctype} {ident}{dims} = {{")
        out += _nested(cells, tuple(g.shape), ARRAY_INDENT, g.size == TABLE_SIZE)
        out.append("};")
    out += ["", f"}}  // namespace {namespace}", ""]
    return "\n".join(out)


def cpp_comments(note) -> str:
    """The comment lines a run's C++ output starts with: ``// key: value`` for every item of
    `note` (a parameter file's ``"note"``: the K the run used, its best epoch); '' for none."""
    if not isinstance(note, dict):
        return ""
    return "".join(f"// {k}: {v}\n" for k, v in note.items())


def to_cpp_style(style: str, registry: ParamRegistry, values=None, value_values=None,
                 name: str = "tuned") -> str:
    """C++ source in `style` (one of `tuner.evals.CPP_STYLES`) of the evaluation `name`."""
    if style == CPP_CLOCKWORK:
        return to_cpp(registry, values, value_values=value_values)
    if style == CPP_ARRAY:
        return to_array_cpp(registry, values, value_values, name)
    raise ValueError(f"unknown C++ export style {style!r} (expected one of "
                     f"{', '.join(CPP_STYLES)})")


def export(registry: ParamRegistry, values, fmt: str, path=None, value_values=None,
           cpp_style: str = CPP_CLOCKWORK, name: str = "tuned") -> str:
    """Format ``values`` (and ``value_values``) as ``fmt`` ('cpp' in `cpp_style`, or 'json');
    write to ``path`` if given; return the text."""
    if fmt == "json":
        return registry.to_json(values, path, value_values)
    if fmt == "cpp":
        text = to_cpp_style(cpp_style, registry, values, value_values, name)
        if path is not None:
            atomic_write(path, text)
        return text
    raise ValueError(f"unknown export format {fmt!r} (expected 'cpp' or 'json')")


# ---------------------------------------------------------------------------------------------
# Engine headers reproduced line for line. A template is the header's text with every parameter
# replaced: ``@NAME`` is a scalar pair or value, a line ``@array NAME`` / ``@psqt NAME`` /
# ``@array2d NAME`` a 1-D array (one line), a table (eight entries a line) or a 2-D array, and
# ``@sigmoid NAME`` a TunableSigmoid (its pairs NAME.a and NAME.c). ``@namespace`` is the namespace.

HEADER_10D79E6 = """#pragma once

#include "eval_types.hpp"

namespace @namespace {

// clang-format off
inline const PParam PAWN_MAT   = @PAWN_MAT;
inline const PParam KNIGHT_MAT = @KNIGHT_MAT;
inline const PParam BISHOP_MAT = @BISHOP_MAT;
inline const PParam ROOK_MAT   = @ROOK_MAT;
inline const PParam QUEEN_MAT  = @QUEEN_MAT;

inline const PParam TEMPO_VAL  = @TEMPO_VAL;

inline const PParam BISHOP_XRAY_PAWNS   = @BISHOP_XRAY_PAWNS;
inline const PParam BISHOP_PAIR_VAL   = @BISHOP_PAIR_VAL;
inline const PParam ROOK_OPEN_VAL     = @ROOK_OPEN_VAL;
inline const PParam ROOK_SEMIOPEN_VAL = @ROOK_SEMIOPEN_VAL;
inline const PParam MINOR_BEHIND_PAWN = @MINOR_BEHIND_PAWN;
inline const PParam RESTRICTED_SQUARES = @RESTRICTED_SQUARES;

inline const PParam DOUBLED_PAWN_VAL = @DOUBLED_PAWN_VAL;
inline const PParam ISOLATED_PAWN_VAL = @ISOLATED_PAWN_VAL;

inline const PParam POTENTIAL_CHECKER_VAL = @POTENTIAL_CHECKER_VAL;
inline const PParam OUTPOST_KNIGHT_VAL    = @OUTPOST_KNIGHT_VAL;
inline const PParam OUTPOST_BISHOP_VAL    = @OUTPOST_BISHOP_VAL;

inline const PParam PAWN_PUSH_THREAT_KNIGHT = @PAWN_PUSH_THREAT_KNIGHT;
inline const PParam PAWN_PUSH_THREAT_BISHOP = @PAWN_PUSH_THREAT_BISHOP;
inline const PParam PAWN_PUSH_THREAT_ROOK   = @PAWN_PUSH_THREAT_ROOK;
inline const PParam PAWN_PUSH_THREAT_QUEEN  = @PAWN_PUSH_THREAT_QUEEN;

@array PAWN_PHALANX
@array DEFENDED_PAWN
@array PASSED_PAWN
@array PASSED_CLEAR_STOPPERS
@array PASSED_CLEAR_FORWARD
@array DEFENDED_PASSED_PUSH
@array BLOCKED_PASSED_PAWN

@array FRIENDLY_KING_PASSED_PAWN_DISTANCE
@array ENEMY_KING_PASSED_PAWN_DISTANCE

@array KNIGHT_MOBILITY
@array BISHOP_MOBILITY
@array ROOK_MOBILITY
@array QUEEN_MOBILITY

inline const PParam PAWN_THREAT_KNIGHT = @PAWN_THREAT_KNIGHT;
inline const PParam PAWN_THREAT_BISHOP = @PAWN_THREAT_BISHOP;
inline const PParam PAWN_THREAT_ROOK   = @PAWN_THREAT_ROOK;
inline const PParam PAWN_THREAT_QUEEN  = @PAWN_THREAT_QUEEN;

@array MINOR_THREAT
@array ROOK_THREAT
inline const PParam KING_THREAT  = @KING_THREAT;
inline const PParam HANGING_PAWN  = @HANGING_PAWN;
inline const PParam HANGING_NON_PAWN  = @HANGING_NON_PAWN;

@array KNIGHT_ON_QUEEN
@array BISHOP_ON_QUEEN
@array ROOK_ON_QUEEN

@array BISHOP_PAWNS

inline const PParam ROOK_LINEUP = @ROOK_LINEUP;

@psqt PAWN_PSQT
@psqt KNIGHT_PSQT
@psqt BISHOP_PSQT
@psqt ROOK_PSQT
@psqt QUEEN_PSQT
@psqt KING_PSQT

inline const PParam KS_NO_QUEEN = @KS_NO_QUEEN;

@array PT_INNER_RING_ATTACKS
@array PT_OUTER_RING_ATTACKS

inline const PParam KS_FLANK_ATTACK = @KS_FLANK_ATTACK;
inline const PParam KS_FLANK_DEFENSE = @KS_FLANK_DEFENSE;
inline const PParam KS_FLANK_DOUBLE_ATTACK   = @KS_FLANK_DOUBLE_ATTACK;
inline const PParam KS_FLANK_DOUBLE_DEFENSE  = @KS_FLANK_DOUBLE_DEFENSE;

@array2d KING_SHELTER
@array BLOCKED_SHELTER_STORM
@array2d SHELTER_STORM
@sigmoid KING_SAFETY_ACTIVATION

inline VParam WINNABLE_PAWNS = @WINNABLE_PAWNS;
inline VParam WINNABLE_SYM = @WINNABLE_SYM;
inline VParam WINNABLE_ASYM = @WINNABLE_ASYM;
inline VParam WINNABLE_PAWN_ENDGAME = @WINNABLE_PAWN_ENDGAME;
inline VParam WINNABLE_BIAS = @WINNABLE_BIAS;

// clang-format on
}  // namespace @namespace
"""

#: Engine commit -> its eval_constants.hpp as a template.
ENGINE_HEADERS = {"10d79e6": HEADER_10D79E6}

_SCALAR = re.compile(r"@(\w+)")
_BLOCK = re.compile(r"^@(array|psqt|array2d|sigmoid) (\w+)$")
PSQT_CELL = 16            # the engine's tuner prints table cells with std::setw(16)
PSQT_PER_LINE = 8
SIGMOID_INDENT = " " * 8
SIGMOID_SCALE_KEY = "sigmoid_B"


def _template_names(template: str) -> list:
    """The parameter group names a template refers to, in order."""
    names = []
    for line in template.split("\n"):
        m = _BLOCK.match(line)
        if m:
            kind, name = m.groups()
            names += [name + ".a", name + ".c"] if kind == "sigmoid" else [name]
        else:
            names += [n for n in _SCALAR.findall(line) if n != "namespace"]
    return names


def header_template(registry: ParamRegistry):
    """The engine header template whose groups are exactly the registry's, or None."""
    for template in ENGINE_HEADERS.values():
        if _template_names(template) == registry.names:
            return template
    return None


def cpp_round(x: float) -> str:
    """A value as the engine's tuner prints it: ``std::round`` through an ostream, so a negative
    value that rounds to zero prints as ``-0``."""
    r = round_half_away(x)
    return "-0" if r == 0 and math.copysign(1.0, float(x)) < 0 else str(r)


def _fill_template(template: str, registry: ParamRegistry, v, vv, namespace: str) -> str:
    def pair(i, const):
        return f"{'CS' if const[i] else 'S'}({cpp_round(v[i, 0])}, {cpp_round(v[i, 1])})"

    def scalar(name):
        g = registry.group(name)
        if g.kind == "value":
            return f"{'CV' if g.constant[0] else 'V'}({cpp_round(vv[g.offset])})"
        return pair(g.offset, registry.constant)

    out = []
    for line in template.split("\n"):
        m = _BLOCK.match(line)
        if m is None:
            out.append(_SCALAR.sub(lambda k: namespace if k.group(1) == "namespace"
                                   else scalar(k.group(1)), line))
            continue
        kind, name = m.groups()
        if kind == "sigmoid":
            a, c = registry.group(name + ".a"), registry.group(name + ".c")
            scale = dict(a.extra)[SIGMOID_SCALE_KEY]
            args = [round_half_away(x) for x in (v[a.offset, 0], v[a.offset, 1],
                                                  v[c.offset, 0], v[c.offset, 1])]
            out += [f"inline TunableSigmoid<{scale}> {name}(",
                    SIGMOID_INDENT + ", ".join(str(x) for x in args), ");"]
            continue
        g = registry.group(name)
        cells = [pair(i, registry.constant) for i in range(g.offset, g.stop)]
        if kind == "array2d":
            rows, cols = g.shape
            out.append(f"inline const std::array<std::array<PParam, {cols}>, {rows}> {name} = {{{{")
            for r in range(rows):
                out.append("  {{" + "".join(f" {c}," for c in cells[r * cols:(r + 1) * cols]) + " }},")
            out.append("}};")
            continue
        out.append(f"inline const std::array<PParam, {g.size}> {name} = {{")
        if kind == "psqt":
            for r in range(0, g.size, PSQT_PER_LINE):
                out.append("    " + "".join((c + ",").ljust(PSQT_CELL)
                                            for c in cells[r:r + PSQT_PER_LINE]) + "//")
        else:
            out.append("   " + "".join(f" {c}," for c in cells))
        out.append("};")
    return "\n".join(out)
