"""Atomic file writes: a crash or Ctrl-C leaves the old file or the complete new one, never half."""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import BinaryIO, Iterator


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file written beside `path`; on success it is fsynced and renamed over `path`, on
    any error (or interruption) removed."""
    path = os.fspath(path)
    head, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(dir=head or ".", prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write `data` (text is UTF-8 encoded) atomically to `path` (see `atomic_open`)."""
    with atomic_open(path) as f:
        f.write(data.encode("utf-8") if isinstance(data, str) else data)
