"""Text formats for labelled positions, and per-file format detection.

Every format gives one position per line; results are White's point of view.

==========  ===============================================  ============================
name        line                                              result tokens
==========  ===============================================  ============================
clockwork   ``FEN;w``                                         ``w`` / ``d`` / ``b``
bracket     ``FEN [1.0]``                                     ``1.0 0.5 0.0 1-0 1/2-1/2 0-1``
pipe        ``FEN | score | wdl`` (score: integer cp)          ``1.0 0.5 0.0`` (also 1, 0)
epd         ``<4 FEN fields> [hmvc fmvn] c9 "1-0"; ...``      ``"1-0" "1/2-1/2" "0-1"``
==========  ===============================================  ============================

Blank lines are skipped. EPD clocks come from the ``hmvc`` / ``fmvn`` opcodes (default 0 and
1); two bare numbers after the four FEN fields are also taken as the clocks.
The FEN text is kept as written, with runs of whitespace collapsed to one space.
Whether the FEN itself is valid is decided later by tuner.chess (one FEN parser).
"""
from __future__ import annotations

import re

FORMATS = ("clockwork", "bracket", "pipe", "epd")

CLOCKWORK_RESULTS = {"w": 1.0, "d": 0.5, "b": 0.0}
BRACKET_RESULTS = {"1.0": 1.0, "0.5": 0.5, "0.0": 0.0,
                   "1-0": 1.0, "1/2-1/2": 0.5, "0-1": 0.0}
PIPE_RESULTS = {"1.0": 1.0, "0.5": 0.5, "0.0": 0.0, "1": 1.0, "0": 0.0}
EPD_RESULTS = {"1-0": 1.0, "1/2-1/2": 0.5, "0-1": 0.0}

INT32_MIN, INT32_MAX = -(2 ** 31), 2 ** 31 - 1

_DETECT = {
    "clockwork": re.compile(r";\s*[wdb]\s*$"),
    "epd": re.compile(r"(^|[\s;])c9\s+\""),
    "pipe": re.compile(r"^[^|]+\|[^|]+\|[^|]+$"),
    "bracket": re.compile(r"\[[^\[\]]*\]\s*$"),
}
_INT = re.compile(r"[+-]?[0-9]+")
_EPD_C9 = re.compile(r'(?:^|;)\s*c9\s+"([^"]*)"')
_EPD_HMVC = re.compile(r"(?:^|;)\s*hmvc\s+(\S+?)\s*(?:;|$)")
_EPD_FMVN = re.compile(r"(?:^|;)\s*fmvn\s+(\S+?)\s*(?:;|$)")

DESCRIPTIONS = {
    "clockwork": "FEN;w|d|b",
    "bracket": "FEN [1.0|0.5|0.0|1-0|1/2-1/2|0-1]",
    "pipe": "FEN | score | wdl",
    "epd": 'EPD with c9 "1-0";',
}


def classify_line(line: str) -> str | None:
    """The format a single (non-blank) line looks like, or None."""
    for name in ("clockwork", "epd", "pipe", "bracket"):
        if _DETECT[name].search(line):
            return name
    return None


def detect_format(sample_lines: list[str]) -> tuple[str | None, dict[str, int]]:
    """Most frequent format among the sample's non-blank lines: (format or None, counts)."""
    counts: dict[str, int] = {}
    for line in sample_lines:
        line = line.strip()
        if line:
            name = classify_line(line)
            if name is not None:
                counts[name] = counts.get(name, 0) + 1
    if not counts:
        return None, counts
    return max(counts, key=counts.get), counts


class Parsed:
    """Accepted lines of one block: fens, results, scores (pipe only), line indices; and
    rejected lines as (line index, reason)."""

    __slots__ = ("fens", "results", "scores", "index", "bad")

    def __init__(self):
        self.fens: list[str] = []
        self.results: list[float] = []
        self.scores: list[int] | None = None
        self.index: list[int] = []
        self.bad: list[tuple[int, str]] = []


def _norm(fen: str) -> str:
    return " ".join(fen.split())


def _clock(text: str) -> str | None:
    return text if text.isdigit() and text.isascii() else None


def parse_epd(lines: list[str]) -> Parsed:
    out = Parsed()
    fens, results, index, bad = out.fens, out.results, out.index, out.bad
    for i, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        parts = line.split(None, 4)
        if len(parts) < 5:
            bad.append((i, "truncated EPD line: expected 4 FEN fields and opcodes"))
            continue
        rest = parts[4]
        hm, fm = "0", "1"
        # Lenient: "FEN(6 fields) c9 ..." -- two bare clock numbers before the opcodes.
        more = rest.split(None, 2)
        if len(more) == 3 and _clock(more[0]) and _clock(more[1]):
            hm, fm, rest = more
        m = _EPD_C9.search(rest)
        if m is None:
            bad.append((i, 'no c9 result opcode (expected c9 "1-0";)'))
            continue
        r = EPD_RESULTS.get(m.group(1).strip())
        if r is None:
            bad.append((i, f'bad c9 result "{m.group(1)}" (expected "1-0", "1/2-1/2" or '
                           '"0-1")'))
            continue
        for rx, name in ((_EPD_HMVC, "hmvc"), (_EPD_FMVN, "fmvn")):
            mm = rx.search(rest)
            if mm is not None:
                v = _clock(mm.group(1))
                if v is None:
                    bad.append((i, f"bad {name} operand {mm.group(1)!r}"))
                    break
                if name == "hmvc":
                    hm = v
                else:
                    fm = v
        else:
            fens.append(f"{parts[0]} {parts[1]} {parts[2]} {parts[3]} {hm} {fm}")
            results.append(r)
            index.append(i)
    return out


#: Formats parsed here in Python; the others are scanned in compiled code by tuner.data.fastscan
#: (tests/reference_formats.py holds plain-Python parsers of those, as the scanner's oracle).
PARSERS = {"epd": parse_epd}


def _epd_fen(line: str) -> str:
    parts = line.split(None, 4)
    if len(parts) < 4:
        return line.strip()  # the FEN parser says what is missing
    rest = parts[4] if len(parts) == 5 else ""
    clocks = []
    for rx, default in ((_EPD_HMVC, "0"), (_EPD_FMVN, "1")):
        m = rx.search(rest)
        clocks.append(m.group(1) if m is not None else default)
    return " ".join(parts[:4] + clocks)


#: The FEN of one line of each format, without its result (for ``tuner eval --file``); None:
#: ``FEN`` or ``FEN;anything``.
FEN_OF_LINE = {
    None: lambda line: line.split(";", 1)[0].strip(),
    "clockwork": lambda line: line.split(";", 1)[0].strip(),
    "bracket": lambda line: re.sub(r"\[[^\[\]]*\]\s*$", "", line).strip(),
    "pipe": lambda line: line.split("|", 1)[0].strip(),
    "epd": _epd_fen,
}

#: Binary files recognised by their first bytes: magic -> what they are.
_BINARY_MAGIC = ((b"PAR1", "a Parquet file"), (b"PK\x03\x04", "a zip archive (or .npz)"),
                 (b"\x89PNG", "a PNG image"), (b"\x7fELF", "an executable"),
                 (b"\x93NUMPY", "a numpy array file"))
#: Share of control bytes (other than tab, CR, LF) from which a text is taken for binary data.
BINARY_CONTROL_SHARE = 0.05


def binary_kind(head: bytes) -> str | None:
    """What the first bytes of a file say it is if it is not text ("a Parquet file", "binary
    data (...)"), or None for text."""
    for magic, what in _BINARY_MAGIC:
        if head.startswith(magic):
            return what
    nul = head.find(b"\0")
    if nul >= 0:
        return f"binary data (a NUL byte at offset {nul})"
    control = sum(head.count(bytes([c])) for c in range(32) if c not in (9, 10, 13))
    if head and control > BINARY_CONTROL_SHARE * len(head):
        return f"binary data ({control} control bytes in the first {len(head):,})"
    return None


def not_text_hint(path, what: str) -> str:
    """The message for a binary input given where text is expected: what it is, what to do."""
    hint = (f"; a Parquet dataset needs no conversion: name it in [data] train, or inspect it "
            f"with `tuner data stats {path}`" if what == "a Parquet file" else "")
    return (f"{path}: {what}, not text: expected one position a line "
            f"({' / '.join(DESCRIPTIONS.values())}), plain or gzip/zstd/bz2/lz4-compressed{hint}")
