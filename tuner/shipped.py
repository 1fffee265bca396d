"""What ships inside the package: the training configurations, reachable by name, the
sample sets the default configuration trains on, with their registry, and the tutorial's
example evaluation (``tuner examples DIR`` copies it out).

All are package data (``tuner/configs/*.toml``, ``tuner/samples/``, ``tuner/examples/``), so a
wheel carries them
and an installed copy finds them from any directory. Their location comes from
``importlib.resources``: the package's own folder, wherever it is installed.
"""
from __future__ import annotations

import importlib.resources
from pathlib import Path

from tuner.errors import ConfigError

CONFIG_SUFFIX = ".toml"
#: The folder of the installed package (package data is read from real files: pyarrow and the
#: configuration loader take paths).
PACKAGE_DIR = Path(str(importlib.resources.files("tuner")))
CONFIG_DIR = PACKAGE_DIR / "configs"
#: The registry of the sample sets shipped with the package (paths relative to it).
SAMPLES_REGISTRY = PACKAGE_DIR / "samples" / "registry.toml"
#: The tutorial's example files (docs/tutorial.md; the repository's examples/ is this folder).
EXAMPLES_DIR = PACKAGE_DIR / "examples"
EXAMPLE_SUFFIXES = (".py", ".toml")


def shipped_examples() -> list[Path]:
    """The example files shipped with the package, sorted by name."""
    return sorted(p for p in EXAMPLES_DIR.iterdir() if p.suffix in EXAMPLE_SUFFIXES)


def write_examples(directory: Path) -> list[Path]:
    """Copy the shipped examples into `directory` (created if needed); a file that is already
    there is left alone (FileExistsError naming it, before anything is written). Returns the
    paths written."""
    from tuner.fileio import atomic_write
    directory = Path(directory)
    targets = [(p, directory / p.name) for p in shipped_examples()]
    for _, target in targets:
        if target.exists():
            raise FileExistsError(f"{target}: already exists (remove it, or choose another "
                                  f"folder)")
    directory.mkdir(parents=True, exist_ok=True)
    for source, target in targets:
        atomic_write(target, source.read_bytes())
    return [t for _, t in targets]


def shipped_configs() -> dict[str, Path]:
    """The shipped configurations by name (the file name without ``.toml``), sorted."""
    return {p.stem: p for p in sorted(CONFIG_DIR.glob(f"*{CONFIG_SUFFIX}"))}


def is_shipped_config(path: Path) -> bool:
    """Whether ``path`` is one of the configurations shipped inside the package."""
    return Path(path).resolve().parent == CONFIG_DIR.resolve()


def find_config(name_or_path: str) -> Path:
    """A configuration file: an existing path, else the shipped configuration of that name.

    Raises ``ConfigError`` naming the value and the shipped names when it is neither.
    """
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    shipped = shipped_configs()
    if name_or_path in shipped:
        return shipped[name_or_path]
    if path.is_dir():
        raise ConfigError(f"{name_or_path}: is a directory, not a configuration file")
    raise ConfigError(f"{name_or_path}: no such configuration file, and not a shipped "
                      f"configuration (shipped: {', '.join(shipped) or 'none'}; "
                      f"see `tuner configs`)")
