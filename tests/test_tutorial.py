"""docs/tutorial.md: the page quotes the example files exactly, and its commands run.

Every `tuner ...` line of the page's ``sh`` blocks runs through Click's runner, in order, in an
empty folder outside the repository: the first, `tuner examples`, writes the example files from
the package (what an installed copy has), at a path Numba has never cached, so the first
evaluation must announce its compilation; every command the page shows must exist.
"""
import ast
import re
import shlex

from click.testing import CliRunner

from shared import REPO
from tuner.cli import main
from tuner.compiling import COMPILING
from tuner.evals import get_evaluation
from tuner.evals.registry import ParamRegistry

TUTORIAL = REPO / "docs" / "tutorial.md"
EXAMPLES = REPO / "examples"
PREFIX = "tuner "
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
    monkeypatch.chdir(tmp_path)
    assert REPO not in tmp_path.resolve().parents
    commands = _commands()
    names = [c[0] for c in commands]
    assert names == ["examples", "eval", "train", "eval", "export", "plot", "params", "diff"], names
    runner = CliRunner()
    results = []
    for args in commands:
        r = runner.invoke(main, args)
        assert r.exit_code == 0, (args, r.output)
        results.append(r)
    examples, first, train, tuned, export, plot, params, diff = results
    for name in ("kingsafety.py", "kingsafety.toml"):  # the shipped files, as quoted
        assert (tmp_path / "examples" / name).read_text() == (EXAMPLES / name).read_text()
    assert first.stderr.startswith(COMPILING)  # a copy Numba never saw: it compiles, and says so
    assert "MAT" in first.stdout and first.stdout.splitlines()[-1].startswith("6k1/5ppp/")
    run = tmp_path / "runs" / "kingsafety"
    reg = ParamRegistry.from_json(run / "params.json")
    assert reg.names == ["MAT", "TEMPO", "KING_ATTACK", "KS_AMPLITUDE", "KS_OFFSET"]
    assert reg.meta["evaluation"] == "kingsafety" and reg.meta["K"] == 0.0025
    assert "epoch    5/5" in train.stdout
    hpp = (run / "params.hpp").read_text()
    assert "namespace kingsafety {" in hpp and "Clockwork" not in hpp
    assert hpp.startswith("// K: 0.0025\n")
    assert export.stdout == hpp  # the run's params.hpp is the export of its params.json
    assert len(tuned.stdout.splitlines()) == 2
    pictures = [tmp_path / line[len("wrote "):] for line in plot.stdout.splitlines()]
    assert pictures and all(p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") for p in pictures)
    start = ParamRegistry.from_json(run / "start.json")  # init = "default": the file's values
    written = get_evaluation("kingsafety.py", tmp_path / "examples").registry
    assert start.names == reg.names and start.defaults.tobytes() == written.defaults.tobytes()
    assert diff.stdout.splitlines()[0].endswith("the 5 largest:")
    assert (run / "best.diff.png").read_bytes().startswith(b"\x89PNG")


def test_the_docs_describe_what_the_tutorial_uses():
    """Every name the example imports from tuner.chess and tuner.tape is in docs/interfaces.md,
    the README gives material.py's real size, and the rules a first evaluation hits are written
    down (global tables as tuples; the phase formula)."""
    tree = ast.parse((EXAMPLES / "kingsafety.py").read_text())
    names = {a.name for node in tree.body if isinstance(node, ast.ImportFrom)
             and node.module.startswith(("tuner.chess", "tuner.tape")) for a in node.names}
    assert {"pop_lsb", "lsb", "phase", "record_pair_sigmoid", "lin_add"} <= names
    interfaces = (REPO / "docs" / "interfaces.md").read_text()
    assert [n for n in sorted(names) if f"`{n}" not in interfaces and f" {n}" not in interfaces] \
        == []
    assert "min(PHASE_MAX, N + B + 2 R + 4 Q)" in interfaces
    lines = len((REPO / "tuner" / "evals" / "material.py").read_text().splitlines())
    assert f"`tuner/evals/material.py` (linear, {lines} lines)" in (REPO / "README.md").read_text()
    assert "reflected list" in (REPO / "docs" / "evaluations.md").read_text()
    assert "which the run does not pass to it yet" not in (REPO / "README.md").read_text()
