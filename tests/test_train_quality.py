"""Tune quality: the split by game, the best epoch and early stopping, fitting K, score blends and
the cross-entropy loss, and a fine-tune that beats its starting point on held-out games."""
from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from tuner.data import load_dataset
from tuner.evals import get_evaluation
from tuner.evals.registry import ParamRegistry
from tuner.tape import new_tape
from tuner.tape.ops import F_SIGMOID_SQ_ERR, F_SIGMOID_XENT, record_sigmoid_xent
from tuner.train.config import ConfigError, describe, validate
from tuner.train.loop import Run, load_data
from tuner.train.split import group_ids, split_by_group
from tuner.train.targets import KFitError, blend_targets, fit_k, sigmoid
from tuner.train.workers import EagerSource, Workers, split_params

from shared import DATASETS

SAMPLE = [str(DATASETS / "selfplay-std.parquet"), str(DATASETS / "selfplay-dfrc.parquet")]


def _raw(**over):
    raw = {"data": {"train": ["tiny"], "validation_fraction": 0.2, "split_seed": 3},
           "evaluation": {"name": "clockwork", "init": "default"},
           "optimizer": {"name": "adamw", "lr": 2.0},
           "training": {"epochs": 6, "batch_size": 256, "micro_batch_size": 64, "threads": 1}}
    for path, v in over.items():
        section, key = path.split(".")
        raw.setdefault(section, {})[key] = v
    return raw


def _run(tmp_path, name, raw, data=None, epochs=None, threads=None):
    out = tmp_path / name
    out.mkdir()
    logs: list[str] = []
    run = Run(validate(raw, "x"), out, epochs=epochs, threads=threads, log=logs.append)
    run.run(data)
    return run, logs


# -- the split ---------------------------------------------------------------------------------
def test_split_by_game_column_keeps_every_game_on_one_side():
    ds = load_dataset("tiny", with_game=True, quiet=True)
    assert ds.game is not None and len(np.unique(ds.game)) > 10
    groups = group_ids([len(ds)], [ds.game])
    for seed in range(5):
        split = split_by_group(groups, 0.2, seed)
        train_games, val_games = set(ds.game[split.train]), set(ds.game[split.val])
        assert train_games and val_games and not train_games & val_games
        assert len(split.train) + len(split.val) == len(ds)
        assert len(split.val) >= 0.2 * len(ds)  # whole games: at least the fraction
        assert split.val_games == len(val_games) and split.train_games == len(train_games)
    # the seed decides which games, and only the seed
    assert np.array_equal(split_by_group(groups, 0.2, 7).val, split_by_group(groups, 0.2, 7).val)
    assert not np.array_equal(split_by_group(groups, 0.2, 7).val,
                              split_by_group(groups, 0.2, 8).val)


def test_split_without_game_column_uses_blocks_and_datasets_never_share_a_game():
    games_b = np.array([5, 5, 9, 9, 9, 5])  # any numbers; equal numbers are one game
    groups = group_ids([10, 6], [None, games_b], block=4)
    np.testing.assert_array_equal(groups[:10], [0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(groups[10:], [3, 3, 4, 4, 4, 3])
    split = split_by_group(groups, 0.3, 0)
    for g in np.unique(groups):
        sides = {int(i) in set(split.val.tolist()) for i in np.flatnonzero(groups == g)}
        assert len(sides) == 1


def test_training_data_holds_out_whole_games():
    cfg = validate(_raw(), "x")
    data = load_data(cfg, lambda s: None)
    ds = load_dataset("tiny", with_game=True, quiet=True)
    assert not set(ds.game[data.train]) & set(ds.game[data.val])
    assert data.val_games == len(set(ds.game[data.val])) > 0


def test_help_config_says_why_the_split_is_by_game():
    text = describe()
    assert "Whole games are held out" in text and "split_block" in text


# -- K -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("true_k", [0.0025, 0.011])
def test_fit_k_recovers_the_k_results_were_drawn_with(true_k):
    rng = np.random.default_rng(1)
    evals = rng.normal(0, 250, 400_000)
    results = (rng.random(len(evals)) < sigmoid(true_k * evals)).astype(np.float64)
    assert fit_k(evals, results) == pytest.approx(true_k, rel=0.03)


def test_fit_k_refuses_evaluations_that_cannot_decide_it():
    with pytest.raises(KFitError, match="same evaluation"):
        fit_k(np.zeros(100), np.full(100, 0.5))
    with pytest.raises(KFitError, match="end of the range"):  # results anti-correlated
        fit_k(np.array([-100.0, 100.0] * 50), np.array([1.0, 0.0] * 50))


def test_k_fit_in_a_run_is_logged_and_kept_on_resume(tmp_path):
    raw = _raw(**{"loss.k": "fit", "training.epochs": 2})
    run, logs = _run(tmp_path, "a", raw)
    assert any(line.startswith("K fitted") for line in logs)
    assert 1e-4 < run.k < 0.05
    resumed = Run(validate(_raw(**{"loss.k": "fit", "training.epochs": 3}), "x"), tmp_path / "a",
                  log=lambda s: None)
    resumed.load_checkpoint()
    assert resumed.k == run.k


def test_k_fit_from_zero_parameters_is_a_config_error(tmp_path):
    raw = _raw(**{"loss.k": "fit", "evaluation.init": "zero"})
    with pytest.raises(ConfigError, match="k = \"fit\""):
        _run(tmp_path, "z", raw)


# -- losses and targets ------------------------------------------------------------------------
def test_cross_entropy_is_finite_for_extreme_arguments():
    t = new_tape(1, 0)
    t.arena.val[0] = 1e4
    for k, y in [(1.0, 0.0), (-1.0, 1.0), (1.0, 1.0), (1e-3, 0.5)]:
        o = record_sigmoid_xent(t, 0, k, y)
        z = k * 1e4
        expected = max(z, 0) + math.log1p(math.exp(-abs(z))) - y * z
        assert math.isfinite(t.arena.val[o]) and t.arena.val[o] == pytest.approx(expected)


def test_blend_targets():
    results = np.array([1.0, 0.5, 0.0])
    scores = np.array([400, 0, -4000], np.int32)
    np.testing.assert_array_equal(blend_targets(results, None, 0.01, 0.0), results)
    got = blend_targets(results, scores, 0.0025, 0.25)
    expected = 0.25 / (1 + np.exp(-0.0025 * scores)) + 0.75 * results
    np.testing.assert_allclose(got, expected, rtol=1e-15)
    with pytest.raises(ValueError, match="score"):
        blend_targets(results, None, 0.01, 0.5)


@pytest.mark.parametrize("evaluation", ["clockwork", "clockwork-10d79e6"])
@pytest.mark.parametrize("loss", [F_SIGMOID_SQ_ERR, F_SIGMOID_XENT])
def test_loss_gradient_with_blended_targets_matches_finite_differences(evaluation, loss):
    ev = get_evaluation(evaluation)
    ds = load_dataset("tiny", need_scores=True, quiet=True)
    rows = np.arange(0, len(ds), 97)
    k = 0.004
    targets = blend_targets(ds.results, ds.score_cp, k, 0.6)
    assert len(np.unique(targets[rows])) > 10  # truly blended, not just results
    reg = ev.registry
    theta = np.concatenate([np.asarray(reg.defaults, float).reshape(-1),
                            np.asarray(reg.value_defaults, float)])
    w = Workers(EagerSource(ev, ds.positions, targets, k, loss), 1, 16, len(rows))
    try:
        sse, grad = w.loss_grad(theta, rows)
        grad = grad.copy()
        rng = np.random.default_rng(0)
        movable = np.flatnonzero(np.abs(grad) > 1e-9 * np.abs(grad).max())
        checked = 0
        for i in rng.choice(movable, 12, replace=False):
            h = 1e-3 * max(1.0, abs(theta[i]))
            up, down = theta.copy(), theta.copy()
            up[i] += h
            down[i] -= h
            fd = (w.loss_grad(up, rows, with_grad=False)[0]
                  - w.loss_grad(down, rows, with_grad=False)[0])
            fd /= 2 * h * len(rows)
            assert grad[i] == pytest.approx(fd, rel=2e-4, abs=1e-12), i
            checked += 1
    finally:
        w.close()
    assert checked == 12
    # the loss itself, against numpy
    from tuner.evals.generic import continuous
    e = continuous(ev, ds.positions[rows], *split_params(theta, reg.n_params))
    p = 1 / (1 + np.exp(-k * e))
    y = targets[rows]
    ref = (np.sum((p - y) ** 2) if loss == F_SIGMOID_SQ_ERR
           else -np.sum(y * np.log(p) + (1 - y) * np.log(1 - p)))
    assert sse == pytest.approx(ref, rel=1e-10)


def test_score_blend_needs_scores(tmp_path):
    # the text-derived tiny set is converted without scores
    from tuner.data.convert import convert_files

    out = tmp_path / "noscore.parquet"
    convert_files([str(DATASETS / "tiny.txt")], str(out))
    raw = _raw(**{"loss.score_blend": 0.5})
    raw["data"]["train"] = [str(out)]
    with pytest.raises(Exception, match="score"):
        _run(tmp_path, "b", raw)


# -- best epoch, early stopping, resume --------------------------------------------------------
def test_best_epoch_is_kept_and_early_stopping_stops(tmp_path):
    raw = _raw(**{"optimizer.lr": 40.0, "training.epochs": 30, "training.patience": 2})
    run, logs = _run(tmp_path, "a", raw)
    h = run.history
    val = np.array(h["val_loss"])
    best = int(np.argmin(val)) + 1
    assert run.best_epoch == best and run.state.best_val == val.min()
    # stopped exactly `patience` epochs after the best one, well before the last epoch
    assert run.epoch == best + 2 < 30, (run.epoch, best)
    assert any(line.startswith("early stop after epoch") for line in logs)
    saved = ParamRegistry.from_json(tmp_path / "a" / "best.json")
    note = json.loads((tmp_path / "a" / "best.json").read_text())["note"]
    assert note == {"K": run.k, "best_epoch": best, "validation_loss": run.state.best_val}
    np.testing.assert_array_equal(np.asarray(saved.defaults).reshape(-1),
                                  run.state.best_theta[: 2 * run.registry.n_params])
    assert (tmp_path / "a" / "best.hpp").read_text().startswith(
        f"// K: {run.k}\n// best_epoch: {best}\n")
    assert not np.array_equal(run.state.best_theta, run.theta)  # the last epoch is not the best


def test_resume_keeps_the_best_epoch_bit_for_bit(tmp_path):
    raw = _raw(**{"optimizer.lr": 40.0, "training.epochs": 8})
    full, _ = _run(tmp_path, "full", raw)
    part, _ = _run(tmp_path, "part", raw, epochs=3)
    resumed = Run(validate(raw, "x"), tmp_path / "part", log=lambda s: None)
    resumed.load_checkpoint()
    resumed.run()
    assert resumed.best_epoch == full.best_epoch and resumed.best_val == full.best_val
    assert resumed.best_theta.tobytes() == full.best_theta.tobytes()
    assert (tmp_path / "part" / "best.json").read_bytes() == \
        (tmp_path / "full" / "best.json").read_bytes()


def test_patience_needs_validation():
    with pytest.raises(ConfigError, match="patience"):
        validate(_raw(**{"training.patience": 3, "data.validation_fraction": 0.0}), "x")


# -- the held-out check ------------------------------------------------------------------------
def _heldout(logs):
    text = "\n".join(logs)
    start = float(re.search(r"^  starting parameters\s+([\d.]+)$", text, re.M).group(1))
    tuned = float(re.search(r"^  tuned \(best epoch \d+\)\s+([\d.]+)$", text, re.M).group(1))
    return start, tuned, text


def test_fine_tune_on_the_sample_beats_its_start_on_held_out_games(tmp_path):
    """The default job's recipe on the shipped sample, as one run (not cross-validated: 5% of
    the games held out, best epoch, patience 3): the engine's integer evaluation with the tuned
    parameters has a lower loss on held-out games than with the starting (the engine's)
    parameters, and the log says so."""
    from tuner.shipped import find_config
    from tuner.train.config import load_config

    cfg = load_config(find_config("default")).with_values(
        {"data": {"validation_fraction": 0.05}, "validation": {"folds": 0, "pulls": []},
         "training": {"patience": 3, "epochs": 30}})
    assert cfg["evaluation"]["init"] == "default"
    out = tmp_path / "run"
    out.mkdir()
    logs: list[str] = []
    run = Run(cfg, out, log=logs.append)
    run.run()
    start, tuned, text = _heldout(logs)
    assert tuned < start, text
    assert "the tune BEAT its starting point" in text
