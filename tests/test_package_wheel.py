"""The installed package: a wheel built from this checkout, installed into a fresh virtual
environment outside the repository, run from a temporary directory.

Slow by nature (a build, a training run): one test runs every command. The fresh environment
sees the suite's own packages (numba, numpy, ...) through a path file instead of installing them
again (that took most of the test's time, a download or unpacking of each and their bytecode
compilation), and `pip check` proves that they satisfy the wheel's requirements, which must be
the project's. The installed copy shares the suite's Numba cache, keyed by the sources' contents
wherever they are, so it compiles only what the suite has not. It uses nothing of the package
in-process but the CLI (and where the cache is), so that it runs against any version of the
sources.
"""
from __future__ import annotations

import email.parser
import os
import shutil
import site
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from click.testing import CliRunner

import tuner
from tuner.cli import main
from tuner.compiling import COMPILING

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "tests" / "data" / "spec"
#: What a wheel must carry besides the code (paths inside the wheel).
PACKAGE_DATA = ["tuner/configs/default.toml", "tuner/configs/clockwork-seed.toml",
                "tuner/configs/clockwork-head.toml", "tuner/samples/registry.toml",
                "tuner/samples/selfplay-std.parquet", "tuner/samples/selfplay-dfrc.parquet",
                "tuner/samples/tiny.parquet", "tuner/evals/params/clockwork.json",
                "tuner/evals/params/clockwork-10d79e6.json", "tuner/evals/params/material.json",
                "tuner/examples/kingsafety.py", "tuner/examples/kingsafety.toml"]
#: The files a wheel is built from (copied, so that the build writes nothing into the checkout).
SOURCES = ["pyproject.toml", "README.md", "tuner"]
#: Conformance positions evaluated by the installed copy (the first lines of each file).
N_FENS = 4
#: Generous bounds for one command (a cold Numba compile on a loaded 2-core machine).
INSTALL_TIMEOUT_S = 900
COMMAND_TIMEOUT_S = 900
SHIPPED_CONFIGS = ["clockwork-head", "clockwork-seed", "default"]
#: The supported Python versions (tests/test_package.py checks the range).
MIN_PYTHON = ">=3.11"


def run(cmd: list, cwd: Path, env: dict, timeout: float = COMMAND_TIMEOUT_S,
        ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=timeout)
    if ok:
        assert r.returncode == 0, (cmd, r.stdout[-3000:], r.stderr[-3000:])
    return r


def conformance(n: int) -> list[tuple[str, int]]:
    """The first ``n`` positions of each self-play conformance file with the engine's eval."""
    out = []
    for variant in ("std", "dfrc"):
        lines = (SPEC / f"conformance-selfplay-{variant}.txt").read_text().splitlines()[:n]
        out += [(fen, int(score)) for fen, score in (ln.rsplit(";", 1) for ln in lines)]
    return out


def build_wheel(tmp: Path, env: dict) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(REPO / name, src / name)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", src],
        tmp, env, INSTALL_TIMEOUT_S)
    (wheel,) = (tmp / "dist").glob("tuner-*.whl")
    return wheel


def fresh_environment(venv: Path, env: dict) -> Path:
    """A virtual environment at `venv` without pip (this interpreter's pip installs into it)
    whose site-packages lists this interpreter's site folders in a path file, so that the
    installed copy imports the suite's dependencies. A path file's folders are only put on the
    path (their own path files are not run), so the suite's editable install of the project is
    not seen; the installed copy's site-packages comes first. Its site-packages folder."""
    run([sys.executable, "-m", "venv", "--without-pip", venv], venv.parent, env)
    (packages,) = (venv / "lib").glob("python*/site-packages")
    (packages / "tuner-test-dependencies.pth").write_text(
        "".join(f"{p}\n" for p in site.getsitepackages()))
    return packages


def test_wheel_installs_and_runs_from_any_directory(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("TUNER_DATASETS", "VIRTUAL_ENV", "PYTHONPATH")}
    # The suite's Numba cache (inherited): the installed copy has the same sources, so it loads
    # the machine code the suite compiled (`tuner.compiling.LayeredCacheLocator`) instead of
    # compiling everything again. (pip keeps its cache: reused.)
    env["NUMBA_CACHE_DIR"] = str(tuner.cache_base())
    env["PIP_NO_INPUT"] = "1"

    wheel = build_wheel(tmp_path, env)
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = email.parser.Parser().parsestr(
            z.read(f"tuner-{tuner_version()}.dist-info/METADATA").decode())
    assert [p for p in PACKAGE_DATA if p not in names] == []
    assert not any(n.startswith(("datasets/", "configs/", "tests/")) for n in names)
    assert meta["Requires-Python"] == MIN_PYTHON
    assert meta.get_all("Requires-Dist")[:len(dependencies())] == dependencies()

    venv = tmp_path / "venv"
    packages = fresh_environment(venv, env)
    pip = [sys.executable, "-m", "pip", "--python", venv / "bin" / "python"]
    run([*pip, "install", "--no-deps", "--no-index", "-q", wheel], tmp_path, env,
        INSTALL_TIMEOUT_S)
    run([*pip, "check"], tmp_path, env)  # the visible packages satisfy what the wheel needs
    assert (packages / "tuner" / "__init__.py").is_file()
    exe = venv / "bin" / "tuner"
    work = tmp_path / "work"  # an empty directory outside the repository
    work.mkdir()

    r = run([exe, "--version"], work, env)
    assert r.stdout.strip() == f"tuner, version {tuner_version()}"

    positions = conformance(N_FENS)
    expected = [f"{fen};{score}" for fen, score in positions]
    here = CliRunner().invoke(main, ["eval", *(fen for fen, _ in positions)])  # compiled here
    assert here.exit_code == 0 and here.stdout.splitlines() == expected
    r = run([exe, "eval", *(fen for fen, _ in positions)], work, env)
    assert r.stdout.splitlines() == expected
    assert COMPILING not in r.stderr, r.stderr  # the installed copy loaded the machine code

    r = run([exe, "data", "list"], work, env)
    lines = r.stdout.splitlines()
    shipped = packages / "tuner" / "samples" / "registry.toml"
    assert lines[1:4] == ["  1. datasets/registry.toml (current directory): none there",
                          "  2. $TUNER_DATASETS: not set",
                          f"  3. {shipped} (shipped with tuner): 3 datasets"], r.stdout
    for name in ("selfplay-std", "selfplay-dfrc", "tiny"):
        assert any(ln.startswith(f"  {name} ") and ln.endswith("ok") for ln in lines), r.stdout

    r = run([exe, "configs"], work, env)
    assert [ln.split()[0] for ln in r.stdout.splitlines()] == SHIPPED_CONFIGS

    run([exe, "examples"], work, env)  # the tutorial's files, from the installed copy
    for name in ("kingsafety.py", "kingsafety.toml"):
        assert (work / "examples" / name).read_bytes() == (REPO / "examples" / name).read_bytes()

    # a project of one's own, run from another directory: its registry is found from its config
    engine = tmp_path / "engine"
    (engine / "datasets").mkdir(parents=True)
    (engine / "configs").mkdir()
    shutil.copy(REPO / "tuner" / "samples" / "tiny.parquet", engine / "datasets" / "mine.parquet")
    (engine / "datasets" / "registry.toml").write_text('[datasets.mine]\nfile = "mine.parquet"\n')
    (engine / "configs" / "missing.toml").write_text('[data]\ntrain = ["theirs"]\n')
    r = run([exe, "train", "--config", engine / "configs" / "missing.toml", "--out", "run0"],
            work, env, ok=False)
    assert r.returncode == 2 and r.stderr.startswith("error: theirs: no such file, and not a "
                                                     "registered dataset name"), r.stderr
    assert not (work / "run0").exists()  # nothing created before the data is found

    r = run([exe, "train", "--config", "default", "--epochs", "1", "--out", "run"], work, env)
    log = (work / "run" / "train.log").read_text()
    assert f"data: selfplay-std ({shipped.parent / 'selfplay-std.parquet'}): 274,281 positions" \
        in log, log
    assert "epoch    1/1" in log and (work / "run" / "best.json").is_file()  # cross-validated
    fold = work / "run" / "pull-1" / "fold-1"
    assert (fold / "params.json").is_file() and (fold / "loss.csv").is_file()
    assert not (fold / "loss.png").exists()  # a fold run draws no picture (tuner/train/cv.py)

    (engine / "configs" / "mine.toml").write_text(  # one run: tiny has too few games for folds
        (REPO / "tuner" / "configs" / "default.toml").read_text().replace(
            '"selfplay-std", "selfplay-dfrc"', '"mine"').replace("folds = 5", "folds = 0"))
    run([exe, "train", "--config", engine / "configs" / "mine.toml", "--epochs", "1",
         "--out", "mine"], work, env)
    assert (f"data: mine ({engine / 'datasets' / 'mine.parquet'}): 4,000 positions"
            in (work / "mine" / "train.log").read_text())

    r = run([exe, "export", work / "run" / "best.json", "--format", "cpp"], work, env)
    here = CliRunner().invoke(main, ["export", str(work / "run" / "best.json"), "--format",
                                     "cpp"])
    assert here.exit_code == 0 and r.stdout == here.stdout and "PAWN_MAT" in r.stdout


def project() -> dict:
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def tuner_version() -> str:
    return project()["version"]


def dependencies() -> list[str]:
    """The project's requirements (without their comments), as a wheel's metadata lists them."""
    return project()["dependencies"]
