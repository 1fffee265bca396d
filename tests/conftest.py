"""Fixtures shared by the test modules: the shipped 4,000-position sample `tiny`, as a dataset and
split for training (module scope: each module gets its own copy, so no module sees another's
changes)."""
from __future__ import annotations

import pytest

from tuner.data import load_dataset
from tuner.train.config import validate
from tuner.train.loop import load_data


@pytest.fixture(scope="module")
def tiny():
    """datasets/tiny.parquet as a `Dataset` (positions, results, ...)."""
    return load_dataset("tiny", quiet=True)


@pytest.fixture(scope="module")
def tiny_data():
    """`tiny` split for training by the default ``[data]`` keys (5% of its games held out for
    validation, split seed 1): 3,723 training and 277 validation positions."""
    return load_data(validate({"data": {"train": ["tiny"]}}, "tiny"), lambda s: None)
