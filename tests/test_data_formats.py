"""Text formats -> convert -> load round trips, format detection, hypothesis-generated lines."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.chess.fen import parse_fen_list
from tuner.data import DatasetError, convert_files, load_dataset
from tuner.data.formats import classify_line, detect_format

TINY_TXT = Path(__file__).resolve().parents[1] / "tuner" / "samples" / "tiny.txt"


def tiny_rows(n: int = 400):
    """(fen, result) pairs from tiny.txt, half standard, half DFRC."""
    lines = TINY_TXT.read_text().splitlines()
    pick = lines[:n // 2] + lines[-(n // 2):]
    tok = {"w": 1.0, "d": 0.5, "b": 0.0}
    return [(ln.split(";")[0], tok[ln.split(";")[1]]) for ln in pick]


def write_format(fmt: str, rows, scores=None) -> str:
    out = []
    for k, (fen, r) in enumerate(rows):
        if fmt == "clockwork":
            out.append(f"{fen};{'w' if r == 1.0 else 'd' if r == 0.5 else 'b'}")
        elif fmt == "bracket":
            tokens = {1.0: ["1.0", "1-0"], 0.5: ["0.5", "1/2-1/2"], 0.0: ["0.0", "0-1"]}[r]
            out.append(f"{fen} [{tokens[k % 2]}]")
        elif fmt == "pipe":
            out.append(f"{fen} | {scores[k]} | {r:.1f}")
        elif fmt == "epd":
            f = fen.split()
            res = {1.0: "1-0", 0.5: "1/2-1/2", 0.0: "0-1"}[r]
            out.append(f'{" ".join(f[:4])} hmvc {f[4]}; fmvn {f[5]}; c9 "{res}";')
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("fmt", ["clockwork", "bracket", "pipe", "epd"])
@pytest.mark.parametrize("forced", [False, True])
def test_round_trip(tmp_path, fmt, forced):
    rows = tiny_rows()
    scores = [(-1) ** k * (k * 7 % 3001) for k in range(len(rows))]
    src = tmp_path / f"in.{fmt}.txt"
    src.write_text(write_format(fmt, rows, scores))
    out = tmp_path / "out.parquet"
    s = convert_files([src], out, fmt=fmt if forced else "auto")
    assert s.files[0].format == fmt
    assert s.rows == len(rows) and s.n_bad == 0
    ds = load_dataset(out)
    expected, status = parse_fen_list([f for f, _ in rows])
    assert (status == 0).all()
    np.testing.assert_array_equal(ds.positions, expected)  # clocks and castling included
    np.testing.assert_array_equal(ds.results, [r for _, r in rows])
    if fmt == "pipe":
        np.testing.assert_array_equal(ds.score_cp, scores)
    else:
        assert ds.score_cp is None


def test_mixed_formats_one_output(tmp_path):
    rows = tiny_rows(40)
    files = []
    for fmt in ["clockwork", "pipe", "epd", "bracket"]:
        p = tmp_path / f"{fmt}.txt"
        p.write_text(write_format(fmt, rows, list(range(len(rows)))))
        files.append(p)
    s = convert_files(files, tmp_path / "o.parquet")
    assert [f.format for f in s.files] == ["clockwork", "pipe", "epd", "bracket"]
    # score_cp exists (pipe) but is null for the other files' rows: by default every row is
    # kept without scores; need_scores=True keeps only the scored rows.
    ds = load_dataset(tmp_path / "o.parquet", quiet=True)
    assert len(ds) == 4 * len(rows) and ds.n_bad == 0 and ds.score_cp is None
    ds = load_dataset(tmp_path / "o.parquet", quiet=True, need_scores=True)
    assert len(ds) == len(rows) and ds.n_bad == 3 * len(rows)
    assert all(b.reason == "score_cp is null" for b in ds.bad_rows)
    np.testing.assert_array_equal(ds.score_cp, list(range(len(rows))))
    with pytest.raises(DatasetError, match="strict"):
        load_dataset(tmp_path / "o.parquet", "strict", need_scores=True)


@pytest.mark.parametrize("line,fmt", [
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1;w", "clockwork"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1 ; d ", "clockwork"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1 [0.5]", "bracket"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1 [1/2-1/2]", "bracket"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1 | 35 | 1.0", "pipe"),
    ('rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - c9 "1-0";', "epd"),
    ('rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - id "x"; c9 "0-1";', "epd"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1", None),
    ("hello world", None),
])
def test_classify_line(line, fmt):
    assert classify_line(line) == fmt


def test_detect_majority_and_unknown(tmp_path):
    assert detect_format(["a;w", "b;d", "c [1.0]", ""])[0] == "clockwork"
    assert detect_format(["", "  "])[0] is None
    p = tmp_path / "x.txt"
    p.write_text("this is not a dataset\nnor is this\n")
    with pytest.raises(DatasetError, match=r"x\.txt: cannot detect the format.*--format"):
        convert_files([p], tmp_path / "o.parquet")
    assert not (tmp_path / "o.parquet").exists()


def test_epd_variants(tmp_path):
    start = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq -"
    p = tmp_path / "a.epd"
    p.write_text(f'{start} c9 "1-0";\n'                       # clocks default to 0 1
                 f'{start} 3 7 c9 "0-1";\n'                    # bare clocks after 4 fields
                 f'{start} bm e4; c9 "1/2-1/2"; hmvc 5;\n'     # any opcode order
                 f'{start} c9 "1-0"\n')                        # no trailing ';'
    convert_files([p], tmp_path / "o.parquet", fmt="epd")
    import pyarrow.parquet as pq
    t = pq.read_table(tmp_path / "o.parquet")
    assert t.column("fen").to_pylist() == [f"{start} 0 1", f"{start} 3 7", f"{start} 5 1",
                                           f"{start} 0 1"]
    assert t.column("result").to_pylist() == [1.0, 0.0, 0.5, 1.0]


# ---- hypothesis: random clockwork/bracket lines against an independent model ----------------

VALID_FENS = [f for f, _ in tiny_rows(20)]
BAD_FENS = ["8/8/8/8/8/8/8/8 w - - 0 1",                         # no kings
            "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR x KQkq - 0 1",
            "rnbqkbnr/ppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
            "Pnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w - - 0 1"]
CW_TOKENS = {"w": 1.0, "d": 0.5, "b": 0.0}
BR_TOKENS = {"1.0": 1.0, "0.5": 0.5, "0.0": 0.0, "1-0": 1.0, "1/2-1/2": 0.5, "0-1": 0.0}
WS = st.sampled_from(["", " ", "  ", "\t"])


@st.composite
def clockwork_line(draw):
    kind = draw(st.sampled_from(["ok", "ok", "ok", "badfen", "badtok", "nosep", "blank"]))
    if kind == "blank":
        return draw(WS), None
    fen = draw(st.sampled_from(BAD_FENS if kind == "badfen" else VALID_FENS))
    if kind == "nosep":
        return fen, "sep"
    tok = draw(st.sampled_from(["x", "1", "ww", "W", "", "1.0"])) if kind == "badtok" \
        else draw(st.sampled_from(sorted(CW_TOKENS)))
    line = f"{draw(WS)}{fen}{draw(WS)};{draw(WS)}{tok}{draw(WS)}"
    return line, ("token" if kind == "badtok" else "fen" if kind == "badfen"
                  else (fen, CW_TOKENS[tok]))


@st.composite
def bracket_line(draw):
    kind = draw(st.sampled_from(["ok", "ok", "ok", "badfen", "badtok", "blank"]))
    if kind == "blank":
        return draw(WS), None
    fen = draw(st.sampled_from(BAD_FENS if kind == "badfen" else VALID_FENS))
    tok = draw(st.sampled_from(["2.0", "w", "1", "0.25", "1-1"])) if kind == "badtok" \
        else draw(st.sampled_from(sorted(BR_TOKENS)))
    line = f"{draw(WS)}{fen}{draw(WS)}[{draw(WS)}{tok}{draw(WS)}]{draw(WS)}"
    return line, ("token" if kind == "badtok" else "fen" if kind == "badfen"
                  else (fen, BR_TOKENS[tok]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), fmt=st.sampled_from(["clockwork", "bracket"]),
       eol=st.sampled_from(["\n", "\r\n"]))
def test_generated_lines(tmp_path_factory, data, fmt, eol):
    strategy = clockwork_line() if fmt == "clockwork" else bracket_line()
    items = data.draw(st.lists(strategy, min_size=1, max_size=40))
    # make sure at least one valid line so the output exists
    items.append((f"{VALID_FENS[0]};d" if fmt == "clockwork" else f"{VALID_FENS[0]} [0.5]",
                  (VALID_FENS[0], 0.5)))
    tmp = tmp_path_factory.mktemp("gen")
    src = tmp / "in.txt"
    src.write_bytes(eol.join(line for line, _ in items).encode())
    s = convert_files([src], tmp / "o.parquet", fmt=fmt, block_bytes=97)  # tiny blocks
    want = [e for _, e in items if isinstance(e, tuple)]
    bad_lines = [k + 1 for k, (_, e) in enumerate(items) if isinstance(e, str)]
    assert s.rows == len(want)
    assert [int(b.split(":")[1]) for b in s.bad] == bad_lines
    for b, (_, e) in zip(s.bad, [it for it in items if isinstance(it[1], str)]):
        reason = b.split(":", 2)[2]
        if e == "fen":
            assert "bad FEN" in reason
        elif e == "token":
            assert "bad result token" in reason
        else:
            assert "no ';'" in reason
    ds = load_dataset(tmp / "o.parquet")
    expected, _ = parse_fen_list([f for f, _ in want])
    np.testing.assert_array_equal(ds.positions, expected)
    np.testing.assert_array_equal(ds.results, [r for _, r in want])


def test_block_boundaries_do_not_split_lines(tmp_path):
    rows = tiny_rows(200)
    src = tmp_path / "in.txt"
    src.write_text(write_format("clockwork", rows))
    for block in (1, 7, 64, 1000, 1 << 20):
        s = convert_files([src], tmp_path / "o.parquet", block_bytes=block)
        assert s.rows == 200 and s.n_bad == 0, block


def test_no_trailing_newline_and_blank_lines(tmp_path):
    rows = tiny_rows(4)
    text = "\n\n" + write_format("clockwork", rows).rstrip("\n").replace("\n", "\n   \n")
    src = tmp_path / "in.txt"
    src.write_text(text)
    s = convert_files([src], tmp_path / "o.parquet")
    assert s.rows == 4 and s.n_bad == 0


# ---- the njit scanner and the reference Python parsers agree ---------------------------------

def test_scanner_token_tables_match_reference():
    from tuner.data import fastscan
    from tuner.data.formats import BRACKET_RESULTS, PIPE_RESULTS
    for (tab, lens, vals), ref in (((fastscan._BR_TAB, fastscan._BR_LEN, fastscan._BR_VAL),
                                    BRACKET_RESULTS),
                                   ((fastscan._PI_TAB, fastscan._PI_LEN, fastscan._PI_VAL),
                                    PIPE_RESULTS)):
        got = {bytes(t[:n]).decode(): v for t, n, v in zip(tab, lens, vals)}
        assert got == ref


PIECES = st.text(alphabet="rnbqkpRNBQKP12345678/ wb-", max_size=30)
JUNK = st.text(alphabet=" \t;|[]01./-wdbx+9e", max_size=12)


@st.composite
def scanner_line(draw, fmt):
    fen = draw(st.sampled_from(VALID_FENS + BAD_FENS)) if draw(st.booleans()) else draw(PIECES)
    if fmt == "clockwork":
        tail = ";" + draw(st.sampled_from(["w", "d", "b", " w ", "x", "", ";w"]))
    elif fmt == "bracket":
        tail = " [" + draw(st.sampled_from(sorted(BR_TOKENS) + ["2", " 1.0 ", "", "[1.0"])) + "]"
    else:
        tail = (" | " + draw(st.sampled_from(["0", "-35", "+7", "1e3", "", "x", "2147483648",
                                               "-2147483648", "99999999999999999999"]))
                + " | " + draw(st.sampled_from(["1.0", "0.5", "0.0", "1", "0", "0.50", "w"])))
    mode = draw(st.sampled_from(["ok", "ok", "junk_tail", "no_tail", "prefix"]))
    if mode == "junk_tail":
        tail += draw(JUNK)
    elif mode == "no_tail":
        tail = draw(JUNK)
    elif mode == "prefix":
        fen = draw(JUNK) + fen
    return draw(WS) + fen + tail + draw(WS)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), fmt=st.sampled_from(["clockwork", "bracket", "pipe"]))
def test_scanner_matches_reference_parser(data, fmt):
    from tuner.data.fastscan import scan_block
    from reference_formats import REFERENCE
    lines = data.draw(st.lists(scanner_line(fmt), min_size=1, max_size=30))
    raw = ("\n".join(lines) + data.draw(st.sampled_from(["", "\n"]))).encode()
    n_lines, offsets, fdata, results, scores, row_line, bad = scan_block(raw, fmt)
    ref = REFERENCE[fmt](raw.decode().split("\n")[:n_lines])
    # every newline ends a line, and so does the end of a block that does not end with one
    # (an empty block has no line: one empty drawn line without a newline is b"")
    assert n_lines == raw.count(b"\n") + (len(raw) > 0 and not raw.endswith(b"\n"))
    fens = [bytes(fdata[offsets[k]:offsets[k + 1]]).decode() for k in range(len(results))]
    assert fens == ref.fens
    assert list(results) == ref.results
    assert list(row_line) == ref.index
    assert bad == ref.bad
    if fmt == "pipe":
        assert list(scores) == ref.scores


@pytest.mark.parametrize("fmt", ["clockwork", "bracket", "pipe"])
def test_an_empty_block_has_no_lines(fmt):
    """b"" is no line (hypothesis once drew it as one empty line without a newline); b"\\n" is
    one empty line; neither has a position or a bad line."""
    from tuner.data.fastscan import scan_block
    for raw, lines in ((b"", 0), (b"\n", 1)):
        n_lines, offsets, fdata, results, scores, row_line, bad = scan_block(raw, fmt)
        assert (n_lines, len(results), len(row_line)) == (lines, 0, 0)
        assert not bad
