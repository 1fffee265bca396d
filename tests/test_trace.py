"""Trace datasets (tuner/data/trace.py) and the trace evaluation (tuner/evals/trace.py): a trace
written from `clockwork`'s own features (examples/write_trace.py) trains to bitwise the
parameters `clockwork` trains to; bad trace rows are reported with file row and field."""
from __future__ import annotations

import functools
import importlib.util
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tuner.train.stream as stream
from tuner.data import DatasetError
from tuner.data.loader import DatasetReader
from tuner.evals import get_evaluation
from tuner.evals.export import export
from tuner.evals.generic import continuous
from tuner.train.config import ConfigError, validate
from tuner.train.loop import Run

ROOT = Path(__file__).resolve().parents[1]


def _writer():
    spec = importlib.util.spec_from_file_location("write_trace", ROOT / "examples" /
                                                  "write_trace.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def trace(tmp_path_factory) -> Path:
    """The trace of the shipped `tiny` sample written by examples/write_trace.py."""
    out = tmp_path_factory.mktemp("trace") / "tiny-trace.parquet"
    assert _writer().write_trace("tiny", out) == 4000
    return out


def _train(tmp_path, name: str, evaluation: str, data: str, k="fit", **training) -> Run:
    raw = {"data": {"train": [data], "validation_fraction": 0.2},
           "evaluation": {"name": evaluation, "init": "default"},
           "loss": {"k": k}, "optimizer": {"lr": 0.5},
           "training": {"epochs": 3, "batch_size": 512, "micro_batch_size": 100,
                        "threads": 2, **training}}
    cfg = validate(raw, str(tmp_path / "x.toml"))
    out = tmp_path / name
    out.mkdir()
    run = Run(cfg, out, log=lambda line: None)
    run.run()
    return run


@pytest.mark.parametrize("shuffle", ["positions", "blocks"])
def test_trace_of_clockwork_trains_to_the_same_bits(trace, tmp_path, monkeypatch, shuffle):
    """Under either shuffle: a blocks run streams the trace rows into its store's order as it
    streams `clockwork`'s positions."""
    native = _train(tmp_path, "native", "clockwork", "tiny", shuffle=shuffle, shuffle_block=64)
    # the trace read in batches of 250 rows: micro-batches of 100 straddle them
    monkeypatch.setattr(stream, "DatasetReader", functools.partial(DatasetReader,
                                                                   batch_rows=250))
    traced = _train(tmp_path, "traced", str(trace.with_suffix(".json")), str(trace),
                    shuffle=shuffle, shuffle_block=64)
    assert traced.evaluation.trace is not None
    assert traced.k == native.k  # fitted to the same evaluations
    assert np.any(native.theta != native.registry.defaults.reshape(-1))  # it trained
    assert native.theta.tobytes() == traced.theta.tobytes()
    assert native.best_theta.tobytes() == traced.best_theta.tobytes()
    for key in ("train_loss", "val_loss"):
        assert native.history[key] == traced.history[key]
    # the generic C++ array form of the tuned trace parameters
    text = export(traced.registry, traced.params, "cpp", None, cpp_style="array",
                  name="tiny-trace")
    assert "PAWN_MAT" in text


def _spoil(trace: Path, tmp_path: Path, **columns) -> Path:
    t = pq.read_table(trace)
    for name, values in columns.items():
        t = t.set_column(t.schema.get_field_index(name), name, values(t.column(name)))
    out = tmp_path / "bad.parquet"
    pq.write_table(t, out)
    return out


def _set(column, row: int, value, type_=None):
    items = column.to_pylist()
    items[row] = value
    return pa.array(items, type_ or column.type)


@pytest.mark.parametrize("column, row, value, expected", [
    ("phase", 7, 25, "row 7: phase 25 outside 0..24"),
    ("result", 3, 0.25, "row 3: bad result 0.25"),
    ("terms", 11, [{"index": 541, "count": 1}], "row 11: terms[0].index 541 outside 0..540"),
    ("terms", 12, [{"index": 0, "count": 1}, {"index": 2, "count": None}],
     "row 12: terms[1].count is null"),
    ("terms", 13, None, "row 13: terms is null"),
])
def test_bad_rows_are_named(trace, tmp_path, column, row, value, expected):
    bad = _spoil(trace, tmp_path, **{column: lambda c: _set(c, row, value)})
    layout = get_evaluation(str(trace.with_suffix(".json"))).trace
    with DatasetReader(str(bad), "strict", trace=layout) as reader:
        with pytest.raises(DatasetError, match="bad.parquet: 1 bad row") as e:
            list(reader.batches())
    assert expected in str(e.value)


def test_kinds_are_not_mixed(trace):
    layout = get_evaluation(str(trace.with_suffix(".json"))).trace
    with pytest.raises(DatasetError, match="is a trace"):
        DatasetReader(str(trace))
    with pytest.raises(DatasetError, match="holds no trace"):
        DatasetReader("tiny", trace=layout)


def _small_trace(tmp_path, rows: list, phase_max=4, **meta) -> Path:
    """A trace of two parameters A, B[2] (3 pairs) with `rows` (result, phase, scale, terms)."""
    params = {"phase_max": phase_max, **meta, "params": [
        {"name": "A", "shape": [], "offset": 0, "values": [[10.0, 20.0]]},
        {"name": "B", "shape": [2], "offset": 1, "values": [[1.5, -3.0], [0.25, 8.0]]}]}
    if phase_max is None:
        del params["phase_max"]
    (tmp_path / "small.json").write_text(json.dumps(params))
    terms_type = pa.list_(pa.struct([("index", pa.int32()), ("count", pa.int32())]))
    table = pa.table({"result": pa.array([r[0] for r in rows], pa.float64()),
                      "phase": pa.array([r[1] for r in rows], pa.int32()),
                      "scale": pa.array([r[2] for r in rows], pa.float64()),
                      "terms": pa.array([[{"index": i, "count": c} for i, c in r[3]]
                                         for r in rows], terms_type)})
    pq.write_table(table, tmp_path / "small.parquet")
    return tmp_path / "small.parquet"


def test_phase_scale_and_merged_terms(tmp_path):
    path = _small_trace(tmp_path, [(1.0, 4, 1.0, [(0, 1)]),
                                   (0.5, 1, 0.5, [(1, 2), (2, -1), (1, 1), (2, 1)]),
                                   (0.0, 0, 0.25, [])])
    ev = get_evaluation(str(path.with_suffix(".json")))
    with DatasetReader(str(path), trace=ev.trace) as reader:
        rows = next(reader.batches()).positions
    got = continuous(ev, rows, np.array(ev.registry.defaults), np.zeros(0))
    # row 1: B[0] * 3 (merged), B[1] * 0 (dropped); eg scaled by 0.5; a = 1/4
    mg, eg = 3 * 1.5, 3 * -3.0 * 0.5
    assert got.tolist() == [10.0, 0.25 * mg + 0.75 * eg, 0.0]


def test_parameter_file_needs_phase_max(tmp_path):
    path = _small_trace(tmp_path, [(1.0, 0, 1.0, [])], phase_max=None)
    with pytest.raises(ValueError, match='needs "phase_max"'):
        get_evaluation(str(path.with_suffix(".json")))


def test_scale_out_of_range_is_named(tmp_path):
    path = _small_trace(tmp_path, [(1.0, 0, 1.0, []), (1.0, 0, 9.0, [])])
    ev = get_evaluation(str(path.with_suffix(".json")))
    with DatasetReader(str(path), "strict", trace=ev.trace) as reader:
        with pytest.raises(DatasetError, match="row 1: scale 9.0 outside 0..4"):
            list(reader.batches())


def test_eager_mode_is_refused(tmp_path):
    path = _small_trace(tmp_path, [(1.0, 0, 1.0, [])])
    cfg = validate({"data": {"train": [str(path)]},
                    "evaluation": {"name": str(path.with_suffix(".json"))},
                    "training": {"mode": "eager"}}, str(tmp_path / "x.toml"))
    with pytest.raises(ConfigError, match="trains in replay mode"):
        Run(cfg, tmp_path / "out")


def test_feature_trace_is_clockworks_counts():
    from tuner.data import load_dataset
    from tuner.evals.clockwork import feature_counts, feature_trace

    positions = load_dataset("tiny", quiet=True).positions[:300]
    start, index, count, phase = feature_trace(positions, terms_per_position=1)  # grown
    counts, phases = feature_counts(positions)
    dense = np.zeros_like(counts)
    for i in range(len(positions)):
        dense[i, index[start[i]:start[i + 1]]] = count[start[i]:start[i + 1]]
    assert np.array_equal(dense, counts) and np.array_equal(phase, phases)
    assert np.all(count != 0) and start[-1] > 300


def test_positions_cut_and_joined_digest_alike(trace):
    from tuner.data.trace import concat_positions, position_count, take_positions
    from tuner.train.stream import DataDigest

    layout = get_evaluation(str(trace.with_suffix(".json"))).trace
    with DatasetReader(str(trace), trace=layout) as reader:
        rows = next(reader.batches()).positions
    n = position_count(rows)
    parts = [take_positions(rows, np.arange(0, 1234)), take_positions(rows, np.arange(1234, n))]
    whole, pieces = DataDigest(), DataDigest()
    whole.update(rows, np.zeros(n), None)
    for p in parts:
        pieces.update(p, np.zeros(position_count(p)), None)
    assert whole.digest() == pieces.digest()
    joined = concat_positions(parts)
    assert all(np.array_equal(a, b) for a, b in zip(joined, rows))
    odd = take_positions(rows, np.arange(1, n, 2))
    assert np.array_equal(odd.index[odd.start[0]:odd.start[1]],
                          rows.index[rows.start[1]:rows.start[2]])


def test_eval_command_refuses_a_trace_evaluation(trace):
    from click.testing import CliRunner

    from tuner.cli import main

    result = CliRunner().invoke(main, ["eval", "-e", str(trace.with_suffix(".json")),
                                       "8/3k4/8/1PP3p1/6P1/p4K2/R7/7r w - - 0 45"])
    assert result.exit_code == 1
    assert "is the evaluation of a trace's rows" in result.output
    assert "Traceback" not in result.output


def test_a_store_cache_is_keyed_by_the_trace_parameter_file(trace, tmp_path):
    """Changing the parameter file's phase_max changes every position's phase blend: a store
    recorded with the old one must not be replayed (the rows are read as phase / phase_max, so
    the data digest in the key differs; K is fixed, so that only the parameter file does)."""
    import json

    params = json.loads(trace.with_suffix(".json").read_text())
    keys = []
    for phase_max in (24, 12):
        pfile = tmp_path / f"p{phase_max}" / "tiny-trace.json"
        pfile.parent.mkdir()
        pfile.write_text(json.dumps({**params, "phase_max": phase_max}))
        run = _train(tmp_path, f"run{phase_max}", str(pfile), str(trace), k=0.0025,
                     store_cache=str(tmp_path / "cache"), epochs=1)
        keys.append(sorted(p.name for p in (tmp_path / "cache").glob("store-*.npz")))
    assert len(keys[0]) == 1 and len(keys[1]) == 2, keys  # the second run recorded its own
    assert run.evaluation.trace.phase_max == 12
