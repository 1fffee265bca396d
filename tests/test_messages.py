"""Messages that say what happened and what to do: a run that never reached its first epoch, a
type error of a config key, a store cache that is a file, a registry entry that is no regular
file, an all-null game column; and default run names that two runs started in one second do
not share."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from shared import REPO, TINY_PARQUET
from tuner.cli import main
from tuner.data import load_dataset
from tuner.data.errors import DatasetError
from tuner.data.registry import ENV_VAR
from tuner.train.config import ConfigError, load_config
from tuner.train.loop import Run, TrainingError, start_run

TOML = f"""\
[data]
train = ["{TINY_PARQUET}"]

[training]
epochs = 1
threads = 1
"""


def _cfg(tmp_path: Path, text: str = TOML) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _start(*args):
    run = start_run(*args, log=lambda line: None)
    run.lock.release()
    return run


def test_resuming_a_run_that_never_reached_its_first_epoch_says_how_to_start_it(tmp_path):
    cfg, out = _cfg(tmp_path), tmp_path / "out"
    _start(str(cfg), str(out), None, 1, 1)  # prepared, never trained
    with pytest.raises(TrainingError) as err:
        start_run(None, None, str(out), None, 1, log=lambda line: None)
    hint = f"`tuner train --config {cfg} --out {out}`"
    assert str(err.value) == (f"{out}: no checkpoint.npz to resume from: the run never "
                              f"completed its first epoch; start it again with {hint}")
    assert _start(str(cfg), str(out), None, 1, 1).out == out  # and that command starts it


def test_two_runs_started_in_the_same_second_get_their_own_default_directories(
        tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(time, "strftime", lambda fmt, *t: "20260102-030405")
    cfg = _cfg(tmp_path)
    first, second = (_start(str(cfg), None, None, 1, 1).out for _ in range(2))
    assert (first, second) == (Path("runs/run-20260102-030405"),
                               Path("runs/run-20260102-030405-2"))
    assert (second / "config.toml").read_bytes() == cfg.read_bytes()


def test_a_type_error_has_the_right_article(tmp_path):
    with pytest.raises(ConfigError, match=r"\[training\] epochs: must be an integer, got 'x'"):
        load_config(_cfg(tmp_path, TOML.replace("epochs = 1", 'epochs = "x"')))


def test_a_store_cache_that_is_a_file_says_so(tmp_path):
    (tmp_path / "cache").write_text("not a folder")
    cfg = load_config(_cfg(tmp_path, TOML + 'mode = "replay"\nstore_cache = "cache"\n'))
    lines: list[str] = []
    (tmp_path / "out").mkdir()
    Run(cfg, tmp_path / "out", log=lines.append).keep_store(None, "0" * 16)
    assert lines == [f"replay: could not keep the store in cache: {tmp_path / 'cache'}: a file, "
                     f"not a folder; not used as a cache"]


@pytest.mark.parametrize("target, what", [("/dev/zero", "a device or other special file"),
                                          ("folder", "a directory")])
def test_a_registry_entry_that_is_no_regular_file(tmp_path, monkeypatch, target, what):
    (tmp_path / "folder").mkdir()
    (tmp_path / "registry.toml").write_text(f'[datasets.mine]\nfile = "{target}"\n')
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "registry.toml"))
    shown = target if target.startswith("/") else str(tmp_path / target)
    with pytest.raises(DatasetError) as err:
        load_dataset("mine")
    message = str(err.value)
    assert message.startswith("dataset 'mine': ") and Path(shown).name in message
    assert f"is {what}, not a Parquet file" in message and "create it" not in message
    monkeypatch.chdir(tmp_path / "folder")
    listed = CliRunner().invoke(main, ["data", "list"])
    (line,) = [ln for ln in listed.output.splitlines() if ln.split()[:1] == ["mine"]]
    assert listed.exit_code == 0 and line.endswith(f"{what}, not a Parquet file"), line


def test_an_all_null_game_column_is_said_and_not_one_game(tmp_path, capsys):
    table = pq.read_table(TINY_PARQUET)
    nulls = pa.nulls(table.num_rows, table.schema.field("game").type)
    path = tmp_path / "nogames.parquet"
    pq.write_table(table.set_column(table.schema.get_field_index("game"), "game", nulls), path)
    data = load_dataset(path, with_game=True)
    assert data.game is None and len(data) == table.num_rows
    assert f"{path}: note: column 'game' is all null" in capsys.readouterr().err
    with_games = load_dataset(TINY_PARQUET, with_game=True)
    assert len(np.unique(with_games.game)) > 1


def test_the_docs_say_that_a_config_runs_the_code_it_names():
    from tuner.train.config import describe

    reference = " ".join(describe().split())
    assert "A module or file is imported, so its code runs with your rights: a configuration " \
           "from someone else runs their code" in reference
    assert "A registry's `file` may be any path, absolute or with `..`" in reference
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    usage = " ".join((REPO / "docs" / "usage.md").read_text(encoding="utf-8").split())
    assert "a configuration from someone else whose `[evaluation] name` is a `.py` file or a " \
           "module runs their code" in readme
    assert "A registry's `file` may be any path: relative to the registry, absolute, or with " \
           "`..`" in usage
