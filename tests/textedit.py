"""Editing test inputs (config text, FENs) so that an edit can never silently match nothing."""


def replace_once(text: str, old: str, new: str) -> str:
    """text with its one occurrence of old replaced by new; fails if old occurs 0 or 2+ times."""
    count = text.count(old)
    assert count == 1, f"{old!r} occurs {count} times in {text!r}"
    return text.replace(old, new)
