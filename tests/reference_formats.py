"""Plain-Python parsers of the clockwork, bracket and pipe formats: the reference the compiled
scanner (tuner.data.fastscan) is checked against, row by row and reason by reason."""
from tuner.data.formats import (BRACKET_RESULTS, CLOCKWORK_RESULTS, INT32_MAX, INT32_MIN,
                                PIPE_RESULTS, Parsed, _INT, _norm)


def parse_clockwork(lines: list[str]) -> Parsed:
    out = Parsed()
    fens, results, index, bad = out.fens, out.results, out.index, out.bad
    get = CLOCKWORK_RESULTS.get
    for i, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        fen, sep, tok = line.partition(";")
        if not sep:
            bad.append((i, "no ';' before the result (expected FEN;w|d|b)"))
            continue
        tok = tok.strip()
        r = get(tok)
        if r is None:
            bad.append((i, f"bad result token {tok!r} (expected w, d or b)"))
            continue
        fens.append(_norm(fen))
        results.append(r)
        index.append(i)
    return out


def parse_bracket(lines: list[str]) -> Parsed:
    out = Parsed()
    fens, results, index, bad = out.fens, out.results, out.index, out.bad
    get = BRACKET_RESULTS.get
    for i, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        j = line.rfind("[")
        if j < 0 or not line.endswith("]"):
            bad.append((i, "no [result] at the end of the line (expected FEN [1.0])"))
            continue
        tok = line[j + 1:-1].strip()
        r = get(tok)
        if r is None:
            bad.append((i, f"bad result token [{tok}] (expected [1.0], [0.5], [0.0], [1-0], "
                           "[1/2-1/2] or [0-1])"))
            continue
        fens.append(_norm(line[:j]))
        results.append(r)
        index.append(i)
    return out


def parse_pipe(lines: list[str]) -> Parsed:
    out = Parsed()
    out.scores = scores = []
    fens, results, index, bad = out.fens, out.results, out.index, out.bad
    get = PIPE_RESULTS.get
    for i, line in enumerate(lines):
        line = line.strip()
        if not line:
            continue
        parts = line.split("|")
        if len(parts) != 3:
            bad.append((i, f"{len(parts)} field(s) separated by '|', expected 3 "
                           "(FEN | score | wdl)"))
            continue
        fen, s, w = parts
        s = s.strip()
        if not _INT.fullmatch(s):
            bad.append((i, f"bad score {s!r} (expected an integer in centipawns)"))
            continue
        score = int(s)
        if not INT32_MIN <= score <= INT32_MAX:
            bad.append((i, f"score {s} out of the int32 range"))
            continue
        w = w.strip()
        r = get(w)
        if r is None:
            bad.append((i, f"bad wdl {w!r} (expected 1.0, 0.5 or 0.0)"))
            continue
        fens.append(_norm(fen))
        results.append(r)
        scores.append(score)
        index.append(i)
    return out


REFERENCE = {"clockwork": parse_clockwork, "bracket": parse_bracket, "pipe": parse_pipe}
