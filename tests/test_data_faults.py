"""Input mix-ups and faults of `tuner convert` and `tuner eval --file` (issue 13, items 4, 6, 7):
binary input given as text, the formats eval reads, line numbering, capped quotes, the report of
every bad line, full and read-only disks, leftovers."""
from __future__ import annotations

import errno
import gzip
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from disks import remount, small_disk
from shared import SAMPLES, TINY_PARQUET, stderr_lines
from tuner.cli import main
from tuner.data import DatasetError, convert_files
from tuner.data.errors import SHOW_BAD

TINY_TXT = SAMPLES / "tiny.txt"
LINES = TINY_TXT.read_text().splitlines()[:40]           # FEN;w|d|b
FENS = [ln.split(";")[0] for ln in LINES]
RESULT = {"w": ("1.0", "1-0"), "d": ("0.5", "1/2-1/2"), "b": ("0.0", "0-1")}


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _eval_lines(r):
    """The `FEN;eval` lines (not a first run's compile notice)."""
    assert "Traceback" not in r.output
    return [ln for ln in r.stdout.splitlines() if ";" in ln]


@pytest.fixture(scope="module")
def reference():
    """`tuner eval` of the 40 FENs given as plain lines."""
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "plain.txt"
        p.write_text("\n".join(FENS) + "\n")
        r = _invoke("eval", "--file", p)
        assert r.exit_code == 0, r.output
        lines = _eval_lines(r)
    assert len(lines) == len(FENS) and all(";" in ln for ln in lines)
    return lines


def _as(fmt: str) -> list[str]:
    out = []
    for line in LINES:
        fen, tok = line.rsplit(";", 1)
        if fmt == "bracket":
            out.append(f"{fen} [{RESULT[tok][0]}]")
        elif fmt == "pipe":
            out.append(f"{fen} | 17 | {RESULT[tok][0]}")
        elif fmt == "epd":
            f = fen.split()
            out.append(f'{" ".join(f[:4])} hmvc {f[4]}; fmvn {f[5]}; c9 "{RESULT[tok][1]}";')
        else:
            out.append(line)
    return out


# -- eval --file reads what convert reads ----------------------------------------------------------

@pytest.mark.parametrize("fmt", ["clockwork", "bracket", "pipe", "epd"])
def test_eval_file_reads_every_convert_format(tmp_path, reference, fmt):
    p = tmp_path / f"{fmt}.txt"
    p.write_text("\n".join(_as(fmt)) + "\n")
    r = _invoke("eval", "--file", p)
    assert r.exit_code == 0, r.output
    assert _eval_lines(r) == reference
    # and convert agrees that these lines are that format
    convert_files([p], tmp_path / f"{fmt}.parquet")
    assert pq.read_table(tmp_path / f"{fmt}.parquet").column("fen").to_pylist() == FENS


def test_eval_file_reads_compressed_input(tmp_path, reference):
    p = tmp_path / "in.txt.gz"
    p.write_bytes(gzip.compress(("\r\n".join(_as("pipe")) + "\r\n").encode()))  # CRLF too
    r = _invoke("eval", "--file", p)
    assert r.exit_code == 0, r.output
    assert _eval_lines(r) == reference


def test_eval_file_reads_a_parquet_dataset(tmp_path):
    r = _invoke("eval", "--file", TINY_PARQUET)
    assert r.exit_code == 0, r.output[:500]
    lines = _eval_lines(r)
    r2 = _invoke("eval", "--file", TINY_TXT)
    assert r2.exit_code == 0
    assert lines == _eval_lines(r2) and len(lines) == 4000


@pytest.mark.parametrize("content, what", [
    (b"\x7fELF\x02\x01\x01" + bytes(200), "an executable"),
    (b"PK\x03\x04" + bytes(100), "a zip archive"),
    (b"rnbqkbnr/pppppppp\x00\x01\x02" * 50, "binary data (a NUL byte at offset 17)"),
])
def test_binary_input_is_refused_in_one_line(tmp_path, content, what):
    p = tmp_path / "in.txt"
    p.write_bytes(content)
    for args in (("eval", "--file", p), ("convert", p, "-o", tmp_path / "o.parquet")):
        r = _invoke(*args)
        assert r.exit_code == 1 and "Traceback" not in r.output
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and f"{p}: {what}" in lines[0] and "not text" in lines[0], lines
        assert r.stdout == ""
    assert sorted(x.name for x in tmp_path.iterdir()) == ["in.txt"]


def test_convert_given_a_parquet_file_says_what_to_do(tmp_path):
    r = _invoke("convert", TINY_PARQUET, "-o", tmp_path / "o.parquet")
    assert r.exit_code == 1 and "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "a Parquet file, not text" in lines[0] and "needs no conversion" in lines[0]
    assert "[data] train" in lines[0] and "tuner data stats" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_lone_cr_does_not_shift_line_numbers(tmp_path):
    """Lines end at LF for eval as for convert: a lone CR stays inside its line."""
    p = tmp_path / "in.txt"
    p.write_bytes(f"{FENS[0]}\r{LINES[1]}\n{LINES[2]}\nnot a fen;w\n".encode())
    r = _invoke("eval", "--file", p)
    labels = [ln.split(": ")[0] for ln in stderr_lines(r)]
    assert labels == [f"{p}:1", f"{p}:3"], r.stderr
    assert _eval_lines(r) == [_eval_lines(_invoke("eval", FENS[2]))[0]]
    summary = convert_files([p], tmp_path / "o.parquet", fmt="clockwork")
    assert [b.split(": ")[0] for b in summary.bad] == [f"{p}:1", f"{p}:3"]


def test_a_huge_bad_line_is_not_echoed_whole(tmp_path):
    p = tmp_path / "in.txt"
    p.write_text(f"{LINES[0]}\n{'x' * 4_000_000};w\n{LINES[1]}\n")
    r = _invoke("eval", "--file", p)
    assert r.exit_code == 1 and len(r.stderr) < 1000, len(r.stderr)
    assert f"{p}:2:" in r.stderr and "4,000,0" in r.stderr      # says how long it was
    r = _invoke("convert", p, "-o", tmp_path / "o.parquet")
    assert r.exit_code == 0 and len(r.stderr) < 1000 and f"{p}:2:" in r.stderr


# -- every bad line is reported -------------------------------------------------------------------

@pytest.mark.parametrize("n_bad", [3, SHOW_BAD, SHOW_BAD + 1, 2500])
def test_every_bad_line_is_reported(tmp_path, n_bad):
    p = tmp_path / "in.txt"
    bad_at = set(range(2, 2 * n_bad + 2, 2))                   # 1-based line numbers
    lines = [f"{FENS[0]};q" if i in bad_at else LINES[i % len(LINES)]
             for i in range(1, 2 * n_bad + 10)]
    p.write_text("\n".join(lines) + "\n")
    out = tmp_path / "o.parquet"
    r = _invoke("convert", p, "-o", out)
    assert r.exit_code == 0, r.output
    report = tmp_path / "o.parquet.bad.txt"
    shown = [ln for ln in r.stderr.splitlines() if ln.startswith(f"  {p}:")]
    if n_bad <= SHOW_BAD:
        assert len(shown) == n_bad and not report.exists()
    else:
        assert len(shown) == SHOW_BAD and f"... and {n_bad - SHOW_BAD:,} more" in r.stderr
        assert f"every bad line: {report}" in r.stderr
        listed = report.read_text().splitlines()
        assert [int(ln.split(":")[1]) for ln in listed] == sorted(bad_at)
        assert all("bad result token 'q'" in ln for ln in listed)
    assert pq.read_table(out).num_rows == len(lines) - n_bad
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".")]


def test_strict_failure_keeps_the_report(tmp_path):
    p = tmp_path / "in.txt"
    p.write_text("\n".join(f"{f};x" for f in FENS[:20]) + "\n" + LINES[0] + "\n")
    with pytest.raises(DatasetError, match="every bad line: ") as e:
        convert_files([p], tmp_path / "o.parquet", policy="strict")
    assert "no Parquet written" in str(e.value)
    assert len((tmp_path / "o.parquet.bad.txt").read_text().splitlines()) == 20
    assert not (tmp_path / "o.parquet").exists()


# -- full and read-only disks, leftovers ----------------------------------------------------------

def test_convert_on_a_full_disk(tmp_path, monkeypatch):
    src = tmp_path / "in.txt"
    src.write_text(TINY_TXT.read_text())                     # 4,000 rows: 69 KB of Parquet
    with small_disk(tmp_path / "disk", "32k") as disk:
        if disk is None:                                     # no tmpfs: the writer fails
            disk = tmp_path / "disk"
            import pyarrow.parquet as pqm

            def full(self, *a, **k):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            monkeypatch.setattr(pqm.ParquetWriter, "write_table", full)
        out = disk / "o.parquet"
        r = _invoke("convert", src, "-o", out, "--no-progress")
        assert r.exit_code == 1 and "Traceback" not in r.output
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"Error: {out}: cannot write: ")
        assert "No space left on device" in lines[0] or "ENOSPC" in lines[0], lines
        assert list(disk.iterdir()) == []                   # no partial output, no temp


def test_convert_on_a_read_only_disk_keeps_the_old_output(tmp_path, monkeypatch):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n")
    with small_disk(tmp_path / "disk", "1m") as disk:
        base = disk if disk is not None else tmp_path / "disk"
        out = base / "o.parquet"
        convert_files([src], out)
        before = out.read_bytes()
        if disk is not None:
            remount(disk, "ro")
        else:
            import tuner.data.convert as conv

            def read_only(path):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS))
            monkeypatch.setattr(conv, "temp_path_for", read_only)
        try:
            r = _invoke("convert", src, "-o", out)
        finally:
            if disk is not None:
                remount(disk, "rw")
        assert r.exit_code == 1 and "Traceback" not in r.output
        assert f"{out}: cannot write: Read-only file system" in r.stderr
        assert out.read_bytes() == before and sorted(x.name for x in base.iterdir()) == ["o.parquet"]


def test_convert_removes_the_leftovers_of_killed_conversions(tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("\n".join(LINES) + "\n")
    for name in (".o.parquet.k1l2.tmp", ".o.parquet.bad.txt.z9.tmp"):
        (tmp_path / name).write_bytes(b"half")
    (tmp_path / ".other.parquet.x.tmp").write_bytes(b"not ours")
    convert_files([src], tmp_path / "o.parquet")
    assert sorted(x.name for x in tmp_path.iterdir()) == [".other.parquet.x.tmp", "in.txt",
                                                          "o.parquet"]
