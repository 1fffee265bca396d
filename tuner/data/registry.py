"""Named datasets: the registries (``registry.toml`` files) and the order they are searched in.

A dataset (in a configuration's ``[data] train``, ``tuner data stats``, ``load_dataset``) is a
URI, a path or a name. This is the one description of how it is found; ``tuner data list``
prints the same order with the files it found:

0. A URI, a value beginning ``scheme://`` (``s3://bucket/key.parquet``, ``file:///abs/x.parquet``),
   is that object, opened through pyarrow's filesystems (`tuner.data.uri`): never relative to
   anything, never a name.
1. A path, a value with a ``/`` or the suffix ``.parquet``, is that file: relative to the
   configuration file when it comes from one, else to the current directory.
2. A name is looked up in these registries; the first that lists it wins:

   a. the project's registry: the nearest ``datasets/registry.toml`` in the configuration
      file's folder or one of its parents; when there is none (or no configuration, or a
      shipped one), ``datasets/registry.toml`` in the current directory;
   b. ``$TUNER_DATASETS``: a directory holding ``registry.toml``, or a ``.toml`` file;
   c. the sample sets shipped inside the package (``tuner.shipped.SAMPLES_REGISTRY``).

3. A name no registry lists is a file of that name, if one exists (relative as in 1.).

No registry location is ever computed from where the package is installed except the shipped
one. File paths in a registry are relative to that registry file; a registry lists local files only
(a URI as its ``file`` is refused: give the URI itself in ``[data] train``).

Entry keys (table ``[datasets."NAME"]``):
    file        Parquet file, relative to the registry file (required)
    rows        expected row count (optional; checked against the Parquet footer)
    sha256      expected SHA-256 of the file (optional; checked on every load)
    description one line for ``tuner data list``
    source      for sets users convert themselves: the text file name to convert
"""
from __future__ import annotations

import enum
import hashlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from tuner.shipped import SAMPLES_REGISTRY, is_shipped_config
from .errors import DatasetError
from .uri import is_uri, locate

ENV_VAR = "TUNER_DATASETS"
REGISTRY_FILE = "registry.toml"
#: Where a project keeps its registry, relative to the project's folder.
PROJECT_REGISTRY = Path("datasets") / REGISTRY_FILE
PARQUET_SUFFIX = ".parquet"


class Origin(enum.Enum):
    """Why a registry is searched (the steps of the lookup order)."""

    PROJECT = "project of the configuration"
    CURRENT = "current directory"
    ENV = f"${ENV_VAR}"
    SHIPPED = "shipped with tuner"


@dataclass(frozen=True)
class RegistryFile:
    """One step of the lookup order: a registry file (it may not exist) and why it is searched."""

    origin: Origin
    path: Path | None  # None: $TUNER_DATASETS is not set

    @property
    def label(self) -> str:
        if self.path is None:
            return self.origin.value
        return f"{display_path(self.path)} ({self.origin.value})"


@dataclass(frozen=True)
class RegistryEntry:
    name: str
    path: Path  # absolute
    registry: Path  # the registry file that lists it
    rows: int | None = None
    sha256: str | None = None
    description: str = ""
    source: str | None = None  # text file users convert themselves (no shipped file)

    def convert_command(self) -> str:
        """The command that creates this file from its text source."""
        src = self.source or f"{self.name}.txt"
        return f"tuner convert path/to/{src} -o {display_path(self.path)}"

    def missing_hint(self) -> str:
        """What to do about a missing file that its registry lists with a checksum."""
        if self.registry == SAMPLES_REGISTRY:
            return "it ships with tuner: reinstall the package"
        return f"{display_path(self.registry)} lists it with a checksum: restore the file"


def display_path(path: Path) -> str:
    """``path`` relative to the working directory when it lies below it, else absolute."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def project_registry(config: Path) -> Path | None:
    """The nearest ``datasets/registry.toml`` in ``config``'s folder or one of its parents."""
    for folder in Path(config).resolve().parents:
        candidate = folder / PROJECT_REGISTRY
        if candidate.is_file():
            return candidate
    return None


def search_path(config: Path | None = None) -> list[RegistryFile]:
    """The registries a name is looked up in, in order (see the module's docstring), for names
    from the configuration file ``config`` (None: names given on the command line)."""
    found = None
    if config is not None and not is_shipped_config(config):
        found = project_registry(config)
    first = (RegistryFile(Origin.PROJECT, found) if found is not None
             else RegistryFile(Origin.CURRENT, Path.cwd() / PROJECT_REGISTRY))
    env = os.environ.get(ENV_VAR)
    if env:
        p = Path(env).expanduser()
        env_file = RegistryFile(Origin.ENV, p if p.suffix == ".toml" else p / REGISTRY_FILE)
    else:
        env_file = RegistryFile(Origin.ENV, None)
    return [first, env_file, RegistryFile(Origin.SHIPPED, SAMPLES_REGISTRY)]


def load_registry(path: Path) -> dict[str, RegistryEntry]:
    """The entries of the registry file ``path``."""
    path = Path(path)
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
        if is_uri(spec["file"]):
            raise DatasetError(f"{path}: dataset '{name}': file {spec['file']!r} is a URI; a "
                               "registry lists local files (give the URI itself in [data] "
                               "train)")
        sha = spec.get("sha256")
        if sha is not None and (not isinstance(sha, str) or len(sha) != 64):
            raise DatasetError(f"{path}: dataset '{name}': sha256 must be 64 hex digits")
        entries[name] = RegistryEntry(
            name=name, path=(path.parent / spec["file"]).resolve(), registry=path,
            rows=spec.get("rows"), sha256=sha.lower() if sha else None,
            description=spec.get("description", ""), source=spec.get("source"))
    return entries


def registries(config: Path | None = None) -> list[tuple[RegistryFile, dict[str, RegistryEntry]]]:
    """The registries of ``search_path(config)`` that exist, with their entries, in order.

    ``$TUNER_DATASETS`` naming no registry is an error; the other steps may have none.
    """
    out = []
    for step in search_path(config):
        if step.path is None:
            continue
        if not step.path.is_file():
            if step.origin is Origin.ENV:
                raise DatasetError(f"{step.path}: no dataset registry there (set by ${ENV_VAR})")
            continue
        out.append((step, load_registry(step.path)))
    return out


def known_datasets(config: Path | None = None) -> dict[str, RegistryEntry]:
    """Every registered name and the entry it resolves to (the first registry listing it)."""
    known: dict[str, RegistryEntry] = {}
    for _, entries in registries(config):
        for name, entry in entries.items():
            known.setdefault(name, entry)
    return known


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def not_a_file(path: Path) -> str | None:
    """What `path` is if it exists but is no regular file ("a directory", "a device or other
    special file"); None otherwise."""
    if not path.exists() or path.is_file():
        return None
    return "a directory" if path.is_dir() else "a device or other special file"


def verify_entry(entry: RegistryEntry) -> None:
    """Check the file of a registry entry exists and matches its checksum."""
    what = not_a_file(entry.path)
    if what is not None:
        raise DatasetError(f"dataset '{entry.name}': {display_path(entry.path)} is {what}, not "
                           f"a Parquet file; the registry's file must name one")
    if not entry.path.is_file():
        if entry.sha256 is None:
            raise DatasetError(
                f"dataset '{entry.name}': {display_path(entry.path)} does not exist; "
                f"create it with:\n  {entry.convert_command()}")
        raise DatasetError(f"dataset '{entry.name}': {display_path(entry.path)} is missing "
                           f"({entry.missing_hint()})")
    if entry.sha256 is not None:
        actual = sha256_file(entry.path)
        if actual != entry.sha256:
            raise DatasetError(
                f"{display_path(entry.path)}: checksum mismatch for dataset '{entry.name}': "
                f"expected sha256 {entry.sha256}, actual {actual}")


@dataclass(frozen=True)
class Resolved:
    path: Path | str  # a str: a URI (`tuner.data.uri`), as it was given
    entry: RegistryEntry | None  # None for a plain path

    @property
    def description(self) -> str:
        if self.entry is not None:
            return f"{self.entry.name} ({display_path(self.path)})"
        return str(self.path)


def is_path(value: str) -> bool:
    """Whether a dataset value is written as a path (a ``/`` or the ``.parquet`` suffix)."""
    return "/" in value or os.sep in value or value.endswith(PARQUET_SUFFIX)


def _file(key: str, config: Path | None) -> Resolved | None:
    """The existing file ``key`` (relative to the configuration's folder); None if missing."""
    path = Path(key).expanduser()
    if not path.is_absolute() and config is not None:
        path = Path(config).parent / path
    if path.is_dir():
        raise DatasetError(f"{key}: is a directory, not a Parquet file")
    return Resolved(path, None) if path.exists() else None


def resolve(name_or_path: str | os.PathLike, config: Path | None = None) -> Resolved:
    """The file a dataset value names, by the lookup order of the module's docstring; a
    registered name is checked (the file exists, its checksum). ``config``: the configuration
    file the value comes from (None: the command line)."""
    key = os.fspath(name_or_path)
    if not isinstance(name_or_path, os.PathLike) and is_uri(key):
        locate(key)  # a URI pyarrow cannot open, or no file there, fails here
        return Resolved(key, None)
    if isinstance(name_or_path, os.PathLike) or is_path(key):
        found = _file(key, config)
        if found is None:
            raise DatasetError(f"{key}: no such file")
        return found
    searched = registries(config)
    for _, entries in searched:
        if key in entries:
            verify_entry(entries[key])
            return Resolved(entries[key].path, entries[key])
    found = _file(key, config)
    if found is not None:
        return found
    names = sorted({name for _, entries in searched for name in entries})
    raise DatasetError(
        f"{key}: no such file, and not a registered dataset name (searched: "
        f"{'; '.join(step.label for step in search_path(config))}; registered: "
        f"{', '.join(names) or 'none'})")
