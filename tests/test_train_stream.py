"""Replay runs stream their data into the store (tuner/train/stream.py): the same store and the
same parameters, bit for bit, as a run given the whole data in memory; bad rows reported with
their file rows across batch boundaries; several datasets; and the positions are not kept."""
from __future__ import annotations

import functools
import gc
import re
import tracemalloc

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tuner.train.loop as loop
import tuner.train.stream as stream
from tuner.data import DatasetError, load_dataset
from tuner.data.loader import DatasetReader
from tuner.shipped import SAMPLES_REGISTRY
from tuner.tape.player import store_digest, store_nbytes
from tuner.train.config import validate
from tuner.train.loop import Run, load_data
from tuner.train.progress import Observer

SAMPLES = SAMPLES_REGISTRY.parent
#: File rows that a test copy of tiny spoils, around the boundaries of batches of `BATCH` rows.
BATCH = 250
BAD = (0, 249, 250, 251, 499, 1500, 3999)


@pytest.fixture
def small_batches(monkeypatch):
    """Runs read their files in batches of `BATCH` rows (not a multiple of the micro-batch)."""
    monkeypatch.setattr(stream, "DatasetReader", functools.partial(DatasetReader,
                                                                   batch_rows=BATCH))


@pytest.fixture(scope="module")
def spoiled(tmp_path_factory):
    """tiny with the rows `BAD` spoiled (a bad FEN, a null result, a bad result in turn)."""
    t = pq.read_table(SAMPLES / "tiny.parquet")
    fens, results = t.column("fen").to_pylist(), t.column("result").to_pylist()
    for i, row in enumerate(BAD):
        if i % 3 == 0:
            fens[row] = "not a fen"
        else:
            results[row] = None if i % 3 == 1 else 0.25
    t = t.set_column(t.schema.get_field_index("fen"), "fen", pa.array(fens, pa.string()))
    t = t.set_column(t.schema.get_field_index("result"), "result",
                     pa.array(results, pa.float64()))
    path = tmp_path_factory.mktemp("spoiled") / "spoiled.parquet"
    pq.write_table(t, path, row_group_size=1000)
    return path


def _raw(train, **loss):
    return {"data": {"train": [str(t) for t in train]},
            "evaluation": {"name": "clockwork", "init": "zero"},
            "loss": {"k": 0.0025, **loss}, "optimizer": {"lr": 5.0},
            "training": {"epochs": 2, "batch_size": 512, "micro_batch_size": 100,
                         "threads": 2}}


def _run(tmp_path, name, raw, monkeypatch, loaded: bool):
    """A run of `raw` (whole data given to it if `loaded`, else streamed): the run, its store
    and its log lines without timings."""
    stores = []
    workers = loop.Workers

    def capture(source, *args, **kw):
        stores.append(getattr(source, "store", None))
        return workers(source, *args, **kw)

    monkeypatch.setattr(loop, "Workers", capture)
    cfg = validate(raw, str(tmp_path / "x.toml"))
    out = tmp_path / name
    out.mkdir()
    lines = []
    run = Run(cfg, out, log=lines.append)
    run.run(load_data(cfg, lambda line: None) if loaded else None)
    timed = re.compile(r"\d s\b|pos/s|recorded|loaded|kept in|compiled")
    return run, stores[0], [line for line in lines if not timed.search(line)]


@pytest.mark.parametrize("case", ["k", "fit-blend", "cache", "two-datasets", "blocks",
                                  "blocks-fit-blend", "blocks-cache", "blocks-two-datasets"])
def test_a_streamed_run_equals_a_loaded_one(tmp_path, monkeypatch, small_batches, spoiled,
                                            case):
    """The store (its digest) and the parameters bit for bit, and the log (data lines, split, K,
    held-out report): for a known K (recorded while reading), K fitted with a score blend and
    a store cache (read, then recorded in a second pass), and two datasets with bad rows; each
    also with ``shuffle = "blocks"`` (recorded in the second pass, in 64 parts of the order:
    the loaded run reorders the positions in memory and records them in that order)."""
    train = [SAMPLES / "tiny.parquet"]
    loss = {}
    if case.endswith("fit-blend"):
        loss = {"k": "fit", "score_blend": 0.5}
    if case.endswith("two-datasets"):
        train = [spoiled, SAMPLES / "tiny.parquet", spoiled]
    raw = _raw(train, **loss)
    if case.endswith("fit-blend"):
        raw["evaluation"]["init"] = "default"   # zeros evaluate every position alike: no K fits
    if case.endswith("cache"):
        raw["training"]["store_cache"] = str(tmp_path / "cache")
    if case.startswith("blocks"):
        raw["training"].update(shuffle="blocks", shuffle_block=64)
    streamed, s_store, s_log = _run(tmp_path, "streamed", raw, monkeypatch, loaded=False)
    loaded, l_store, l_log = _run(tmp_path, "loaded", raw, monkeypatch, loaded=True)
    assert store_digest(s_store) == store_digest(l_store)
    assert streamed.theta.tobytes() == loaded.theta.tobytes()
    assert streamed.k == loaded.k
    data_lines = [line for line in s_log if line.startswith("data: ")]
    assert len(data_lines) == len(train)
    assert any(line.startswith("held-out games") for line in s_log)
    held = [line for line in l_log if not line.startswith("data: ")]
    assert [line for line in s_log if not line.startswith("data: ")] == held
    if case == "two-datasets":
        assert f"{4000 - len(BAD):,} positions ({len(BAD)} bad rows skipped)" in data_lines[0]


def test_bad_rows_across_batch_boundaries(spoiled, capsys):
    """Every pass reads the same batches; the bad rows keep their file rows; a second pass
    reads exactly the positions the first one kept."""
    whole = load_dataset(spoiled, keep_row_index=True, quiet=True)
    with DatasetReader(spoiled, batch_rows=BATCH) as reader:
        batches = list(reader.batches())
        assert [b.start for b in batches] == list(range(0, 4000, BATCH))
        assert sorted(b.row for b in reader.bad_rows) == list(BAD)
        assert reader.n_bad == len(BAD) and reader.kept == len(whole)
        np.testing.assert_array_equal(np.concatenate([b.rows() for b in batches]),
                                      whole.row_index)
        np.testing.assert_array_equal(np.concatenate([b.positions for b in batches]),
                                      whole.positions)
        kept = np.array([0, 247, 248, 249, 500, len(whole) - 1])
        np.testing.assert_array_equal(reader.file_rows(kept), whole.row_index[kept])
        np.testing.assert_array_equal(reader.positions(kept), whole.positions[kept])
        assert len(list(reader.batches())) == len(batches)   # a second pass, reported once
    err = capsys.readouterr().err
    assert err.count(f"skipped {len(BAD)} bad row(s) of 4,000") == 1
    for row in BAD[:5]:
        assert f"row {row}: " in err


def test_a_streamed_run_reports_bad_rows_like_the_loader(tmp_path, small_batches, spoiled,
                                                         capsys):
    raw = _raw([spoiled])
    raw["data"]["policy"] = "strict"
    (tmp_path / "out").mkdir()
    with pytest.raises(DatasetError) as streamed:
        Run(validate(raw, "x"), tmp_path / "out").run()
    with pytest.raises(DatasetError) as loaded:
        load_dataset(spoiled, "strict", with_game=True)
    assert str(streamed.value) == str(loaded.value)
    assert f"{len(BAD)} bad row(s) of 4,000 (policy strict" in str(streamed.value)
    assert "row 249: " in str(streamed.value) and "row 250: " in str(streamed.value)


def test_a_file_that_changes_between_passes_is_an_error(spoiled):
    with DatasetReader(SAMPLES / "tiny.parquet") as reader:
        list(reader.batches())
        reader.pf.close()
        reader.pf = pq.ParquetFile(spoiled)   # what a file rewritten between passes reads
        with pytest.raises(DatasetError, match=r"changed while it was read \(3,993 valid rows "
                                               r"now, 4,000 before\)"):
            list(reader.batches())
        with pytest.raises(DatasetError, match=r"row 0: changed since it was read"):
            reader.positions(np.array([0, 5]))


class _Growth(Observer):
    """Memory traced (numpy's arrays included) from the start to the end of loading (a replay
    run's recording included; not the specialised player's compilation, which follows)."""

    def load_start(self, names):
        self.start = tracemalloc.get_traced_memory()[0]

    def load_end(self, n_positions, seconds):
        # what is held, not garbage awaiting the collector (Numba's compiling in the window
        # leaves megabytes of it, more or less by what the cache lacked)
        gc.collect()
        self.growth = tracemalloc.get_traced_memory()[0] - self.start


@pytest.mark.parametrize("mode", ["replay", "eager"])
def test_a_replay_run_does_not_keep_the_positions(tmp_path, monkeypatch, mode):
    """Once loaded, a replay run holds its store and a few numbers per position (results, the
    training rows), far less than the 72 bytes of a position; an eager run (which keeps the
    positions) shows what the test would see if it kept them."""
    stores = []
    workers = loop.Workers
    monkeypatch.setattr(loop, "Workers", lambda source, *a, **kw: stores.append(
        getattr(source, "store", None)) or workers(source, *a, **kw))
    raw = _raw(["selfplay-std"])
    raw["data"]["validation_fraction"] = 0.0
    raw["training"].update(epochs=1, batch_size=65536, micro_batch_size=1024, mode=mode)
    (tmp_path / "out").mkdir()
    growth = _Growth()
    run = Run(validate(raw, "x"), tmp_path / "out", observer=growth)
    tracemalloc.start()
    try:
        run.run()
    finally:
        tracemalloc.stop()
    n = 274_281
    per_position = (growth.growth - (store_nbytes(stores[0]) if stores[0] else 0)) / n
    if mode == "replay":
        assert per_position < 50, per_position
    else:
        assert per_position > 72, per_position


def test_a_blocks_store_is_cached_under_its_order(tmp_path, monkeypatch):
    """A streamed blocks run's cached store is keyed by its order too: another shuffle seed
    records (and keeps) its own store, the same seed loads the one kept, bitwise."""
    cache = tmp_path / "cache"
    digests = []
    for seed in (1, 2, 1):
        raw = _raw([SAMPLES / "tiny.parquet"])
        raw["training"].update(shuffle="blocks", shuffle_block=64, shuffle_seed=seed, epochs=1,
                               store_cache=str(cache))
        _, store, _ = _run(tmp_path, f"seed{seed}-{len(digests)}", raw, monkeypatch, False)
        digests.append(store_digest(store))
        assert len(list(cache.glob("store-*.npz"))) == min(len(digests), 2)
    assert digests[0] == digests[2] != digests[1]
