"""tuner: a fast Texel tuner for hand-crafted chess evaluations.

Importing the package points Numba's on-disk cache at a folder named after a hash of this
package's source files. Numba checks only the source file of a cached function itself, so after an
edit to a function it calls from another module (or an upgrade of the package) it could load
stale machine code; with one cache folder per version of the sources that cannot happen. Set
NUMBA_CACHE_DIR to choose the folder yourself.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
from pathlib import Path


@functools.cache
def source_digest() -> str:
    """A digest of this package's source files (names and contents), read once per process."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


#: How many cache folders (versions of the sources) to keep.
_KEEP = 4


def _configure_numba_cache() -> None:
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tuner" / "numba"
    folder = base / source_digest()
    if not folder.exists():
        try:
            folder.mkdir(parents=True)
            old = sorted((p for p in base.iterdir() if p != folder), key=lambda p: p.stat().st_mtime)
            for p in old[: max(0, len(old) - (_KEEP - 1))]:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:  # a read-only home: Numba then warns and compiles without caching
            pass
    folder = str(folder)
    os.environ["NUMBA_CACHE_DIR"] = folder
    if "numba" in sys.modules:  # imported before us: its config has already been read
        import numba
        numba.config.CACHE_DIR = folder


_configure_numba_cache()
