"""A small file system for the fault tests: a tmpfs when this process may mount one (root).
Tests that get None inject the same OSError into the writer instead."""
from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path


@contextlib.contextmanager
def small_disk(path: Path, size: str):
    """A tmpfs of `size` (e.g. "64k") mounted at `path` (created) if this process may mount one;
    else None. Unmounted on exit."""
    path.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True).returncode == 0 if os.geteuid() == 0 else False
    try:
        yield path if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], check=True)


def remount(path: Path, options: str) -> None:
    """Change the options of the tmpfs at `path` (``ro``, ``rw``, ``size=4m``)."""
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True)
