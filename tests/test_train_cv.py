"""The pull toward the starting parameters and the cross-validation by game (tuner/train/pull.py,
tuner/train/cv.py, `tuner.train.split.fold_of`), on the 4,000-position sample `tiny`."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.evals import get_evaluation
from tuner.train.config import ConfigError, load_config, validate
from tuner.train.cv import THETAS, CrossValidation, in_order
from tuner.train.loop import CHECKPOINT, Run, initial_params, load_data
from tuner.train.pull import Pull
from tuner.train.split import fold_of, group_ids, split_by_group
from tuner.train.workers import EagerSource, Workers

pytestmark = pytest.mark.usefixtures("no_loss_plot")  # conftest.py: no loss.png drawn

K = 0.0025


def test_pull_gradient_matches_finite_differences_of_the_objective(tiny_data):
    """grad of mean loss + lam ||theta - theta0||^2 (Workers + Pull) against central differences
    of that objective, on parameters moved away from theta0."""
    ev = get_evaluation("clockwork")
    reg = ev.registry
    theta0 = np.concatenate([np.asarray(reg.defaults, float).reshape(-1),
                             np.asarray(reg.value_defaults, float)])
    theta = theta0 + np.random.default_rng(3).uniform(-20, 20, theta0.shape)
    batch = tiny_data.train[:700]
    lam = 1e-4  # large enough that the pull is a sizeable part of the gradient
    pull = Pull(lam, theta0)
    w = Workers(EagerSource(ev, tiny_data.positions, tiny_data.results, K), 2, 64, len(batch))
    try:
        def objective(t):
            sse, _ = w.loss_grad(t, batch, with_grad=False)
            return sse / len(batch) + pull.value(t)

        _, grad = w.loss_grad(theta, batch)
        grad = pull.add_gradient(grad.copy(), theta)
        data_only = w.loss_grad(theta, batch)[1]
        tunable = np.flatnonzero(np.abs(data_only) > 1e-7)[:12]
        assert len(tunable) == 12
        h = 1e-3
        for i in tunable:
            e = np.zeros_like(theta)
            e[i] = h
            fd = (objective(theta + e) - objective(theta - e)) / (2 * h)
            assert grad[i] == pytest.approx(fd, rel=1e-6), i
            assert abs(grad[i] - data_only[i]) > 0.1 * abs(grad[i])  # the pull is in it
    finally:
        w.close()
    assert pull.value(theta0) == 0.0
    assert Pull(0.0, theta0).value(theta) == 0.0


def _raw(mode="replay", pull=1e-5, epochs=3, **more):
    raw = {"data": {"train": ["tiny"], "validation_fraction": 0.05},
           "evaluation": {"init": "default"},
           "optimizer": {"name": "adamw", "lr": 2.0, "pull": pull},
           "training": {"epochs": epochs, "batch_size": 512, "micro_batch_size": 64,
                        "mode": mode}}
    for section, keys in more.items():
        raw.setdefault(section, {}).update(keys)
    return raw


def _train(path, raw, threads, data):
    path.mkdir()
    run = Run(validate(raw, "x"), path, threads=threads, log=lambda s: None)
    run.run(data)
    return run


def test_pull_replay_equals_eager_bitwise_and_pulls_toward_the_start(tmp_path, tiny_data):
    eager = _train(tmp_path / "eager", _raw("eager"), 1, tiny_data)
    replay = _train(tmp_path / "replay", _raw("replay"), 2, tiny_data)
    assert eager.theta.tobytes() == replay.theta.tobytes()
    assert eager.history["train_loss"] == replay.history["train_loss"]
    free = _train(tmp_path / "free", _raw("replay", pull=0.0), 2, tiny_data)
    start = initial_params(replay.cfg, replay.registry)
    moved = [np.linalg.norm(r.theta - start) for r in (replay, free)]
    assert 0 < moved[0] < 0.8 * moved[1]


def test_reported_training_loss_is_the_objective_with_the_pull(tmp_path, tiny_data):
    """One batch an epoch: epoch 2's training loss is the mean loss at the parameters after
    epoch 1 plus lam ||theta_1 - theta0||^2."""
    raw = _raw(pull=1e-4, epochs=1, training={"batch_size": 4096})
    one = _train(tmp_path / "one", raw, 1, tiny_data)
    raw["training"]["epochs"] = 2
    two = _train(tmp_path / "two", raw, 1, tiny_data)
    w = Workers(EagerSource(one.evaluation, tiny_data.positions, tiny_data.results, K), 1, 64,
                4096)
    try:
        sse, _ = w.loss_grad(one.theta, tiny_data.train, with_grad=False)
    finally:
        w.close()
    term = Pull(1e-4, one.theta0).value(one.theta)
    assert term > 1e-3 * sse / len(tiny_data.train)
    assert two.history["train_loss"][1] == pytest.approx(sse / len(tiny_data.train) + term,
                                                         rel=1e-12)


def test_pull_and_its_start_are_in_the_checkpoint_and_resume_bitwise(tmp_path):
    cfg = tmp_path / "run.toml"
    cfg.write_text('[data]\ntrain = ["tiny"]\n[evaluation]\ninit = "default"\n'
                   '[optimizer]\nlr = 2.0\npull = 1e-5\n'
                   '[training]\nepochs = 3\nbatch_size = 512\nmicro_batch_size = 64\n',
                   encoding="utf-8")
    runner = CliRunner()
    for args in (["--out", str(tmp_path / "full")], ["--out", str(tmp_path / "part"),
                                                      "--epochs", "1"],
                 ["--resume", str(tmp_path / "part"), "--epochs", "3", "--threads", "2"]):
        r = runner.invoke(main, ["train", "--config", str(cfg), "--threads", "1", *args]
                          if "--resume" not in args else ["train", *args])
        assert r.exit_code == 0, r.output
    z = [np.load(tmp_path / d / CHECKPOINT) for d in ("full", "part")]
    assert z[0]["theta"].tobytes() == z[1]["theta"].tobytes()
    run = Run(load_config(cfg), tmp_path / "x")
    assert z[1]["theta0"].tobytes() == run.theta0.tobytes()
    assert json.loads(str(z[1]["config"]))["optimizer"]["pull"] == 1e-5
    cfg.write_text(cfg.read_text().replace("pull = 1e-5", "pull = 2e-5"), encoding="utf-8")
    r = runner.invoke(main, ["train", "--config", str(cfg), "--resume", str(tmp_path / "part"),
                             "--epochs", "4"])
    assert r.exit_code == 2 and "[optimizer] pull: 1e-05 in the run, 2e-05 now" in r.output


def test_folds_partition_the_training_games(tiny):
    groups = group_ids([len(tiny)], [tiny.game], block=16)  # tiny has no game column
    outer = split_by_group(groups, 0.1, 1)
    vals = [fold_of(outer, groups, 4, i, 1) for i in range(1, 5)]
    held = np.concatenate([s.val for s in vals])
    assert np.array_equal(np.sort(held), outer.train)  # each training position in one fold
    for s in vals:
        assert np.array_equal(np.union1d(s.train, s.val), outer.train)
        assert not set(groups[s.val]) & set(groups[s.train])  # whole games
        assert abs(len(s.val) - len(outer.train) / 4) < 0.05 * len(outer.train)
    assert sum(s.val_games for s in vals) == outer.train_games
    again = fold_of(outer, groups, 4, 2, 1)
    assert np.array_equal(again.val, vals[1].val)
    assert not np.array_equal(fold_of(outer, groups, 4, 2, 7).val, vals[1].val)
    assert fold_of(outer, groups, 4, 0, 1) is outer
    few = group_ids([len(tiny)], [tiny.game])  # 4 blocks of 1,024 positions
    with pytest.raises(ValueError, match="4 training game.s. cannot make 5 folds"):
        fold_of(split_by_group(few, 0.0, 1), few, 5, 1, 1)


@pytest.mark.parametrize("raw, message", [
    ({"validation": {"folds": 1}}, "[validation] folds: must be 0 or in 2..100"),
    ({"validation": {"folds": 3, "fold": 4}}, "[validation] fold: must be in 0..folds (3)"),
    ({"validation": {"pulls": [0, -1]}}, "[validation] pulls: holds -1"),
    ({"validation": {"pulls": [1e-6, 1e-6]}}, "holds a value twice"),
    ({"optimizer": {"pull": -1e-3}}, "[optimizer] pull: must be in [0, 1e+09]"),
])
def test_bad_cross_validation_keys_are_clear_errors(raw, message):
    with pytest.raises(ConfigError, match=None) as e:
        validate({"data": {"train": ["tiny"]}, **raw}, "x.toml")
    assert message in str(e.value)


CV_TOML = """\
[data]
train = ["tiny"]
validation_fraction = 0.0
split_block = 64

[evaluation]
init = "{init}"

[optimizer]
lr = {lr}

[validation]
folds = 3
pulls = [0.0, 1e-5]

[training]
epochs = 3
batch_size = 512
micro_batch_size = 64
"""


def _cv_config(tmp_path, init="zero", lr=5.0):
    path = tmp_path / f"cv-{init}.toml"
    path.write_text(CV_TOML.format(init=init, lr=lr), encoding="utf-8")
    return path


def _cv(cfg, out, threads, backend=in_order, resume=False):
    lines = []
    cv = CrossValidation(None if resume else str(cfg), None if resume else str(out),
                         str(out) if resume else None, None, threads, lines.append)
    return cv.run(backend), lines


def test_cross_validation_is_deterministic_and_resumes_skipping_finished_folds(tmp_path):
    cfg = _cv_config(tmp_path)
    full, lines = _cv(cfg, tmp_path / "full", 1)
    # from zero the tune beats the start on every fold: a final run, and its parameters
    assert full["improves"] and full["result"] == "tuned"
    assert [len(p["changes"]) for p in full["pulls"]] == [3, 3]
    assert all(c < 0 for p in full["pulls"] for c in p["changes"])
    assert (tmp_path / "full" / "final" / CHECKPOINT).exists()
    final = np.load(tmp_path / "full" / "final" / CHECKPOINT)
    assert int(final["epoch"]) == full["chosen"]["epochs"]
    assert any("cross-validated change" in line and "larger than the folds' spread" in line
               for line in lines)

    def killed(tasks, run_one):  # fold 1 done, fold 2 killed after its first epoch
        run_one(tasks[0])
        run_one(dataclasses.replace(tasks[1], epochs=1))
        raise KeyboardInterrupt

    part = tmp_path / "part"
    with pytest.raises(KeyboardInterrupt):
        _cv(cfg, part, 2, backend=killed)
    thetas = part / "pull-1" / "fold-2" / THETAS
    np.save(thetas, np.load(thetas)[:0])  # as if killed between the checkpoint and THETAS
    again, lines = _cv(cfg, part, 2, resume=True)
    assert again == full
    assert any("[pull 0, fold 1/3] nothing to train" in line for line in lines)
    assert any("[pull 0, fold 2/3] resumed from" in line and "after epoch 1" in line
               for line in lines)
    for name in ("best.json", "best.hpp", "final/params.json", "pull-2/fold-3/params.json"):
        assert (part / name).read_bytes() == (tmp_path / "full" / name).read_bytes(), name
    for name in ("final", "pull-1/fold-2"):  # the checkpoints too (but for their timings)
        a, b = (np.load(d / name / CHECKPOINT) for d in (part, tmp_path / "full"))
        for key in ("theta", "m", "v", "theta0", "history_train_loss", "history_val_loss"):
            assert a[key].tobytes() == b[key].tobytes(), (name, key)
    assert json.loads((part / "best.json").read_text())["note"]["result"] == "tuned"


def test_no_improvement_beyond_the_spread_keeps_the_starting_parameters(tmp_path):
    """From the engine's parameters at a rate far too high, the folds get worse: best.json holds
    the starting parameters, with a note, and no final run is made."""
    cfg = _cv_config(tmp_path, init="default", lr=50.0)
    out = tmp_path / "cv"
    r = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(out)])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "cv.json").read_text())
    assert not summary["improves"] and summary["result"] == "starting parameters"
    assert "NOT an improvement larger than the folds' spread" in r.output
    best = json.loads((out / "best.json").read_text())
    run = Run(load_config(cfg), tmp_path / "x")
    assert best["note"]["result"] == "starting parameters" and "noise" in best["note"]["why"]
    assert (out / "best.json").read_text() == run.registry.with_meta(
        evaluation=run.evaluation.name, K=run.k).dumps(run.params, value_values=run.values,
                                                        note=best["note"])
    assert not (out / "final").exists()
    # each fold is an ordinary run directory holding out its fold
    fold = load_config(out / "pull-2" / "fold-3" / "config.toml")
    assert (fold["validation"]["fold"], fold["optimizer"]["pull"]) == (3, 1e-5)
    data = load_data(fold, lambda s: None)
    assert 0 < len(data.val) < 0.5 * len(data)
    assert not math.isnan(summary["pulls"][1]["mean"])
