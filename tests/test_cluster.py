"""Data-parallel training on Ray (tuner/train/cluster.py, ``[cluster]``, ``tuner train --workers``):
1, 2 and 3 workers give bitwise the parameters of the run on one machine, for `clockwork` and
`clockwork-10d79e6`; a worker killed mid-epoch is restarted by Ray and the run still ends with
the same bits; a worker Ray cannot restart ends the run with one line and the checkpoint kept; a
cluster run resumes bit for bit. On a local Ray of 2 CPUs (``ray.init(num_cpus=2)``), with the
4,000-position sample `tiny` and 2 epochs."""
from __future__ import annotations

import os
import signal
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.train import cluster as cluster_mod
from tuner.train.config import ConfigError, validate
from tuner.train.loop import CHECKPOINT, TrainingError, start_run
from tuner.train.progress import Observer

CONFIG = """\
[data]
train = ["tiny"]
validation_fraction = 0.1
[evaluation]
name = "{name}"
init = "default"
[optimizer]
lr = 2.0
[training]
epochs = 2
batch_size = 1024
micro_batch_size = 128
threads = 1
{extra}"""
EVALUATIONS = ("clockwork", "clockwork-10d79e6")


def _config(folder, name: str = "clockwork", extra: str = ""):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tune.toml"
    path.write_text(CONFIG.format(name=name, extra=extra))
    return path


def _train(folder, name: str = "clockwork", workers: int = 0, epochs: int | None = None,
           observer: Observer | None = None, resume: bool = False):
    """A run of `name` in `folder`/out (new, or resumed), on `workers` Ray workers (0: none);
    returns (the Run, its log lines)."""
    lines: list[str] = []
    out = folder / "out"
    run = start_run(None if resume else str(_config(folder, name)), None if resume else str(out),
                    str(out) if resume else None, epochs, None, log=lines.append,
                    observer=observer)
    run.use_cluster(None, workers)
    run.run()
    return run, lines


@pytest.fixture(scope="module")
def local_runs(tmp_path_factory):
    """Each evaluation's run on this machine: its final parameters and its history."""
    runs = {}
    for name in EVALUATIONS:
        run, _ = _train(tmp_path_factory.mktemp(name), name)
        runs[name] = run.theta.copy(), run.history
    return runs


@pytest.mark.parametrize("name", EVALUATIONS)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_any_number_of_workers_gives_the_bits_of_one_machine(local_ray, local_runs, tmp_path,
                                                             name, workers):
    run, lines = _train(tmp_path, name, workers)
    assert any(f"cluster: {workers} worker(s) on Ray" in line for line in lines)
    assert len(set(run.workers.pids)) == workers and os.getpid() not in run.workers.pids
    theta, history = local_runs[name]
    assert np.array_equal(run.theta, theta)
    assert _losses(run.history) == _losses(history)  # the validation too: the workers'



def _losses(history: dict) -> dict:
    """The history without its timings."""
    return {k: v for k, v in history.items() if k not in ("seconds", "positions_per_s")}


class KillAWorker(Observer):
    """Kills (SIGKILL) the process of worker 0 after the first batch of epoch `epoch`."""

    def __init__(self, epoch: int):
        self.epoch, self.current, self.killed = epoch, 0, []
        self.run = None

    def epoch_start(self, epoch, epochs, n):
        self.current = epoch

    def epoch_progress(self, done, mean_loss):
        if self.current == self.epoch and not self.killed:
            self.killed.append(self.run.workers.pids[0])
            os.kill(self.killed[0], signal.SIGKILL)


def _train_killing(folder, observer: KillAWorker, workers: int = 2):
    out = folder / "out"
    run = start_run(str(_config(folder)), str(out), None, None, None, observer=observer)
    run.use_cluster(None, workers)
    observer.run = run
    run.run()
    return run


def test_a_worker_killed_mid_epoch_is_restarted_by_ray_and_the_bits_are_the_same(
        local_ray, local_runs, tmp_path):
    observer = KillAWorker(epoch=2)
    run = _train_killing(tmp_path, observer)
    assert observer.killed and observer.killed[0] != os.getpid()
    assert run.workers.pids[0] == observer.killed[0]  # the pid the run started with
    assert np.array_equal(run.theta, local_runs["clockwork"][0])
    assert _losses(run.history) == _losses(local_runs["clockwork"][1])


def test_a_worker_ray_cannot_restart_ends_the_run_in_one_line_keeping_the_checkpoint(
        local_ray, local_runs, tmp_path, monkeypatch):
    monkeypatch.setattr(cluster_mod, "MAX_RESTARTS", 0)
    with pytest.raises(TrainingError) as e:
        _train_killing(tmp_path, KillAWorker(epoch=2))
    msg = str(e.value)
    assert "\n" not in msg and "could not restart it" in msg and "checkpoint" in msg
    with np.load(tmp_path / "out" / CHECKPOINT) as c:  # epoch 1's, intact
        assert int(c["epoch"]) == 1
    resumed, _ = _train(tmp_path, workers=2, resume=True)  # and it continues bit for bit
    assert np.array_equal(resumed.theta, local_runs["clockwork"][0])


def test_a_cluster_run_resumes_bitwise(local_ray, local_runs, tmp_path):
    first, _ = _train(tmp_path, workers=2, epochs=1)
    assert first.epoch == 1
    run, lines = _train(tmp_path, workers=3, epochs=2, resume=True)
    assert any("resumed from" in line for line in lines)
    assert run.epoch == 2 and np.array_equal(run.theta, local_runs["clockwork"][0])


def test_cluster_options_without_ray_say_how_to_install_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    path = _config(tmp_path)
    for args in (["--workers", "2"], ["--cluster", "auto"]):
        result = CliRunner().invoke(main, ["train", "--config", str(path), "--out",
                                           str(tmp_path / "out"), *args])
        assert result.exit_code == 2
        assert result.output.strip().count("\n") == 0
        assert "pip install 'tuner[ray]'" in result.output
    path = _config(tmp_path / "in-file", extra="[cluster]\nworkers = 2\n")
    result = CliRunner().invoke(main, ["train", "--config", str(path), "--out",
                                       str(tmp_path / "out")])
    assert result.exit_code == 2 and "[cluster] workers = 2" in result.output
    assert "pip install 'tuner[ray]'" in result.output and str(path) in result.output
    assert not (tmp_path / "out").exists()  # refused before anything is made
    result = CliRunner().invoke(main, ["train", "--config", str(path), "--cluster", "yarn"])
    assert result.exit_code == 2 and "--cluster: must be" in result.output and "'yarn'" in \
        result.output
    help_text = " ".join(CliRunner().invoke(main, ["train", "--help"]).output.split())
    assert help_text.count("pip install 'tuner[ray]'") == 2


@pytest.mark.parametrize("cluster, needles", [
    ({"address": "yarn"}, ["x: [cluster] address", "'local', 'auto' or 'ray://HOST:PORT'",
                           "'yarn'"]),
    ({"address": "ray://"}, ["[cluster] address", "'ray://'"]),
    ({"workers": -1}, ["x: [cluster] workers", "-1"]),
    ({"workers": "2"}, ["[cluster] workers", "must be an integer"]),
])
def test_cluster_keys_are_checked(cluster, needles):
    with pytest.raises(ConfigError) as e:
        validate({"data": {"train": ["tiny"]}, "cluster": cluster}, "x")
    assert all(n in str(e.value) for n in needles), str(e.value)


def test_cluster_keys_may_change_on_resume():
    plain = validate({"data": {"train": ["tiny"]}}, "x")
    on_ray = validate({"data": {"train": ["tiny"]}, "cluster": {"address": "auto",
                                                                "workers": 3}}, "x")
    assert plain["cluster"] == {"address": "local", "workers": 0}
    assert on_ray.digest() == plain.digest()
