"""A thin Python front end to the tape, for tests and interactive use.

`Value` and `Pair` are handles (an arena index and the graph) with the usual operators; every
operation calls the `@njit` recorder of `tuner.tape.ops`, so what is recorded here is exactly what
Numba code records. Hot loops should call the recorders directly instead.

>>> g = Graph()
>>> x = g.value(2.0)
>>> y = (x * x + 1.0).log()
>>> g.backward(y)
>>> round(x.grad, 6)
0.8
"""
from __future__ import annotations

from typing import Sequence, Union

import numpy as np

from . import ops
from .player import backward, forward
from .recording import new_tape, reset, zero_grad

Number = Union[int, float]


class Graph:
    """A tape with `n_value_params` value and `n_pair_params` pair parameters in front."""

    def __init__(self, n_value_params: int = 0, n_pair_params: int = 0, records: int = 1 << 12):
        self.tape = new_tape(n_value_params, n_pair_params, records=records)

    # Leaves and parameters.
    def value(self, x: Number) -> "Value":
        """A constant value leaf."""
        return Value(self, ops.record_const(self.tape, float(x)))

    def pair(self, mg: Number, eg: Number) -> "Pair":
        """A constant pair leaf."""
        return Pair(self, ops.record_const_pair(self.tape, float(mg), float(eg)))

    def value_param(self, i: int) -> "Value":
        """Handle of value parameter `i`."""
        return Value(self, i)

    def pair_param(self, i: int) -> "Pair":
        """Handle of pair parameter `i`."""
        return Pair(self, i)

    # N-ary ops.
    def _push(self, handles: Sequence, coefs: Sequence[Number] | None) -> int:
        first = ops.operand_mark(self.tape)
        for i, h in enumerate(handles):
            ops.push_operand(self.tape, h.index, 1.0 if coefs is None else float(coefs[i]))
        return first

    def sum(self, values: Sequence["Value"]) -> "Value":
        """Compensated sum of values."""
        return Value(self, ops.record_sum(self.tape, self._push(values, None)))

    def lincomb_value(self, values: Sequence["Value"], coefs: Sequence[Number]) -> "Value":
        """sum_i coefs[i] * values[i]"""
        return Value(self, ops.record_lincomb_value(self.tape, self._push(values, coefs)))

    def lincomb_pair(self, pairs: Sequence["Pair"], coefs: Sequence[Number]) -> "Pair":
        """sum_i coefs[i] * pairs[i]"""
        return Pair(self, ops.record_lincomb_pair(self.tape, self._push(pairs, coefs)))

    # Sweeps.
    def backward(self, output: "Value") -> None:
        """Gradients of `output` (parameter gradients accumulate until `zero_grad`)."""
        backward(self.tape, output.index)

    def forward(self) -> None:
        """Replay every record with the current parameter values."""
        forward(self.tape)

    def zero_grad(self) -> None:
        zero_grad(self.tape)

    def reset(self) -> None:
        """Drop every record and temporary; parameters stay."""
        reset(self.tape)


class Value:
    """Handle of a value slot."""

    __slots__ = ("graph", "index")

    def __init__(self, graph: Graph, index: int):
        self.graph, self.index = graph, int(index)

    @property
    def value(self) -> float:
        return float(self.graph.tape.arena.val[self.index])

    @property
    def grad(self) -> float:
        return float(self.graph.tape.arena.val_grad[self.index])

    def _wrap(self, index: int) -> "Value":
        return Value(self.graph, index)

    def _binary(self, o, with_value, with_scalar) -> "Value":
        """This value and `o`, recorded by `with_value` if `o` is a Value, else (a number) by
        `with_scalar`."""
        t = self.graph.tape
        return self._wrap(with_value(t, self.index, o.index) if isinstance(o, Value)
                          else with_scalar(t, self.index, float(o)))

    def __add__(self, o):
        return self._binary(o, ops.record_add, ops.record_add_scalar)

    __radd__ = __add__

    def __sub__(self, o):
        return self._binary(o, ops.record_sub, ops.record_sub_scalar)

    def __rsub__(self, s):
        return self._wrap(ops.record_scalar_sub(self.graph.tape, float(s), self.index))

    def __mul__(self, o):
        if isinstance(o, Pair):
            return Pair(self.graph, ops.record_value_mul_pair(self.graph.tape, self.index, o.index))
        return self._binary(o, ops.record_mul, ops.record_mul_scalar)

    def __rmul__(self, s):
        return self._wrap(ops.record_mul_scalar(self.graph.tape, self.index, float(s)))

    def __truediv__(self, o):
        if isinstance(o, Pair):
            return Pair(self.graph, ops.record_value_div_pair(self.graph.tape, self.index, o.index))
        return self._binary(o, ops.record_div, ops.record_div_scalar)

    def __rtruediv__(self, s):
        return self._wrap(ops.record_scalar_div(self.graph.tape, float(s), self.index))

    def __pow__(self, o):
        return self._binary(o, ops.record_pow, ops.record_pow_const)

    def __neg__(self):
        return self._wrap(ops.record_neg(self.graph.tape, self.index))

    def exp(self) -> "Value":
        return self._wrap(ops.record_exp(self.graph.tape, self.index))

    def log(self) -> "Value":
        return self._wrap(ops.record_log(self.graph.tape, self.index))

    def sigmoid(self) -> "Value":
        return self._wrap(ops.record_sigmoid(self.graph.tape, self.index))


class Pair:
    """Handle of a pair slot (mg, eg)."""

    __slots__ = ("graph", "index")

    def __init__(self, graph: Graph, index: int):
        self.graph, self.index = graph, int(index)

    @property
    def value(self) -> np.ndarray:
        return self.graph.tape.arena.pair_val[self.index].copy()

    @property
    def grad(self) -> np.ndarray:
        return self.graph.tape.arena.pair_grad[self.index].copy()

    def _wrap(self, index: int) -> "Pair":
        return Pair(self.graph, index)

    def __add__(self, o: "Pair") -> "Pair":
        return self._wrap(ops.record_pair_add(self.graph.tape, self.index, o.index))

    def __sub__(self, o: "Pair") -> "Pair":
        return self._wrap(ops.record_pair_sub(self.graph.tape, self.index, o.index))

    def __neg__(self) -> "Pair":
        return self._wrap(ops.record_pair_neg(self.graph.tape, self.index))

    def __mul__(self, o) -> "Pair":
        t = self.graph.tape
        if isinstance(o, Pair):
            return self._wrap(ops.record_pair_mul(t, self.index, o.index))
        if isinstance(o, Value):
            return self._wrap(ops.record_pair_mul_value(t, self.index, o.index))
        return self._wrap(ops.record_pair_mul_scalar(t, self.index, float(o)))

    def __rmul__(self, s) -> "Pair":
        return self._wrap(ops.record_pair_mul_scalar(self.graph.tape, self.index, float(s)))

    def __truediv__(self, o) -> "Pair":
        t = self.graph.tape
        if isinstance(o, Value):
            return self._wrap(ops.record_pair_div_value(t, self.index, o.index))
        return self._wrap(ops.record_pair_div_scalar(t, self.index, float(o)))

    def __rtruediv__(self, s) -> "Pair":
        return self._wrap(ops.record_scalar_div_pair(self.graph.tape, float(s), self.index))

    def sigmoid(self) -> "Pair":
        return self._wrap(ops.record_pair_sigmoid(self.graph.tape, self.index))

    def eg_scale(self, s: Number) -> "Pair":
        """(mg, eg * s)"""
        return self._wrap(ops.record_eg_scale(self.graph.tape, self.index, float(s)))

    def add_clamped_eg(self, v: Value) -> "Pair":
        """(mg, eg + v), the eg half clamped so that it cannot change sign."""
        return self._wrap(ops.record_add_clamped_eg(self.graph.tape, self.index, v.index))

    def phase(self, alpha: Number) -> Value:
        """alpha * mg + (1 - alpha) * eg"""
        return Value(self.graph, ops.record_phase(self.graph.tape, self.index, float(alpha)))
