"""The project's error model: every problem a user can cause (a bad file, key, row, option value
or engine) is an exception of a class deriving from `TunerError`, raised by the layer that finds
it, whose message is one line naming the problem and where it is (file, line or row, field,
FEN, ...). No layer below the command line prints, exits or raises Click's exceptions: the
commands (`tuner.cli`) turn a `TunerError` into that line on stderr and an exit code, in one
place (`tuner.cli.errors`).

The classes keep the built-in base they always had (`ValueError`, `RuntimeError`, ...), so code
catching those still catches them.
"""
from __future__ import annotations

#: Longest reason (or quoted input) a message repeats; a 4 MB bad line is not echoed whole.
MAX_QUOTE = 200


def clip(text: str, limit: int = MAX_QUOTE) -> str:
    """`text` cut to `limit` characters, saying how long it was."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"


def error_line(e: BaseException, last: bool = False) -> str:
    """The first (or `last`) non-empty line of `e`'s text, stripped (its type's name if it has
    none): what a message quotes of another library's error (pyarrow, Ray)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return (lines[-1 if last else 0]) if lines else type(e).__name__


class TunerError(Exception):
    """A problem a user can fix; the message is one line naming it and its location."""


class ConfigError(TunerError, ValueError):
    """A configuration file that cannot be used; the message names the file and the key.

    Defined here, below every layer, because finding a configuration (`tuner.shipped`) is a
    base service; `tuner.train.config.ConfigError` is the same class."""
