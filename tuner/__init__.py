"""tuner: a fast Texel tuner for hand-crafted chess evaluations.

Importing the package points Numba's on-disk cache at ``$XDG_CACHE_HOME/tuner/numba``
(``~/.cache/...`` by default; set NUMBA_CACHE_DIR to choose the folder yourself). Inside it, a
module's machine code goes to the folder of its layer's version, ``<layer>-<layer_digest>``
(`tuner.compiling.LayeredCacheLocator`): the package's layers are stacked (`LAYERS`, calls go
downward only) and a layer's digest covers its own sources and those of every layer below it.
Numba checks only the source file of a cached function itself, so after an edit to a function it
calls from another module it could load stale machine code; here such an edit changes the digest
of the layer it is in and of every layer above, which then compile again, while the layers below
(and everything after an edit of the CLI or the docs) keep their machine code. A module outside
the layers (a user's evaluation, the tutorial's example) is keyed by every source of the package.
The newest `KEEP` versions of each layer are kept.

The folders are made 0700 and refused if another user could write to them (`tuner.cachedir`),
and Numba may cache nowhere else (not in the package's ``__pycache__``, which is not keyed by the
version). If one cannot be made (a read-only cache home) or is refused, a one-line warning says so
on stderr and the machine code goes to a private temporary folder of this process, removed at
exit: every such run compiles again.
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys
from pathlib import Path

#: The package's layers, bottom up, by rank: a layer calls into its own and lower ranks only
#: (train and plots side by side). A top-level module of `BASE_MODULES` is of the base layer, a
#: subpackage named here of its layer; anything else (the CLI's modules, the examples) counts as
#: the top layer, keyed by every source.
LAYERS: dict[str, int] = {"base": 0, "tape": 1, "chess": 2, "evals": 3, "data": 4, "train": 5,
                          "plots": 5, "cli": 6}
#: The layer everything not placed below counts as.
TOP = "cli"
#: The top-level modules of the base layer.
BASE_MODULES = frozenset({"__init__", "jit", "fileio", "cachedir", "compiling", "interrupt",
                          "shipped"})
#: How many versions of each layer's machine code to keep.
KEEP = 4

#: The package's folder.
ROOT = Path(__file__).resolve().parent


def layer_of(path: str | os.PathLike) -> str | None:
    """The layer of the source file `path`: a name of `LAYERS`, or None for a file outside the
    package."""
    try:
        parts = Path(path).resolve().relative_to(ROOT).parts
    except ValueError:
        return None
    if len(parts) == 1:
        return "base" if Path(parts[0]).stem in BASE_MODULES else TOP
    return parts[0] if parts[0] in LAYERS else TOP


@functools.cache
def _sources() -> tuple[tuple[str, str, bytes], ...]:
    """(layer, path relative to the package, contents) of every source file, read once."""
    return tuple((layer_of(p), p.relative_to(ROOT).as_posix(), p.read_bytes())
                 for p in sorted(ROOT.rglob("*.py")))


@functools.cache
def layer_digest(layer: str) -> str:
    """A digest of the sources (names and contents) of `layer` and of every layer below it, read
    once per process. ValueError for a name not in `LAYERS`."""
    if layer not in LAYERS:
        raise ValueError(f"{layer!r}: not a layer of the package (layers: {', '.join(LAYERS)})")
    h = hashlib.sha256()
    for own, name, data in _sources():
        if own == layer or LAYERS[own] < LAYERS[layer]:
            h.update(name.encode())
            h.update(data)
    return h.hexdigest()[:16]


def source_digest() -> str:
    """A digest of every source file of the package (names and contents), read once per
    process: the top layer's `layer_digest`."""
    return layer_digest(TOP)


#: Where Numba's machine code goes (set at import; see `cache_folder`).
_cache_base: Path | None = None


def cache_base() -> Path:
    """Numba's cache folder, which holds the version folders of the layers (`cache_folder`)."""
    return _cache_base


def cache_folder(layer: str) -> Path:
    """The private folder of `layer`'s version under Numba's cache folder,
    ``<cache>/<layer>-<layer_digest(layer)>``: made (0700) on first use in a process, when the
    older versions of the layer beyond `KEEP` are removed, and touched, so that the versions
    kept are the newest used. Where it cannot be made or is refused, a one-line warning and the
    folder goes into this process's temporary folder instead."""
    global _cache_base
    from tuner import cachedir

    try:
        return cachedir.version_folder(_cache_base, layer, layer_digest(layer), KEEP)
    except OSError as e:
        fallback = cachedir.process_folder()
        if _cache_base == fallback:
            raise
        sys.stderr.write(f"tuner: {cachedir.describe(e)}; compiled code is cached in {fallback} "
                         f"for this run only\n")
        _cache_base = fallback
        return cachedir.version_folder(_cache_base, layer, layer_digest(layer), KEEP)


def generated_layer(path: str | os.PathLike) -> str | None:
    """The layer whose current `cache_folder` holds the file `path` (a module generated for that
    version of the layer, such as a specialised player), or None."""
    try:
        parts = Path(path).resolve().relative_to(cache_base().resolve()).parts
    except ValueError:
        return None
    layer, _, digest = parts[0].partition("-")
    if len(parts) > 1 and layer in LAYERS and digest == layer_digest(layer):
        return layer
    return None


#: Where Numba looks for machine code: only `tuner.compiling.LayeredCacheLocator`.
LOCATOR = "tuner.compiling.LayeredCacheLocator"


def _configure_numba_cache() -> None:
    global _cache_base
    from tuner import cachedir

    cachedir.remove_dead_process_folders()
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    try:
        if chosen:
            folder = cachedir.private_folder(chosen)
        else:
            home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
            folder = cachedir.private_folder(home / "tuner" / "numba", top=home / "tuner")
            cachedir.remove_unlayered_versions(folder)
    except OSError as e:
        folder = cachedir.process_folder()
        sys.stderr.write(f"tuner: {cachedir.describe(e)}; compiled code is cached in {folder} "
                         f"for this run only (set NUMBA_CACHE_DIR to a folder of yours to keep "
                         f"it)\n")
    _cache_base = folder
    os.environ["NUMBA_CACHE_DIR"] = str(folder)
    # Only that locator: where a folder is unusable Numba would try the package's __pycache__.
    locators = os.environ.setdefault("NUMBA_CACHE_LOCATOR_CLASSES", LOCATOR)
    if "numba" in sys.modules:  # imported before us: its config has already been read
        import numba
        numba.config.CACHE_DIR = str(folder)
        numba.config.CACHE_LOCATOR_CLASSES = locators


_configure_numba_cache()
