"""Bitwise determinism of training: any thread count, eager or replay, and resumed runs.

Also checks the batch loss and gradient against a plain numpy Texel loss on dense feature counts.
"""
from __future__ import annotations

import gc

import numpy as np
import pytest
from click.testing import CliRunner

from textedit import replace_once
from tuner.cli import main
from tuner.evals import clockwork as cw
from tuner.evals import get_evaluation
from tuner.train.config import ConfigError, load_config, validate
from tuner.train.loop import CHECKPOINT, Run, TrainingError, start_run
from tuner.train.workers import EagerSource, Workers

#: History columns that do not depend on timing.
EXACT = ("epoch", "train_loss", "val_loss", "lr")

TINY_TOML = """\
[data]
train = ["tiny"]
validation_fraction = 0.05

[optimizer]
name = "{opt}"
lr = {lr}
weight_decay = 0.001

[schedule]
type = "exponential"
gamma = 0.8
decay_from_epoch = 1

[training]
epochs = 4
batch_size = 512
micro_batch_size = 64
threads = 1
mode = "{mode}"
"""


def _raw(opt="adamw", mode="eager", lr=None):
    return {"data": {"train": ["tiny"], "validation_fraction": 0.05},
            "optimizer": {"name": opt, "lr": lr if lr is not None else
                          (5.0 if opt == "adamw" else 2000.0), "weight_decay": 0.001},
            "schedule": {"type": "exponential", "gamma": 0.8, "decay_from_epoch": 1},
            "training": {"epochs": 3, "batch_size": 512, "micro_batch_size": 64, "mode": mode}}


def _train(tmp_path, raw, threads, data, epochs=None):
    out = tmp_path / f"run-{raw['optimizer']['name']}-{raw['training']['mode']}-{threads}"
    out.mkdir()
    run = Run(validate(raw, "x"), out, threads=threads, epochs=epochs, log=lambda s: None)
    history = run.run(data)
    return run, {k: list(map(float, history[k])) for k in EXACT}


@pytest.mark.parametrize("opt", ["adamw", "sgd"])
def test_thread_count_and_mode_do_not_change_a_bit(tmp_path, tiny_data, opt):
    # tiny: 3,723 training positions = 7 full batches of 512 and one of 139 (not a multiple of 64)
    assert len(tiny_data.train) % 512 and len(tiny_data.train) % 512 % 64
    ref_run, ref_hist = _train(tmp_path, _raw(opt, "eager"), 1, tiny_data)
    assert ref_run.state.step == 3 * 8
    assert np.isfinite(ref_run.params).all()
    assert ref_hist["train_loss"][-1] < ref_hist["train_loss"][0]       # it does learn
    assert (ref_run.params != 0).sum() > 500
    for mode in ("eager", "replay"):
        for threads in (1, 2, 3):
            if (mode, threads) == ("eager", 1):
                continue
            run, hist = _train(tmp_path, _raw(opt, mode), threads, tiny_data)
            assert run.params.tobytes() == ref_run.params.tobytes(), (mode, threads)
            assert run.state.m.tobytes() == ref_run.state.m.tobytes(), (mode, threads)
            assert run.state.v.tobytes() == ref_run.state.v.tobytes(), (mode, threads)
            assert hist == ref_hist, (mode, threads)


def test_batch_gradient_is_thread_independent_and_correct(tiny_data):
    """Workers.loss_grad for one batch equals a numpy Texel loss/gradient; any threads, any micro."""
    ev = get_evaluation("clockwork")
    rng = np.random.default_rng(5)
    params = np.array(cw.registry().defaults) * rng.uniform(0.5, 1.5, size=(cw.N_PARAMS, 2))
    batch = rng.permutation(tiny_data.train)[:1000]
    k = 0.0025
    # numpy reference: e = counts . (alpha mg + (1 - alpha) eg)
    counts, phases = cw.feature_counts(tiny_data.positions[batch])
    alpha = phases / 24.0
    e = (counts * alpha[:, None]) @ params[:, 0] + (counts * (1 - alpha)[:, None]) @ params[:, 1]
    s = 1.0 / (1.0 + np.exp(-k * e))
    y = tiny_data.results[batch]
    ref_sse = np.sum((s - y) ** 2)
    dl_de = 2.0 * (s - y) * s * (1.0 - s) * k / len(batch)
    ref_grad = np.stack([(counts * (dl_de * alpha)[:, None]).sum(0),
                         (counts * (dl_de * (1 - alpha))[:, None]).sum(0)], axis=1)

    results = []
    for threads, micro in [(1, 1000), (1, 64), (2, 64), (3, 64), (2, 7)]:
        w = Workers(EagerSource(ev, tiny_data.positions, tiny_data.results, k), threads, micro,
                    1000)
        try:
            sse, grad = w.loss_grad(params.reshape(-1), batch)
            grad = grad.reshape(-1, 2)
            sse2, none = w.loss_grad(params.reshape(-1), batch, with_grad=False)
        finally:
            w.close()
        assert none is None and sse2 == sse
        assert sse == pytest.approx(ref_sse, rel=1e-12)
        np.testing.assert_allclose(grad, ref_grad, rtol=1e-9, atol=1e-15 * np.abs(ref_grad).max())
        results.append((micro, sse, grad.copy()))
    # same micro-batch size: bitwise identical for 1, 2 and 3 threads
    same = [r for r in results if r[0] == 64]
    for _, sse, grad in same[1:]:
        assert sse == same[0][1] and grad.tobytes() == same[0][2].tobytes()


def test_val_loss_in_history_is_the_loss_of_the_final_parameters(tmp_path, tiny_data):
    run, hist = _train(tmp_path, _raw(), 2, tiny_data)
    ie, cont, *_ = cw.evaluate_positions(tiny_data.positions[tiny_data.val], run.params)
    s = 1.0 / (1.0 + np.exp(-0.0025 * cont))
    expected = np.mean((s - tiny_data.results[tiny_data.val]) ** 2)
    assert hist["val_loss"][-1] == pytest.approx(expected, rel=1e-10)
    assert hist["epoch"] == [1.0, 2.0, 3.0]


# -- resume ----------------------------------------------------------------------------------------

def _write_cfg(path, opt="adamw", lr=5.0, mode="eager"):
    path.write_text(TINY_TOML.format(opt=opt, lr=lr, mode=mode), encoding="utf-8")
    return path


def _checkpoint(d):
    with np.load(d / CHECKPOINT) as z:
        return {k: z[k] for k in z.files}


def _assert_same_run(a, b):
    """Two output directories hold bitwise the same training state and parameters."""
    ca, cb = _checkpoint(a), _checkpoint(b)
    assert set(ca) == set(cb)
    for key in ca:
        if key in ("history_seconds", "history_positions_per_s"):   # wall-clock timings
            assert ca[key].shape == cb[key].shape
            continue
        assert ca[key].dtype == cb[key].dtype, key
        assert ca[key].tobytes() == cb[key].tobytes(), key
    for name in ("params.json", "params.hpp"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    rows = [[line.split(",")[:4] for line in (d / "loss.csv").read_text().splitlines()]
            for d in (a, b)]
    assert rows[0] == rows[1]


def _quiet_start(*args, **kw):
    return start_run(*args, log=lambda s: None, **kw)


@pytest.mark.parametrize("opt, mode, threads", [("adamw", "eager", (1, 2, 3)),
                                                ("sgd", "replay", (2, 2, 1))])
def test_resume_is_bitwise_identical(tmp_path, opt, mode, threads):
    cfg = _write_cfg(tmp_path / "run.toml", opt=opt, lr=5.0 if opt == "adamw" else 2000.0,
                     mode=mode)
    full, part = tmp_path / "full", tmp_path / "part"
    _quiet_start(str(cfg), str(full), None, 4, threads[0]).run()
    _quiet_start(str(cfg), str(part), None, 2, threads[1]).run()
    assert int(_checkpoint(part)["epoch"]) == 2
    run = _quiet_start(None, None, str(part), 4, threads[2])
    assert run.epoch == 2 and run.state.step == 2 * 8
    run.run()
    _assert_same_run(full, part)
    assert "resumed from" in (part / "train.log").read_text()


def test_resume_through_the_cli(tmp_path):
    cfg = _write_cfg(tmp_path / "run.toml")
    full, part = tmp_path / "full", tmp_path / "part"
    runner = CliRunner()
    r = runner.invoke(main, ["train", "--config", str(cfg), "--out", str(full), "--epochs", "4",
                             "--threads", "2"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["train", "--config", str(cfg), "--out", str(part), "--epochs", "2",
                             "--threads", "1"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["train", "--resume", str(part), "--epochs", "4", "--threads", "3"])
    assert r.exit_code == 0, r.output
    assert "resumed" in r.output
    _assert_same_run(full, part)
    # a config differing only in epochs, threads and mode may be given explicitly on resume
    other = tmp_path / "other.toml"
    text = replace_once(cfg.read_text(), "epochs = 4", "epochs = 9")
    text = replace_once(text, "threads = 1", "threads = 2")
    other.write_text(replace_once(text, 'mode = "eager"', 'mode = "replay"'), encoding="utf-8")
    r = runner.invoke(main, ["train", "--config", str(other), "--resume", str(full),
                             "--epochs", "5"])
    assert r.exit_code == 0, r.output
    assert int(_checkpoint(full)["epoch"]) == 5


def test_resume_with_a_changed_config_is_refused(tmp_path):
    cfg = _write_cfg(tmp_path / "run.toml")
    out = tmp_path / "out"
    _quiet_start(str(cfg), str(out), None, 1, 1).run()
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "train.log"}
    other = _write_cfg(tmp_path / "other.toml", lr=6.0)
    runner = CliRunner()
    r = runner.invoke(main, ["train", "--config", str(other), "--resume", str(out),
                             "--epochs", "3"])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert "Traceback" not in r.output
    assert "different configuration" in r.stderr and "epochs" in r.stderr
    with pytest.raises(TrainingError, match="different configuration"):
        _quiet_start(str(other), None, str(out), 3, 1)
    # editing the run's own copy of the config is caught too
    (out / "config.toml").write_text(other.read_text(), encoding="utf-8")
    r = runner.invoke(main, ["train", "--resume", str(out), "--epochs", "3"])
    assert r.exit_code == 2 and "different configuration" in r.stderr
    after = {p.name: p.read_bytes() for p in out.iterdir() if p.name not in ("train.log",
                                                                            "config.toml")}
    before.pop("config.toml")
    assert after == before          # nothing was trained or rewritten


def test_resume_without_checkpoint_is_an_error(tmp_path):
    runner = CliRunner()
    empty = tmp_path / "empty"
    empty.mkdir()
    r = runner.invoke(main, ["train", "--resume", str(empty)])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    assert "Traceback" not in r.output and str(empty) in r.stderr
    # a directory with a config but no checkpoint (stopped before its first epoch ended)
    cfg = _write_cfg(tmp_path / "run.toml")
    started = tmp_path / "started"
    _quiet_start(str(cfg), str(started), None, 1, 1)       # prepared, never run
    r = runner.invoke(main, ["train", "--resume", str(started)])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    assert f"no {CHECKPOINT} to resume from" in r.stderr
    with pytest.raises(TrainingError, match="no checkpoint.npz"):
        _quiet_start(None, None, str(started), None, 1)


def test_new_run_into_a_run_directory_is_refused(tmp_path):
    cfg = _write_cfg(tmp_path / "run.toml")
    out = tmp_path / "out"
    _quiet_start(str(cfg), str(out), None, 1, 1).run()
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    other = _write_cfg(tmp_path / "other.toml", lr=1.0)
    r = CliRunner().invoke(main, ["train", "--config", str(other), "--out", str(out)])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    assert "already holds a run" in r.stderr and "--resume" in r.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    with pytest.raises(TrainingError, match="already holds a run"):
        _quiet_start(str(cfg), str(out), None, 1, 1)


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
def test_corrupt_checkpoint_is_a_clear_error(tmp_path, damage):
    """A damaged checkpoint (e.g. copied half-way) is reported as such, not with a traceback."""
    cfg = _write_cfg(tmp_path / "run.toml")
    out = tmp_path / "out"
    _quiet_start(str(cfg), str(out), None, 1, 1).run()
    data = (out / CHECKPOINT).read_bytes()
    (out / CHECKPOINT).write_bytes({"truncated": data[: len(data) // 2], "empty": b"",
                                    "garbage": b"not a checkpoint " * 8}[damage])
    r = CliRunner().invoke(main, ["train", "--resume", str(out), "--epochs", "2"])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    assert "Traceback" not in r.output and CHECKPOINT in r.stderr


def test_resume_past_the_end_does_nothing(tmp_path):
    cfg = _write_cfg(tmp_path / "run.toml")
    out = tmp_path / "out"
    _quiet_start(str(cfg), str(out), None, 2, 1).run()
    before = _checkpoint(out)
    run = _quiet_start(None, None, str(out), 2, 2)
    run.run()
    after = _checkpoint(out)
    assert all(before[k].tobytes() == after[k].tobytes() for k in before)


def test_load_config_roundtrip_of_run_copy(tmp_path):
    cfg = _write_cfg(tmp_path / "run.toml")
    out = tmp_path / "out"
    _quiet_start(str(cfg), str(out), None, 1, 1)
    assert (out / "config.toml").read_bytes() == cfg.read_bytes()
    assert load_config(out / "config.toml").digest() == load_config(cfg).digest()
    with pytest.raises(ConfigError):
        _quiet_start(None, None, None, 1, 1)


def test_a_run_dropped_unrun_releases_its_directory_at_once(tmp_path):
    """A prepared run that is dropped without running holds no reference to itself (no cycle
    for the garbage collector to find later), so its directory's lock goes with it: a resume
    right after it, with the collector off, is not refused as another process's."""
    cfg = _write_cfg(tmp_path / "run.toml")
    started = tmp_path / "started"
    gc.disable()
    try:
        _quiet_start(str(cfg), str(started), None, 1, 1)       # prepared, dropped
        with pytest.raises(TrainingError, match="no checkpoint.npz"):
            _quiet_start(None, None, str(started), None, 1)
    finally:
        gc.enable()
