"""Atomic file writes: a crash or Ctrl-C leaves the old file or the complete new one, never half."""
from __future__ import annotations

import os
import tempfile


def atomic_write(path: str | os.PathLike, data: bytes | str) -> None:
    """Write `data` (text is UTF-8 encoded) beside `path`, fsync, then rename it over `path`."""
    path = os.fspath(path)
    head, name = os.path.split(path)
    fd, tmp = tempfile.mkstemp(dir=head or ".", prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
