"""Error and bad-row types shared by the dataset loader and the converter."""
from __future__ import annotations

from typing import NamedTuple

from tuner.errors import TunerError, clip  # noqa: F401  (clip: re-exported)


class DatasetError(TunerError, ValueError):
    """A dataset (Parquet file, text input or registry entry) cannot be used.

    The message always names the file (or registry name) and the problem.
    """


class BadRow(NamedTuple):
    """One rejected row: ``row`` is the 0-based row number in the Parquet file
    (for text inputs: the 1-based line number), ``reason`` says why."""

    row: int
    reason: str


#: How many bad rows a Dataset / conversion keeps in its list (the count is always exact).
MAX_BAD_KEPT = 10_000
#: How many bad rows are shown in messages.
SHOW_BAD = 10
def format_bad_list(items: list[str], total: int, show: int = SHOW_BAD) -> str:
    """``items`` (already formatted) as indented lines, at most ``show`` of them, plus
    '... and N more' when ``total`` exceeds what is shown."""
    lines = [f"  {s}" for s in items[:show]]
    if total > len(lines):
        lines.append(f"  ... and {total - len(lines):,} more")
    return "\n".join(lines)
