"""A run directory: its lock, its metadata (``run.json``) and clean-ups.

One process at a time trains in a directory: `RunLock` holds an exclusive ``flock`` on the
directory itself (no lock file to leave behind; the kernel releases it when the process ends,
however it ends). A second process is refused with a `RunBusyError` while the first holds it.
"""
from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
from pathlib import Path

from tuner.fileio import atomic_write, read_json

RUN_META = "run.json"


class RunBusyError(RuntimeError):
    """Another process trains in this directory."""


class RunLock:
    """An exclusive lock on a run directory, held from `acquire` to `release` (or the end of the
    process). Acquiring a lock this object already holds does nothing."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunBusyError(f"{self.directory}: another tuner process is training in this "
                               f"directory; wait for it to finish, or choose another "
                               f"--out") from None
        except OSError:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the last descriptor releases the flock

    def __del__(self):
        self.release()


class RunMetaError(ValueError):
    """``run.json`` cannot be read."""


def read_meta(directory: Path) -> dict:
    """``run.json`` of a run directory ({} when there is none): the config path the run was
    started from (``config``) and the epochs it trains to (``epochs``)."""
    path = Path(directory) / RUN_META
    if not path.exists():
        return {}
    try:
        meta = read_json(path, RunMetaError)
    except RunMetaError as e:
        raise RunMetaError(f"{e}; delete it to resume with the run's config.toml and "
                           f"--epochs") from None
    if not isinstance(meta, dict):
        raise RunMetaError(f"{path}: not a JSON object; delete it to resume with the run's "
                           f"config.toml and --epochs")
    return meta


def write_meta(directory: Path, **fields) -> None:
    """Update ``run.json`` with `fields` (atomically)."""
    meta = read_meta(directory)
    meta.update(fields)
    atomic_write(Path(directory) / RUN_META, json.dumps(meta))


def claim_new_dir(path: Path) -> Path:
    """Create the directory `path` or, when it exists (e.g. a run started in the same second),
    the first of ``path-2``, ``path-3``, ... that does not; mkdir is atomic, so no two processes
    get the same one. Returns the directory created."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for k in itertools.count(1):
        candidate = path if k == 1 else path.with_name(f"{path.name}-{k}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        return candidate
    raise AssertionError("unreachable")  # itertools.count never ends


def discard_new_run(directory: Path, created_dir: bool, files: tuple) -> None:
    """Undo the start of a run that failed before its first checkpoint: delete the `files` it
    created and, if it created it, the (then empty) directory."""
    for name in files:
        with contextlib.suppress(FileNotFoundError):
            (Path(directory) / name).unlink()
    if created_dir:
        with contextlib.suppress(OSError):  # not empty: something else lives there
            Path(directory).rmdir()
