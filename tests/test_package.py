"""The package's shipped configurations by name, the run directory made only once the data is
found, and the one supported Python range. The wheel itself: tests/test_package_wheel.py."""
from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

import tuner
from tuner.cli import main
from tuner.shipped import find_config, shipped_configs
from tuner.train.config import ConfigError, load_config

from test_package_wheel import MIN_PYTHON, REPO, SHIPPED_CONFIGS

#: Python gained tomllib, which the package imports, in this version.
TOMLLIB_SINCE = (3, 11)


# -- the shipped configurations by name ---------------------------------------------------------

def test_shipped_configs_by_name(tmp_path, monkeypatch):
    assert list(shipped_configs()) == SHIPPED_CONFIGS
    assert find_config("default") == REPO / "tuner" / "configs" / "default.toml"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "default").mkdir()                 # a folder of that name does not hide it
    assert find_config("default").name == "default.toml"
    (tmp_path / "default.toml").write_text("")
    assert find_config("default.toml") == Path("default.toml")  # a path is a path
    with pytest.raises(ConfigError) as e:
        find_config("nosuch")
    assert str(e.value) == ("nosuch: no such configuration file, and not a shipped "
                            "configuration (shipped: clockwork-head, clockwork-seed, default; "
                            "see `tuner configs`)")
    for path in shipped_configs().values():
        load_config(path)                          # every shipped configuration is valid


def test_configs_command_lists_and_prints(tmp_path):
    r = CliRunner().invoke(main, ["configs"])
    assert r.exit_code == 0
    lines = r.stdout.splitlines()
    assert [ln.split()[0] for ln in lines] == SHIPPED_CONFIGS
    cfg = load_config(find_config("default"))
    assert lines[-1] == (f"default         {cfg['evaluation']['name']}, "
                         f"{cfg['training']['epochs']} epochs on selfplay-std, selfplay-dfrc")
    r = CliRunner().invoke(main, ["configs", "default"])
    assert r.exit_code == 0 and r.stdout == find_config("default").read_text()
    r = CliRunner().invoke(main, ["configs", "nosuch"])
    assert r.exit_code == 2 and r.stderr == ("error: nosuch: not a shipped configuration "
                                             "(shipped: clockwork-head, clockwork-seed, "
                                             "default)\n")


def test_train_creates_no_run_directory_before_the_data_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv("TUNER_DATASETS", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c.toml").write_text('[data]\ntrain = ["tiny", "nosuch.parquet"]\n')
    r = CliRunner().invoke(main, ["train", "--config", "c.toml", "--out", "out"])
    assert r.exit_code == 2 and r.stderr == "error: nosuch.parquet: no such file\n"
    r = CliRunner().invoke(main, ["train", "--config", "c.toml"])        # default runs/...
    assert r.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]


# -- the supported Python versions --------------------------------------------------------------

def imported_modules() -> set[str]:
    """The top-level names of every module the package's sources import."""
    names = set()
    for path in Path(tuner.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])
    return names


def test_one_supported_python_range():
    """pyproject's requires-python starts where the stdlib has every module the package
    imports (tomllib, without a fallback), and the interpreter the suite runs on is inside it:
    the supported range is the tested one."""
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    assert project["requires-python"] == MIN_PYTHON == ">={}.{}".format(*TOMLLIB_SINCE)
    assert sys.version_info[:2] >= TOMLLIB_SINCE
    imported = imported_modules()
    assert "tomllib" in imported and "tomli" not in imported
    assert not any(d.startswith("tomli") for d in project["dependencies"])
