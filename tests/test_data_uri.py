"""Datasets named by URI (tuner/data/uri.py): a ``file://`` URI of the shipped sample `tiny` loads,
trains (on one machine, and on 2 Ray workers that open it themselves) and caches its store exactly
as its plain path does; a URI gets the checks a path gets (schema, bad rows, not Parquet), with
the URI named; a store cache never serves the store of an object replaced under the same URI;
an unknown scheme, no such object and a text file are one clear line each."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from shared import TINY_PARQUET, stderr_lines
from tuner.cli import main
from tuner.data import DatasetError, load_dataset
from tuner.data.registry import resolve
from tuner.data.stats import dataset_stats
from tuner.data.uri import is_uri
from tuner.train.loop import start_run

CONFIG = """\
[data]
train = [{train}]
validation_fraction = 0.1
[evaluation]
name = "clockwork"
init = "default"
[optimizer]
lr = 2.0
[training]
epochs = 2
batch_size = 1024
micro_batch_size = 128
threads = 1
segment = 500
{extra}"""
#: A URI whose scheme no pyarrow filesystem has.
UNKNOWN_SCHEME = "nosuch://x/y.parquet"


@pytest.fixture
def tiny_copy(tmp_path) -> Path:
    """The shipped sample `tiny`, copied to a folder of the test's own."""
    path = tmp_path / "data" / "tiny.parquet"
    path.parent.mkdir()
    shutil.copyfile(TINY_PARQUET, path)
    return path


def _config(folder: Path, train: str, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tune.toml"
    path.write_text(CONFIG.format(train=f'"{train}"', extra=extra))
    return path


def _train(folder: Path, train: str, workers: int = 0, extra: str = ""):
    """A run of the configuration training on `train` in `folder`/out, on `workers` Ray workers
    (0: none); returns (the Run, its log lines)."""
    lines: list[str] = []
    run = start_run(str(_config(folder, train, extra)), str(folder / "out"), None, None, None,
                    log=lines.append)
    run.use_cluster(None, workers)
    run.run()
    return run, lines


def _losses(history: dict) -> dict:
    return {k: history[k] for k in ("epoch", "train_loss", "val_loss")}


@pytest.mark.parametrize("value, uri", [
    ("s3://bucket/key.parquet", True), ("gs://b/k.parquet", True),
    ("hdfs://namenode:8020/x.parquet", True), ("file:///abs/x.parquet", True),
    ("git+ssh://h/x", True), ("tiny", False), ("data/x.parquet", False),
    ("/abs/x.parquet", False), ("C:\\data\\x.parquet", False), ("3s://b/k", False),
    ("my file://x.parquet", False)])
def test_a_uri_is_a_scheme_and_two_slashes(value, uri):
    assert is_uri(value) is uri


def test_a_file_uri_loads_what_its_path_loads(tiny_copy):
    uri = tiny_copy.as_uri()
    found = resolve(uri, config=tiny_copy.parent.parent / "elsewhere" / "c.toml")
    assert found.path == uri and found.entry is None  # not relative to the configuration
    by_path, by_uri = load_dataset(tiny_copy, with_game=True), load_dataset(uri, with_game=True)
    assert by_uri.source == uri and len(by_uri) == len(by_path) == 4000
    for name in ("positions", "results", "score_cp", "game", "ply"):
        assert np.array_equal(getattr(by_uri, name), getattr(by_path, name)), name
    stats = dataset_stats(uri).to_dict()  # `tuner data stats URI`
    assert stats.pop("source") == uri
    assert stats == {k: v for k, v in dataset_stats(tiny_copy).to_dict().items() if k != "source"}


def _bad_files(folder: Path) -> dict[str, Path]:
    """Files that fail the loader's checks, each a different way."""
    table = pq.read_table(TINY_PARQUET).slice(0, 50)
    fen = table.column("fen").to_pylist()
    fen[3] = "not a fen"
    result = table.column("result").to_pylist()
    result[7] = 0.25
    bad_rows = _with(_with(table, "fen", fen), "result", result)
    files = {"bad rows": bad_rows, "no result column": table.drop_columns(["result"]),
             "no valid row": bad_rows.take([3, 7])}
    paths = {}
    for what, t in files.items():
        paths[what] = folder / f"{what.replace(' ', '-')}.parquet"
        pq.write_table(t, paths[what])
    paths["text"] = folder / "text.parquet"
    paths["text"].write_text("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1 | 0.5\n")
    return paths


def _with(table: pa.Table, column: str, values: list) -> pa.Table:
    """`table` with `column` replaced by `values`."""
    return table.set_column(table.schema.get_field_index(column), column, pa.array(values))


def _error(value, policy: str) -> str:
    with pytest.raises(DatasetError) as e:
        load_dataset(value, policy=policy, quiet=True)
    return str(e.value)


@pytest.mark.parametrize("what", ["bad rows", "no result column", "no valid row", "text"])
def test_a_uri_gets_the_checks_of_a_path_and_is_named_in_their_errors(tmp_path, what):
    path = _bad_files(tmp_path)[what]
    uri = path.as_uri()
    policy = "strict" if what == "bad rows" else "skip"
    message = _error(uri, policy)
    assert message.startswith(f"{uri}: ")
    assert message == _error(path, policy).replace(str(path), uri)
    if what == "bad rows":  # skipped as a path's are
        by_path, by_uri = (load_dataset(v, quiet=True) for v in (path, uri))
        assert by_uri.n_bad == by_path.n_bad == 2 and by_uri.bad_rows == by_path.bad_rows
        assert np.array_equal(by_uri.positions, by_path.positions)


def test_a_registry_cannot_list_a_uri(tmp_path, monkeypatch):
    monkeypatch.delenv("TUNER_DATASETS", raising=False)
    monkeypatch.chdir(tmp_path)
    registry = tmp_path / "datasets" / "registry.toml"
    registry.parent.mkdir()
    registry.write_text('[datasets.remote]\nfile = "s3://bucket/key.parquet"\n')
    with pytest.raises(DatasetError, match=r"registry\.toml: dataset 'remote': file "
                                           r"'s3://bucket/key\.parquet' is a URI; a registry "
                                           r"lists local files"):
        resolve("remote")


def test_a_training_run_from_a_file_uri_gives_the_bits_of_its_path(tiny_copy, tmp_path):
    by_path, _ = _train(tmp_path / "path", str(tiny_copy))
    by_uri, lines = _train(tmp_path / "uri", tiny_copy.as_uri())
    assert any(line.startswith(f"data: {tiny_copy.as_uri()}: 4,000 positions") for line in lines)
    assert np.array_equal(by_uri.theta, by_path.theta)
    assert _losses(by_uri.history) == _losses(by_path.history)


def test_two_workers_reading_a_file_uri_give_the_bits_of_one_machine(local_ray, tiny_copy,
                                                                     tmp_path):
    local, _ = _train(tmp_path / "local", str(tiny_copy))
    run, lines = _train(tmp_path / "ray", tiny_copy.as_uri(), workers=2)
    assert any("cluster: 2 worker(s) on Ray" in line for line in lines)
    assert sorted(info["rows"] for info in run.workers.info) != [4000]  # each read its share
    assert sum(info["rows"] for info in run.workers.info) == 4000
    assert np.array_equal(run.theta, local.theta)
    assert _losses(run.history) == _losses(local.history)


def test_a_store_cache_never_serves_the_store_of_an_object_replaced_under_its_uri(tiny_copy,
                                                                                  tmp_path):
    uri, cache = tiny_copy.as_uri(), f'store_cache = "{tmp_path / "cache"}"'
    first, lines = _train(tmp_path / "first", uri, extra=cache)
    assert any(line.startswith("replay: store kept in") for line in lines)
    again, lines = _train(tmp_path / "again", uri, extra=cache)
    assert any(line.startswith("replay: loaded the store of 4,000 positions") for line in lines)
    assert np.array_equal(again.theta, first.theta)
    # the object replaced under the same URI, with the same modification time: one result changed
    table, before = pq.read_table(tiny_copy), tiny_copy.stat()
    result = table.column("result").to_pylist()
    result[0] = 0.0 if result[0] else 1.0
    pq.write_table(_with(table, "result", result), tiny_copy)
    os.utime(tiny_copy, ns=(before.st_atime_ns, before.st_mtime_ns))
    replaced, lines = _train(tmp_path / "replaced", uri, extra=cache)
    assert not any(line.startswith("replay: loaded the store") for line in lines)
    assert any(line.startswith("replay: store kept in") for line in lines)
    fresh, _ = _train(tmp_path / "fresh", str(tiny_copy))  # no cache
    assert np.array_equal(replaced.theta, fresh.theta)
    assert not np.array_equal(replaced.theta, first.theta)


def _arrow_first_line(uri: str) -> str:
    """The first line of what pyarrow says of a URI it cannot make a filesystem of."""
    with pytest.raises((pa.ArrowException, ValueError)) as e:
        pafs.FileSystem.from_uri(uri)
    return str(e.value).splitlines()[0]


@pytest.mark.parametrize("case", ["unknown scheme", "no such object", "text file"])
def test_a_uri_that_cannot_be_trained_on_is_one_clear_line(tmp_path, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    text = tmp_path / "positions.txt"
    text.write_text("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1 | 0.5\n")
    uri, expected = {
        "unknown scheme": (UNKNOWN_SCHEME, "unknown URI scheme, or its filesystem is not "
                                           f"available: {_arrow_first_line(UNKNOWN_SCHEME)}"),
        "no such object": ("file:///nonexistent.parquet", "no such object (local filesystem)"),
        "text file": (text.as_uri(), "not a Parquet file, or corrupted ("),
    }[case]
    _config(tmp_path, uri)
    r = CliRunner().invoke(main, ["train", "--config", "tune.toml", "--out", "out"])
    lines = stderr_lines(r)
    assert r.exit_code == 2 and "Traceback" not in r.output + r.stderr
    assert lines[-1].startswith(f"error: {uri}: {expected}"), lines
    assert len([line for line in lines if line.startswith("error:")]) == 1
    if case != "text file":  # found missing before the run's directory is made
        assert not (tmp_path / "out").exists()
