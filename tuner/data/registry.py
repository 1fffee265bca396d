"""Named datasets: ``datasets/registry.toml``.

The registry lives in the ``datasets/`` directory next to the ``tuner`` package (the repository
root), or in the directory (or the ``.toml`` file) named by the environment variable
``TUNER_DATASETS``. File paths in the registry are relative to the registry's directory.

Entry keys (table ``[datasets."NAME"]``):
    file        Parquet file, relative to the registry directory (required)
    rows        expected row count (optional; checked against the Parquet footer)
    sha256      expected SHA-256 of the file (optional; checked on every load)
    description one line for ``tuner data list``
    source      for sets users convert themselves: the text file name to convert
"""
from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .errors import DatasetError

ENV_VAR = "TUNER_DATASETS"
REGISTRY_FILE = "registry.toml"


@dataclass(frozen=True)
class RegistryEntry:
    name: str
    path: Path  # absolute
    rows: int | None = None
    sha256: str | None = None
    description: str = ""
    source: str | None = None  # text file users convert themselves (no shipped file)

    def convert_command(self) -> str:
        """The command that creates this file from its text source."""
        src = self.source or f"{self.name}.txt"
        return f"tuner convert path/to/{src} -o {display_path(self.path)}"


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def registry_path() -> Path:
    """Location of registry.toml (it may not exist)."""
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env).expanduser()
        return p if p.suffix == ".toml" else p / REGISTRY_FILE
    return Path(__file__).resolve().parents[2] / "datasets" / REGISTRY_FILE


def load_registry(path: Path | None = None) -> dict[str, RegistryEntry]:
    """All entries of the registry; {} when there is no registry file."""
    path = registry_path() if path is None else Path(path)
    if not path.is_file():
        if os.environ.get(ENV_VAR) and path == registry_path():
            raise DatasetError(f"{path}: no dataset registry there (set by ${ENV_VAR})")
        return {}
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise DatasetError(f"{path}: cannot read the dataset registry: {e}") from e
    table = doc.get("datasets", {})
    if not isinstance(table, dict):
        raise DatasetError(f"{path}: [datasets] must be a table")
    entries = {}
    for name, spec in table.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("file"), str):
            raise DatasetError(f"{path}: dataset '{name}' needs a 'file' string")
        sha = spec.get("sha256")
        if sha is not None and (not isinstance(sha, str) or len(sha) != 64):
            raise DatasetError(f"{path}: dataset '{name}': sha256 must be 64 hex digits")
        entries[name] = RegistryEntry(
            name=name, path=(path.parent / spec["file"]).resolve(), rows=spec.get("rows"),
            sha256=sha.lower() if sha else None, description=spec.get("description", ""),
            source=spec.get("source"))
    return entries


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def verify_entry(entry: RegistryEntry) -> None:
    """Check the file of a registry entry exists and matches its checksum."""
    if not entry.path.is_file():
        if entry.sha256 is None:
            raise DatasetError(
                f"dataset '{entry.name}': {display_path(entry.path)} does not exist; "
                f"create it with:\n  {entry.convert_command()}")
        raise DatasetError(
            f"dataset '{entry.name}': {display_path(entry.path)} is missing "
            "(it is shipped with the repository: restore it with git)")
    if entry.sha256 is not None:
        actual = sha256_file(entry.path)
        if actual != entry.sha256:
            raise DatasetError(
                f"{display_path(entry.path)}: checksum mismatch for dataset '{entry.name}': "
                f"expected sha256 {entry.sha256}, actual {actual}")


@dataclass(frozen=True)
class Resolved:
    path: Path
    entry: RegistryEntry | None  # None for a plain path

    @property
    def description(self) -> str:
        if self.entry is not None:
            return f"{self.entry.name} ({display_path(self.path)})"
        return str(self.path)


def resolve(name_or_path: str | os.PathLike) -> Resolved:
    """A registry name (checked: exists, checksum), else a path to an existing file."""
    key = os.fspath(name_or_path)
    registry = load_registry()
    if key in registry:
        entry = registry[key]
        verify_entry(entry)
        return Resolved(entry.path, entry)
    path = Path(key).expanduser()
    if path.is_dir():
        raise DatasetError(f"{key}: is a directory, not a Parquet file")
    if not path.exists():
        known = ", ".join(sorted(registry)) or "none"
        raise DatasetError(
            f"{key}: no such file, and not a registered dataset name (registered: {known})")
    return Resolved(path, None)
