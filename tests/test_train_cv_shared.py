"""What a cross-validation's fold runs share (tuner/train/cv.py): the data loaded once and split
per fold (`tuner.train.stream.refold`), and the held-out evaluations (`EvalMemo`), on `tiny`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tuner.evals import get_evaluation
from tuner.train.config import load_config, validate
from tuner.train.cv import FoldTask, run_fold
from tuner.train.heldout import EvalMemo, integer_evals
from tuner.train.loop import CHECKPOINT, initial_params
from tuner.train.stream import load_data, refold

pytestmark = pytest.mark.usefixtures("no_loss_plot")  # conftest.py: no loss.png drawn

FOLD_TOML = """\
[data]
train = ["tiny"]
validation_fraction = 0.1
split_block = 64

[evaluation]
init = "zero"

[optimizer]
lr = 5.0

[validation]
folds = 3

[training]
epochs = 2
batch_size = 512
micro_batch_size = 64
"""


def _config(tmp_path: Path) -> Path:
    path = tmp_path / "fold.toml"
    path.write_text(FOLD_TOML, encoding="utf-8")
    return path


def test_refold_splits_loaded_data_as_load_data_of_the_fold_does(tmp_path):
    cfg = load_config(_config(tmp_path))
    loaded = load_data(cfg, lambda s: None)
    for fold in (0, 1, 3):
        fold_cfg = cfg.with_values({"validation": {"fold": fold}})
        want, got = load_data(fold_cfg, lambda s: None), refold(loaded, fold_cfg)
        assert np.array_equal(got.train, want.train) and np.array_equal(got.val, want.val)
        assert (got.train_games, got.val_games) == (want.train_games, want.val_games)
        assert got.held_out().tobytes() == want.held_out().tobytes()
    assert len(refold(loaded, cfg.with_values({"validation": {"fold": 1}})).val) > len(loaded.val)


def test_a_fold_run_given_the_loaded_data_gives_the_bits_of_one_reading_its_own(tmp_path):
    path = _config(tmp_path)
    loaded = load_data(load_config(path), lambda s: None)
    memo = EvalMemo(get_evaluation("clockwork"))
    results = []
    for name, data, shared in (("own", None, None), ("given", loaded, memo)):
        task = FoldTask(0.0, 2, tmp_path / name, path, {"validation": {"fold": 2}}, 2)
        results.append(run_fold(task, 1, data=data, memo=shared))
    own, given = results
    assert own.thetas.tobytes() == given.thetas.tobytes()
    assert own.val_loss.tobytes() == given.val_loss.tobytes()
    for name in ("params.json", "best.json"):
        assert ((tmp_path / "own" / name).read_bytes()
                == (tmp_path / "given" / name).read_bytes()), name
    assert (tmp_path / "given" / CHECKPOINT).exists()
    # the held-out report evaluated the starting parameters, the engine's defaults (init is not
    # "default") and the best parameters into the memo, under the fold's number
    assert len(memo.done) == 3 and {fold for fold, _ in memo.done} == {2}


def test_eval_memo_evaluates_each_held_out_set_and_parameters_once(tiny_data):
    ev = get_evaluation("clockwork")
    theta = initial_params(validate({"data": {"train": ["tiny"]}}, "x"), ev.registry)
    memo = EvalMemo(ev)
    positions = tiny_data.held_out()
    first = memo.evals(1, theta, positions)
    assert memo.evals(1, theta.copy(), positions) is first  # the same parameters: remembered
    assert np.array_equal(first[0], integer_evals(ev, theta, positions)[0])
    moved = memo.evals(1, theta + 1.0, positions)
    other = memo.evals(2, theta, positions[:10])
    assert moved is not first and len(other[0]) == 10 and len(memo.done) == 3

