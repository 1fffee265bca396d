"""Data-parallel training on Ray (tuner/train/cluster.py, ``[cluster]``, ``tuner train --workers``):
1, 2 and 3 workers give bitwise the parameters of the run on one machine, for `clockwork` and
`clockwork-10d79e6`, with the block shuffle and with full batches too; each worker records only
its share of the store (or loads it from the store cache), and the driver none; a worker killed
mid-epoch is restarted by Ray and the run still ends with the same bits; a worker Ray cannot
restart ends the run with one line and the checkpoint kept; a cluster run resumes bit for bit. On the suite's local Ray
(``local_ray``), with the 4,000-position sample `tiny` in segments of 500 rows (8 segments:
shares for 3 workers) and 2 epochs."""
from __future__ import annotations

import importlib.util
import os
import signal
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.train import cluster as cluster_mod
from tuner.evals import get_evaluation
from tuner.train.config import RAY_MISSING, RAY_OPTIONAL, ConfigError, validate
from tuner.train.kernels import cut_chunks
from tuner.train.loop import CHECKPOINT, TrainingError, start_run
from tuner.train.progress import Observer
from tuner.train.record import record_store
from tuner.train.workers import EagerSource, ReplaySource, Workers

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
batch_size = {batch}
micro_batch_size = 128
threads = 1
segment = 500
{extra}"""
EVALUATIONS = ("clockwork", "clockwork-10d79e6")
ROOT = Path(__file__).resolve().parents[1]


#: ``[training]`` keys of the variants run on one machine and on workers (besides the plain run).
VARIANTS = {"blocks": 'shuffle = "blocks"\nshuffle_block = 64', "all": "", "eager": 'mode = "eager"',
            "fit": '[loss]\nk = "fit"'}


def _config(folder, name: str = "clockwork", extra: str = "", batch: str = "1024"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tune.toml"
    path.write_text(CONFIG.format(name=name, extra=extra, batch=batch))
    return path


def _variant(folder, variant: str | None):
    """The configuration of `variant` (None: the plain run) in `folder`."""
    if variant is None:
        return _config(folder)
    return _config(folder, extra=VARIANTS[variant], batch='"all"' if variant == "all" else "1024")


def _train(folder, name: str = "clockwork", workers: int = 0, epochs: int | None = None,
           observer: Observer | None = None, resume: bool = False, config=None):
    """A run of `name` (or of the configuration file `config`) in `folder`/out (new, or
    resumed), on `workers` Ray workers (0: none); returns (the Run, its log lines)."""
    lines: list[str] = []
    out = folder / "out"
    config = config if config is not None else _config(folder, name)
    run = start_run(None if resume else str(config), None if resume else str(out),
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
    # each worker recorded only its share, whole segments; the driver recorded no store
    shares = [info["rows"] for info in run.workers.info]
    assert sum(shares) == run.workers.source.n_rows == 4000
    assert shares == list(np.diff(run.workers.bounds)) and all(b % 500 == 0 for b in
                                                               run.workers.bounds)
    assert max(shares) < 4000 if workers > 1 else shares == [4000]
    assert not any("replay: recorded" in line for line in lines)  # the driver's log
    theta, history = local_runs[name]
    assert np.array_equal(run.theta, theta)
    assert _losses(run.history) == _losses(history)  # the validation too: the workers'


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_block_shuffle_full_batches_eager_epochs_and_a_fitted_k_give_the_bits_of_one_machine(
        local_ray, tmp_path, variant):
    local, _ = _train(tmp_path / "local", config=_variant(tmp_path / "local", variant))
    run, _ = _train(tmp_path / "ray", workers=2, config=_variant(tmp_path / "ray", variant))
    assert len(run.workers.actors) == 2 and run.k == local.k
    assert (run.k != 1 / 400) == (variant == "fit")  # the driver fitted K, for the workers too
    assert np.array_equal(run.theta, local.theta)
    assert _losses(run.history) == _losses(local.history)


def test_a_trace_evaluation_gives_the_bits_of_one_machine(local_ray, tmp_path):
    """Its workers read their rows of a trace file (not FENs)."""
    spec = importlib.util.spec_from_file_location("write_trace", ROOT / "examples" /
                                                  "write_trace.py")
    writer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(writer)
    trace = tmp_path / "tiny-trace.parquet"
    assert writer.write_trace("tiny", trace) == 4000
    runs = []
    for workers in (0, 2):
        path = _config(tmp_path / str(workers), name=str(trace.with_suffix(".json")))
        path.write_text(path.read_text().replace('train = ["tiny"]', f'train = ["{trace}"]'))
        runs.append(_train(tmp_path / str(workers), workers=workers, config=path)[0])
    assert runs[1].evaluation.trace is not None and len(runs[1].workers.actors) == 2
    assert np.array_equal(runs[1].theta, runs[0].theta)
    assert _losses(runs[1].history) == _losses(runs[0].history)


def test_micro_batches_end_every_micro_positions_and_at_every_segment():
    rng = np.random.default_rng(3)
    order = np.sort(rng.choice(4000, size=1500, replace=False))
    starts = np.empty(len(order) + 1, np.int64)
    n = cut_chunks(order, 128, 500, starts)
    starts = starts[: n + 1]
    assert starts[0] == 0 and starts[-1] == len(order) and np.all(np.diff(starts) >= 1)
    for lo, hi in zip(starts[:-1], starts[1:]):
        chunk = order[lo:hi]
        assert len(chunk) <= 128 and len(set(chunk // 500)) == 1  # never two segments
        # it ends where it is full, or where the next row is another segment's
        assert hi == len(order) or len(chunk) == 128 or order[hi] // 500 != chunk[0] // 500
    assert n == sum(-(-np.sum(order // 500 == s) // 128) for s in range(8))
    assert cut_chunks(order[:0], 128, 500, starts) == 0


def test_threads_and_modes_agree_bitwise_with_segments(tiny_data):
    ev = get_evaluation("clockwork")
    k, batch = 0.0025, np.random.default_rng(4).permutation(tiny_data.train)[:1500]
    theta = np.array(ev.registry.defaults).reshape(-1)
    store = record_store(ev, tiny_data.positions, tiny_data.results, k, 1, 64)
    got = []
    for source, threads in [(ReplaySource(store), 1), (ReplaySource(store), 2),
                            (EagerSource(ev, tiny_data.positions, tiny_data.results, k), 2)]:
        w = Workers(source, threads, 128, len(batch), segment=500)
        try:
            sse, grad = w.loss_grad(theta, batch)
            got.append((sse, grad.tobytes()))
        finally:
            w.close()
    assert got[1] == got[0] and got[2] == got[0]


def test_shares_are_whole_segments_with_as_many_training_rows_as_they_allow():
    train = np.flatnonzero(np.arange(4000) % 10 != 3)  # 3,600 training rows of 4,000
    for segment, workers, want in [(500, 3, [0, 1500, 2500, 4000]), (500, 1, [0, 4000]),
                                   (1500, 4, [0, 1500, 3000, 4000]), (4000, 2, [0, 4000]),
                                   (500, 8, list(range(0, 4001, 500)))]:
        assert list(cluster_mod.shares(train, 4000, segment, workers)) == want
    # a blocks run's store: the training rows first, the validation rows after them
    assert list(cluster_mod.shares(np.arange(3000), 4000, 500, 2)) == [0, 1500, 4000]


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


def _train_killing(folder, observer: KillAWorker, workers: int = 2, extra: str = ""):
    out = folder / "out"
    run = start_run(str(_config(folder, extra=extra)), str(out), None, None, None,
                    observer=observer)
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
        _train_killing(tmp_path, KillAWorker(epoch=2), extra='store_cache = "stores"')
    msg = str(e.value)
    assert "\n" not in msg and "could not restart it" in msg and "checkpoint" in msg
    with np.load(tmp_path / "out" / CHECKPOINT) as c:  # epoch 1's, intact
        assert int(c["epoch"]) == 1
    stores = sorted((tmp_path / "stores").glob("store-*.npz"))
    assert len(stores) == 2  # one per share: each key covers its share's rows
    for p in stores:
        os.utime(p, ns=(1, 1))
    resumed, _ = _train(tmp_path, workers=2, resume=True)  # and it continues bit for bit,
    assert np.array_equal(resumed.theta, local_runs["clockwork"][0])
    assert sorted((tmp_path / "stores").glob("store-*.npz")) == stores  # its workers loading
    assert all(p.stat().st_mtime_ns != 1 for p in stores)  # their shares (which touches them)


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


def test_help_says_ray_is_optional_without_claiming_it_is_missing():
    """The help of --cluster / --workers and of the [cluster] keys says how to get Ray, not
    that it is missing (the help is the same whether it is installed or not)."""
    for args in (["train", "--help"], ["train", "--help-config"]):
        help_text = " ".join(CliRunner().invoke(main, args).output.split())
        assert RAY_OPTIONAL in help_text and RAY_MISSING not in help_text, args


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


def test_a_segment_other_than_the_default_is_in_the_digest():
    plain = validate({"data": {"train": ["tiny"]}}, "x")
    assert validate({"data": {"train": ["tiny"]}, "training": {"segment": 1 << 18}},
                    "x").digest() == plain.digest()
    assert validate({"data": {"train": ["tiny"]}, "training": {"segment": 500}},
                    "x").digest() != plain.digest()
    with pytest.raises(ConfigError, match=r"x: \[training\] segment.*must be in \[1,"):
        validate({"data": {"train": ["tiny"]}, "training": {"segment": 0}}, "x")


def test_cluster_keys_may_change_on_resume():
    plain = validate({"data": {"train": ["tiny"]}}, "x")
    on_ray = validate({"data": {"train": ["tiny"]}, "cluster": {"address": "auto",
                                                                "workers": 3}}, "x")
    assert plain["cluster"] == {"address": "local", "workers": 0}
    assert on_ray.digest() == plain.digest()
