"""Parameter registry: names, kinds, shapes, flat offsets, defaults and constant flags.

The on-disk schema is the one of ``clockwork-params.json`` / ``clockwork-head-params.json`` (see
``tuner/evals/params/``)::

    {"source": ..., "format": ..., "evaluation": ..., "K": ..., "phase_weights": {...},
     "phase_max": 24, "note": {...},
     "total_pair_entries": N, "total_value_entries": V,
     "constant_pair_entries": C, "constant_value_entries": D,
     "params": [{"name": ..., "kind": "pair" | "value", "shape": [...], "offset": ...,
                 "values": [...], "constant": [bool, ...]}, ...]}

An entry of kind ``pair`` is an (mg, eg) pair, written ``[mg, eg]``; an entry of kind ``value`` is
a scalar. Other fields of an entry (e.g. ``sigmoid_B``) are kept in ``ParamGroup.extra`` and
written back. Entries without ``kind`` are pairs, and the ``*_value_entries`` counts are optional, so
pairs-only files written before value parameters existed load unchanged. Pairs and values live in
two separate flat vectors: groups are kept in registration order and flattened row-major, and entry
``i`` of group ``g`` has index ``g.offset + i`` in its own kind's vector.

``evaluation`` (the name of the evaluation the values belong to), ``K`` (the scale of the
sigmoid the values were tuned with) and ``note`` (what a run says about them: K, best epoch) are
written by runs and by ``tuner params``, and kept through a read and a write.

``ParamRegistry.to_json`` writes the same schema with the values replaced, so a tuned output is
readable by ``from_json``. A registry with value parameters writes ``kind`` on every group and the
value counts; a pairs-only registry writes the original schema (no ``kind``), byte for byte what it
was before.
"""
from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from tuner.errors import TunerError
from tuner.fileio import atomic_write, read_json

_SCHEMA_KEYS = ("source", "format", "evaluation", "K", "phase_weights", "phase_max", "note")
_ENTRY_KEYS = ("name", "kind", "shape", "offset", "values", "constant")

PAIR = "pair"
VALUE = "value"
KINDS = (PAIR, VALUE)
#: Largest magnitude a parameter file may hold: rounded, it still fits a 64-bit integer (the
#: trainer stops a run long before, at +-1e9).
MAX_PARAM_MAGNITUDE = 1e18
#: Largest number of entries of one parameter group.
MAX_GROUP_ENTRIES = 1 << 20


class ParamFileError(TunerError, ValueError):
    """A parameter file that cannot be used; the message names the file and the entry."""


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number_error(x) -> str | None:
    """Why `x` is not a usable parameter value (None if it is)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return f"must be a number, got {json.dumps(x)[:40]}"
    if not math.isfinite(x):
        return f"must be finite, got {x}"
    if abs(x) > MAX_PARAM_MAGNITUDE:
        return f"must be within +-{MAX_PARAM_MAGNITUDE:g}, got {x:g}"
    return None


def check_entry(p, where: str) -> None:
    """ValueError naming `where` (e.g. ``params[3] (PAWN_MAT)``) and the field if the JSON
    entry `p` is not a well-formed parameter group."""
    if not isinstance(p, dict):
        raise ValueError(f"{where}: must be an object, got {type(p).__name__}")
    for key in ("name", "shape", "offset", "values"):
        if key not in p:
            raise ValueError(f"{where}: missing {key!r}")
    if not isinstance(p["name"], str) or not p["name"]:
        raise ValueError(f"{where}.name: must be a non-empty string")
    shape = p["shape"]
    if not isinstance(shape, list) or not all(_is_int(k) and k >= 0 for k in shape):
        raise ValueError(f"{where}.shape: must be a list of integers >= 0, got "
                         f"{json.dumps(shape)[:40]}")
    size = math.prod(shape)
    if size > MAX_GROUP_ENTRIES:
        raise ValueError(f"{where}.shape: {size:,} entries, at most {MAX_GROUP_ENTRIES:,}")
    if not _is_int(p["offset"]) or p["offset"] < 0:
        raise ValueError(f"{where}.offset: must be an integer >= 0")
    kind = p.get("kind", PAIR)
    if kind not in KINDS:
        raise ValueError(f"{where}.kind: {kind!r}, expected one of {KINDS}")
    values = p["values"]
    if not isinstance(values, list) or len(values) != size:
        raise ValueError(f"{where}.values: must be a list of {size} entries for shape "
                         f"{tuple(shape)}")
    for j, v in enumerate(values):
        if kind == PAIR:
            if not isinstance(v, list) or len(v) != 2:
                raise ValueError(f"{where}.values[{j}]: every value of a pair must be an "
                                 f"[mg, eg] pair")
            items = ((f"{where}.values[{j}][{h}]", x) for h, x in enumerate(v))
        else:
            items = ((f"{where}.values[{j}]", v),)
        for at, x in items:
            err = _number_error(x)
            if err:
                raise ValueError(f"{at}: {err}")
    const = p.get("constant", [False] * size)
    if not isinstance(const, list) or len(const) != size or \
            not all(isinstance(c, bool) for c in const):
        raise ValueError(f"{where}.constant: must be a list of {size} booleans")


@dataclass(frozen=True)
class ParamGroup:
    """One named parameter: a scalar or an array of pairs (kind "pair") or of values ("value")."""

    name: str
    shape: tuple
    offset: int     # index of the first entry in its kind's flat vector
    size: int
    constant: tuple  # one bool per entry
    kind: str = PAIR
    extra: tuple = ()  # the JSON entry's other fields, as (key, value) items in file order

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
    """Ordered set of pair and value parameters with flat offsets, defaults and constant flags.

    Attributes: ``groups`` (every ParamGroup, in registration order), ``pair_groups`` and
    ``value_groups`` (the groups of each kind, in order), ``names`` (group names in order),
    ``n_params`` (number of pair entries), ``defaults`` (float64[n_params, 2]), ``constant``
    (bool[n_params]), ``n_values`` (number of value entries), ``value_defaults``
    (float64[n_values]), ``value_constant`` (bool[n_values]), ``meta`` (the other top-level JSON
    fields: source, format, evaluation, K, phase_weights, phase_max, note).
    """

    def __init__(self, groups: Sequence[ParamGroup], defaults: np.ndarray,
                 meta: dict | None = None, value_defaults: np.ndarray | None = None):
        self.groups = list(groups)
        self.names = [g.name for g in self.groups]
        self._by_name = {g.name: g for g in self.groups}
        if len(self._by_name) != len(self.groups):
            raise ValueError("duplicate parameter name in registry")
        sizes = {}
        for kind in KINDS:
            n = 0
            for g in self.groups:
                if g.kind not in KINDS:
                    raise ValueError(f"{g.name}: kind {g.kind!r}, expected one of {KINDS}")
                if g.kind != kind:
                    continue
                if g.offset != n:
                    raise ValueError(f"{g.name}: offset {g.offset}, expected {n}")
                if len(g.constant) != g.size or int(np.prod(g.shape, dtype=np.int64)) != g.size:
                    raise ValueError(f"{g.name}: shape/size/constant length mismatch")
                n += g.size
            sizes[kind] = n
        self.pair_groups = [g for g in self.groups if g.kind == PAIR]
        self.value_groups = [g for g in self.groups if g.kind == VALUE]
        self.n_params = sizes[PAIR]
        self.n_values = sizes[VALUE]
        self.defaults = _frozen(np.ascontiguousarray(defaults, dtype=np.float64).reshape(self.n_params, 2))
        vd = np.zeros(0) if value_defaults is None else value_defaults
        self.value_defaults = _frozen(np.ascontiguousarray(vd, dtype=np.float64).reshape(self.n_values))
        self.constant = _frozen(np.array([c for g in self.pair_groups for c in g.constant], dtype=np.bool_))
        self.value_constant = _frozen(np.array([c for g in self.value_groups for c in g.constant],
                                               dtype=np.bool_))
        self.meta = dict(meta or {})

    def with_meta(self, **fields) -> "ParamRegistry":
        """The same parameters and values with these top-level fields set (e.g. ``K=`` the K a
        run trained with, ``evaluation=`` its name); this registry is left as it is."""
        reg = copy.copy(self)
        reg.meta = {**self.meta, **fields}
        return reg

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
        """Flat index of ``name`` (scalar) or ``name[idx...]`` (array) in its kind's vector,
        bounds-checked."""
        g = self.group(name)
        if len(idx) != len(g.shape):
            raise IndexError(f"{name} has shape {g.shape}, got index {idx}")
        for k, s in zip(idx, g.shape):
            if not 0 <= k < s:
                raise IndexError(f"{name}{list(idx)} out of range for shape {g.shape}")
        return g.offset + (int(np.ravel_multi_index(idx, g.shape)) if g.shape else 0)

    def group_of(self, flat: int, kind: str = PAIR) -> ParamGroup:
        """The group of kind `kind` holding flat index ``flat`` of that kind's vector."""
        for g in self.groups:
            if g.kind == kind and g.offset <= flat < g.stop:
                return g
        n = self.n_params if kind == PAIR else self.n_values
        raise IndexError(f"flat {kind} index {flat} out of range 0..{n - 1}")

    def describe_index(self, flat: int, kind: str = PAIR) -> str:
        """Where flat index `flat` of kind `kind` falls, for error messages: the entry's name
        (``PST_KNIGHT[12]``) or, out of range, how far past the last entry (or before the first)
        it is, naming that entry and its group."""
        groups = [g for g in (self.pair_groups if kind == PAIR else self.value_groups) if g.size]
        n = self.n_params if kind == PAIR else self.n_values
        if not groups:
            return f"the evaluation has no {kind} parameters"
        if 0 <= flat < n:
            g = self.group_of(flat, kind)
            return g.entry_name(flat - g.offset)
        if flat < 0:
            first = groups[0]
            return f"before the first {kind} parameter, {first.entry_name(0)} (index 0)"
        last = groups[-1]
        return (f"{flat - n + 1} past the last {kind} parameter, "
                f"{last.entry_name(last.size - 1)} (index {n - 1})")

    def entry_names(self) -> list:
        """One readable name per flat pair entry, e.g. ``KNIGHT_MOBILITY[3]``."""
        return [g.entry_name(i) for g in self.pair_groups for i in range(g.size)]

    def value_entry_names(self) -> list:
        """One readable name per flat value entry."""
        return [g.entry_name(i) for g in self.value_groups for i in range(g.size)]

    def group_ids(self) -> np.ndarray:
        """int32[n_params]: for each flat pair entry, the position of its group in ``groups``."""
        out = np.empty(self.n_params, dtype=np.int32)
        for k, g in enumerate(self.groups):
            if g.kind == PAIR:
                out[g.slice] = k
        return out

    def values_of(self, values: np.ndarray, name: str) -> np.ndarray:
        """View of one group in its kind's values: ``values[n_params, 2]`` reshaped to
        ``shape + (2,)`` for a pair group, ``values[n_values]`` reshaped to ``shape`` for a value
        group."""
        g = self.group(name)
        v = np.asarray(values)[g.slice]
        return v.reshape(g.shape + (2,)) if g.kind == PAIR else v.reshape(g.shape)

    def check_values(self, values) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (self.n_params, 2):
            raise ValueError(f"values must have shape ({self.n_params}, 2), got {v.shape}")
        return v

    def check_value_values(self, value_values) -> np.ndarray:
        v = np.asarray(value_values, dtype=np.float64)
        if v.shape != (self.n_values,):
            raise ValueError(f"value parameters must have shape ({self.n_values},), got {v.shape}")
        return v

    # ------------------------------------------------------------------ JSON I/O
    @classmethod
    def from_dict(cls, d: dict) -> "ParamRegistry":
        """A registry from the JSON schema; ValueError naming the entry and field if `d` is not
        one (every value a finite number within +-MAX_PARAM_MAGNITUDE)."""
        if not isinstance(d, dict) or not isinstance(d.get("params"), list):
            raise ValueError("not a parameter file: expected an object with a \"params\" list")
        for i, p in enumerate(d["params"]):
            check_entry(p, f"params[{i}]" + (f" ({p['name']})" if isinstance(p, dict)
                                              and isinstance(p.get("name"), str) else ""))
        groups = []
        vals = {PAIR: [], VALUE: []}
        for p in d["params"]:
            kind = p.get("kind", PAIR)
            if kind not in KINDS:
                raise ValueError(f"{p['name']}: kind {kind!r}, expected one of {KINDS}")
            shape = tuple(int(k) for k in p["shape"])
            size = int(np.prod(shape, dtype=np.int64))
            values = p["values"]
            const = p.get("constant", [False] * size)
            if len(values) != size or len(const) != size:
                raise ValueError(f"{p['name']}: {len(values)} values / {len(const)} flags for shape {shape}")
            for v in values:
                if kind == PAIR and (isinstance(v, (int, float)) or len(v) != 2):
                    raise ValueError(f"{p['name']}: every value of a pair must be an [mg, eg] pair")
                if kind == VALUE and not isinstance(v, (int, float)):
                    raise ValueError(f"{p['name']}: every value of a value parameter must be a number")
            extra = tuple((k, v) for k, v in p.items() if k not in _ENTRY_KEYS)
            groups.append(ParamGroup(p["name"], shape, int(p["offset"]), size,
                                     tuple(bool(c) for c in const), kind, extra))
            vals[kind].extend(values)
        defaults = np.array(vals[PAIR], dtype=np.float64).reshape(-1, 2)
        value_defaults = np.array(vals[VALUE], dtype=np.float64)
        meta = {k: d[k] for k in _SCHEMA_KEYS if k in d}
        reg = cls(groups, defaults, meta, value_defaults)
        for key, have in (("total_pair_entries", reg.n_params),
                          ("total_value_entries", reg.n_values),
                          ("constant_pair_entries", int(reg.constant.sum())),
                          ("constant_value_entries", int(reg.value_constant.sum()))):
            if key in d and d[key] != have:
                raise ValueError(f"{key} {d[key]} does not match the entries ({have})")
        return reg

    @classmethod
    def from_json(cls, path) -> "ParamRegistry":
        """Read a parameter file; ParamFileError naming the file and what is wrong with it
        (missing, not text, not JSON, nested too deeply, an entry out of range, ...)."""
        d = read_json(path, ParamFileError, parse_constant=_reject_constant)
        try:
            return cls.from_dict(d)
        except ValueError as e:
            raise ParamFileError(f"{path}: {e}") from None

    def to_dict(self, values=None, value_values=None) -> dict:
        v = self.defaults if values is None else self.check_values(values)
        vv = self.value_defaults if value_values is None else self.check_value_values(value_values)
        with_kinds = self.n_values > 0
        d = {k: self.meta[k] for k in _SCHEMA_KEYS if k in self.meta}
        d["total_pair_entries"] = self.n_params
        if with_kinds:
            d["total_value_entries"] = self.n_values
        d["constant_pair_entries"] = int(self.constant.sum())
        if with_kinds:
            d["constant_value_entries"] = int(self.value_constant.sum())
        params = []
        for g in self.groups:
            p = {"name": g.name}
            if with_kinds:
                p["kind"] = g.kind
            p["shape"] = list(g.shape)
            p["offset"] = g.offset
            p.update(g.extra)
            if g.kind == PAIR:
                p["values"] = [[_num(v[i, 0]), _num(v[i, 1])] for i in range(g.offset, g.stop)]
            else:
                p["values"] = [_num(vv[i]) for i in range(g.offset, g.stop)]
            p["constant"] = list(g.constant)
            params.append(p)
        d["params"] = params
        return d

    def dumps(self, values=None, value_values=None, note: dict | None = None) -> str:
        """JSON text in the layout of clockwork-params.json (one group per three lines); `note`
        (e.g. where tuned parameters came from) is written as the top-level ``"note"`` object
        (in place of the registry's own, if it has one)."""
        d = self.to_dict(values, value_values)
        head = {k: d[k] for k in d if k != "params"}
        if note is not None:
            head["note"] = note
        lines = ["{"]
        for k, val in head.items():
            lines.append(f" {json.dumps(k)}: {json.dumps(val)},")
        lines.append(' "params": [')
        for j, p in enumerate(d["params"]):
            if p.get("kind", PAIR) == PAIR:
                vals = ", ".join(f"[{_fmt(a)}, {_fmt(b)}]" for a, b in p["values"])
            else:
                vals = ", ".join(_fmt(a) for a in p["values"])
            kind = f'"kind": {json.dumps(p["kind"])}, ' if "kind" in p else ""
            extra = "".join(f" {json.dumps(k)}: {json.dumps(p[k])}," for k in p if k not in _ENTRY_KEYS)
            lines.append(f'  {{"name": {json.dumps(p["name"])}, {kind}"shape": {json.dumps(p["shape"])}, '
                         f'"offset": {p["offset"]},{extra}')
            lines.append(f"   \"values\": [{vals}],")
            lines.append(f"   \"constant\": {json.dumps(p['constant'])}}}" + ("," if j + 1 < len(d["params"]) else ""))
        lines.append(" ]")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def to_json(self, values=None, path=None, value_values=None) -> str:
        """Serialise ``values`` (float64[n_params, 2]) and ``value_values`` (float64[n_values];
        defaults where None) in the registry schema.

        Floats are written with Python's shortest round-trip repr, integral values as integers, so
        ``from_json(path)`` gives back ``values`` and ``value_values`` exactly. Writes to ``path``
        if given (atomically, via a temporary file) and returns the text.
        """
        text = self.dumps(values, value_values)
        if path is not None:
            atomic_write(path, text)
        return text


def _reject_constant(name: str):
    raise ValueError(f"{name} is not a number a parameter may hold")


def _frozen(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def _num(x: float):
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"parameter value {x} is not finite")
    if x.is_integer() and abs(x) < 2 ** 53 and not (x == 0 and math.copysign(1, x) < 0):
        return int(x)
    return x


def _fmt(x) -> str:
    return str(x) if isinstance(x, int) else repr(float(x))
