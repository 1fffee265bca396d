"""Arena-allocated tape autograd engine (see `tuner.tape.ops` for the op table)."""
from .arena import (Tape, TapeFullError, capacity, grow, new_pair, new_tape, new_value, reset,
                    zero_grad, zero_param_grad)
from .linear import LinearAccumulator, lin_add, lin_clear, lin_record_pair, new_accumulator
from .ops import *  # noqa: F401,F403  (the op table: record_*, forward, backward, ...)
from .graph import Graph, Pair, Value
