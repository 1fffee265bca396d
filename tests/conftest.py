"""Fixtures shared by the test modules: the shipped 4,000-position sample `tiny`, as a dataset and
split for training (module scope: each module gets its own copy, so no module sees another's
changes).

``pytest --compile-times`` adds a report of the seconds each test spent in Numba compilations in
this process (outermost ones, setup included; subprocesses not counted), slowest first, to find
where a cold run's time goes (with ``--durations``).

Under pytest-xdist (``make test``: ``-n 2``) the controller first compiles what most test files
share (a one-epoch training run of the Clockwork evaluation on `tiny`, and its ``eval``) into the
Numba cache, so that the workers load that machine code instead of each compiling it (once per
version of the sources and cache: `WARM_UP_DONE`). With
``--dist loadfile`` a file runs whole on one worker and the slowest file bounds the run's wall
time, so the files that take longest (`SLOW_FILES`) are collected, and therefore handed out,
first, and xdist's own reordering (largest test count first, which put the one-test wheel file
last) is turned off. The files that use the local Ray (`RAY_FILES`) are handed out as one
(`pytest_xdist_make_scheduler`): one worker runs them one after another on one Ray (`local_ray`)
instead of starting one each."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from tuner.compiling import CompileWatch, watch_compilation
from tuner.data import load_dataset
from tuner.train.config import validate
from tuner.train.loop import load_data

#: How many tests the ``--compile-times`` report lists.
COMPILE_REPORT_LINES = 40
#: The seconds of compilation of each test (by node id), for that report.
_COMPILE_TIMES = pytest.StashKey[dict[str, CompileWatch]]()


#: The test files that take longest, slowest first (``--durations`` of the whole suite, warm and
#: cold, on 2 cores, 2026-12-02): started first, so that no worker starts one while the other is
#: finishing the small ones. test_tape_specialise.py comes after test_tape_player.py and
#: test_store_validation.py, which compile (cold) the interpreter and most of the kernels its
#: specialised player calls: it loads them instead of compiling them at the same time. Only the
#: order depends on this list; a file not named keeps its place after these.
SLOW_FILES = ("test_package_wheel.py", "test_cluster.py", "test_train_recovery.py",
              "test_sweep.py", "test_tape_ops.py", "test_eval_reference_10d79e6.py",
              "test_train_quality.py", "test_store_validation.py", "test_tape_player.py",
              "test_eval_indices.py", "test_cache_folders.py", "test_train_replay.py",
              "test_chess_fen.py", "test_train_faults.py", "test_train_determinism.py",
              "test_train_cv.py", "test_train_shuffle.py", "test_plots.py",
              "test_train_stream.py", "test_tape_specialise.py")


def pytest_addoption(parser):
    parser.addoption("--compile-times", action="store_true",
                     help="report the seconds each test spent compiling with Numba")


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order collected
        config.option.loadscopereorder = False


#: The test files that use the local Ray (`local_ray`), the scope they are handed out in
#: together under ``--dist loadfile``, and the CPUs of that Ray.
RAY_FILES = ("test_cluster.py", "test_sweep.py", "test_data_uri.py")
RAY_SCOPE = "ray"
RAY_CPUS = 2


def pytest_collection_modifyitems(config, items):
    """`SLOW_FILES` first, in that order; the others after them in their collected order."""
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FILES)))


def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadfile``: xdist's scheduler of whole files, but with `RAY_FILES` one
    scope (where the first of them is collected), so that one worker runs them on one Ray.
    (xdist's ``--dist loadgroup`` cannot do it: it renames the tests, which pytest 9 ignores.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class RayFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return RAY_SCOPE if Path(scope).name in RAY_FILES else scope

    return RayFilesTogether(config, log)


@pytest.hookimpl(trylast=True)  # after the test's own teardown (a monkeypatched `ray` undone)
def pytest_runtest_teardown(item, nextitem):
    """After the last test of a run of `RAY_FILES` tests, the Ray `local_ray` started (if any)
    is shut down."""
    if nextitem is not None and nextitem.path.name in RAY_FILES:
        return
    ray = sys.modules.get("ray")
    if item.path.name in RAY_FILES and ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not item.config.getoption("compile_times"):
        yield
        return
    with watch_compilation(lambda: None) as watch:
        yield
    item.config.stash.setdefault(_COMPILE_TIMES, {})[item.nodeid] = watch


#: The controller's warm-up under pytest-xdist: a run of the kernels most test files use.
WARM_UP_CONFIG = """[data]
train = ["tiny"]
[evaluation]
name = "clockwork"
[training]
epochs = 1
threads = 2
"""
#: Written into the top layer's cache folder (whose version covers every source of the package)
#: after a warm-up that succeeded: a later suite with the same sources and cache skips the
#: warm-up (several seconds of one core while the other waits), the kernels being cached.
WARM_UP_DONE = "suite-warm-up.done"
#: The position the warm-up evaluates (``tuner eval``: the evaluation's own entry point).
WARM_UP_FEN = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"


def pytest_sessionstart(session):
    """Under pytest-xdist, in the controller before the workers start (xdist starts them in its
    own, later hook): compile the shared kernels once (see the module's docstring), ``tuner
    eval`` in a subprocess while ``tuner train`` runs here (a compilation takes one core: two at
    once use both). A failure here is reported and left to the tests."""
    config = session.config
    if not getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput"):
        return
    import tuner
    done = tuner.cache_folder(tuner.TOP) / WARM_UP_DONE
    if done.exists():  # these sources' warm-up has filled this cache: nothing to compile
        return
    from tuner.cli import main  # only here: a plain run imports no command
    paths = [str(Path(tuner.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))  # these sources
    evaluating = subprocess.Popen([sys.executable, "-m", "tuner.cli", "eval", WARM_UP_FEN],
                                  env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
    with tempfile.TemporaryDirectory(prefix="tuner-warm-up-") as tmp:
        (Path(tmp) / "warm-up.toml").write_text(WARM_UP_CONFIG)
        r = CliRunner().invoke(main, ["train", "--config", str(Path(tmp) / "warm-up.toml"),
                                      "--out", str(Path(tmp) / "run")])
    failed = [] if r.exit_code == 0 else [("train", r.exit_code, r.output)]
    _, err = evaluating.communicate()
    if evaluating.returncode != 0:
        failed.append(("eval", evaluating.returncode, err))
    for command, code, output in failed:
        sys.stderr.write(f"warm-up `tuner {command}` failed ({code}): {output[-2000:]}\n")
    if not failed:
        done.touch()


def pytest_terminal_summary(terminalreporter, config):
    times = config.stash.get(_COMPILE_TIMES, {})
    if not times:
        return
    total = sum(w.seconds for w in times.values())
    terminalreporter.section(f"Numba compilation: {total:.1f} s in this process")
    for nodeid, w in sorted(times.items(), key=lambda kv: -kv[1].seconds)[:COMPILE_REPORT_LINES]:
        terminalreporter.write_line(f"{w.seconds:8.1f} s  {nodeid}")


@pytest.fixture(scope="module")
def tiny():
    """datasets/tiny.parquet as a `Dataset` (positions, results, ...)."""
    return load_dataset("tiny", quiet=True)


@pytest.fixture(scope="module")
def tiny_data():
    """`tiny` split for training by the default ``[data]`` keys (5% of its games held out for
    validation, split seed 1): 3,723 training and 277 validation positions."""
    return load_data(validate({"data": {"train": ["tiny"]}}, "tiny"), lambda s: None)


@pytest.fixture(scope="module")
def no_loss_plot():
    """For a test module (``pytestmark = pytest.mark.usefixtures("no_loss_plot")``, set up before
    its other module fixtures): its training runs draw no ``loss.png``, which matplotlib takes
    most of a short run's time to draw (e.g. 1.2 of 1.6 s, test_store_validation's runs); the
    loss.csv beside it and everything else a run does stay. The picture itself:
    tests/test_train_outputs.py, tests/test_plot.py."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("tuner.train.plot.write_loss_plot", lambda path, history, **kw: None)
        yield


@pytest.fixture
def local_ray():
    """A local Ray of `RAY_CPUS` CPUs (the `ray` module), started by the first test that needs
    it and kept for the tests of `RAY_FILES` that follow it (``make test`` runs them one after
    another on one worker), shut down after the last of them (`pytest_runtest_teardown`)."""
    ray = pytest.importorskip("ray", reason="Ray is installed by `make` (pip install "
                                            "'tuner[ray]')")
    if not ray.is_initialized():
        ray.init(num_cpus=RAY_CPUS, include_dashboard=False, logging_level="WARNING")
    return ray
