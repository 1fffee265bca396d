"""`tuner eval --file` streams its input and caps the invalid lines it prints; text inputs may
start with a UTF-8 byte order mark; a Parquet file without a fen column is one plain line."""
from __future__ import annotations

import gzip
import tempfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from shared import stderr_lines
from tuner.cli import main
from tuner.data.convert import UTF8_BOM, convert_files
from tuner.data.errors import SHOW_BAD
from tuner.cli import evals as commands

START = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
ENDGAME = "8/3k4/8/1PP3p1/6P1/p4K2/R7/7r w - - 0 45"
N_BAD = SHOW_BAD + 15


@pytest.fixture
def tmp_folder(tmp_path, monkeypatch):
    """The temporary folder (where eval's report of invalid lines goes) inside tmp_path."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _eval(*args):
    r = CliRunner().invoke(main, ["eval", *map(str, args)])
    return r, stderr_lines(r)


def test_invalid_lines_past_the_first_ones_go_to_a_named_report(tmp_path, tmp_folder):
    f = tmp_path / "in.txt"
    f.write_text("".join(f"garbage {i}\n" for i in range(N_BAD)) + f"{START}\n")
    r, err = _eval("--file", f)
    assert r.exit_code == 1 and r.stdout == f"{START};59\n"
    assert err[:SHOW_BAD] == [f"{f}:{i + 1}: piece placement: unknown piece letter 'g' in rank 8: "
                              f"'garbage'" for i in range(SHOW_BAD)]
    (report,) = tmp_folder.glob("tuner-eval-*.bad.txt")
    assert err[SHOW_BAD:] == [f"... and {N_BAD - SHOW_BAD} more invalid lines ({N_BAD} in all; "
                              f"every one: {report})"]
    listed = report.read_text().splitlines()
    assert [ln.split(":")[1] for ln in listed] == [str(i + 1) for i in range(N_BAD)]


def test_a_few_invalid_lines_leave_no_report(tmp_path, tmp_folder):
    f = tmp_path / "in.txt"
    f.write_text(f"garbage\n{START}\n")
    r, err = _eval("--file", f, "nonsense")
    assert r.exit_code == 1 and r.stdout == f"{START};59\n" and len(err) == 2
    assert err[0].startswith("arg:1: ") and err[1].startswith(f"{f}:1: ")
    assert list(tmp_folder.iterdir()) == []


def test_the_file_is_read_a_block_at_a_time(tmp_path, monkeypatch):
    block = 256
    lines = ["", ""] * 300 + [f"{START};w", "", "garbage", f"{ENDGAME};d\r"] * 20
    f = tmp_path / "in.txt.gz"
    text = "\n".join(lines).encode()
    f.write_bytes(gzip.compress(text))
    monkeypatch.setattr(commands, "EVAL_BLOCK_BYTES", block)
    blocks = list(commands._input_blocks((START,), str(f)))
    # every block holds the lines of at most `block` bytes (the shortest line is "garbage\n")
    assert len(blocks) > len(text) // block
    assert max(len(b) for b in blocks[1:]) <= block // len("garbage\n")
    items = [item for b in blocks for item in b]
    expect = [("arg:1", START)] + [(f"{f}:{k}", line.split(";")[0])
                                   for k, line in enumerate(lines, 1) if line]
    assert items == expect
    r, err = _eval("--file", f)
    assert r.exit_code == 1 and r.stdout.splitlines() == [f"{START};59", f"{ENDGAME};318"] * 20
    assert len(err) == SHOW_BAD + 1 and err[0] == (f"{f}:603: piece placement: unknown piece "
                                                  f"letter 'g' in rank 8: 'garbage'")


def test_a_byte_order_mark_is_skipped(tmp_path):
    f = tmp_path / "bom.txt"
    f.write_bytes(UTF8_BOM + f"{START};w\n{ENDGAME};d\n".encode())
    r, err = _eval("--file", f)
    assert (r.exit_code, err) == (0, []) and r.stdout == f"{START};59\n{ENDGAME};318\n"
    summary = convert_files([f], tmp_path / "bom.parquet")
    assert (summary.rows, summary.n_bad) == (2, 0)
    assert pq.read_table(tmp_path / "bom.parquet").column("fen").to_pylist()[0] == START


def test_a_parquet_file_without_a_fen_column(tmp_path):
    f = tmp_path / "x.parquet"
    pq.write_table(pa.table({"position": [START], "result": [1.0]}), f)
    r, err = _eval("--file", f)
    assert r.exit_code == 1 and err == [
        f"Error: {f}: a Parquet file without a fen column (its columns: position, result); "
        f"eval --file reads the FENs of a `fen` column"]
