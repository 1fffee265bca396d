"""Sweeps (tuner/train/sweep.py, `tuner sweep`): the trials of a sweep file, each an ordinary run
directory; the ranked table; the resume of a killed sweep; the same table one after another
without Ray and as Ray tasks on a local Ray (``ray.init(num_cpus=2)``); errors of a sweep file.

Every sweep here is 4 trials of 2 epochs on the 4,000-position sample `tiny`."""
from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.train import sweep as sweep_mod
from tuner.train.config import RAY_MISSING, RAY_OPTIONAL, ConfigError, load_config
from tuner.train.loop import CHECKPOINT
from tuner.train.sweep import RESULTS_CSV, RESULTS_PNG, TRIAL_RESULT, load_sweep, rank, run_sweep

REPO = Path(__file__).resolve().parents[1]
BASE = """\
[data]
train = ["tiny"]
validation_fraction = 0.1
[evaluation]
init = "default"
[optimizer]
lr = 2.0
[training]
epochs = 2
batch_size = 512
micro_batch_size = 64
threads = 1
"""
SWEEP = """\
[sweep]
config = "base.toml"
{extra}
[sweep.values]
"optimizer.lr" = [0.5, 2.0]
training.batch_size = [256, 1024]
"""
KEYS = ("optimizer.lr", "training.batch_size")
#: Epochs of the trial whose Ray worker is killed: long enough to kill it between its first
#: checkpoint and its end.
LONG_EPOCHS = 150
#: How long the killed sweep's process may take to finish its first trials.
KILL_AFTER_S = 600


def _files(folder: Path, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "base.toml").write_text(BASE)
    path = folder / "sweep.toml"
    path.write_text(SWEEP.format(extra=extra))
    return path


@pytest.fixture(scope="module")
def sequential(tmp_path_factory):
    """A sweep of 4 trials run one after another with Ray unimportable: (its directory, its
    ranked rows, its log lines)."""
    folder = tmp_path_factory.mktemp("sequential")
    lines: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
        ranked, _ = run_sweep(_files(folder), folder / "out", log=lines.append)
    return folder / "out", ranked, lines


def test_sweep_ranks_its_trials_and_each_row_is_what_its_run_directory_holds(sequential):
    out, ranked, _ = sequential
    assert [r["rank"] for r in ranked] == [1, 2, 3, 4]
    losses = [r["best_val_loss"] for r in ranked]
    assert losses == sorted(losses) and len(set(losses)) == 4
    assert sorted(r["trial"] for r in ranked) == [f"trial-00{i}" for i in range(1, 5)]
    grid = {(r["optimizer.lr"], r["training.batch_size"]) for r in ranked}
    assert grid == {(0.5, 256), (0.5, 1024), (2.0, 256), (2.0, 1024)}
    for row in ranked:
        d = out / row["trial"]
        cfg = load_config(d / "config.toml")  # the run's own configuration holds the values
        assert cfg["optimizer"]["lr"] == row["optimizer.lr"]
        assert cfg["training"]["batch_size"] == row["training.batch_size"]
        best = json.loads((d / "best.json").read_text())["note"]
        assert best["validation_loss"] == row["best_val_loss"]
        assert best["best_epoch"] == row["best_epoch"]
        lines = (d / "loss.csv").read_text().splitlines()
        head, last = lines[0].split(","), lines[-1].split(",")
        assert len(lines) - 1 == row["epochs"] == 2
        for field in ("train_loss", "val_loss"):
            assert last[head.index(field)] == f"{row[field]:.10g}"
        with np.load(d / CHECKPOINT) as z:
            assert int(z["epoch"]) == row["epochs"]
            assert float(z["best_val"]) == row["best_val_loss"]
        assert row["status"] == "done"
    with open(out / RESULTS_CSV, newline="") as f:
        table = list(csv.DictReader(f))
    assert [t["trial"] for t in table] == [r["trial"] for r in ranked]
    assert [float(t["best_val_loss"]) for t in table] == losses  # written exactly
    assert list(table[0]) == ["rank", "trial", *KEYS, *sweep_mod.RESULT_FIELDS]
    assert (out / RESULTS_PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_killed_sweep_resumes_without_running_finished_trials_again(sequential, tmp_path):
    """Kill -9 the sweep's process once two trials have finished: the same command again runs
    only the rest, and the table is the uninterrupted sweep's, byte for byte."""
    path = _files(tmp_path)
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", "from tuner.cli import main; main()", "sweep",
                             "--config", str(path), "--out", str(out)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    second = out / "trial-002" / TRIAL_RESULT
    deadline = time.monotonic() + KILL_AFTER_S
    while not second.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert second.exists() and not (out / RESULTS_CSV).exists()  # killed mid-sweep
    finished = {n: [(out / n / f).read_bytes() for f in (TRIAL_RESULT, "train.log")]
                + [(out / n / TRIAL_RESULT).stat().st_mtime_ns]
                for n in ("trial-001", "trial-002")}
    result = CliRunner().invoke(main, ["sweep", "--config", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "sweep: resumed; 2 trial(s) finished, not run again" in result.output
    assert "rank  trial" in result.output and f"done: {out / RESULTS_CSV}" in result.output
    for n, before in finished.items():  # not run again: not one byte of theirs changed
        assert [(out / n / f).read_bytes() for f in (TRIAL_RESULT, "train.log")] \
            + [(out / n / TRIAL_RESULT).stat().st_mtime_ns] == before
    assert "[trial-001]" not in result.output and "[trial-003]" in result.output
    seq_out = sequential[0]
    assert (out / RESULTS_CSV).read_bytes() == (seq_out / RESULTS_CSV).read_bytes()
    for n in ("trial-003", "trial-004"):
        with np.load(out / n / CHECKPOINT) as a, np.load(seq_out / n / CHECKPOINT) as b:
            assert np.array_equal(a["theta"], b["theta"])


def _not_here(*args):
    raise AssertionError("the trials ran in this process, not as Ray tasks")


def test_on_a_local_ray_the_table_is_bitwise_the_sequential_one(sequential, local_ray, tmp_path,
                                                                monkeypatch):
    monkeypatch.setattr(sweep_mod, "in_order", _not_here)
    lines: list[str] = []
    ranked, sweep = run_sweep(_files(tmp_path, 'cluster = "local"'), tmp_path / "out",
                              log=lines.append)
    assert local_ray.is_initialized()  # the sweep's Ray was this one, left running
    assert sweep.cluster == "local"
    assert any("submitted to Ray" in line for line in lines)
    seq_out, seq_ranked, _ = sequential
    assert ranked == seq_ranked
    assert (tmp_path / "out" / RESULTS_CSV).read_bytes() == (seq_out / RESULTS_CSV).read_bytes()
    for row in ranked:
        with np.load(tmp_path / "out" / row["trial"] / CHECKPOINT) as a, \
                np.load(seq_out / row["trial"] / CHECKPOINT) as b:
            assert np.array_equal(a["theta"], b["theta"])


def _holder_of_lock(folder: Path) -> int:
    """The process holding the flock of `folder` (its run's lock), from /proc/locks."""
    inode = folder.stat().st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if "FLOCK" in fields and fields[-3].endswith(f":{inode}"):
            return int(fields[-4])
    raise AssertionError(f"no process holds the lock of {folder}")


def test_a_ray_worker_killed_mid_trial_is_retried_by_ray_and_the_trial_resumes_bitwise(
        local_ray, tmp_path, monkeypatch):
    """Kill -9 the Ray worker training a trial once it has checkpointed: Ray runs the task
    again, the trial resumes from its checkpoint, and its parameters are the sequential run's."""
    long_base = BASE.replace("epochs = 2", f"epochs = {LONG_EPOCHS}")
    one = '[sweep]\nconfig = "base.toml"\n{extra}\n[sweep.values]\n"optimizer.lr" = [2.0]\n'
    (tmp_path / "base.toml").write_text(long_base)
    (tmp_path / "seq.toml").write_text(one.format(extra=""))
    (tmp_path / "ray.toml").write_text(one.format(extra='cluster = "local"'))
    run_sweep(tmp_path / "seq.toml", tmp_path / "seq")
    trial = tmp_path / "ray" / "trial-001"
    killed: list[int] = []

    def kill_the_worker():
        while not (trial / CHECKPOINT).exists():
            time.sleep(0.02)
        killed.append(_holder_of_lock(trial))
        os.kill(killed[0], signal.SIGKILL)

    killer = threading.Thread(target=kill_the_worker, daemon=True)
    killer.start()
    monkeypatch.setattr(sweep_mod, "in_order", _not_here)
    ranked, _ = run_sweep(tmp_path / "ray.toml", tmp_path / "ray")
    killer.join(timeout=0)
    assert killed and killed[0] != os.getpid()
    log = (trial / "train.log").read_text()
    assert "resumed from" in log and log.count("sweep trial trial-001") == 2
    assert ranked[0]["epochs"] == LONG_EPOCHS
    assert (tmp_path / "ray" / RESULTS_CSV).read_bytes() == \
        (tmp_path / "seq" / RESULTS_CSV).read_bytes()
    with np.load(trial / CHECKPOINT) as a, np.load(tmp_path / "seq" / "trial-001" / CHECKPOINT) \
            as b:
        assert np.array_equal(a["theta"], b["theta"])


def test_without_ray_a_cluster_says_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    path = _files(tmp_path, 'cluster = "local"')
    result = CliRunner().invoke(main, ["sweep", "--config", str(path), "--out",
                                       str(tmp_path / "out")])
    assert result.exit_code == 2
    err = result.output.strip()
    assert err.count("\n") == 0 and "pip install 'tuner[ray]'" in err and str(path) in err
    assert not (tmp_path / "out").exists()  # refused before anything is made
    monkeypatch.chdir(tmp_path)
    bare = _files(tmp_path / "bare")  # --cluster on the command line: the same line
    result = CliRunner().invoke(main, ["sweep", "--config", str(bare), "--cluster", "local"])
    assert result.exit_code == 2 and "pip install 'tuner[ray]'" in result.output
    result = CliRunner().invoke(main, ["sweep", "--config", str(bare), "--cluster", "yarn"])
    assert result.exit_code == 2 and "--cluster: must be" in result.output and "'yarn'" in \
        result.output
    assert not (tmp_path / "sweeps").exists()
    help_text = " ".join(CliRunner().invoke(main, ["sweep", "--help"]).output.split())
    assert "pip install 'tuner[ray]'" in help_text
    keys = " ".join(CliRunner().invoke(main, ["sweep", "--help-sweep"]).output.split())
    assert RAY_OPTIONAL in keys and RAY_MISSING not in keys  # optional, not missing


@pytest.mark.parametrize("values, extra, expected", [
    ('"optimizer.lr" = [1.0, -2.0]', "", ["optimizer.lr = -2.0", "[optimizer] lr", "-2.0"]),
    ('"data.train" = ["tiny", "no-such-set"]', "", ["trial-002", 'data.train = "no-such-set"',
                                                    "no-such-set"]),
    ('"optimizer.nope" = [1]', "", ["'optimizer.nope'", "not a configuration key"]),
    ('"validation.folds" = [2]', "", ["'validation.folds'", "does not vary [validation]"]),
    ('"optimizer.lr" = []', "", ["'optimizer.lr'", "non-empty list"]),
    ('"optimizer.lr" = {low = 1.0, high = 2.0}', "", ["'optimizer.lr'", "is for mode 'random'"]),
    ('"optimizer.lr" = {low = 0.0, high = 2.0, log = true}', 'mode = "random"\ntrials = 2',
     ["'optimizer.lr'", "low > 0", "0.0"]),
    ('"training.batch_size" = {low = 1.5, high = 9}', 'mode = "random"\ntrials = 2',
     ["'training.batch_size'", "low must be an integer", "1.5"]),
    ('"optimizer.lr" = [1.0]', 'mode = "random"', ["[sweep] trials", "trials >= 1"]),
    ('"optimizer.lr" = [1.0]', 'cluster = "yarn"', ["[sweep] cluster", "'yarn'"]),
    ('"optimizer.lr" = [1.0]', 'cluster = "ray://"', ["[sweep] cluster", "'ray://HOST:PORT'",
                                                      "got 'ray://'"]),
    ('"optimizer.lr" = [1.0]', 'colour = 3', ["[sweep]", "unknown key 'colour'",
                                              "allowed: config, mode, trials"]),
    ('"optimizer.lr" = [1.0]', 'trials = "2"', ["[sweep] trials", "must be an integer", "'2'"]),
    ('"optimizer.lr" = [1.0]', 'mode = "grid"\ntrials = 2', ["[sweep] trials", "mode 'random'"]),
    ('"optimizer.lr" = [1.0]', 'cpus_per_trial = 0', ["[sweep] cpus_per_trial",
                                                      "must be in [1, 1,024]", "got 0"]),
    ('"optimizer.lr" = [1.0]', 'mode = "lottery"', ["[sweep] mode", "'grid', 'random'",
                                                    "'lottery'"]),
])
def test_sweep_file_errors_name_the_file_the_key_and_the_value(tmp_path, values, extra,
                                                               expected):
    (tmp_path / "base.toml").write_text(BASE)
    path = tmp_path / "bad.toml"
    path.write_text(f'[sweep]\nconfig = "base.toml"\n{extra}\n[sweep.values]\n{values}\n')
    with pytest.raises(ConfigError) as e:
        load_sweep(path, tmp_path / "out")
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg
    for text in expected:
        assert text in msg
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text, expected", [
    ('[sweep.values]\n"optimizer.lr" = [1.0]\n', ["[sweep]", "missing required key 'config'"]),
    ('[sweep]\nconfig = "base.toml"\n', ["[sweep]", "missing required key 'values'"]),
    ('[sweep]\nconfig = "base.toml"\nvalues = 3\n', ["[sweep] values", "must be a table",
                                                       "got 3"]),
    ('[sweep]\nconfig = "base.toml"\n[sweep.values]\n', ["[sweep.values]", "no key to vary"]),
    ('[train]\nepochs = 1\n', ["one table, [sweep]", "not [train]"]),
])
def test_a_sweep_file_without_its_required_keys_names_the_missing_one(tmp_path, text, expected):
    (tmp_path / "base.toml").write_text(BASE)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_sweep(path, tmp_path / "out")
    msg = str(e.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg
    for needle in expected:
        assert needle in msg, (needle, msg)


@pytest.mark.parametrize("content, expected", [
    (None, "no such sweep file"), (b"\xff[sweep]", "not a text file (byte 0 is not UTF-8)"),
    (b"[sweep\n", "not valid TOML")])
def test_a_sweep_file_that_cannot_be_read_says_why_in_one_line(tmp_path, content, expected):
    path = tmp_path / "sweep.toml"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ConfigError) as e:
        load_sweep(path, tmp_path / "out")
    assert str(e.value).startswith(f"{path}: {expected}") and "\n" not in str(e.value)


@pytest.mark.parametrize("cluster", ["yarn", "ray://"])
def test_a_cluster_given_instead_of_the_files_is_checked_as_the_files(tmp_path, cluster):
    path = _files(tmp_path)
    with pytest.raises(ConfigError) as e:
        load_sweep(path, tmp_path / "out", cluster)
    assert str(e.value) == (f"--cluster: must be '', 'local', 'auto' or 'ray://HOST:PORT', got "
                            f"{cluster!r}")
    assert load_sweep(path, tmp_path / "out", "").cluster == ""  # '' runs them here


def test_the_sweep_reference_lists_every_key_with_its_type_and_default():
    text = sweep_mod.describe_sweep()
    for k, key in sweep_mod.SWEEP_SCHEMA.items():
        assert f"  {k} (" in text and key.doc.split()[0] in text
    assert "  values (table, required)" in text and "  cpus_per_trial (integer, default 1)" in text


def test_random_draws_follow_the_seed_and_stay_in_their_ranges(tmp_path):
    (tmp_path / "base.toml").write_text(BASE)

    def draws(seed):
        path = tmp_path / f"r{seed}.toml"
        path.write_text(f'[sweep]\nconfig = "base.toml"\nmode = "random"\ntrials = 6\n'
                        f'seed = {seed}\n[sweep.values]\n'
                        f'"optimizer.lr" = {{low = 0.1, high = 10.0, log = true}}\n'
                        f'"training.batch_size" = {{low = 64, high = 2048}}\n'
                        f'"optimizer.name" = ["adamw", "sgd"]\n')
        return [t.values for t in load_sweep(path, tmp_path / "out").trials]

    a = draws(1)
    assert a == draws(1) and a != draws(2) and len(a) == 6
    assert all(0.1 <= v["optimizer.lr"] <= 10.0 and isinstance(v["optimizer.lr"], float)
               for v in a)
    assert all(64 <= v["training.batch_size"] <= 2048 and type(v["training.batch_size"]) is int
               for v in a)
    assert {v["optimizer.name"] for v in a} <= {"adamw", "sgd"}


def test_a_directory_of_another_sweep_is_refused(sequential, tmp_path):
    out = sequential[0]
    path = _files(tmp_path)
    path.write_text(SWEEP.format(extra="").replace("[0.5, 2.0]", "[0.5, 3.0]"))
    with pytest.raises(sweep_mod.TrainingError, match="holds another sweep"):
        run_sweep(path, out)


def test_a_failed_trial_ranks_last_with_its_error_and_the_others_go_on(tmp_path):
    path = _files(tmp_path)
    path.write_text(SWEEP.format(extra="").replace("[0.5, 2.0]", "[1e12, 2.0]")
                    .replace("[256, 1024]", "[1024]"))
    lines: list[str] = []
    ranked, _ = run_sweep(path, tmp_path / "out", log=lines.append)
    assert [r["trial"] for r in ranked] == ["trial-002", "trial-001"]
    good, failed = ranked
    assert good["status"] == "done" and math.isfinite(good["best_val_loss"])
    assert failed["status"].startswith("failed: ") and "smaller learning rate" in failed["status"]
    assert math.isnan(failed["best_val_loss"]) and failed["epochs"] == 0
    assert json.loads((tmp_path / "out" / "trial-001" / TRIAL_RESULT).read_text())["status"] \
        == failed["status"]
    last = (tmp_path / "out" / RESULTS_CSV).read_text().splitlines()[-1].split(",")
    assert last[:2] == ["2", "trial-001"] and last[4] == "nan"


def test_rank_puts_failed_trials_last_and_keeps_trial_order_on_ties():
    rows = [{"trial": f"t{i}", "best_val_loss": v} for i, v in
            enumerate([0.2, math.nan, 0.1, 0.2])]
    assert [(r["rank"], r["trial"]) for r in rank(rows)] == [(1, "t2"), (2, "t0"), (3, "t3"),
                                                              (4, "t1")]


def test_the_picture_has_a_panel_per_key_log_for_spread_numbers_names_for_the_rest():
    from tuner.plots.sweep import sweep_figure
    rows = [{"trial": "t1", "optimizer.lr": 0.1, "optimizer.name": "adamw", "best_val_loss": 0.2},
            {"trial": "t2", "optimizer.lr": 10.0, "optimizer.name": "sgd", "best_val_loss": 0.1},
            {"trial": "t3", "optimizer.lr": 1.0, "optimizer.name": "sgd",
             "best_val_loss": math.nan}]
    fig = sweep_figure(rows, ["optimizer.lr", "optimizer.name"])
    lr, name = fig.axes
    assert lr.get_xscale() == "log" and name.get_xscale() == "linear"
    assert [t.get_text() for t in name.get_xticklabels()] == ["adamw", "sgd"]
    trials, best = lr.lines
    assert list(trials.get_xdata()) == [0.1, 10.0]  # the failed trial is left out
    assert list(best.get_xdata()) == [10.0] and list(best.get_ydata()) == [0.1]
    with pytest.raises(ValueError, match="has no 'training.epochs'"):
        sweep_figure(rows, ["training.epochs"])
