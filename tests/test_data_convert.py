"""tuner convert: bad-input corpus, atomic output, interrupts, row groups."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from textedit import replace_once
from tuner.data import DatasetError, convert_files, load_dataset
from tuner.data.schema import ROW_GROUP_ROWS

ROOT = Path(__file__).resolve().parents[1]
TINY_TXT = ROOT / "tuner" / "samples" / "tiny.txt"
START = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
GOOD = [ln for ln in TINY_TXT.read_text().splitlines()[:50]]


def only_output_files(d: Path) -> list[str]:
    """Everything in d except inputs (*.txt): no temporary file may be left behind."""
    return sorted(p.name for p in d.iterdir() if not p.name.endswith(".txt"))


# (format, bad line, expected reason fragment)
CORPUS = [
    ("clockwork", START[:30], "no ';'"),                               # truncated line
    ("clockwork", START[:30] + ";w", "bad FEN: piece placement"),       # truncated FEN
    ("clockwork", START + ";x", "bad result token 'x'"),
    ("clockwork", START + ";", "bad result token ''"),
    ("clockwork", START + ";1-0", "bad result token '1-0'"),
    ("clockwork", replace_once(START, "RNBQKBNR", "RNBQ1BNR") + ";w", "White has 0 kings"),
    ("clockwork", replace_once(START, "/pppppppp/", "/ppppppp/") + ";w", "rank 7 has 7 files"),
    ("clockwork", "p" + replace_once(START[1:], "/pppppppp/", "/1ppppppp/") + ";w", "pawn on a8"),
    ("clockwork", "4k3/8/8/8/8/1P6/PPPPPPPP/4K3 w - - 0 1;w", "White has 9 pawns (at most 8)"),
    ("clockwork", "4k3/8/8/8/8/8/8/4r1K1 b - - 0 1;w", "White's king on g1 is in check"),
    ("clockwork", "4k3/8/8/8/8/8/8/4K3 w KQ - 0 1;w", "castling: right 'K' names no White rook"),
    ("clockwork", replace_once(START, " - 0 1", " e6 0 1") + ";w", "no Black pawn stands on e5"),
    ("clockwork", replace_once(START, " w ", " W ") + ";w", "side to move"),
    ("clockwork", replace_once(START, "KQkq", "KQkqK") + ";w", "castling"),
    ("clockwork", START + " 7;w", "extra fields"),
    ("clockwork", "é" + START + ";w", "bad FEN"),
    ("bracket", START + " [2.0]", "bad result token [2.0]"),
    ("bracket", START + " [w]", "bad result token [w]"),
    ("bracket", START + " 1.0", "no [result]"),
    ("bracket", START[:20] + " [1.0]", "bad FEN"),
    ("pipe", START + " | 12", "2 field(s)"),
    ("pipe", START + " | abc | 1.0", "bad score 'abc'"),
    ("pipe", START + " | 12 | 2", "bad wdl '2'"),
    ("pipe", START + " | 99999999999 | 1.0", "out of the int32 range"),
    ("pipe", START + " | 1 | 1.0 | x", "4 field(s)"),
    ("epd", "rnbqkbnr/pppppppp/8/8 w", "truncated EPD"),
    ("epd", START[:-4] + ' c9 "2-0";', 'bad c9 result "2-0"'),
    ("epd", START[:-4] + " bm e4;", "no c9"),
    ("epd", START[:-4] + ' c9 "1-0"; hmvc x;', "bad hmvc"),
    ("epd", replace_once(START[:-4], "8/8/8/8", "8/8/8") + ' c9 "1-0";', "bad FEN"),
]


def good_line(fmt: str) -> str:
    return {"clockwork": START + ";d", "bracket": START + " [0.5]",
            "pipe": START + " | 0 | 0.5", "epd": START[:-4] + ' c9 "1/2-1/2";'}[fmt]


@pytest.mark.parametrize("fmt,line,reason", CORPUS)
def test_bad_line_corpus(tmp_path, fmt, line, reason):
    src = tmp_path / "in.txt"
    src.write_text(f"{good_line(fmt)}\n{line}\n{good_line(fmt)}\n")
    out = tmp_path / "out.parquet"
    # skip: the bad line is reported as file:2: reason, the two good lines are written
    s = convert_files([src], out, fmt=fmt)
    assert s.rows == 2 and s.n_bad == 1
    assert s.bad[0].startswith(f"{src}:2: ") and reason in s.bad[0], s.bad
    assert len(load_dataset(out)) == 2
    # strict: the same line fails the conversion, nothing is written
    out2 = tmp_path / "strict.parquet"
    with pytest.raises(DatasetError) as e:
        convert_files([src], out2, fmt=fmt, policy="strict")
    assert f"{src}:2: " in str(e.value) and reason in str(e.value)
    assert not out2.exists()
    assert only_output_files(tmp_path) == ["out.parquet"]


@pytest.mark.parametrize("content", ["", "\n\n  \n", "\r\n"])
def test_empty_file(tmp_path, content):
    src = tmp_path / "empty.txt"
    src.write_text(content)
    with pytest.raises(DatasetError, match=r"empty\.txt: empty file"):
        convert_files([src], tmp_path / "o.parquet")
    good = tmp_path / "good.txt"
    good.write_text("\n".join(GOOD) + "\n")
    with pytest.raises(DatasetError, match="empty file"):
        convert_files([good, src], tmp_path / "o.parquet")
    assert only_output_files(tmp_path) == []


def test_all_lines_bad(tmp_path):
    src = tmp_path / "bad.txt"
    src.write_text(f"{START};x\n{START};y\n")
    with pytest.raises(DatasetError, match="no valid positions.*no Parquet written") as e:
        convert_files([src], tmp_path / "o.parquet", fmt="clockwork")
    assert f"{src}:1:" in str(e.value) and f"{src}:2:" in str(e.value)
    assert only_output_files(tmp_path) == []


def test_input_and_output_errors(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(GOOD) + "\n")
    with pytest.raises(DatasetError, match="nope.txt: no such file"):
        convert_files([tmp_path / "nope.txt"], tmp_path / "o.parquet")
    with pytest.raises(DatasetError, match="not a regular file"):
        convert_files([tmp_path], tmp_path / "o.parquet")
    with pytest.raises(DatasetError, match="output directory .* does not exist"):
        convert_files([src], tmp_path / "missing" / "o.parquet")
    with pytest.raises(DatasetError, match="would overwrite this input"):
        convert_files([src], src)
    with pytest.raises(DatasetError, match="no input files"):
        convert_files([], tmp_path / "o.parquet")
    assert src.read_text().startswith(GOOD[0])
    assert only_output_files(tmp_path) == []


def test_failure_keeps_existing_output(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(GOOD) + "\n")
    out = tmp_path / "o.parquet"
    convert_files([src], out)
    before = out.read_bytes()
    bad = tmp_path / "bad.txt"
    bad.write_text("\n".join(GOOD) + f"\n{START};q\n")
    with pytest.raises(DatasetError, match="strict"):
        convert_files([bad], out, policy="strict")
    assert out.read_bytes() == before
    assert only_output_files(tmp_path) == ["o.parquet"]


@pytest.mark.parametrize("exc", [KeyboardInterrupt, MemoryError, RuntimeError])
def test_interrupt_leaves_no_file(tmp_path, monkeypatch, exc):
    import tuner.data.convert as conv
    src = tmp_path / "in.txt"
    src.write_text("\n".join(TINY_TXT.read_text().splitlines()) + "\n")
    real = conv._convert_block
    calls = []

    def flaky(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise exc("boom")
        return real(*args, **kw)

    monkeypatch.setattr(conv, "_convert_block", flaky)
    with pytest.raises(exc):
        convert_files([src], tmp_path / "o.parquet", block_bytes=10_000, row_group_rows=50)
    assert len(calls) == 3
    assert only_output_files(tmp_path) == []


def test_sigterm_leaves_no_file(tmp_path):
    """A real process, killed with SIGTERM in the middle of writing."""
    src = tmp_path / "in.txt"
    src.write_text(TINY_TXT.read_text())
    marker = tmp_path / "started"
    code = f"""
import time, tuner.data.convert as conv
from tuner.cli import main
real = conv._convert_block
def slow(*a, **k):
    out = real(*a, **k)
    open({str(marker)!r}, "w").close()
    time.sleep(0.2)
    return out
conv._convert_block = slow
main(["convert", {str(src)!r}, "-o", {str(tmp_path / 'o.parquet')!r}])
"""
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read()
        assert time.time() < deadline
        time.sleep(0.05)
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir())  # writing in progress
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 128 + signal.SIGTERM
    assert only_output_files(tmp_path) == ["started"]


def test_row_groups_compression_and_mode(tmp_path):
    assert 65_536 <= ROW_GROUP_ROWS <= 262_144
    src = tmp_path / "in.txt"
    src.write_text(TINY_TXT.read_text())
    out = tmp_path / "o.parquet"
    convert_files([src], out, row_group_rows=1500, block_bytes=5000)
    md = pq.ParquetFile(out).metadata
    assert [md.row_group(i).num_rows for i in range(md.num_row_groups)] == [1500, 1500, 1000]
    assert md.row_group(0).column(0).compression == "ZSTD"
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask


def test_progress_callback(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text(TINY_TXT.read_text())
    seen = []
    convert_files([src, src], tmp_path / "o.parquet", progress=seen.append, block_bytes=10_000)
    assert sum(seen) == 2 * src.stat().st_size and len(seen) > 2


@pytest.mark.parametrize("codec", ["gzip", "zstd", "bz2", "lz4"])
def test_compressed_inputs(tmp_path, codec):
    import pyarrow as pa
    raw = TINY_TXT.read_bytes()
    src = tmp_path / f"in.{codec}.txt"
    with pa.CompressedOutputStream(str(src), codec) as f:
        f.write(raw)
    seen = []
    s = convert_files([src], tmp_path / "o.parquet", progress=seen.append, block_bytes=50_000)
    assert s.rows == 4000 and s.n_bad == 0 and s.files[0].format == "clockwork"
    assert sum(seen) == src.stat().st_size
    plain = load_dataset(ROOT / "tuner" / "samples" / "tiny.parquet")
    assert (load_dataset(tmp_path / "o.parquet").positions == plain.positions).all()
    # a damaged compressed stream is an error naming the file, and leaves nothing behind
    b = bytearray(src.read_bytes())
    del b[len(b) // 2:]
    b += b"\x00" * 64
    src.write_bytes(bytes(b))
    with pytest.raises(DatasetError, match=f"{src.name}: cannot decompress"):
        convert_files([src], tmp_path / "o2.parquet", block_bytes=50_000)
    assert only_output_files(tmp_path) == ["o.parquet"]
