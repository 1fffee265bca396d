"""Cache folders that only their owner can change.

The tuner keeps three caches: Numba's machine code (`tuner`), the generated players
(`tuner.tape.specialise`) and the replay stores (``[training] store_cache``). What they hold is run
(machine code, Python source) or trusted (stores), so a cache is used only where nobody else could
have written: `private_folder` makes missing folders 0700 whatever the umask and refuses, with
`CacheError`, a folder owned by another user or writable by its group or others; `open_private`
does the same for a file (and refuses a symbolic link).

`version_folder` is one version of a layer's machine code in Numba's cache folder
(``<layer>-<digest>``), the older versions beyond a number removed.

`process_folder` is the fallback where no such folder can be had (a read-only cache home): a 0700
temporary folder of this process, ``tuner-<pid>-<random>`` in the system temporary folder, removed
at exit. One left by a killed process is removed by the next import of `tuner`
(`remove_dead_process_folders`).
"""
from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import BinaryIO

#: Mode of the folders and files the caches create.
FOLDER_MODE, FILE_MODE = 0o700, 0o600
#: Permission bits that let someone other than the owner change a folder or file.
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
#: A process's temporary folder: ``tuner-<pid>-<random>`` (`process_folder`).
PROCESS_PREFIX = "tuner-"
_PROCESS_NAME = re.compile(r"tuner-(\d+)-[^/]+\Z")
#: What versions before these checks made for each process on a read-only cache, never removed:
#: removed (`remove_dead_process_folders`) once untouched for `LEGACY_AGE_S` seconds.
LEGACY_PREFIX = "tuner-players-"
LEGACY_AGE_S = 24 * 3600
#: A version of a layer's machine code (`version_folder`), and one of the versions before the
#: cache was keyed per layer (a folder per digest of all sources, `remove_unlayered_versions`).
_VERSION_NAME = re.compile(r"([a-z]+)-[0-9a-f]{16}\Z")
_UNLAYERED_NAME = re.compile(r"[0-9a-f]{16}\Z")


class CacheError(OSError):
    """A cache folder or file that is not used; the message names it and why (one line)."""

    def __init__(self, path: str | os.PathLike, problem: str):
        super().__init__(f"{os.fspath(path)}: {problem}; not used as a cache")

    def __str__(self) -> str:
        return self.args[0]


def describe(err: OSError) -> str:
    """`err` in one line naming the path (``path: reason``)."""
    if isinstance(err, CacheError) or not err.filename:
        return str(err)
    return f"{os.fspath(err.filename)}: {err.strerror or err}"


def check_private(path: str | os.PathLike, st: os.stat_result) -> None:
    """`CacheError` unless `st` (of `path`) is owned by this process's user and not writable by
    its group or others."""
    me = os.geteuid()
    if st.st_uid != me:
        raise CacheError(path, f"owned by uid {st.st_uid}, not by this user (uid {me})")
    if st.st_mode & OTHERS_WRITE:
        mode = stat.S_IMODE(st.st_mode)
        raise CacheError(path, f"mode {mode:o} lets its group or others write to it "
                               f"(`chmod go-w` it)")


def private_folder(path: str | os.PathLike, top: str | os.PathLike | None = None) -> Path:
    """`path` as a folder that only this user can change. Missing folders are created with mode
    0700 whatever the umask; `path` and its parents up to `top` (by default `path` alone) are
    checked (`check_private`). `CacheError` if one is not fit, OSError if one cannot be made."""
    path = Path(path)
    chain = [path, *path.parents]
    chain = chain[: chain.index(Path(top)) + 1] if top is not None else chain[:1]
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for p in reversed(missing):
        try:
            os.mkdir(p, FOLDER_MODE)
        except FileExistsError:  # made meanwhile by another process: checked below
            continue
        os.chmod(p, FOLDER_MODE)  # the umask may have taken the owner's bits too
    for p in chain:
        st = os.stat(p)
        if not stat.S_ISDIR(st.st_mode):
            raise CacheError(p, "a file, not a folder" if stat.S_ISREG(st.st_mode) else "not a folder")
        check_private(p, st)
    return path


def open_private(path: str | os.PathLike) -> BinaryIO:
    """`path` open for reading. `CacheError` if it is a symbolic link, not a regular file, or
    fails `check_private`; OSError (FileNotFoundError...) if it cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        if os.path.islink(path):
            raise CacheError(path, "a symbolic link") from None
        raise
    f = os.fdopen(fd, "rb")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CacheError(path, "not a regular file")
        check_private(path, st)
    except BaseException:
        f.close()
        raise
    return f


def version_folder(base: str | os.PathLike, layer: str, digest: str, keep: int) -> Path:
    """``base/<layer>-<digest>``, a `private_folder` (checked up to `base`) touched now. When it
    is made, the other versions of `layer` in `base` but the `keep` - 1 newest are removed."""
    base = Path(base)
    folder = base / f"{layer}-{digest}"
    new = not folder.exists()
    private_folder(folder, top=base)
    os.utime(folder)  # the newest used are kept
    if new:
        old = [p for p in base.iterdir() if p != folder and _is_version(p, layer)]
        old.sort(key=lambda p: p.stat().st_mtime)
        for p in old[: max(0, len(old) - (keep - 1))]:
            shutil.rmtree(p, ignore_errors=True)
    return folder


def _is_version(path: Path, layer: str) -> bool:
    m = _VERSION_NAME.match(path.name)
    return m is not None and m[1] == layer and path.is_dir() and not path.is_symlink()


def remove_unlayered_versions(base: str | os.PathLike) -> list[Path]:
    """Remove from `base` the folders named by a 16-digit hexadecimal digest, which versions
    before the cache was keyed per layer made (one per version of all the sources). Returns what
    was removed."""
    removed = []
    for p in Path(base).iterdir():
        if _UNLAYERED_NAME.match(p.name) and p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
    return removed


@functools.cache
def process_folder() -> Path:
    """A 0700 folder of this process in the system temporary folder (``tuner-<pid>-<random>``),
    removed when the process exits."""
    path = Path(tempfile.mkdtemp(prefix=f"{PROCESS_PREFIX}{os.getpid()}-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_dead_process_folders(folder: str | os.PathLike | None = None) -> list[Path]:
    """Remove this user's `process_folder` folders in `folder` (default: the system temporary
    folder) whose process is gone, and the ``tuner-players-*`` folders of older versions untouched
    for `LEGACY_AGE_S`. Returns what was removed."""
    folder = Path(folder if folder is not None else tempfile.gettempdir())
    me = os.geteuid()
    removed = []
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(PROCESS_PREFIX)]
    except OSError:
        return removed
    for e in entries:
        try:
            st = e.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != me:
            continue
        m = _PROCESS_NAME.match(e.name)
        if m:
            stale = not _alive(int(m[1]))
        else:
            stale = e.name.startswith(LEGACY_PREFIX) and time.time() - st.st_mtime > LEGACY_AGE_S
        if stale:
            shutil.rmtree(e.path, ignore_errors=True)
            removed.append(Path(e.path))
    return removed
