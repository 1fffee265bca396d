"""Datasets: Parquet loading, text converters, the dataset registry and statistics.

Public API (imported lazily, so ``import tuner.data`` is cheap):

* ``load_dataset(path_or_name, policy="skip", ...) -> Dataset``
* ``Dataset``, ``BadRow``, ``DatasetError``
* ``convert_files(inputs, output, fmt="auto", policy="skip", ...) -> ConvertSummary``
* ``resolve(name_or_path, config=None)``, ``search_path(config=None)``, ``known_datasets()``,
  ``load_registry(path)``
* ``dataset_stats(path_or_name) -> Stats``, ``format_stats(stats)``
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "DatasetError": "errors", "BadRow": "errors",
    "Dataset": "loader", "load_dataset": "loader",
    "convert_files": "convert", "ConvertSummary": "convert",
    "FORMATS": "formats", "detect_format": "formats",
    "resolve": "registry", "load_registry": "registry", "search_path": "registry",
    "known_datasets": "registry", "RegistryEntry": "registry",
    "dataset_stats": "stats", "format_stats": "stats", "Stats": "stats",
    "phases": "stats", "classify_variants": "stats",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'tuner.data' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


def __dir__():
    return __all__
