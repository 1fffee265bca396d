"""Exporting parameter values: Clockwork C++ source (``to_cpp``) and registry JSON (``to_json``).

``to_cpp`` writes paste-ready source in the style of Clockwork's ``src/eval_constants.hpp``:
scalars as ``inline const PParam NAME = S(mg, eg);``, arrays as
``inline const std::array<PParam, N> NAME = { S(..), ... };``, piece-square tables eight entries a
line, constant (never tuned) entries as ``CS(mg, eg)``. Values are rounded to integers like C++
``std::round`` (half away from zero), which is what the engine's tuner prints after every epoch.
"""
from __future__ import annotations

import math

import numpy as np

from tuner.fileio import atomic_write
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
    """float64[n, 2] rounded with ``std::round`` semantics, as int64."""
    v = np.asarray(values, dtype=np.float64)
    out = np.empty(v.shape, dtype=np.int64)
    flat_in, flat_out = v.reshape(-1), out.reshape(-1)
    for i in range(flat_in.size):
        flat_out[i] = round_half_away(flat_in[i])
    return out


def _is_table(g) -> bool:
    return g.name.endswith("_PSQT") or (len(g.shape) == 1 and g.shape[0] in (48, 64))


def to_cpp(registry: ParamRegistry, values=None, namespace: str = "Clockwork") -> str:
    """Clockwork ``eval_constants.hpp`` source for ``values`` (float64[n, 2]; defaults if None)."""
    v = registry.defaults if values is None else registry.check_values(values)
    iv = round_params(v)
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


def to_json(registry: ParamRegistry, values=None, path=None) -> str:
    """Registry-schema JSON for ``values`` (exact round trip through ``ParamRegistry.from_json``)."""
    return registry.to_json(values, path)


def export(registry: ParamRegistry, values, fmt: str, path=None) -> str:
    """Format ``values`` as ``fmt`` ('cpp' or 'json'); write to ``path`` if given; return the text."""
    if fmt == "json":
        return registry.to_json(values, path)
    if fmt == "cpp":
        text = to_cpp(registry, values)
        if path is not None:
            atomic_write(path, text)
        return text
    raise ValueError(f"unknown export format {fmt!r} (expected 'cpp' or 'json')")
