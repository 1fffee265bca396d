"""``[training] shuffle = "blocks"`` (a store recorded once in a seeded random order, blocks of
it shuffled per epoch) and ``batch_size = "all"`` (one full-batch step per epoch in store order):
bitwise determinism, eager equals replay, resume, and the rows each batch reads."""
from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from test_train_determinism import _assert_same_run, _checkpoint
from tuner.train.config import RESUME_FREE, ConfigError, validate
from tuner.train.loop import Run, start_run
from tuner.train.stream import epoch_batches, in_record_order
from tuner.train.workers import Workers

#: The modes under test: (batch_size, shuffle, shuffle_block).
MODES = {"blocks": (512, "blocks", 64), "all": ("all", "positions", 64),
         "all-blocks": ("all", "blocks", 64)}
#: Positions of `tiny` (training and validation).
TINY_ROWS = 4000
RESUME_FREE_TRAINING = [key for section, key in RESUME_FREE if section == "training"]
EXACT = ("epoch", "train_loss", "val_loss", "lr")


def _raw(mode: str, train: str = "eager", epochs: int = 3) -> dict:
    bs, shuffle, block = MODES[mode]
    return {"data": {"train": ["tiny"], "validation_fraction": 0.05},
            "optimizer": {"name": "adamw", "lr": 5.0, "weight_decay": 0.001},
            "training": {"epochs": epochs, "batch_size": bs, "micro_batch_size": 64,
                         "mode": train, "shuffle": shuffle, "shuffle_block": block}}


def _train(tmp_path, raw: dict, threads: int, data):
    out = tmp_path / f"run-{len(list(tmp_path.iterdir()))}"
    out.mkdir()
    run = Run(validate(raw, "x"), out, threads=threads, log=lambda s: None)
    history = run.run(data)
    return run, {k: list(map(float, history[k])) for k in EXACT}


@pytest.fixture
def batches(monkeypatch):
    """The rows of every batch with a gradient, as `Workers.loss_grad` is given them (in the
    run, not in the warm-up of the kernels on a few positions of their own)."""
    seen = []
    real = Workers.loss_grad

    def spy(self, theta, order, with_grad=True):
        if with_grad and self.source.n_rows >= TINY_ROWS:
            seen.append(np.array(order))
        return real(self, theta, order, with_grad)

    monkeypatch.setattr(Workers, "loss_grad", spy)
    return seen


def _runs(rows: np.ndarray) -> int:
    """How many runs of consecutive store rows `rows` are read as (in store order)."""
    rows = np.sort(rows)
    return 1 + int((np.diff(rows) != 1).sum())


@pytest.mark.parametrize("mode", sorted(MODES))
def test_new_modes_are_bitwise_the_same_for_any_thread_count_eager_or_replay(tmp_path, tiny_data,
                                                                           mode):
    """Eager or replay, 1 or 2 threads, the data loaded or streamed (a replay run given no data
    reads `tiny` itself: a blocks run records it in a second pass, in parts of the order)."""
    ref_run, ref_hist = _train(tmp_path, _raw(mode, "eager"), 1, tiny_data)
    assert ref_hist["train_loss"][-1] < ref_hist["train_loss"][0]      # it does learn
    for train, threads, data in (("eager", 2, tiny_data), ("replay", 1, tiny_data),
                                 ("replay", 2, tiny_data), ("replay", 1, None),
                                 ("replay", 2, None)):
        case = (train, threads, "streamed" if data is None else "loaded")
        run, hist = _train(tmp_path, _raw(mode, train), threads, data)
        assert run.params.tobytes() == ref_run.params.tobytes(), case
        assert run.state.m.tobytes() == ref_run.state.m.tobytes(), case
        assert hist == ref_hist, case


def test_blocks_differ_from_positions(tmp_path, tiny_data):
    raw = _raw("blocks")
    blocks, _ = _train(tmp_path, raw, 1, tiny_data)
    raw["training"]["shuffle"] = "positions"
    positions, _ = _train(tmp_path, raw, 1, tiny_data)
    assert blocks.params.tobytes() != positions.params.tobytes()


def test_a_blocks_batch_is_made_of_contiguous_runs(tmp_path, tiny_data, batches):
    run, _ = _train(tmp_path, _raw("blocks", "replay", epochs=2), 1, tiny_data)
    n_train = len(tiny_data.train)
    assert len(batches) == 2 * -(-n_train // 512)
    for epoch in (batches[:len(batches) // 2], batches[len(batches) // 2:]):
        rows = np.concatenate(epoch)
        assert np.array_equal(np.sort(rows), np.arange(n_train))   # every training row once
        for b in epoch:  # 512 rows in blocks of 64: 8 runs, 9 where a block is cut
            assert _runs(b) <= len(b) // 64 + 2, _runs(b)
    assert max(_runs(b) for b in batches) > 1            # the blocks are shuffled
    assert not np.array_equal(batches[0], batches[len(batches) // 2])   # anew each epoch


def test_a_positions_batch_reads_scattered_rows(tmp_path, tiny_data, batches):
    raw = _raw("blocks", "replay", epochs=1)
    raw["training"]["shuffle"] = "positions"
    _train(tmp_path, raw, 1, tiny_data)
    assert min(_runs(b) for b in batches[:-1]) > 100   # what the blocks avoid


def test_full_batch_makes_one_step_per_epoch_over_every_position(tmp_path, tiny_data, batches):
    run, _ = _train(tmp_path, _raw("all", "replay"), 2, tiny_data)
    assert run.state.step == 3
    assert len(batches) == 3
    for b in batches:
        assert np.array_equal(b, tiny_data.train)     # every training position, in store order


def test_record_order_is_a_seeded_permutation_of_the_training_positions(tiny_data):
    a, b = in_record_order(tiny_data, 5), in_record_order(tiny_data, 6)
    n_train, n_val = len(tiny_data.train), len(tiny_data.val)
    assert np.array_equal(a.train, np.arange(n_train))
    assert np.array_equal(a.val, np.arange(n_train, n_train + n_val))
    assert np.array_equal(a.held_out(), tiny_data.held_out())
    assert np.array_equal(a.results[a.val], tiny_data.results[tiny_data.val])
    keys = [p.tobytes() for p in tiny_data.positions[tiny_data.train]]
    got = [p.tobytes() for p in a.positions[a.train]]
    assert sorted(got) == sorted(keys) and got != keys    # the same positions, shuffled
    assert a.positions[a.train].tobytes() != b.positions[b.train].tobytes()   # by the seed
    assert in_record_order(tiny_data, 5).positions.tobytes() == a.positions.tobytes()


def _blocks_then_sorted(train, seed, batch, size):
    """The reference of a blocks epoch's order: the shuffled blocks one after the other (what
    `epoch_batches` gave before it sorted the batches), then each batch's positions in their
    order in `train` (what `Workers.loss_grad`'s sort made of them)."""
    starts = np.random.default_rng(seed).permutation(-(-len(train) // size)) * size
    at = np.concatenate([np.arange(lo, min(lo + size, len(train))) for lo in starts])
    return np.concatenate([train[np.sort(at[b: b + batch])] for b in range(0, len(at), batch)])


@pytest.mark.parametrize("n, batch, size", [(1000, 100, 64), (1000, 128, 64), (1000, 5000, 64),
                                            (1000, 100, 3000), (1000, 1, 7), (1, 4, 4),
                                            (999, 250, 1)])
@pytest.mark.parametrize("kind", ["store rows", "increasing", "shuffled"])
def test_epoch_batches_of_blocks(n, batch, size, kind):
    """A blocks run's training rows are 0..n-1 (`_batch_of_blocks` then reads no `train`);
    others are read from `train`."""
    train = np.arange(n) if kind == "store rows" else np.arange(10, 10 + n)
    increasing = kind != "shuffled"
    if not increasing:  # the batches then follow `train`'s order, not the rows'
        train = np.random.default_rng(1).permutation(train)
    training = {"batch_size": batch, "shuffle": "blocks", "shuffle_block": size}
    batches = [b.copy() for b in epoch_batches(train, np.random.default_rng(0), training)]
    assert [len(b) for b in batches] == [min(batch, n - lo) for lo in range(0, n, batch)]
    order = np.concatenate(batches)
    assert order.dtype == train.dtype
    assert np.array_equal(order, _blocks_then_sorted(train, 0, batch, size))
    if increasing:  # in store order: `Workers.loss_grad` has nothing to sort
        assert all(np.all(np.diff(b) > 0) for b in batches)
    (whole,) = epoch_batches(train, None, {**training, "batch_size": "all"})
    assert np.array_equal(whole, train)


@pytest.mark.parametrize("mode, train, threads", [("blocks", "replay", (1, 2, 1)),
                                                  ("all", "replay", (2, 1, 2)),
                                                  ("blocks", "eager", (2, 1, 1))])
def test_resume_is_bitwise_identical_in_each_mode(tmp_path, mode, train, threads):
    bs, shuffle, block = MODES[mode]
    cfg = tmp_path / "run.toml"
    cfg.write_text(f'[data]\ntrain = ["tiny"]\n\n[optimizer]\nlr = 5.0\n\n[training]\n'
                   f'batch_size = {bs if isinstance(bs, int) else repr(bs)!s}\n'
                   f'micro_batch_size = 64\nmode = "{train}"\nshuffle = "{shuffle}"\n'
                   f'shuffle_block = {block}\n'.replace("'", '"'), encoding="utf-8")
    full, part = tmp_path / "full", tmp_path / "part"
    start_run(str(cfg), str(full), None, 4, threads[0], log=lambda s: None).run()
    start_run(str(cfg), str(part), None, 2, threads[1], log=lambda s: None).run()
    assert int(_checkpoint(part)["epoch"]) == 2
    run = start_run(None, None, str(part), 4, threads[2], log=lambda s: None)
    run.run()
    _assert_same_run(full, part)


@pytest.mark.parametrize("key, value, message", [
    ("batch_size", "everything", "must be an integer or \"all\""),
    ("batch_size", 0, "must be in [1, "),
    ("shuffle", "rows", "must be one of 'positions', 'blocks'"),
    ("shuffle_block", 0, "must be in [1, ")])
def test_bad_values_name_the_key_and_value(key, value, message):
    with pytest.raises(ConfigError) as e:
        validate({"data": {"train": ["tiny"]}, "training": {key: value}}, "run.toml")
    assert f"[training] {key}" in str(e.value) and message in str(e.value)
    assert repr(value) in str(e.value) or str(value) in str(e.value)


def test_the_position_shuffle_keeps_the_digest_runs_resume_with():
    """A run started before the shuffle keys (and ``segment``) existed resumes: under the
    position shuffle they are not in the digest (nor ``segment`` at its default); under blocks
    both shuffle keys are. Such a run trained under the position shuffle, the default then: it
    must say so now that the default is blocks (without it, its digest differs and the resume is
    refused, naming the shuffle)."""
    positions = {"shuffle": "positions"}
    base = {"data": {"train": ["tiny"]}, "training": positions}
    plain = validate(base, "run.toml")
    older = json.loads(json.dumps(plain.values))
    for key in ("shuffle", "shuffle_block", "segment"):
        del older["training"][key]
    for key in RESUME_FREE_TRAINING:
        older["training"].pop(key, None)
    del older["cluster"]  # nor the [cluster] section (all of its keys may change on resume)
    want = hashlib.sha256(json.dumps(older, sort_keys=True).encode()).hexdigest()[:16]
    assert plain.digest() == want
    assert validate({**base, "training": {**positions, "shuffle_block": 7}}, "x").digest() == want
    blocks = validate({**base, "training": {"shuffle": "blocks"}}, "x").digest()
    assert blocks != want
    assert validate({"data": base["data"]}, "x").digest() == blocks  # the default
    assert validate({**base, "training": {"shuffle": "blocks", "shuffle_block": 7}},
                    "x").digest() != blocks
