"""What a run leaves in its output directory, how it stops on non-finite numbers, and `tuner bench`."""
from __future__ import annotations

import re

import numpy as np
import pytest
from click.testing import CliRunner

from textedit import replace_once
from tuner.cli import main
from tuner.evals import clockwork as cw
from tuner.evals.registry import ParamRegistry
from tuner.train.config import validate
from tuner.train.loop import CHECKPOINT, HISTORY_FIELDS, Run, TrainingError

TINY_TOML = """\
[data]
train = ["tiny"]

[optimizer]
lr = 5.0

[training]
epochs = 3
batch_size = 512
micro_batch_size = 128
threads = 2
"""
PNG = b"\x89PNG\r\n\x1a\n"
FLOAT = r"[-+]?\d+\.\d+(?:[eE][-+]?\d+)?"


def _checkpoint(d):
    with np.load(d / CHECKPOINT) as z:
        return {k: z[k] for k in z.files}


def _no_stray_files(d):
    stray = [p.name for p in d.iterdir() if p.name.startswith(".") or p.name.endswith(".tmp")]
    assert not stray, stray


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    """One 3-epoch run on `tiny` through `tuner train`."""
    tmp = tmp_path_factory.mktemp("outputs")
    cfg = tmp / "my.toml"
    cfg.write_text(TINY_TOML, encoding="utf-8")
    out = tmp / "out"
    r = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    return cfg, out, r


def test_output_files(cli_run):
    cfg, out, r = cli_run
    names = {p.name for p in out.iterdir()}
    assert {"config.toml", "train.log", CHECKPOINT, "params.json", "params.hpp", "best.json",
            "best.hpp", "loss.csv", "loss.png"} <= names
    _no_stray_files(out)
    assert (out / "config.toml").read_bytes() == cfg.read_bytes()
    assert f"done: last parameters in {out / 'params.json'}" in r.stdout
    assert f"in {out / 'best.json'}" in r.stdout


def test_train_log_one_line_per_epoch(cli_run):
    _, out, r = cli_run
    ck = _checkpoint(out)
    log = (out / "train.log").read_text()
    epochs = re.findall(rf"^epoch\s+(\d+)/3\s+train ({FLOAT})\s+val ({FLOAT})\s", log, re.M)
    assert [int(e) for e, _, _ in epochs] == [1, 2, 3]
    assert len([ln for ln in log.splitlines() if ln.startswith("epoch")]) == 3
    for (_, train, val), t, v in zip(epochs, ck["history_train_loss"], ck["history_val_loss"]):
        assert float(train) == pytest.approx(t, abs=1e-6)
        assert float(val) == pytest.approx(v, abs=1e-6)
    # what is logged is also printed
    for line in log.splitlines():
        if line.startswith("epoch"):
            assert line in r.stdout


def test_checkpoint_contents(cli_run):
    _, out, _ = cli_run
    ck = _checkpoint(out)
    assert int(ck["epoch"]) == 3 and int(ck["step"]) == 3 * 8    # 3,723 train positions / 512
    assert ck["theta"].shape == (2 * cw.N_PARAMS,) and np.isfinite(ck["theta"]).all()
    assert list(ck["history_epoch"]) == [1.0, 2.0, 3.0]
    assert (ck["history_train_loss"][1:] < ck["history_train_loss"][:-1]).all()
    assert str(ck["evaluation"]) == "clockwork"


def test_params_json_and_hpp(cli_run):
    _, out, _ = cli_run
    params = _checkpoint(out)["theta"].reshape(-1, 2)
    reg = ParamRegistry.from_json(out / "params.json")
    ref = cw.registry()
    assert reg.names == ref.names
    assert [g.shape for g in reg.groups] == [g.shape for g in ref.groups]
    assert np.array_equal(reg.constant, ref.constant)
    assert reg.defaults.tobytes() == params.tobytes()      # exact round trip
    hpp = (out / "params.hpp").read_text()
    # names are padded into a column: "inline const PParam PAWN_MAT       = S(mg, eg);"
    iv = np.floor(np.abs(params) + 0.5) * np.sign(params)      # std::round
    m = re.search(r"^inline const PParam PAWN_MAT\s*= S\((-?\d+), (-?\d+)\);$", hpp, re.M)
    assert m, hpp[:500]
    assert (int(m.group(1)), int(m.group(2))) == (int(iv[0, 0]), int(iv[0, 1]))
    for g in ref.groups:
        assert g.name in hpp


def test_loss_csv_and_png(cli_run):
    _, out, _ = cli_run
    ck = _checkpoint(out)
    lines = (out / "loss.csv").read_text().splitlines()
    assert lines[0] == ",".join(HISTORY_FIELDS)
    assert len(lines) == 1 + 3
    table = np.array([[float(x) for x in ln.split(",")] for ln in lines[1:]])
    for j, name in enumerate(HISTORY_FIELDS):
        np.testing.assert_allclose(table[:, j], ck[f"history_{name}"], rtol=1e-9)
    png = (out / "loss.png").read_bytes()
    assert png.startswith(PNG) and len(png) > 1000


def test_params_written_after_every_epoch(tmp_path, tiny_data):
    cfg = validate({"data": {"train": ["tiny"]},
                    "training": {"batch_size": 1024, "micro_batch_size": 256}}, "x")
    data = tiny_data
    run = Run(cfg, tmp_path, epochs=1, threads=1, log=lambda s: None)
    run.run(data)
    first = ParamRegistry.from_json(tmp_path / "params.json").defaults
    assert first.tobytes() == run.params.tobytes()
    run.epochs = 2
    run.run(data)
    second = ParamRegistry.from_json(tmp_path / "params.json").defaults
    assert second.tobytes() == run.params.tobytes() and second.tobytes() != first.tobytes()
    _no_stray_files(tmp_path)


def test_outputs_hold_the_k_the_run_fitted(tmp_path, tiny_data):
    """With k = "fit" the JSON outputs carry the fitted K (not the parameter file's 0.0025) and
    the evaluation's name, the .hpp files start with it as a comment, and `tuner export` of a
    JSON output gives its .hpp."""
    cfg = validate({"data": {"train": ["tiny"]}, "evaluation": {"init": "default"},
                    "loss": {"k": "fit"},
                    "training": {"batch_size": 1024, "micro_batch_size": 256}}, "x")
    run = Run(cfg, tmp_path, epochs=1, threads=1, log=lambda s: None)
    run.run(tiny_data)
    shipped_k = cw.registry().meta["K"]
    assert run.k != shipped_k and run.best_epoch == 1
    for stem in ("params", "best"):
        reg = ParamRegistry.from_json(tmp_path / f"{stem}.json")
        assert reg.meta["K"] == run.k and reg.meta["note"]["K"] == run.k
        assert reg.meta["evaluation"] == "clockwork"
        hpp = (tmp_path / f"{stem}.hpp").read_text()
        assert hpp.startswith(f"// K: {run.k}\n")
        r = CliRunner().invoke(main, ["export", str(tmp_path / f"{stem}.json")])
        assert r.exit_code == 0, r.output
        assert r.stdout == hpp
    assert "// best_epoch: 1\n" in (tmp_path / "best.hpp").read_text()


def test_run_without_validation_set(tmp_path):
    cfg = tmp_path / "run.toml"
    text = replace_once(TINY_TOML, '["tiny"]', '["tiny"]\nvalidation_fraction = 0.0')
    cfg.write_text(replace_once(text, "epochs = 3", "epochs = 2"), encoding="utf-8")
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(out)])
    assert r.exit_code == 0, (r.output, r.exception)
    ck = _checkpoint(out)
    assert np.isnan(ck["history_val_loss"]).all() and np.isfinite(ck["history_train_loss"]).all()
    assert re.search(r"train 4,000 positions \([\d,]+ games\), validation 0 \(no validation\)",
                     r.stdout), r.stdout
    epochs = [ln for ln in (out / "train.log").read_text().splitlines() if ln.startswith("epoch")]
    assert len(epochs) == 2 and all(" val - " in ln for ln in epochs)
    assert (out / "loss.png").read_bytes().startswith(PNG)
    assert len((out / "loss.csv").read_text().splitlines()) == 3


def test_default_output_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "quick.toml").write_text(replace_once(TINY_TOML, "epochs = 3", "epochs = 1"),
                                         encoding="utf-8")
    r = CliRunner().invoke(main, ["train", "--config", "quick.toml"])
    assert r.exit_code == 0, (r.output, r.exception)
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 1 and re.fullmatch(r"quick-\d{8}-\d{6}", runs[0].name)
    assert (runs[0] / "params.json").exists()


def test_relative_dataset_path_survives_resume_from_elsewhere(tmp_path, monkeypatch):
    """Parquet paths are relative to the config file, also when resuming from another folder."""
    import shutil
    (tmp_path / "data").mkdir()
    (tmp_path / "cfg").mkdir()
    shutil.copyfile("tuner/samples/tiny.parquet", tmp_path / "data" / "mine.parquet")
    cfg = tmp_path / "cfg" / "run.toml"
    cfg.write_text(replace_once(TINY_TOML, '["tiny"]', '["../data/mine.parquet"]'), encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    runner = CliRunner()
    r = runner.invoke(main, ["train", "--config", str(cfg), "--out", "../out", "--epochs", "1"])
    assert r.exit_code == 0, (r.output, r.exception)
    assert "mine.parquet" in r.stdout
    monkeypatch.chdir(tmp_path / "data")
    r = runner.invoke(main, ["train", "--resume", str(tmp_path / "out"), "--epochs", "2"])
    assert r.exit_code == 0, (r.output, r.exception)
    assert int(_checkpoint(tmp_path / "out")["epoch"]) == 2


# -- non-finite numbers stop the run; the last good checkpoint stays ------------------------------

@pytest.fixture(scope="module")
def tiny_cfg():
    return validate({"data": {"train": ["tiny"]}, "optimizer": {"lr": 5.0},
                     "training": {"batch_size": 512, "micro_batch_size": 64}}, "x")


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize("entry", [(0, 0), (5, 1), (400, 0)])
def test_non_finite_parameter_stops_the_run(tmp_path, tiny_cfg, tiny_data, value, entry):
    run = Run(tiny_cfg, tmp_path, epochs=1, threads=2, log=lambda s: None)
    run.run(tiny_data)
    files = {n: (tmp_path / n).read_bytes() for n in (CHECKPOINT, "params.json", "params.hpp")}
    run.params[entry] = value
    run.epochs = 3
    with pytest.raises(TrainingError) as e:
        run.run(tiny_data)
    msg = str(e.value)
    # An entry that no position uses cannot make the loss non-finite; the range check on the
    # parameters catches it instead.
    assert re.match(r"epoch 2, batch \d+: (the loss or its gradient is not finite"
                    r"|a parameter left the range)", msg), msg
    assert f"(epoch 1) is kept in {tmp_path / CHECKPOINT}" in msg
    for n, data in files.items():
        assert (tmp_path / n).read_bytes() == data, n
    assert run.epoch == 1 and len(run.history["epoch"]) == 1
    _no_stray_files(tmp_path)


def test_non_finite_result_names_its_batch(tmp_path, tiny_cfg, tiny_data):
    """The error names the batch of the shuffled epoch that holds the offending position."""
    results = tiny_data.results.copy()
    bad_row = tiny_data.train[1234]
    results[bad_row] = np.nan
    data = type(tiny_data)(tiny_data.positions, results, tiny_data.train, tiny_data.val)
    run = Run(tiny_cfg, tmp_path, epochs=1, threads=2, log=lambda s: None)
    # the epoch's order comes from the run's shuffle RNG: replay it to find the batch
    rng = np.random.default_rng()
    rng.bit_generator.state = run.state.rng.bit_generator.state
    order = tiny_data.train[rng.permutation(len(tiny_data.train))]
    batch = int(np.flatnonzero(order == bad_row)[0]) // 512 + 1
    with pytest.raises(TrainingError, match=rf"^epoch 1, batch {batch}: "):
        run.run(data)
    assert not (tmp_path / CHECKPOINT).exists()


def test_overflowing_init_through_the_cli(tmp_path):
    """An init file beyond the parameter bound is refused before anything is created."""
    message = "params[0] (PAWN_MAT).values[0][0]: must be within +-1e+18, got 1e+308"
    reg = cw.registry()
    huge = np.full((reg.n_params, 2), 1e308)
    (tmp_path / "huge.json").write_text(reg.dumps(huge), encoding="utf-8")
    cfg = tmp_path / "run.toml"
    cfg.write_text(TINY_TOML + '\n[evaluation]\ninit = "huge.json"\n', encoding="utf-8")
    r = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (r.output, r.exception)
    assert "Traceback" not in r.output
    assert message in r.stderr
    assert not (tmp_path / "o").exists()           # a run that never completed an epoch


def test_failure_message_claims_only_an_existing_checkpoint(tmp_path, tiny_cfg, tiny_data):
    """Failing in the first epoch, there is no checkpoint: the message must not promise one."""
    results = tiny_data.results.copy()
    results[tiny_data.train] = np.nan
    data = type(tiny_data)(tiny_data.positions, results, tiny_data.train, tiny_data.val)
    run = Run(tiny_cfg, tmp_path, epochs=1, threads=1, log=lambda s: None)
    with pytest.raises(TrainingError) as e:
        run.run(data)
    assert not (tmp_path / CHECKPOINT).exists()
    assert str(tmp_path / CHECKPOINT) not in str(e.value), str(e.value)


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
@pytest.mark.parametrize("lr", [1e20, 1e300])
def test_divergence_is_a_training_error(tmp_path, opt, lr):
    """An absurd learning rate makes the parameters explode in the first batch: the run stops
    with a clear error (exit code 2, no traceback) and writes no checkpoint."""
    cfg = tmp_path / "run.toml"
    text = replace_once(TINY_TOML, "lr = 5.0", f'name = "{opt}"\nlr = {lr!r}')
    cfg.write_text(replace_once(text, "batch_size = 512", "batch_size = 1000"), encoding="utf-8")
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(out)])
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), (r.exit_code, r.output)
    assert "Traceback" not in r.output
    assert re.search(r"^error: epoch 1, batch 1: (a parameter left the range|the loss or its "
                     r"gradient is not finite).*; training stopped, no checkpoint was written "
                     r"\(no epoch completed\)\. Try a smaller learning rate\.$", r.stderr, re.M), r.stderr
    assert not (out / CHECKPOINT).exists()


# -- tuner bench ----------------------------------------------------------------------------------

def test_bench_signature_is_thread_independent():
    sigs = []
    for threads in ("1", "2"):
        r = CliRunner().invoke(main, ["bench", "--epochs", "1", "--dataset", "tiny",
                                      "--threads", threads])
        assert r.exit_code == 0, (r.output, r.exception)
        m = re.search(r"^Bench: (\d+)$", r.stdout, re.M)
        assert m, r.stdout
        sigs.append(int(m.group(1)))
        assert f"{threads} thread(s)" in r.stdout
    assert sigs[0] == sigs[1] and sigs[0] > 0


def test_bench_missing_dataset():
    r = CliRunner().invoke(main, ["bench", "--epochs", "1", "--dataset", "no-such-set"])
    assert r.exit_code == 2 and "no-such-set" in r.stderr and "Traceback" not in r.output
