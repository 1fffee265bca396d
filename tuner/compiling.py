"""Noticing Numba compilation as it happens, so that a first run can say why it is slow.

Numba compiles a function the first time it is called with new argument types, unless its machine
code is in the on-disk cache (a folder per version of each layer of the sources, see `tuner` and
`LayeredCacheLocator`). It then fires a
``numba:compile`` event around the compilation, and only then: a function loaded from the cache
fires nothing. `watch_compilation` listens for that event and calls ``on_start`` before the first
compilation begins (once), so the announcement comes before the wait, never after.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from numba.core import event
from numba.core.caching import _CacheLocator, _SourceFileBackedLocatorMixin

import tuner
from tuner import cachedir

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


class LayeredCacheLocator(_SourceFileBackedLocatorMixin, _CacheLocator):
    """Where Numba keeps a function's machine code (``NUMBA_CACHE_LOCATOR_CLASSES``, set by
    `tuner`): in the folder of its layer's version, ``tuner.cache_folder(layer)``, so that it is
    used only with the sources it was compiled from (Numba itself checks the function's own file).

    A module of the package goes to ``<layer>-<digest>/tuner.<subpackage>`` (the same for every
    copy of the same sources, an installed one included); a module written into a layer's
    current folder (a generated player) is of that layer; any other module (a user's evaluation)
    counts as the top layer, keyed by every source of the package, in Numba's usual subfolder
    named after its folder."""

    def __init__(self, py_func, py_file: str):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        layer = tuner.layer_of(py_file)
        if layer is not None:
            inside = Path(py_file).resolve().relative_to(tuner.ROOT).parent.parts
            self._cache_path = os.path.join(tuner.cache_folder(layer), ".".join(("tuner", *inside)))
            return
        folder = tuner.cache_folder(tuner.generated_layer(py_file) or tuner.TOP)
        self._cache_path = os.path.join(folder, self.get_suitable_cache_subpath(py_file))

    def get_source_stamp(self):
        """What Numba compares to decide whether cached machine code is stale: for a module of
        the package, its layer's digest (its contents and those of the layers below, so a fresh
        clone or an installed copy of the same sources loads it, and an edit never does); for
        any other module, Numba's own stamp (the file's time and size)."""
        layer = tuner.layer_of(self._py_file)
        return super().get_source_stamp() if layer is None else tuner.layer_digest(layer)

    def ensure_cache_path(self) -> None:
        cachedir.private_folder(self._cache_path)
        tempfile.TemporaryFile(dir=self._cache_path).close()  # writable

    def get_cache_path(self) -> str:
        return self._cache_path
