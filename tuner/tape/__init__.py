"""Arena-allocated tape autograd engine.

`recording` (records and operands, no values) and `arena` (values and gradients, parameters
first) are separate; a `Tape` is a recorder writing one recording over one arena. `ops` is the op
table (each op's forward and backward side by side, the recorders and the sweeps), `linear` the
lazy linear accumulator, `player` freezes recordings into a compact per-position store and
replays it, `follow` copies out a recording of positions of a known structure without matching
them (what freezing would give, checked record by record), `graph` a Python front end for tests
and interactive use.
"""
from .arena import Arena, new_arena, set_params
from .recording import (Recording, Tape, TapeFullError, capacity, grow, new_recording, new_tape,
                        reset, zero_grad, zero_param_grad)
from .linear import LinearAccumulator, lin_add, lin_clear, lin_record_pair, new_accumulator
from .ops import *  # noqa: F401,F403  (the op table: record_*, tags, forms, kernels)
from .player import FreezeError, Store, backward, forward, freeze, freeze_tape, play
from .graph import Graph, Pair, Value
