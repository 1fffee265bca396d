"""Atomic file writes: a crash or Ctrl-C leaves the old file or the complete new one, never half.

The new content goes to a hidden temporary file beside the target (``.<name>.<random>.tmp``),
which is locked (``flock``) while it is written, fsynced, given the mode the umask allows (like any
file the process creates) and renamed over the target. A process killed before the rename leaves
its temporary file behind, unlocked: `remove_stale_temps` deletes those, never one that another
process is still writing. A failed write raises `WriteError`, which names the target.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator

#: Name pattern of the temporary files: ``.<target name>.<random>.tmp``.
TEMP_PREFIX, TEMP_SUFFIX = ".", ".tmp"
#: Mode of a new file before the umask applies (what ``open()`` uses).
NEW_FILE_MODE = 0o666


class WriteError(OSError):
    """A file could not be written; the message names it and the reason (e.g. disk full)."""

    def __init__(self, path: str | os.PathLike, err: OSError):
        reason = err.strerror or str(err)
        code = errno.errorcode.get(err.errno, "") if err.errno else ""
        super().__init__(err.errno, f"cannot write {os.fspath(path)}: {reason}"
                         + (f" ({code})" if code else ""))
        self.filename = os.fspath(path)

    def __str__(self) -> str:
        return self.strerror


def current_umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def new_file_mode() -> int:
    """The permission bits a newly created file gets under the current umask."""
    return NEW_FILE_MODE & ~current_umask()


def temp_path_for(path: str | os.PathLike) -> tuple[int, str]:
    """A new locked temporary file beside `path`: (fd, name). The lock (``flock``, exclusive)
    marks it as in use until the fd is closed, so `remove_stale_temps` leaves it alone."""
    head, name = os.path.split(os.fspath(path))
    fd, tmp = tempfile.mkstemp(dir=head or ".", prefix=f"{TEMP_PREFIX}{name}.", suffix=TEMP_SUFFIX)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd, tmp


def finish_temp(tmp: str, path: str | os.PathLike, mode: int | None = None) -> None:
    """Give the temporary file `tmp` `mode` (by default the umask's) and rename it over `path`;
    the rename is made durable by syncing the folder."""
    os.chmod(tmp, new_file_mode() if mode is None else mode)
    os.replace(tmp, path)
    try:
        dfd = os.open(os.path.dirname(os.fspath(path)) or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:  # some file systems cannot sync a folder; the rename itself is done
        pass
    finally:
        os.close(dfd)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: int | None = None) -> Iterator[BinaryIO]:
    """A binary file written beside `path`; on success it is fsynced, given `mode` (by default
    what the umask allows) and renamed over `path`, on any error (or interruption) removed. An
    OSError (disk full, read-only file system, no permission) becomes a `WriteError` naming
    `path`."""
    path = os.fspath(path)
    try:
        fd, tmp = temp_path_for(path)
    except OSError as e:
        raise WriteError(path, e) from None
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
            finish_temp(tmp, path, mode)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, WriteError):
            raise WriteError(path, exc) from None
        raise


def atomic_write(path: str | os.PathLike, data: bytes | str, mode: int | None = None) -> None:
    """Write `data` (text is UTF-8 encoded) atomically to `path` (see `atomic_open`)."""
    with atomic_open(path, mode) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)


def remove_stale_temps(folder: str | os.PathLike, name: str = "") -> list[Path]:
    """Delete the temporary files of atomic writes in `folder` that no process holds any more
    (left by a kill); with `name`, only those of that target file. Returns what was removed."""
    removed = []
    pattern = f"{TEMP_PREFIX}{name}.*{TEMP_SUFFIX}" if name else f"{TEMP_PREFIX}*{TEMP_SUFFIX}"
    for p in Path(folder).glob(pattern):
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # still being written by another process
            os.close(fd)
            continue
        try:
            p.unlink()
            removed.append(p)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def read_json(path: str | os.PathLike, error: type[Exception] = ValueError,
              **options) -> object:
    """The JSON value in file `path` (UTF-8; `options` go to ``json.loads``, e.g.
    ``parse_constant``). Anything that stops it, an unreadable file, bytes that are not UTF-8, text
    that is not JSON (with its line and column), nesting too deep for the parser or a ValueError of
    an option's hook, raises `error` with one line naming the file."""
    import json

    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise error(f"{path}: no such file") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a JSON file") from None
    except OSError as e:
        raise error(f"{path}: cannot read it ({e.strerror or e})") from None
    try:
        return json.loads(data.decode("utf-8"), **options)
    except UnicodeDecodeError as e:
        raise error(f"{path}: not a text file (byte {e.start} is not UTF-8)") from None
    except json.JSONDecodeError as e:
        raise error(f"{path}:{e.lineno}:{e.colno}: not JSON ({e.msg})") from None
    except RecursionError:
        raise error(f"{path}: arrays or objects nested too deeply for the JSON parser (about "
                    f"a thousand levels at most)") from None
    except ValueError as e:
        raise error(f"{path}: {e}") from None
