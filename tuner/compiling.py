"""Noticing Numba compilation as it happens, so that a first run can say why it is slow.

Numba compiles a function the first time it is called with new argument types, unless its machine
code is in the on-disk cache (one folder per version of the sources, see `tuner`). It then fires a
``numba:compile`` event around the compilation, and only then: a function loaded from the cache
fires nothing. `watch_compilation` listens for that event and calls ``on_start`` before the first
compilation begins (once), so the announcement comes before the wait, never after.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from numba.core import event

#: The Numba event fired around every compilation (never for a function loaded from the cache).
COMPILE_EVENT = "numba:compile"
#: How commands announce a compilation; the tests recognise the line by it.
COMPILING = "compiling, first run only"


@dataclass
class CompileWatch:
    """What a `watch_compilation` block saw: whether anything compiled, and for how long (the
    outermost compilations only: a function compiles the functions it calls inside its own)."""

    compiled: bool = False
    seconds: float = 0.0


class _Listener(event.Listener):
    def __init__(self, on_start: Callable[[], None], watch: CompileWatch):
        self.on_start_cb = on_start
        self.watch = watch
        self.depth = 0
        self.t0 = 0.0
        self.lock = threading.Lock()

    def on_start(self, ev) -> None:
        with self.lock:
            self.depth += 1
            if self.depth > 1:
                return
            self.t0 = time.perf_counter()
            first = not self.watch.compiled
            self.watch.compiled = True
        if first:
            self.on_start_cb()

    def on_end(self, ev) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                self.watch.seconds += time.perf_counter() - self.t0


@contextmanager
def watch_compilation(on_start: Callable[[], None],
                      watch: CompileWatch | None = None) -> Iterator[CompileWatch]:
    """Within the block, call ``on_start()`` just before Numba starts the first compilation (in
    any thread); yields a `CompileWatch` filled in as the block runs. Passing the `watch` of an
    earlier block continues it: ``on_start`` is called once over all of them, seconds add up."""
    watch = CompileWatch() if watch is None else watch
    with event.install_listener(COMPILE_EVENT, _Listener(on_start, watch)):
        yield watch
