"""Epoch numbering as documented (README "Epochs", --help-config): the log, loss.csv and the
history count epochs from 1; `from_epoch` and `decay_from_epoch` are 0-based, so `from_epoch = N`
first applies in the epoch the log calls N + 1."""
from __future__ import annotations

from tuner.evals.registry import PAIR
from tuner.train.config import validate
from tuner.train.loop import Run, load_data

GAMMA = 0.5
LR = 4.0


def test_log_history_and_stages_agree_on_the_epoch_numbers(tmp_path):
    cfg = validate({
        "data": {"train": ["tiny"]},
        "evaluation": {"name": "material"},
        "optimizer": {"lr": LR},
        "schedule": {"type": "exponential", "gamma": GAMMA, "decay_from_epoch": 1},
        "freeze": {"stages": [{"from_epoch": 2, "train": ["PAWN"]}]},
        "training": {"epochs": 3, "batch_size": 512, "micro_batch_size": 128, "threads": 1},
    }, "x")
    lines = []
    data = load_data(cfg, lambda s: None)
    run = Run(cfg, tmp_path, epochs=2, log=lines.append)
    initial = run.params.copy()
    run.run(data)
    after_2 = run.params.copy()
    run.epochs = 3
    run.run(data)

    h = run.history
    assert h["epoch"] == [1, 2, 3]
    assert [ln.split()[1] for ln in lines if ln.startswith("epoch ")] == ["1/2", "2/2", "3/3"]
    # decay_from_epoch = 1: the log's epochs 1 and 2 at lr, epoch 3 at lr * gamma^(3 - 1 - 1).
    assert h["lr"] == [LR, LR, LR * GAMMA]
    csv = (tmp_path / "loss.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in csv[1:]] == ["1", "2", "3"]
    # from_epoch = 2: the log's epoch 3 trains only PAWN; epochs 1 and 2 trained everything.
    reg = run.registry
    moved = (run.params != after_2).any(axis=1)
    assert [g.name for g in reg.groups if g.kind == PAIR and moved[g.slice].any()] == ["PAWN"]
    assert (after_2 != initial).any(axis=1).all()
