"""tuner: a fast Texel tuner for hand-crafted chess evaluations.

Importing the package points Numba's on-disk cache at a folder named after a hash of this
package's source files, ``$XDG_CACHE_HOME/tuner/numba/<hash>`` (``~/.cache/...`` by default; the
newest `_KEEP` versions are kept). Numba checks only the source file of a cached function itself,
so after an edit to a function it calls from another module (or an upgrade of the package) it
could load stale machine code; with one cache folder per version of the sources that cannot
happen. Set NUMBA_CACHE_DIR to choose the folder yourself.

The folder is made 0700 and refused if another user could write to it (`tuner.cachedir`), and
Numba may cache nowhere else (not in the package's ``__pycache__``, which is not keyed by the
version). If it cannot be made (a read-only cache home) or is refused, a one-line warning says so
on stderr and the machine code goes to a private temporary folder of this process, removed at
exit: every such run compiles again.
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
    from tuner import cachedir

    cachedir.remove_dead_process_folders()
    chosen = os.environ.get("NUMBA_CACHE_DIR")
    try:
        if chosen:
            folder = cachedir.private_folder(chosen)
        else:
            home = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
            base = home / "tuner" / "numba"
            folder = base / source_digest()
            new = not folder.exists()
            cachedir.private_folder(folder, top=home / "tuner")
            if new:
                old = sorted((p for p in base.iterdir() if p != folder),
                             key=lambda p: p.stat().st_mtime)
                for p in old[: max(0, len(old) - (_KEEP - 1))]:
                    shutil.rmtree(p, ignore_errors=True)
    except OSError as e:
        folder = cachedir.process_folder()
        sys.stderr.write(f"tuner: {cachedir.describe(e)}; compiled code is cached in {folder} "
                         f"for this run only (set NUMBA_CACHE_DIR to a folder of yours to keep "
                         f"it)\n")
    folder = str(folder)
    os.environ["NUMBA_CACHE_DIR"] = folder
    # Only that folder: where it is unusable Numba would try the package's __pycache__ next.
    locators = os.environ.setdefault("NUMBA_CACHE_LOCATOR_CLASSES", "UserProvidedCacheLocator")
    if "numba" in sys.modules:  # imported before us: its config has already been read
        import numba
        numba.config.CACHE_DIR = folder
        numba.config.CACHE_LOCATOR_CLASSES = locators


_configure_numba_cache()
