"""Faults during training: kills at chosen moments, concurrent runs, damaged checkpoints, full and
read-only disks, SIGTERM, leftovers, file modes and resume edge cases (issue 13).

Kills are injected deterministically: a subprocess runs `tuner train` with one step of the run
patched to SIGKILL (or SIGTERM) the process at a chosen moment. Full disks are a small tmpfs when
the test can mount one (root), otherwise an OSError injected into the atomic writer.
"""
from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tuner import fileio
from disks import remount, small_disk
from shared import REPO, TINY_PARQUET
from tuner.cli import main
from tuner.evals.registry import ParamRegistry
from tuner.train.checkpoint import FIELDS
from tuner.train.loop import CHECKPOINT, TrainingError, start_run
from tuner.train.rundir import RUN_META, RunBusyError, RunLock

TOML = f"""\
[data]
train = ["{TINY_PARQUET}"]

[optimizer]
lr = 5.0

[training]
epochs = 4
batch_size = 1024
micro_batch_size = 256
threads = 1
"""
OUTPUTS = ("params.json", "params.hpp", "loss.csv", "loss.png")


def _cfg(tmp_path, text=TOML, name="run.toml"):
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _checkpoint(d):
    with np.load(d / CHECKPOINT) as z:
        return {k: z[k] for k in z.files}


def _params_of(d):
    reg = ParamRegistry.from_json(d / "params.json")
    return np.concatenate([reg.defaults.reshape(-1), reg.value_defaults])


def _hidden(d):
    return sorted(p.name for p in d.iterdir() if p.name.startswith("."))


def _train(*args):
    return CliRunner().invoke(main, ["train", *map(str, args)])


def _ok(r):
    assert r.exit_code == 0, (r.output, r.exception)
    assert "Traceback" not in r.output
    return r


def _refused(r, *needles):
    """Exit 2 with a one-line error (no traceback) holding every needle."""
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (r.output, r.exception)
    assert "Traceback" not in r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1, r.stderr
    for n in needles:
        assert n in errors[0], (n, errors[0])
    return errors[0]


PRELUDE = """
import os, signal, sys, time
from pathlib import Path
from tuner.cli import main
from tuner.train import loop
from tuner import fileio
"""


def _subprocess(code: str, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", PRELUDE + code, *map(str, args)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 240) -> None:
    deadline = time.time() + seconds
    while not path.exists():
        if proc.poll() is not None:
            raise AssertionError(f"exited {proc.returncode}: {proc.communicate()}")
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


#: Kill the process with SIGKILL when Run.<method> is entered with run.epoch == argv[1].
KILL_IN_METHOD = """
method, at = sys.argv[1], int(sys.argv[2])
real = getattr(loop.Run, method)
def dying(self, *a, **k):
    if self.epoch == at:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, *a, **k)
setattr(loop.Run, method, dying)
main(sys.argv[3:])
"""

#: Kill the process with SIGKILL inside the atomic writer, after the temporary file of the
#: target named argv[1] is complete and before it is renamed (the argv[2]-th such write).
KILL_BEFORE_RENAME = """
name, nth = sys.argv[1], int(sys.argv[2])
real = fileio.finish_temp
seen = []
def dying(tmp, path, *mode):
    if os.path.basename(path) == name:
        seen.append(1)
        if len(seen) == nth:
            os.kill(os.getpid(), signal.SIGKILL)
    return real(tmp, path, *mode)
fileio.finish_temp = dying
main(sys.argv[3:])
"""


# -- 1. a kill between the checkpoint and the outputs ---------------------------------------------

def test_kill_after_the_last_checkpoint_is_repaired_on_resume(tmp_path):
    """Killed after the final epoch's checkpoint, before its params.json: resume finds nothing
    to train, brings every output up to date with the checkpoint and says so."""
    cfg = _cfg(tmp_path)
    out = tmp_path / "out"
    proc = _subprocess(KILL_IN_METHOD, "write_outputs", 4, "train", "--config", cfg, "--out", out)
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    ck = _checkpoint(out)
    assert int(ck["epoch"]) == 4
    assert _params_of(out).tobytes() != ck["theta"].tobytes()      # the outputs lag behind
    r = _ok(_train("--resume", out))
    assert "nothing to train: the run is at epoch 4 of 4" in r.stdout
    assert "data:" not in r.stdout                                   # no data loaded again
    assert _params_of(out).tobytes() == ck["theta"].tobytes()
    assert int(ck["best_epoch"]) >= 1
    best = ParamRegistry.from_json(out / "best.json")
    assert best.defaults.reshape(-1).tobytes() == ck["best_theta"].tobytes()
    assert len((out / "loss.csv").read_text().splitlines()) == 1 + 4
    reg = ParamRegistry.from_json(out / "params.json")
    from tuner.evals.export import to_cpp
    assert (out / "params.hpp").read_text() == f"// K: {reg.meta['K']}\n" + to_cpp(
        reg, reg.defaults, value_values=reg.value_defaults)
    assert _hidden(out) == []


def test_checkpoint_swapped_from_a_longer_run(tmp_path):
    """The issue's reproduction: A trained 2 epochs, B 3; A's copy with B's checkpoint resumed
    to 3 must hold B's parameters."""
    cfg = _cfg(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b"
    _ok(_train("--config", cfg, "--out", a, "--epochs", 2))
    _ok(_train("--config", cfg, "--out", b, "--epochs", 3))
    copy = tmp_path / "copy"
    shutil.copytree(a, copy)
    shutil.copyfile(b / CHECKPOINT, copy / CHECKPOINT)
    r = _ok(_train("--resume", copy, "--epochs", 3))
    assert "nothing to train" in r.stdout
    for name in ("params.json", "params.hpp"):
        assert (copy / name).read_bytes() == (b / name).read_bytes(), name
    assert [ln.split(",")[:4] for ln in (copy / "loss.csv").read_text().splitlines()] == \
        [ln.split(",")[:4] for ln in (b / "loss.csv").read_text().splitlines()]


def test_kill_while_the_checkpoint_is_renamed(tmp_path):
    """Killed with epoch 2's checkpoint complete but not yet renamed: its temporary file is
    left; the resume removes it, restarts epoch 2 and ends bitwise where an uninterrupted run
    does."""
    cfg = _cfg(tmp_path)
    full, part = tmp_path / "full", tmp_path / "part"
    _ok(_train("--config", cfg, "--out", full, "--epochs", 3))
    proc = _subprocess(KILL_BEFORE_RENAME, CHECKPOINT, 2, "train", "--config", cfg, "--out",
                       part, "--epochs", 3)
    proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGKILL
    assert int(_checkpoint(part)["epoch"]) == 1
    assert any(n.startswith(f".{CHECKPOINT}.") for n in _hidden(part)), _hidden(part)
    r = _ok(_train("--resume", part))                    # no --epochs: the run's own 3
    assert _hidden(part) == []
    assert "training to epoch 3" in r.stdout
    for key in ("theta", "m", "v", "step", "epoch", "history_train_loss"):
        assert _checkpoint(part)[key].tobytes() == _checkpoint(full)[key].tobytes(), key
    for name in ("params.json", "params.hpp"):
        assert (part / name).read_bytes() == (full / name).read_bytes(), name


# -- 2. one process per run directory -------------------------------------------------------------

HOLD_IN_EPOCH = """
marker, go = Path(sys.argv[1]), Path(sys.argv[2])
real = loop.Run.train
def held(self, *a, **k):
    marker.touch()
    while not go.exists():
        time.sleep(0.05)
    return real(self, *a, **k)
loop.Run.train = held
main(sys.argv[3:])
"""


def test_second_process_on_a_run_directory_is_refused(tmp_path):
    cfg = _cfg(tmp_path)
    out = tmp_path / "out"
    marker, go = tmp_path / "training", tmp_path / "go"
    proc = _subprocess(HOLD_IN_EPOCH, marker, go, "train", "--config", cfg, "--out", out,
                       "--epochs", 2)
    try:
        _wait_for(marker, proc)
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        for args in (("--config", cfg, "--out", out), ("--resume", out)):
            _refused(_train(*args), str(out), "another tuner process is training")
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    finally:
        go.touch()
        stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert int(_checkpoint(out)["epoch"]) == 2
    _ok(_train("--resume", out, "--epochs", 3))              # released at the end
    assert int(_checkpoint(out)["epoch"]) == 3


def test_run_lock_in_process(tmp_path):
    a, b = RunLock(tmp_path), RunLock(tmp_path)
    a.acquire()
    a.acquire()                                              # re-entrant for its holder
    with pytest.raises(RunBusyError, match="another tuner process"):
        b.acquire()
    a.release()
    b.acquire()
    b.release()
    assert list(tmp_path.iterdir()) == []                    # no lock file


# -- 3. damaged checkpoints ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trained")
    cfg = _cfg(tmp)
    out = tmp / "out"
    _ok(_train("--config", cfg, "--out", out, "--epochs", 2))
    return out


def _n(ck):
    return ck["theta"].shape[0]


# (name, change to the checkpoint's arrays, what the message must name)
DAMAGE = [
    ("theta-short", lambda c: c.update(theta=c["theta"][:-2]), "theta"),
    ("theta-2d", lambda c: c.update(theta=c["theta"].reshape(-1, 2)), "theta"),
    ("theta-float32", lambda c: c.update(theta=c["theta"].astype(np.float32)), "theta"),
    ("theta-big-endian", lambda c: c.update(theta=c["theta"].astype(">f8")), "theta"),
    ("theta-nan", lambda c: c["theta"].__setitem__(3, np.nan), "theta"),
    ("theta-1e300", lambda c: c["theta"].__setitem__(3, 1e300), "theta"),
    ("m-long", lambda c: c.update(m=np.zeros(_n(c) + 10)), "m"),
    ("v-negative", lambda c: c["v"].__setitem__(0, -1.0), "v"),
    ("v-int", lambda c: c.update(v=c["v"].astype(np.int64)), "v"),
    ("epoch-negative", lambda c: c.update(epoch=np.int64(-1)), "epoch"),
    ("epoch-zero", lambda c: c.update(epoch=np.int64(0)), "epoch"),
    ("epoch-huge", lambda c: c.update(epoch=np.int64(2 ** 62)), "epoch"),
    ("epoch-vector", lambda c: c.update(epoch=np.array([2, 2])), "epoch"),
    ("epoch-float", lambda c: c.update(epoch=np.float64(2.0)), "epoch"),
    ("step-negative", lambda c: c.update(step=np.int64(-5)), "step"),
    ("step-below-epoch", lambda c: c.update(step=np.int64(1)), "step"),
    ("history-short", lambda c: c.update(history_train_loss=c["history_train_loss"][:1]),
     "history_train_loss"),
    ("history-epochs", lambda c: c.update(history_epoch=np.array([1.0, 5.0])), "history_epoch"),
    ("rng-not-json", lambda c: c.update(rng=np.array("{oops")), "rng"),
    ("rng-wrong-state", lambda c: c.update(rng=np.array('{"bit_generator": "MT19937"}')), "rng"),
    ("evaluation", lambda c: c.update(evaluation=np.array("material")), "evaluation"),
    ("k-nan", lambda c: c.update(k=np.float64(np.nan)), "k"),
    ("k-negative", lambda c: c.update(k=np.float64(-0.01)), "k"),
    ("best-epoch-ahead", lambda c: c.update(best_epoch=np.int64(7)), "best_epoch"),
    ("best-theta-short", lambda c: c.update(best_theta=c["best_theta"][:5]), "best_theta"),
    ("best-val-nan", lambda c: c.update(best_val=np.float64(np.nan)), "best_val"),
    ("missing-m", lambda c: c.pop("m"), "'m'"),
    ("unknown-key", lambda c: c.update(extra=np.zeros(3)), "extra"),
    ("object-array", lambda c: c.update(theta=np.array([None] * _n(c), dtype=object)), CHECKPOINT),
]


@pytest.mark.parametrize("name, damage, needle", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_damaged_checkpoint_is_refused_before_use(tmp_path, trained, name, damage, needle):
    out = tmp_path / "out"
    shutil.copytree(trained, out)
    ck = _checkpoint(out)
    damage(ck)
    np.savez(out / CHECKPOINT, **ck)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "train.log"}
    err = _refused(_train("--resume", out, "--epochs", 3), str(out / CHECKPOINT), needle)
    assert "resumed" not in err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "train.log"} == before


def test_checkpoint_fields_cover_what_is_saved(trained):
    assert set(_checkpoint(trained)) == set(FIELDS)


# -- 4. full and read-only disks, SIGTERM ---------------------------------------------------------

def _inject(monkeypatch, err: int, after: int = 0):
    """The atomic writer fails with `err` from its (after+1)-th write on."""
    real = fileio.finish_temp
    calls = []

    def failing(tmp, path, *mode):
        calls.append(path)
        if len(calls) > after:
            raise OSError(err, os.strerror(err))
        return real(tmp, path, *mode)

    monkeypatch.setattr(fileio, "finish_temp", failing)
    return calls


def _assert_consistent(out: Path):
    """What a failed run leaves: no temporary file, and every file complete."""
    assert _hidden(out) == []
    if (out / CHECKPOINT).exists():
        ck = _checkpoint(out)
        if (out / "params.json").exists():
            assert _params_of(out).shape == ck["theta"].shape
    for name in (RUN_META, "params.json"):
        if (out / name).exists():
            json.loads((out / name).read_text())


def test_full_disk_during_training(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    with small_disk(tmp_path / "disk", "64k") as disk:
        injected = None
        if disk is None:                                     # no tmpfs: fail the 5th write
            injected = _inject(monkeypatch, errno.ENOSPC, after=4)
            disk = tmp_path / "disk"
        out = disk / "out"
        err = _refused(_train("--config", cfg, "--out", out), "No space left on device")
        assert re.match(rf"error: cannot write {re.escape(str(out))}/\S+: No space left on device "
                        r"\(ENOSPC\)$", err), err
        _assert_consistent(out)
        assert (out / CHECKPOINT).exists()                   # epoch 1 was kept
        # with room again, the run resumes and its outputs agree with its checkpoint
        if injected is None:
            remount(disk, "size=4m")
        else:
            monkeypatch.undo()
        _ok(_train("--resume", out))
        assert int(_checkpoint(out)["epoch"]) == 4
        assert _params_of(out).tobytes() == _checkpoint(out)["theta"].tobytes()


def test_read_only_disk_on_resume(tmp_path, monkeypatch):
    cfg = _cfg(tmp_path)
    with small_disk(tmp_path / "disk", "4m") as disk:
        base = disk if disk is not None else tmp_path / "disk"
        out = base / "out"
        _ok(_train("--config", cfg, "--out", out, "--epochs", 1))
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        if disk is not None:
            remount(disk, "ro")
        else:
            _inject(monkeypatch, errno.EROFS)
        r = _train("--resume", out, "--epochs", 2)
        if disk is not None:
            remount(disk, "rw")
        _refused(r, str(out), "Read-only file system")
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_atomic_writer_failure_names_the_file_and_leaves_nothing(tmp_path, monkeypatch):
    target = tmp_path / "x.bin"
    target.write_bytes(b"old")
    _inject(monkeypatch, errno.ENOSPC)
    with pytest.raises(fileio.WriteError) as e:
        fileio.atomic_write(target, b"new" * 1000)
    assert str(e.value) == f"cannot write {target}: No space left on device (ENOSPC)"
    assert target.read_bytes() == b"old" and sorted(p.name for p in tmp_path.iterdir()) == ["x.bin"]


SIGTERM_AFTER_EPOCH = """
marker = Path(sys.argv[1])
real = loop.Run.save_checkpoint
def slow(self, *a, **k):
    real(self, *a, **k)
    marker.touch()
    time.sleep(0.5)
loop.Run.save_checkpoint = slow
main(sys.argv[2:])
"""


def test_sigterm_is_handled_like_ctrl_c(tmp_path):
    cfg = _cfg(tmp_path)
    out, marker = tmp_path / "out", tmp_path / "epoch-done"
    proc = _subprocess(SIGTERM_AFTER_EPOCH, marker, "train", "--config", cfg, "--out", out,
                       "--epochs", 50)
    _wait_for(marker, proc)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    assert _hidden(out) == []
    epoch = int(_checkpoint(out)["epoch"])
    assert 1 <= epoch < 50
    _ok(_train("--resume", out, "--epochs", epoch + 1))


# -- 5. configuration values that crash or run forever ------------------------------------------

@pytest.mark.parametrize("snippet, needle", [
    ("[data]\nsplit_seed = -1", "[data] split_seed: must be in [0, "),
    ("[training]\nshuffle_seed = -3", "[training] shuffle_seed: must be in [0, "),
    ("[evaluation]\ninit = \"random\"\nrandom_seed = -2", "[evaluation] random_seed"),
    ("[training]\nepochs = 99999999999999999999", "[training] epochs: must be in [1, 1,000,000]"),
    ("[training]\nbatch_size = 9000000000000", "[training] batch_size: must be in [1, "),
    ("[training]\nmicro_batch_size = 100000000", "[training] micro_batch_size: must be in [1, "),
    ("[training]\nthreads = 10000", "[training] threads: must be in [0, 256]"),
    ("[loss]\nk = 1e308", "[loss] k: must be in [1e-05, 1]"),
    ("[loss]\nk = 1e-300", "[loss] k: must be in [1e-05, 1]"),
    ("[freeze]\n[[freeze.stages]]\nfrom_epoch = -1\ntrain = [\"*\"]",
     "[freeze] stages[0].from_epoch: must be in [0, 1,000,000]"),
    ("[schedule]\ntype = \"piecewise\"\n[[schedule.segments]]\nepochs = 3\nlr_start = nan\n"
     "lr_end = 1.0", "[schedule] segments[0].lr_start: must be > 0, got nan"),
    ("[schedule]\ntype = \"piecewise\"\n[[schedule.segments]]\nepochs = 99999999999\n"
     "lr_start = 1.0\nlr_end = 1.0", "[schedule] segments[0].epochs"),
    ("[schedule]\ngamma = 1e300", "[schedule] gamma: must be in (0, 1]"),
])
def test_config_bounds(tmp_path, snippet, needle):
    cfg = _cfg(tmp_path, _merge(snippet))
    out = tmp_path / "out"
    _refused(_train("--config", cfg, "--out", out), str(cfg), needle)
    assert not out.exists()


def _merge(snippet: str) -> str:
    """TOML with the snippet's keys added to its section (appended if TOML has none)."""
    head, body = snippet.split("\n", 1)
    if f"\n{head}\n" not in f"\n{TOML}":
        return f"{TOML}\n{snippet}\n"
    keys = {ln.split("=")[0].strip() for ln in body.splitlines() if "=" in ln}
    base = "".join(ln for ln in TOML.splitlines(True) if ln.split("=")[0].strip() not in keys)
    return base.replace(head + "\n", f"{head}\n{body}\n", 1)


def test_binary_config_file(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_bytes(TINY_PARQUET.read_bytes()[:2000])
    _refused(_train("--config", cfg, "--out", tmp_path / "out"), str(cfg), "not a text file")


def test_epochs_option_bounds(tmp_path):
    r = _train("--config", _cfg(tmp_path), "--epochs", 10 ** 20, "--out", tmp_path / "o")
    assert r.exit_code == 2 and "--epochs" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


# -- 7. leftovers, modes and resume edge cases ------------------------------------------------------

def test_stale_temporary_files_are_removed_but_not_live_ones(tmp_path):
    cfg = _cfg(tmp_path)
    out = tmp_path / "out"
    _ok(_train("--config", cfg, "--out", out, "--epochs", 1))
    stale = out / f".{CHECKPOINT}.x1y2.tmp"
    stale.write_bytes(b"half a checkpoint")
    live = out / ".params.json.abcd.tmp"
    live.write_bytes(b"being written")
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)                           # as the atomic writer holds it
    try:
        assert fileio.remove_stale_temps(out) == [stale]
        assert live.exists() and not stale.exists()
    finally:
        os.close(fd)
    stale.write_bytes(b"again")
    _ok(_train("--resume", out, "--epochs", 2))
    assert _hidden(out) == []


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_outputs_respect_the_umask(tmp_path, umask):
    cfg = _cfg(tmp_path)
    out = tmp_path / "out"
    old = os.umask(umask)
    try:
        _ok(_train("--config", cfg, "--out", out, "--epochs", 1))
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
    assert set(OUTPUTS) | {CHECKPOINT, RUN_META, "config.toml", "train.log"} <= set(modes)
    assert all(m == 0o666 & ~umask for m in modes.values()), modes


@pytest.mark.parametrize("change, needle", [
    ('train = ["no-such-dataset"]', "no-such-dataset"),
    ('train = ["/nowhere/x.parquet"]', "/nowhere/x.parquet"),
    ('train = ["' + str(TINY_PARQUET) + '"]\n[freeze]\n[[freeze.stages]]\nfrom_epoch = 1\n'
     'train = ["NO_SUCH_*"]', "NO_SUCH_*"),
])
def test_config_error_after_start_leaves_no_run_directory(tmp_path, change, needle):
    text = TOML.replace(f'train = ["{TINY_PARQUET}"]', change)
    cfg = _cfg(tmp_path, text)
    out = tmp_path / "runs" / "out"
    _refused(_train("--config", cfg, "--out", out), needle)
    assert not out.exists()
    # an existing (empty) directory is kept, and left empty
    out.mkdir(parents=True)
    _refused(_train("--config", cfg, "--out", out), needle)
    assert out.is_dir() and list(out.iterdir()) == []


def test_rejected_resume_names_the_changed_keys(tmp_path):
    cfg = _cfg(tmp_path)
    out = tmp_path / "out"
    _ok(_train("--config", cfg, "--out", out, "--epochs", 1))
    other = _cfg(tmp_path, TOML.replace("lr = 5.0", "lr = 6.0").replace("batch_size = 1024",
                                                                         "batch_size = 512"),
                 "other.toml")
    err = _refused(_train("--config", other, "--resume", out), "different configuration")
    assert "[optimizer] lr: 5.0 in the run, 6.0 now" in err
    assert "[training] batch_size: 1024 in the run, 512 now" in err


def test_resume_without_epochs_trains_to_the_runs_epochs(tmp_path):
    """Started with --epochs 3 (the config says 4) and stopped after 1: resuming without
    --epochs goes to 3."""
    cfg = _cfg(tmp_path)
    out = tmp_path / "out"
    run = start_run(str(cfg), str(out), None, 3, 1, log=lambda s: None)
    run.epochs = 1                                          # as if stopped after epoch 1
    run.run()
    del run
    r = _ok(_train("--resume", out))
    assert "training to epoch 3" in r.stdout
    assert int(_checkpoint(out)["epoch"]) == 3
    r = _ok(_train("--resume", out))
    assert "nothing to train: the run is at epoch 3 of 3" in r.stdout
    r = _ok(_train("--resume", out, "--epochs", 4))
    assert int(_checkpoint(out)["epoch"]) == 4
    assert json.loads((out / RUN_META).read_text())["epochs"] == 4


def test_resume_refused_names_busy_directory_in_process(tmp_path):
    cfg = _cfg(tmp_path)
    out = tmp_path / "out"
    run = start_run(str(cfg), str(out), None, 1, 1, log=lambda s: None)
    with pytest.raises(TrainingError, match="another tuner process"):
        start_run(None, None, str(out), 1, 1, log=lambda s: None)
    run.run()
    assert int(_checkpoint(out)["epoch"]) == 1


# -- 3. parameter files (--params, init) -----------------------------------------------------------

START = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"


def _params_text(change) -> str:
    from tuner.evals import clockwork as cw
    d = cw.registry().to_dict()
    change(d)
    return json.dumps(d)


# (name, change to a clockwork parameter file's dict, or its raw text; what the message names)
BAD_PARAMS = [
    ("nan", lambda d: d["params"][0]["values"].__setitem__(0, [math.nan, 1]),
     "NaN is not a number"),
    ("inf", lambda d: d["params"][0]["values"].__setitem__(0, [1, math.inf]), "Infinity"),
    ("1e300", lambda d: d["params"][2]["values"].__setitem__(0, [1e300, 1]),
     "params[2] (" ),
    ("string value", lambda d: d["params"][1]["values"].__setitem__(0, ["x", 1]),
     ".values[0][0]: must be a number"),
    ("bool value", lambda d: d["params"][1]["values"].__setitem__(0, [True, 1]),
     ".values[0][0]: must be a number"),
    ("null value", lambda d: d["params"][1]["values"].__setitem__(0, [1, None]),
     ".values[0][1]: must be a number"),
    ("not a pair", lambda d: d["params"][0]["values"].__setitem__(0, 5), "[mg, eg] pair"),
    ("shape text", lambda d: d["params"][0].update(shape="x"), "params[0] (PAWN_MAT).shape"),
    ("negative shape", lambda d: d["params"][0].update(shape=[-1]), ".shape"),
    ("huge shape", lambda d: d["params"][0].update(shape=[10 ** 6, 10 ** 6]), ".shape"),
    ("no offset", lambda d: d["params"][1].pop("offset"), "missing 'offset'"),
    ("params not a list", lambda d: d.update(params=5), '"params" list'),
    ("entry not an object", lambda d: d["params"].__setitem__(0, 7), "params[0]: must be"),
    ("constant not bools", lambda d: d["params"][0].update(constant=[1]), ".constant"),
    ("top level list", lambda d: (d.clear(), d.update(x=1)), '"params" list'),
]


def _bad_params(tmp_path, name, change):
    p = tmp_path / "bad.json"
    p.write_text(_params_text(change), encoding="utf-8")
    return p


@pytest.mark.parametrize("name, change, needle", BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
def test_bad_params_file_for_eval(tmp_path, name, change, needle):
    p = _bad_params(tmp_path, name, change)
    r = CliRunner().invoke(main, ["eval", "--params", str(p), START])
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), (r.output, r.exception)
    assert "Traceback" not in r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Error: {p}: ") and needle in lines[0], lines


@pytest.mark.parametrize("name, change, needle", BAD_PARAMS[:4], ids=[b[0] for b in BAD_PARAMS[:4]])
def test_bad_params_file_as_init(tmp_path, name, change, needle):
    _bad_params(tmp_path, name, change)
    cfg = _cfg(tmp_path, TOML + '\n[evaluation]\ninit = "bad.json"\n')
    out = tmp_path / "out"
    _refused(_train("--config", cfg, "--out", out), "[evaluation] init", "bad.json", needle)
    assert not out.exists()


def test_binary_params_file(tmp_path):
    p = tmp_path / "bad.json"
    p.write_bytes(TINY_PARQUET.read_bytes()[:500])
    r = CliRunner().invoke(main, ["eval", "--params", str(p), START])
    assert r.exit_code == 1 and "not a text file" in r.stderr and "Traceback" not in r.output
