"""Training configuration: schema errors (API and CLI), learning-rate schedules, freeze stages."""
from __future__ import annotations

import json
import math
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

from textedit import replace_once
from tuner.cli import main
from tuner.evals import clockwork as cw
from tuner.shipped import find_config, shipped_configs
from tuner.train.config import SCHEMA, Config, ConfigError, describe, load_config, validate
from tuner.train.loop import Run, load_data
from tuner.train.schedule import check_patterns, learning_rate, trainable_mask


TINY = """\
[data]
train = ["tiny"]

[training]
epochs = 1
batch_size = 512
micro_batch_size = 64
threads = 1
"""


def _raw(**sections):
    raw = {"data": {"train": ["tiny"]},
           "training": {"epochs": 1, "batch_size": 512, "micro_batch_size": 64, "threads": 1}}
    for name, values in sections.items():
        raw[name] = dict(raw.get(name, {}), **values)
    return raw


def _cli_fails(tmp_path, toml_text, *needles, extra=()):
    """Run `tuner train` on a config with `toml_text`: exit 2, no traceback, all `needles` shown."""
    cfg = tmp_path / "run.toml"
    cfg.write_text(textwrap.dedent(toml_text), encoding="utf-8")
    r = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(tmp_path / "out"),
                                  *extra])
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    assert isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, r.stderr  # besides, at most progress lines and a first run's notice
    for needle in needles:
        assert needle in r.stderr, (needle, r.stderr)
    return r.stderr


# -- validate(): one error per problem, naming the key -----------------------------------------

def test_validate_fills_defaults():
    cfg = validate({"data": {"train": "tiny"}}, "x")
    assert cfg["data"]["train"] == ["tiny"]          # a single name becomes a list
    for section, keys in SCHEMA.items():
        for k, key in keys.items():
            if section == "data" and k == "train":
                continue
            assert cfg[section][k] == key.default, (section, k)
    # int accepted where a number is expected
    assert validate(_raw(optimizer={"lr": 3}), "x")["optimizer"]["lr"] == 3


@pytest.mark.parametrize("raw, needles", [
    ({"data": {"train": ["tiny"]}, "foo": {}}, ["x: unknown section [foo]", "[data]", "[training]"]),
    (_raw(optimizer={"lrr": 1.0}),
     ["[optimizer]", "unknown key 'lrr'", "allowed: name, lr, beta1, beta2, eps, weight_decay, "
                                          "momentum"]),
    (_raw(training={"epochs": "ten"}), ["[training] epochs", "integer", "'ten'"]),
    (_raw(training={"epochs": 2.5}), ["[training] epochs", "integer", "2.5"]),
    (_raw(training={"epochs": True}), ["[training] epochs", "integer", "True"]),
    (_raw(optimizer={"lr": "fast"}), ["[optimizer] lr", "number", "'fast'"]),
    (_raw(optimizer={"lr": -1.0}), ["[optimizer] lr", "must be > 0", "-1.0"]),
    (_raw(optimizer={"lr": 0}), ["[optimizer] lr", "must be > 0"]),
    (_raw(optimizer={"lr": math.nan}), ["[optimizer] lr", "finite"]),
    (_raw(optimizer={"lr": math.inf}), ["[optimizer] lr", "finite"]),
    (_raw(optimizer={"name": "adam"}), ["[optimizer] name", "'adamw', 'sgd'"]),
    (_raw(optimizer={"beta1": 1.0}), ["[optimizer] beta1", "[0, 1)"]),
    (_raw(data={"validation_fraction": 1.5}), ["[data] validation_fraction", "[0, 1)", "1.5"]),
    (_raw(data={"validation_fraction": -0.1}), ["[data] validation_fraction", "[0, 1)"]),
    (_raw(data={"policy": "lenient"}), ["[data] policy", "'skip', 'strict'"]),
    (_raw(data={"train": []}), ["[data] train", "at least one"]),
    (_raw(data={"train": [1]}), ["[data] train", "list of strings"]),
    ({"training": {"epochs": 1}}, ["[data]", "missing required key 'train'"]),
    ({"data": 5}, ["[data] must be a table"]),
    (_raw(training={"threads": -1}), ["[training] threads", "[0, 256]"]),
    (_raw(training={"micro_batch_size": 0}), ["[training] micro_batch_size", "[1, 65,536]"]),
    (_raw(training={"mode": "lazy"}), ["[training] mode", "'replay', 'eager'"]),
    (_raw(schedule={"type": "cosine"}), ["[schedule] type", "'constant', 'exponential'"]),
    (_raw(schedule={"type": "piecewise"}), ["[schedule]", "piecewise", "[[schedule.segments]]"]),
    (_raw(schedule={"type": "piecewise",
                    "segments": [{"epochs": 2, "lr_start": 1.0, "lr_end": 0.0}]}),
     ["segments[0]", "> 0"]),
    (_raw(schedule={"type": "piecewise",
                    "segments": [{"epochs": 2, "lr_start": 1.0, "lr_stop": 0.5}]}),
     ["segments[0]", "unknown key 'lr_stop'", "epochs, lr_start, lr_end"]),
    (_raw(schedule={"type": "piecewise", "segments": [{"epochs": 2, "lr_start": 1.0}]}),
     ["segments[0]", "missing key 'lr_end'"]),
    (_raw(schedule={"segments": [3]}), ["segments", "list of tables"]),
    (_raw(freeze={"stages": [{"from_epoch": 3, "train": ["*"]},
                             {"from_epoch": 1, "train": ["*"]}]}),
     ["[freeze] stages", "distinct and increasing"]),
    (_raw(freeze={"stages": [{"from_epoch": 1, "train": ["*"]},
                             {"from_epoch": 1, "train": ["*_MAT"]}]}),
     ["[freeze] stages", "distinct and increasing"]),
    (_raw(freeze={"stages": [{"from_epoch": 0}]}), ["stages[0]", "missing key 'train'"]),
    (_raw(freeze={"stages": [{"from_epoch": 0, "train": [1]}]}),
     ["stages[0].train", "list of strings"]),
    (_raw(freeze={"stages": [{"from_epoch": 0, "train": ["*"], "exclude": "PAWN_MAT"}]}),
     ["stages[0].exclude", "list"]),
])
def test_validate_errors(raw, needles):
    with pytest.raises(ConfigError) as e:
        validate(raw, "x")
    msg = str(e.value)
    assert msg.startswith("x")
    for needle in needles:
        assert needle in msg, (needle, msg)


def test_help_config_lists_every_key():
    r = CliRunner().invoke(main, ["train", "--help-config"])
    assert r.exit_code == 0
    reference, shipped = r.output.strip().rsplit("\n", 1)
    assert reference.strip() == describe().strip()
    assert shipped.endswith(": " + ", ".join(shipped_configs()))
    for section, keys in SCHEMA.items():
        assert f"[{section}]" in r.output
        for k in keys:
            assert f"  {k} (" in r.output, k


def test_example_configs_are_valid():
    cfg = load_config(find_config("default"))
    assert cfg["data"]["train"] == ["selfplay-std", "selfplay-dfrc"]
    assert cfg["evaluation"]["init"] == "default" and cfg["validation"]["folds"] >= 2
    assert 0.0 in cfg["validation"]["pulls"]  # the unpulled fine-tune is one of the choices


# -- the same errors through the CLI: exit code 2, one line on stderr, no traceback -------------

@pytest.mark.parametrize("text, needles", [
    (TINY + "[foo]\nx = 1\n", ["unknown section [foo]", "allowed: [data]"]),
    (TINY + "[optimizer]\nlrr = 1.0\n", ["unknown key 'lrr'", "allowed: name, lr,"]),
    (replace_once(TINY, "epochs = 1", 'epochs = "ten"'), ["[training] epochs", "integer"]),
    (TINY + "[optimizer]\nlr = -1.0\n", ["[optimizer] lr", "must be > 0"]),
    (replace_once(TINY, '["tiny"]', '["tiny"]\nvalidation_fraction = 1.5'),
     ["[data] validation_fraction", "[0, 1)"]),
    (TINY + '[schedule]\ntype = "piecewise"\n', ["[[schedule.segments]]"]),
    (TINY + "[[freeze.stages]]\nfrom_epoch = 2\ntrain = ['*']\n"
            "[[freeze.stages]]\nfrom_epoch = 1\ntrain = ['*_MAT']\n",
     ["distinct and increasing"]),
    (TINY + "[[freeze.stages]]\nfrom_epoch = 0\ntrain = ['PAWN_MATERIAL']\n",
     ["stages[0].train", "'PAWN_MATERIAL'", "matches no parameter"]),
    (TINY + "[[freeze.stages]]\nfrom_epoch = 0\ntrain = ['*']\nexclude = ['*_PQST']\n",
     ["stages[0].exclude", "'*_PQST'", "matches no parameter"]),
    (replace_once(TINY, '["tiny"]', '["no-such-dataset"]'), ["no-such-dataset"]),
    (TINY + "[training\n", ["not valid TOML"]),
    (TINY + '[evaluation]\ninit = "missing.json"\n', ["[evaluation] init", "missing.json"]),
])
def test_cli_config_errors(tmp_path, text, needles):
    _cli_fails(tmp_path, text, *needles)


def test_cli_missing_config_file(tmp_path):
    r = CliRunner().invoke(main, ["train", "--config", str(tmp_path / "nope.toml"),
                                  "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    assert "nope.toml" in r.stderr and "no such configuration file" in r.stderr
    assert "Traceback" not in r.output


def test_cli_needs_config_or_resume():
    r = CliRunner().invoke(main, ["train"])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit)
    assert "--config" in r.stderr


def test_cli_unknown_evaluation(tmp_path):
    """An evaluation name that does not exist is a configuration error, not a crash."""
    _cli_fails(tmp_path, TINY + '[evaluation]\nname = "stockfish"\n', "stockfish", "clockwork")


def test_cli_init_file_that_is_not_a_parameter_file(tmp_path):
    """A parameter JSON that cannot be read is a configuration error, not a crash."""
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    _cli_fails(tmp_path, TINY + '[evaluation]\ninit = "bad.json"\n', "bad.json")
    (tmp_path / "bad.json").write_text('{"params": 3}', encoding="utf-8")
    _cli_fails(tmp_path, TINY + '[evaluation]\ninit = "bad.json"\n', "bad.json")


def test_init_json_for_another_layout_is_refused(tmp_path):
    reg = cw.registry()
    d = reg.to_dict()
    d["params"] = d["params"][:-1]          # drop KING_PSQT
    d.pop("total_pair_entries")
    d.pop("constant_pair_entries")
    (tmp_path / "short.json").write_text(json.dumps(d), encoding="utf-8")
    _cli_fails(tmp_path, TINY + '[evaluation]\ninit = "short.json"\n', "short.json",
               "does not hold the parameters")


def test_init_json_relative_to_config_and_constants_kept(tmp_path):
    reg = cw.registry()
    values = np.array(reg.defaults) + 0.5
    (tmp_path / "start.json").write_text(reg.dumps(values), encoding="utf-8")
    cfg_path = tmp_path / "run.toml"
    cfg_path.write_text(TINY + '[evaluation]\ninit = "start.json"\n', encoding="utf-8")
    run = Run(load_config(cfg_path), tmp_path, log=lambda s: None)
    expect = values.copy()
    expect[reg.constant] = reg.defaults[reg.constant]
    assert run.params.tobytes() == expect.tobytes()


# -- learning-rate schedules --------------------------------------------------------------------

def _sched(**kw):
    return validate(_raw(schedule=kw), "x")["schedule"]


def test_constant_schedule():
    s = _sched(type="constant")
    assert all(learning_rate(s, 7.5, e) == 7.5 for e in range(100))


def test_exponential_schedule_is_clockworks():
    """Clockwork: epochs 0..6 at lr, then epoch e >= 7 at lr * 0.91^(e - 6)."""
    s = _sched(type="exponential", gamma=0.91, decay_from_epoch=6)
    for e in range(7):
        assert learning_rate(s, 10.0, e) == 10.0
    for e in range(7, 60):
        assert learning_rate(s, 10.0, e) == pytest.approx(10.0 * 0.91 ** (e - 6), rel=1e-14)
    assert learning_rate(s, 10.0, 7) == pytest.approx(9.1, rel=1e-14)
    lrs = [learning_rate(s, 10.0, e) for e in range(6, 40)]
    assert all(b < a for a, b in zip(lrs, lrs[1:]))


def test_exponential_schedule_from_zero():
    s = _sched(type="exponential", gamma=0.5, decay_from_epoch=0)
    assert [learning_rate(s, 8.0, e) for e in range(5)] == [8.0, 4.0, 2.0, 1.0, 0.5]


def test_piecewise_schedule():
    s = _sched(type="piecewise", segments=[
        {"epochs": 3, "lr_start": 1.0, "lr_end": 0.001},
        {"epochs": 2, "lr_start": 0.5, "lr_end": 0.02},
        {"epochs": 4, "lr_start": 0.2, "lr_end": 0.2},
        {"epochs": 1, "lr_start": 3, "lr_end": 0.25},
    ])
    lr = [learning_rate(s, 123.0, e) for e in range(14)]   # base lr is ignored
    approx = lambda x: pytest.approx(x, rel=1e-13)  # noqa: E731
    # segment starts (boundaries)
    assert lr[0] == 1.0 and lr[3] == 0.5 and lr[5] == 0.2 and lr[9] == 3
    # geometric interpolation inside a segment: constant ratio (lr_end / lr_start)^(1 / epochs)
    assert lr[1] == approx(0.1) and lr[2] == approx(0.01)
    assert lr[4] == approx(0.1)
    assert lr[5:9] == [approx(0.2)] * 4
    # after the last segment its lr_end holds
    assert lr[10:] == [0.25] * 4


def test_run_history_records_the_schedule(tmp_path):
    cfg = validate(_raw(schedule={"type": "piecewise", "segments": [
        {"epochs": 2, "lr_start": 4.0, "lr_end": 1.0}]}, training={"epochs": 3}), "x")
    run = Run(cfg, tmp_path, log=lambda s: None)
    h = run.run(load_data(cfg, lambda s: None))
    assert h["lr"] == [4.0, pytest.approx(2.0, rel=1e-14), 1.0]


# -- freeze stages --------------------------------------------------------------------------------

def _pairs(reg, flat):
    """The per-pair view of a flat mask over a pairs-only registry (mg and eg always agree)."""
    assert flat.shape == (2 * reg.n_params,) and np.array_equal(flat[::2], flat[1::2])
    return flat[::2]


def _groups(reg, mask):
    return {g.name for g in reg.groups if mask[g.slice].any()}


def test_trainable_mask_stages():
    reg = cw.registry()
    const = np.asarray(reg.constant)
    assert const.any()
    free = ~const
    assert np.array_equal(_pairs(reg, trainable_mask(reg, [], 0)), free)
    stages = [{"from_epoch": 2, "train": ["*_MAT"], "exclude": []},
              {"from_epoch": 4, "train": ["*"], "exclude": ["*_PSQT", "QUEEN_*"]},
              {"from_epoch": 6, "train": ["*_KING_RING", "*_PASSED_PAWN_DISTANCE"]}]
    check_patterns(reg, stages)
    for e in (0, 1):   # before the first stage everything non-constant moves
        assert np.array_equal(_pairs(reg, trainable_mask(reg, stages, e)), free)
    for e in (2, 3):
        m = _pairs(reg, trainable_mask(reg, stages, e))
        assert _groups(reg, m) == {"PAWN_MAT", "KNIGHT_MAT", "BISHOP_MAT", "ROOK_MAT", "QUEEN_MAT"}
        assert m.sum() == 5
    for e in (4, 5):
        m = _pairs(reg, trainable_mask(reg, stages, e))
        names = _groups(reg, m)
        assert not any(n.endswith("_PSQT") or n.startswith("QUEEN_") for n in names)
        assert {"PAWN_MAT", "ROOK_MOBILITY", "BISHOP_PAIR_VAL"} <= names
        expect = np.zeros_like(m)
        for g in reg.groups:
            if g.name in names:
                expect[g.slice] = True
        assert np.array_equal(m, expect & free)
        assert (expect & const).any()   # KNIGHT_KING_RING[0] etc. are constant: never trained
    for e in (6, 100):   # the last stage holds; constants inside matched groups stay frozen
        m = _pairs(reg, trainable_mask(reg, stages, e))
        assert _groups(reg, m) == {"KNIGHT_KING_RING", "BISHOP_KING_RING", "ROOK_KING_RING",
                                   "QUEEN_KING_RING", "FRIENDLY_KING_PASSED_PAWN_DISTANCE",
                                   "ENEMY_KING_PASSED_PAWN_DISTANCE"}
        assert not (m & const).any()
        matched = sum(g.size for g in reg.groups
                      if g.name.endswith("_KING_RING") or g.name.endswith("PAWN_DISTANCE"))
        assert m.sum() == matched - const.sum()   # every constant lives in one of these groups
    # constants never move, even under '*'
    assert np.array_equal(_pairs(reg, trainable_mask(reg, [{"from_epoch": 0, "train": ["*"]}], 0)), free)


def test_check_patterns():
    reg = cw.registry()
    check_patterns(reg, [{"from_epoch": 0, "train": ["PAWN_MAT", "*_PSQT"], "exclude": ["K*"]}])
    with pytest.raises(ValueError, match=r"stages\[1\]\.train: pattern 'PAWN_MATT'"):
        check_patterns(reg, [{"from_epoch": 0, "train": ["*"]},
                             {"from_epoch": 1, "train": ["PAWN_MATT"]}])
    with pytest.raises(ValueError, match=r"stages\[0\]\.exclude: pattern 'pawn_mat'"):
        check_patterns(reg, [{"from_epoch": 0, "train": ["*"], "exclude": ["pawn_mat"]}])


def test_freeze_run_keeps_frozen_entries_exactly(tmp_path):
    """Frozen entries keep their value (and optimiser moments) bit for bit; the others move."""
    cfg = validate(_raw(
        evaluation={"init": "random", "random_range": 50.0, "random_seed": 3},
        optimizer={"lr": 2.0, "weight_decay": 0.01},
        freeze={"stages": [{"from_epoch": 0, "train": ["*"], "exclude": ["*_PSQT"]},
                           {"from_epoch": 2, "train": ["*_PSQT"]}]},
        training={"epochs": 4}), "x")
    reg = cw.registry()
    data = load_data(cfg, lambda s: None)
    run = Run(cfg, tmp_path, epochs=2, log=lambda s: None)
    init = run.params.copy()
    assert np.isfinite(init).all() and (init[~reg.constant] != 0).all()
    psqt = np.zeros(reg.n_params, bool)
    for g in reg.groups:
        if g.name.endswith("_PSQT"):
            psqt[g.slice] = True
    const = np.asarray(reg.constant)

    run.run(data)                                   # epochs 0, 1: everything but the PSQTs
    p2 = run.params.copy()
    m2, v2 = run.state.m.reshape(-1, 2).copy(), run.state.v.reshape(-1, 2).copy()  # (no value parameters)
    assert p2[psqt].tobytes() == init[psqt].tobytes()
    assert not m2[psqt].any() and not v2[psqt].any()
    assert p2[const].tobytes() == reg.defaults[const].tobytes()
    moved = (p2 != init).any(axis=1)
    assert moved[~psqt & ~const].mean() > 0.9     # nearly every other entry moved

    run.epochs = 4
    run.run(data)                                   # epochs 2, 3: only the PSQTs
    p4 = run.params
    assert p4[~psqt].tobytes() == p2[~psqt].tobytes()
    assert run.state.m.reshape(-1, 2)[~psqt].tobytes() == m2[~psqt].tobytes()
    assert (p4[psqt] != init[psqt]).any(axis=1).mean() > 0.9


def test_clockwork_head_recipe_is_the_engine_tuners():
    """The shipped clockwork-head configuration: 10d79e6's evaltune_main.cpp schedule and freeze stages."""
    from tuner.evals import get_evaluation

    cfg = load_config(find_config("clockwork-head"))
    reg = get_evaluation(cfg["evaluation"]["name"]).registry
    assert reg.n_params == 627 and reg.n_values == 5
    stages = cfg["freeze"]["stages"]
    check_patterns(reg, stages)
    n_pairs = 2 * reg.n_params
    for epoch in (0, 23):        # freeze_pair_range(5, ...) and freeze_value_range: material only
        m = trainable_mask(reg, stages, epoch)
        assert np.flatnonzero(m).tolist() == list(range(10))
    for epoch in (24, 95):       # unfreeze_pair_range(0, 627 - 80) and every value
        m = trainable_mask(reg, stages, epoch)
        assert m[: 2 * 547].all() and not m[2 * 547: n_pairs].any() and m[n_pairs:].all()
    assert trainable_mask(reg, stages, 96).all()
    lr = cfg["schedule"]
    for epoch in (0, 10, 23, 24, 50, 71, 72, 200, 449):
        if epoch < 24:
            expect = 20.0 * 0.0333 ** (epoch / 24)
        elif epoch < 72:
            expect = 2 * 0.0667 ** ((epoch - 24) / 28)
        else:
            expect = 0.1 ** ((epoch - 72) / 128)
        assert learning_rate(lr, cfg["optimizer"]["lr"], epoch) == pytest.approx(expect, rel=1e-6)
    t = cfg["training"]
    assert (t["epochs"], t["batch_size"], cfg["loss"]["k"]) == (450, 16 * 16384, 1 / 400)


#: The ``[training]`` keys added after runs existed, which the digest leaves out where they
#: change nothing (so that those runs resume and keep their caches).
ADDED_LATER = ("segment", "shuffle", "shuffle_block")


@pytest.mark.parametrize("training, left_out", [
    ({"shuffle": "positions"}, ADDED_LATER),
    ({"shuffle": "positions", "segment": 1 << 18, "shuffle_block": 7}, ADDED_LATER),  # no blocks
    ({}, ("segment",)),  # the default shuffle is blocks: its keys count
    ({"shuffle": "positions", "segment": 500}, ("shuffle", "shuffle_block")),
    ({"segment": 500, "shuffle": "blocks", "shuffle_block": 7}, ())])
def test_the_digest_leaves_out_the_keys_added_later_only_where_they_change_nothing(training,
                                                                                    left_out):
    """A configuration without the keys left out (as it was before they existed) has the same
    digest; without any other of the keys added later, a different one."""
    cfg = validate(_raw(training=training), "x")

    def without(keys):
        values = json.loads(json.dumps(cfg.values))
        for key in keys:
            del values["training"][key]
        return Config(values).digest()

    assert without(left_out) == cfg.digest()
    for key in set(ADDED_LATER) - set(left_out):
        assert without([key]) != cfg.digest(), key
