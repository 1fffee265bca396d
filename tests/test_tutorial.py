"""docs/tutorial.md: the page quotes the example files exactly, and its commands run.

Every `.venv/bin/tuner ...` line of the page's ``sh`` blocks runs through Click's runner, in order,
in a folder holding a fresh copy of examples/ (a file path Numba has never cached, so the first
command must announce its compilation), and every command the page shows must exist.
"""
import re
import shlex
import shutil

from click.testing import CliRunner

from shared import REPO
from tuner.cli import main
from tuner.compiling import COMPILING
from tuner.evals.registry import ParamRegistry

TUTORIAL = REPO / "docs" / "tutorial.md"
EXAMPLES = REPO / "examples"
PREFIX = ".venv/bin/tuner "
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def _blocks(lang):
    return [body for kind, body in FENCE.findall(TUTORIAL.read_text()) if kind == lang]


def _commands():
    return [shlex.split(line[len(PREFIX):]) for body in _blocks("sh")
            for line in body.splitlines() if line.startswith(PREFIX)]


def test_the_tutorial_quotes_the_example_files():
    assert (EXAMPLES / "kingsafety.py").read_text() in _blocks("python")
    assert (EXAMPLES / "kingsafety.toml").read_text() in _blocks("toml")


def test_the_tutorial_commands_run(tmp_path, monkeypatch):
    shutil.copytree(EXAMPLES, tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    commands = _commands()
    names = [c[0] for c in commands]
    assert names == ["eval", "train", "eval", "export", "plot"], names
    runner = CliRunner()
    results = []
    for args in commands:
        r = runner.invoke(main, args)
        assert r.exit_code == 0, (args, r.output)
        results.append(r)
    first, train, tuned, export, plot = results
    assert first.stderr.startswith(COMPILING)  # a copy Numba never saw: it compiles, and says so
    assert "MAT" in first.stdout and first.stdout.splitlines()[-1].startswith("6k1/5ppp/")
    run = tmp_path / "runs" / "kingsafety"
    reg = ParamRegistry.from_json(run / "params.json")
    assert reg.names == ["MAT", "TEMPO", "KING_ATTACK", "KS_AMPLITUDE", "KS_OFFSET"]
    assert "epoch    5/5" in train.stdout
    hpp = (run / "params.hpp").read_text()
    assert "namespace kingsafety {" in hpp and "Clockwork" not in hpp
    assert export.stdout == hpp  # the run's params.hpp is the export of its params.json
    assert len(tuned.stdout.splitlines()) == 2
    pictures = [tmp_path / line[len("wrote "):] for line in plot.stdout.splitlines()]
    assert pictures and all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in pictures)
