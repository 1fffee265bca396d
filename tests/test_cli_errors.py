"""The error model: the layers below the CLI raise the project's exceptions (`TunerError`, or an
`OSError` naming its path), never Click's; the main group turns them into one line and an exit
code in one place (`tuner.cli.errors`), in the command's style."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import tuner
from tuner.cli import main
from tuner.cli.errors import COMMAND_ERRORS, TRAINING_ERRORS, TrainingCommand, TunerGroup
from tuner.data.errors import DatasetError
from tuner.errors import ConfigError, TunerError
from tuner.evals import EvaluationIndexError
from tuner.evals.registry import ParamFileError
from tuner.evals.verify import EngineError
from tuner.train.loop import TrainingError

PACKAGE = Path(tuner.__file__).parent
#: What a command of the CLI may raise to end with Click's usage or error report.
CLICK_ERRORS = {"ClickException", "UsageError", "BadParameter", "FileError", "Abort"}


def click_errors_raised(path: Path, root: Path = PACKAGE) -> list[str]:
    """``file:line: click.X`` for every use of a Click exception class in `path`, a module of the
    package folder `root`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.relative_to(root.parent)}:{node.lineno}: click.{node.attr}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in CLICK_ERRORS
            and isinstance(node.value, ast.Name) and node.value.id == "click"]


def test_no_layer_below_the_cli_uses_click_exceptions():
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if "cli" not in p.relative_to(PACKAGE).parts]
    assert len(files) > 50  # the scan reads the package, not an empty folder
    assert [hit for p in files for hit in click_errors_raised(p)] == []


def click_imports(path: Path, root: Path = PACKAGE) -> list[str]:
    """``file:line`` for every import of Click (top level or inside a function) in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.relative_to(root.parent)}:{node.lineno}" for node in ast.walk(tree)
            if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "click"
                                                     for a in node.names))
            or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "click")]


def test_only_the_cli_imports_click(tmp_path):
    """Click is the terminal's library: a layer below the CLI reports through a callable it is
    given (as `tuner.train.bench.run_bench` does), never by echoing."""
    files = [p for p in sorted(PACKAGE.rglob("*.py")) if "cli" not in p.relative_to(PACKAGE).parts]
    assert [hit for p in files for hit in click_imports(p)] == []
    planted = tmp_path / "tuner" / "planted.py"
    planted.parent.mkdir()
    planted.write_text("def f():\n    from click import echo\n    echo('x')\n", encoding="utf-8")
    assert click_imports(planted, tmp_path / "tuner") == ["tuner/planted.py:2"]


def test_scan_finds_click_exceptions(tmp_path):
    """The scan above reports a planted use, with its line."""
    text = (PACKAGE / "evals" / "verify.py").read_text(encoding="utf-8")  # a real module
    copy = tmp_path / "tuner" / "evals" / "verify.py"
    copy.parent.mkdir(parents=True)
    copy.write_text(text + "\n\ndef f():\n    raise click.UsageError('x')\n", encoding="utf-8")
    line = text.count("\n") + 4
    hits = click_errors_raised(copy, tmp_path / "tuner")
    assert hits == [f"tuner/evals/verify.py:{line}: click.UsageError"]


@pytest.mark.parametrize("cls", [ConfigError, DatasetError, EvaluationIndexError, ParamFileError,
                                 EngineError, TrainingError])
def test_project_exceptions_are_tuner_errors(cls):
    assert issubclass(cls, TunerError)


def _group(error: BaseException) -> click.Group:
    """A main group with two commands that raise `error`: one of each error style."""
    group = TunerGroup("t")

    @group.command("plain")
    def plain():
        raise error

    @group.command("training", cls=TrainingCommand)
    def training():
        raise error
    return group


@pytest.mark.parametrize("error", [DatasetError("a.parquet: row 3: bad FEN"),
                                   FileNotFoundError(2, "No such file or directory", "x.json")])
@pytest.mark.parametrize("command, style", [("plain", COMMAND_ERRORS),
                                            ("training", TRAINING_ERRORS)])
def test_group_reports_user_errors_in_one_line(error, command, style):
    r = CliRunner().invoke(_group(error), [command])
    assert r.exit_code == style.exit_code, (r.output, r.exception)
    assert isinstance(r.exception, SystemExit)
    assert r.stderr == f"{style.prefix}: {error}\n"
    assert "Traceback" not in r.output


def test_group_leaves_bugs_alone():
    """An exception that is not a user's problem is not turned into a message: it stays a
    traceback, for a bug report."""
    r = CliRunner().invoke(_group(KeyError("internal")), ["plain"])
    assert isinstance(r.exception, KeyError)


def test_training_commands_report_in_their_style():
    """`tuner configs NAME` of no shipped configuration: a ConfigError from the command,
    reported by the group as the training commands' line."""
    r = CliRunner().invoke(main, ["configs", "nosuch"])
    assert r.exit_code == TRAINING_ERRORS.exit_code
    assert r.stderr.startswith("error: nosuch: not a shipped configuration (shipped: ")


def test_python_m_tuner_cli_runs_the_command():
    r = subprocess.run([sys.executable, "-m", "tuner.cli", "--help"], capture_output=True,
                       text=True, cwd=PACKAGE.parent)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("Usage: tuner ")
    assert sorted(main.commands) == sorted(
        line.split()[0] for line in r.stdout.split("Commands:\n")[1].splitlines() if line.strip())
