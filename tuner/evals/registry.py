"""Parameter registry: names, shapes, flat offsets, defaults and constant flags of an evaluation.

The on-disk schema is the one of ``clockwork-params.json`` (see ``tuner/evals/params/``)::

    {"source": ..., "format": ..., "K": ..., "phase_weights": {...}, "phase_max": 24,
     "total_pair_entries": N, "constant_pair_entries": C,
     "params": [{"name": ..., "shape": [...], "offset": ..., "values": [[mg, eg], ...],
                 "constant": [bool, ...]}, ...]}

Every parameter entry is a pair (mg, eg). Groups are stored in registration order and flattened
row-major, so entry ``i`` of group ``g`` has flat index ``g.offset + i``. ``ParamRegistry.to_json``
writes the same schema with the values replaced, so a tuned output is readable by ``from_json``.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from tuner.fileio import atomic_write

_SCHEMA_KEYS = ("source", "format", "K", "phase_weights", "phase_max")


@dataclass(frozen=True)
class ParamGroup:
    """One named parameter (a scalar pair or an array of pairs)."""

    name: str
    shape: tuple
    offset: int
    size: int
    constant: tuple  # one bool per entry

    @property
    def stop(self) -> int:
        return self.offset + self.size

    @property
    def slice(self) -> slice:
        return slice(self.offset, self.offset + self.size)

    def entry_name(self, i: int) -> str:
        if not self.shape:
            return self.name
        idx = np.unravel_index(i, self.shape)
        return self.name + "".join(f"[{int(k)}]" for k in idx)


class ParamRegistry:
    """Ordered set of pair parameters with flat offsets, defaults and constant flags.

    Attributes: ``groups`` (list of ParamGroup), ``names`` (group names in order), ``n_params``
    (number of pair entries), ``defaults`` (float64[n_params, 2]), ``constant`` (bool[n_params]),
    ``meta`` (the other top-level JSON fields: source, format, K, phase_weights, phase_max).
    """

    def __init__(self, groups: Sequence[ParamGroup], defaults: np.ndarray, meta: dict | None = None):
        self.groups = list(groups)
        self.names = [g.name for g in self.groups]
        self._by_name = {g.name: g for g in self.groups}
        if len(self._by_name) != len(self.groups):
            raise ValueError("duplicate parameter name in registry")
        n = 0
        for g in self.groups:
            if g.offset != n:
                raise ValueError(f"{g.name}: offset {g.offset}, expected {n}")
            if len(g.constant) != g.size or int(np.prod(g.shape, dtype=np.int64)) != g.size:
                raise ValueError(f"{g.name}: shape/size/constant length mismatch")
            n += g.size
        self.n_params = n
        self.defaults = np.ascontiguousarray(defaults, dtype=np.float64).reshape(n, 2)
        self.defaults.setflags(write=False)
        self.constant = np.array([c for g in self.groups for c in g.constant], dtype=np.bool_)
        self.constant.setflags(write=False)
        self.meta = dict(meta or {})

    # ------------------------------------------------------------------ lookup
    def __len__(self) -> int:
        return self.n_params

    def __iter__(self) -> Iterator[ParamGroup]:
        return iter(self.groups)

    def __contains__(self, name: str) -> bool:
        return name in self._by_name

    def group(self, name: str) -> ParamGroup:
        try:
            return self._by_name[name]
        except KeyError:
            raise KeyError(f"unknown parameter {name!r}") from None

    def offset(self, name: str) -> int:
        return self.group(name).offset

    def index(self, name: str, *idx: int) -> int:
        """Flat index of ``name`` (scalar) or ``name[idx...]`` (array), bounds-checked."""
        g = self.group(name)
        if len(idx) != len(g.shape):
            raise IndexError(f"{name} has shape {g.shape}, got index {idx}")
        for k, s in zip(idx, g.shape):
            if not 0 <= k < s:
                raise IndexError(f"{name}{list(idx)} out of range for shape {g.shape}")
        return g.offset + (int(np.ravel_multi_index(idx, g.shape)) if g.shape else 0)

    def group_of(self, flat: int) -> ParamGroup:
        """The group holding flat index ``flat``."""
        for g in self.groups:
            if g.offset <= flat < g.stop:
                return g
        raise IndexError(f"flat index {flat} out of range 0..{self.n_params - 1}")

    def entry_names(self) -> list:
        """One readable name per flat entry, e.g. ``KNIGHT_MOBILITY[3]``."""
        return [g.entry_name(i) for g in self.groups for i in range(g.size)]

    def group_ids(self) -> np.ndarray:
        """int32[n_params]: the group number of each flat entry."""
        out = np.empty(self.n_params, dtype=np.int32)
        for k, g in enumerate(self.groups):
            out[g.slice] = k
        return out

    def values_of(self, values: np.ndarray, name: str) -> np.ndarray:
        """View of ``values[n_params, 2]`` for one group, reshaped to ``shape + (2,)``."""
        g = self.group(name)
        return np.asarray(values)[g.slice].reshape(g.shape + (2,))

    def check_values(self, values) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (self.n_params, 2):
            raise ValueError(f"values must have shape ({self.n_params}, 2), got {v.shape}")
        return v

    # ------------------------------------------------------------------ JSON I/O
    @classmethod
    def from_dict(cls, d: dict) -> "ParamRegistry":
        groups = []
        vals = []
        for p in d["params"]:
            shape = tuple(int(k) for k in p["shape"])
            size = int(np.prod(shape, dtype=np.int64))
            values = p["values"]
            const = p.get("constant", [False] * size)
            if len(values) != size or len(const) != size:
                raise ValueError(f"{p['name']}: {len(values)} values / {len(const)} flags for shape {shape}")
            for v in values:
                if len(v) != 2:
                    raise ValueError(f"{p['name']}: every value must be an [mg, eg] pair")
            groups.append(ParamGroup(p["name"], shape, int(p["offset"]), size, tuple(bool(c) for c in const)))
            vals.extend(values)
        defaults = np.array(vals, dtype=np.float64).reshape(-1, 2)
        meta = {k: d[k] for k in _SCHEMA_KEYS if k in d}
        reg = cls(groups, defaults, meta)
        if "total_pair_entries" in d and d["total_pair_entries"] != reg.n_params:
            raise ValueError(f"total_pair_entries {d['total_pair_entries']} != {reg.n_params} entries")
        if "constant_pair_entries" in d and d["constant_pair_entries"] != int(reg.constant.sum()):
            raise ValueError("constant_pair_entries does not match the constant flags")
        return reg

    @classmethod
    def from_json(cls, path) -> "ParamRegistry":
        with open(path) as f:
            return cls.from_dict(json.load(f))

    def to_dict(self, values=None) -> dict:
        v = self.defaults if values is None else self.check_values(values)
        d = {k: self.meta[k] for k in _SCHEMA_KEYS if k in self.meta}
        d["total_pair_entries"] = self.n_params
        d["constant_pair_entries"] = int(self.constant.sum())
        d["params"] = [
            {"name": g.name, "shape": list(g.shape), "offset": g.offset,
             "values": [[_num(v[i, 0]), _num(v[i, 1])] for i in range(g.offset, g.stop)],
             "constant": list(g.constant)}
            for g in self.groups
        ]
        return d

    def dumps(self, values=None) -> str:
        """JSON text in the layout of clockwork-params.json (one group per three lines)."""
        d = self.to_dict(values)
        head = {k: d[k] for k in d if k != "params"}
        lines = ["{"]
        for k, val in head.items():
            lines.append(f" {json.dumps(k)}: {json.dumps(val)},")
        lines.append(' "params": [')
        for j, p in enumerate(d["params"]):
            vals = ", ".join(f"[{_fmt(a)}, {_fmt(b)}]" for a, b in p["values"])
            lines.append(f'  {{"name": {json.dumps(p["name"])}, "shape": {json.dumps(p["shape"])}, '
                         f'"offset": {p["offset"]},')
            lines.append(f"   \"values\": [{vals}],")
            lines.append(f"   \"constant\": {json.dumps(p['constant'])}}}" + ("," if j + 1 < len(d["params"]) else ""))
        lines.append(" ]")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def to_json(self, values=None, path=None) -> str:
        """Serialise ``values`` (float64[n_params, 2]; defaults if None) in the registry schema.

        Floats are written with Python's shortest round-trip repr, integral values as integers, so
        ``from_json(path).defaults`` equals ``values`` exactly. Writes to ``path`` if given (atomically,
        via a temporary file) and returns the text.
        """
        text = self.dumps(values)
        if path is not None:
            atomic_write(path, text)
        return text


def _num(x: float):
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"parameter value {x} is not finite")
    if x.is_integer() and abs(x) < 2 ** 53 and not (x == 0 and math.copysign(1, x) < 0):
        return int(x)
    return x


def _fmt(x) -> str:
    return str(x) if isinstance(x, int) else repr(float(x))
