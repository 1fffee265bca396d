"""CLI: tuner convert, tuner data stats / list (click.testing.CliRunner)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.data.registry import ENV_VAR

DATASETS = Path(__file__).resolve().parents[1] / "datasets"
START = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"


@pytest.fixture
def runner(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    return CliRunner()


def test_convert_ok_and_bad_lines(runner, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text(f"{START};w\n{START};z\n{START} [0.5]\n")
    out = tmp_path / "o.parquet"
    r = runner.invoke(main, ["convert", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert f"wrote {out}: 1 rows, 2 bad lines skipped" in r.stdout
    assert f"{src}:2: bad result token 'z'" in r.stderr
    assert f"{src}:3: no ';'" in r.stderr
    r = runner.invoke(main, ["data", "stats", str(out)])
    assert r.exit_code == 0 and "1 valid of 1" in r.stdout


def test_convert_strict_and_errors(runner, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text(f"{START};w\n{START};z\n")
    out = tmp_path / "o.parquet"
    r = runner.invoke(main, ["convert", str(src), "-o", str(out), "--policy", "strict"])
    assert r.exit_code == 1 and f"{src}:2: bad result token" in r.stderr
    assert "Error:" in r.stderr and not out.exists()
    r = runner.invoke(main, ["convert", str(tmp_path / "nope.txt"), "-o", str(out)])
    assert r.exit_code == 1 and "nope.txt: no such file" in r.stderr
    r = runner.invoke(main, ["convert", str(src), "-o", str(out), "--format", "epd"])
    assert r.exit_code == 1 and "no valid positions" in r.stderr
    r = runner.invoke(main, ["convert", str(src)])
    assert r.exit_code == 2  # usage error: -o is required
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_convert_forced_format_and_progress(runner, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text(f'{START[:-4]} c9 "0-1";\n')
    out = tmp_path / "o.parquet"
    r = runner.invoke(main, ["convert", str(src), "-o", str(out), "--format", "epd",
                             "--progress"])
    assert r.exit_code == 0, r.output
    assert "epd, 1 rows" in r.stdout and "converting" in r.stderr


@pytest.mark.parametrize("name,rows", [("tiny", "4,000"), ("selfplay-std", "274,281"),
                                       ("selfplay-dfrc", "116,687")])
def test_stats_every_shipped_set(runner, name, rows):
    r = runner.invoke(main, ["data", "stats", name])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert f"{rows} valid of {rows} (0 bad)" in out
    for label in ("0-4", "5-8", "9-12", "13-16", "17-20", "21-23", "24 ", "standard", "DFRC",
                  "unknown (no rights)", "white wins", "draws", "black wins", "score_cp  range"):
        assert label in out, label


def test_stats_json_matches_published_figures(runner):
    r = runner.invoke(main, ["data", "stats", "selfplay-std", "--json"])
    s = json.loads(r.stdout)
    assert s["rows"] == 274_281 and s["n_bad"] == 0
    assert s["results"] == {"white wins (1.0)": 117_356, "draws (0.5)": 101_055,
                            "black wins (0.0)": 55_870}
    shares = [round(100 * k / s["rows"], 1) for _, k in s["phase"]]
    assert shares == [19.5, 21.5, 11.5, 9.4, 12.0, 11.7, 14.3]  # datasets/README provenance
    assert s["variant"]["dfrc"] == 0 and s["variant_column"] == {"standard": 274_281}
    r = runner.invoke(main, ["data", "stats", "selfplay-dfrc", "--json"])
    s = json.loads(r.stdout)
    assert s["variant"]["standard"] == 0 and s["variant"]["dfrc"] > 30_000
    tiny = json.loads(runner.invoke(main, ["data", "stats", "tiny", "--json"]).stdout)
    v = tiny["variant"]
    assert v["standard"] + v["dfrc"] + v["unknown"] == 4000


def test_stats_errors(runner, tmp_path):
    r = runner.invoke(main, ["data", "stats", "v2.1"])
    if not (DATASETS / "v2.1.parquet").exists():
        assert r.exit_code == 1
        assert "tuner convert path/to/v2.1.txt -o datasets/v2.1.parquet" in r.stderr \
            or "tuner convert path/to/v2.1.txt -o" in r.stderr
    r = runner.invoke(main, ["data", "stats", str(tmp_path / "x.parquet")])
    assert r.exit_code == 1 and "no such file" in r.stderr
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1garbagePAR1")
    r = runner.invoke(main, ["data", "stats", str(bad)])
    assert r.exit_code == 1 and "not a Parquet file, or corrupted" in r.stderr


def test_data_list(runner):
    r = runner.invoke(main, ["data", "list"])
    assert r.exit_code == 0
    for name in ("selfplay-std", "selfplay-dfrc", "tiny"):
        line = next(ln for ln in r.stdout.splitlines() if ln.strip().startswith(name + " "))
        assert line.endswith("ok")
    if not (DATASETS / "v3.parquet").exists():
        assert "missing; create with: tuner convert path/to/v3.txt -o" in r.stdout
