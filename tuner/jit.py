"""The options every compiled function of the package is compiled with, declared once.

``@njit(**JIT)`` for a function called from Python or from other compiled code, ``@njit(**INLINE)``
for a small helper that Numba should inline into its callers (at the Numba IR level, so that the
caller's types specialise it). All use NumPy's error model: a float division by zero gives an
infinity or a NaN instead of raising, which lets LLVM vectorise the loops; the code validates its
inputs before compiled code sees them, so no exception is lost by it. Machine code is cached on
disk (see `tuner` for where), and the GIL is released so that threads run compiled code at once.
"""
from __future__ import annotations

#: Options of every compiled function of the package.
JIT: dict = dict(cache=True, nogil=True, error_model="numpy")
#: Options of a small helper inlined into its callers.
INLINE: dict = dict(JIT, inline="always")
#: Options of a hot function that neither allocates nor returns an array (the recorders, an
#: evaluation's features, freezing's extraction): compiled without the runtime's reference
#: counting, so every array it reads, in a tuple (a Tape, an accumulator) or not, is one its
#: caller keeps alive. Numba would otherwise update the counts of a tuple's arrays on every access
#: to one of them where it cannot prove them redundant, which costs the recorders more than their
#: arithmetic.
BORROWED: dict = dict(JIT, _nrt=False)
#: Options of a recorder (`tuner.tape.ops.record_*`, `tuner.tape.linear.lin_record_pair`): a
#: `BORROWED` function inlined into its callers, since a call passing a Tape (some ninety words:
#: every array's data pointer, shape and strides) costs more than the record it appends.
RECORDER: dict = dict(BORROWED, inline="always")
