"""Every command that reads a JSON file (a parameter file or a run's run.json) turns a file it
cannot read into one line naming the file: here, nesting too deep for Python's parser."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.fileio import read_json

ROOT = Path(__file__).resolve().parents[1]
CLOCKWORK = ROOT / "tuner" / "evals" / "params" / "clockwork.json"
START = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
DEPTH = 100_000
TOML = f"""\
[data]
train = ["{ROOT / 'tuner' / 'samples' / 'tiny.parquet'}"]

[evaluation]
init = "deep.json"
"""


def _deep(path: Path) -> Path:
    path.write_text("[" * DEPTH + "]" * DEPTH, encoding="utf-8")
    return path


def test_read_json_names_the_file_and_line_of_each_failure(tmp_path):
    cases = {"deep.json": ("[" * DEPTH + "]" * DEPTH).encode(), "bad.json": b'{"a": 1,\n x}',
             "bin.json": b"\xff\xfe\x00", "bom.json": b"\xef\xbb\xbf{}"}
    expect = {"deep.json": ": arrays or objects nested too deeply",
              "bad.json": ":2:2: not JSON (Expecting property name",
              "bin.json": ": not a text file (byte 0 is not UTF-8)",
              "bom.json": ":1:1: not JSON (Unexpected UTF-8 BOM"}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(KeyError) as err:
            read_json(tmp_path / name, KeyError)
        assert err.value.args[0].startswith(f"{tmp_path / name}{expect[name]}"), err.value
    for path, message in ((tmp_path / "none.json", "no such file"),
                          (tmp_path, "is a directory")):
        with pytest.raises(ValueError, match=f"^{path}: {message}"):
            read_json(path)


def _run_dir(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    _deep(run / "run.json")
    return run


@pytest.mark.parametrize("command", ["eval --params", "plot", "diff", "export", "init",
                                     "resume"])
def test_deeply_nested_json_is_one_line_naming_the_file(tmp_path, command):
    deep = _deep(tmp_path / "deep.json")
    args = {"eval --params": ["eval", "--params", deep, START],
            "plot": ["plot", deep, "-o", tmp_path / "pic"],
            "diff": ["diff", CLOCKWORK, deep],
            "export": ["export", deep],
            "init": ["train", "--config", tmp_path / "run.toml", "--out", tmp_path / "out"],
            "resume": ["train", "--resume", tmp_path / "run"]}[command]
    if command == "init":
        (tmp_path / "run.toml").write_text(TOML, encoding="utf-8")
    if command == "resume":
        deep = _run_dir(tmp_path) / "run.json"
    r = CliRunner().invoke(main, [str(a) for a in args])
    assert r.exit_code in (1, 2) and isinstance(r.exception, SystemExit), (r.output, r.exception)
    assert "Traceback" not in r.output and "RecursionError" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{deep}: arrays or objects nested too deeply" in lines[0], lines
    assert not (tmp_path / "out").exists()
