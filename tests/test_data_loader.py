"""load_dataset: Arrow buffer handling, bad rows, schema errors, corrupted files, and agreement
with python-chess on which FENs are valid."""
from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chess_oracle import python_chess_flags
from tuner.chess.fen import parse_fen_array, parse_fen_list
from tuner.data import DatasetError, convert_files, load_dataset
from tuner.data.loader import DatasetReader

SAMPLES = Path(__file__).resolve().parents[1] / "tuner" / "samples"
TINY = SAMPLES / "tiny.parquet"


@pytest.fixture(scope="module")
def tiny_table():
    return pq.read_table(TINY)


def write(table: pa.Table, path: Path, **kw) -> Path:
    pq.write_table(table, path, **kw)
    return path


def test_tiny_by_name(tiny, tiny_table):
    assert len(tiny) == 4000 and tiny.n_bad == 0 and tiny.bad_rows == []
    assert tiny.positions.shape == (4000, 9) and tiny.positions.dtype == np.uint64
    assert tiny.results.dtype == np.float64 and tiny.score_cp.dtype == np.int32
    np.testing.assert_array_equal(tiny.results, tiny_table.column("result").to_numpy())
    np.testing.assert_array_equal(tiny.score_cp, tiny_table.column("score_cp").to_numpy())
    expected, status = parse_fen_list(tiny_table.column("fen").to_pylist())
    assert (status == 0).all()
    np.testing.assert_array_equal(tiny.positions, expected)
    assert tiny.nbytes == 4000 * (72 + 8 + 4)
    assert "tiny" in tiny.source


def test_path_equals_name(tiny):
    ds = load_dataset(TINY)
    np.testing.assert_array_equal(ds.positions, tiny.positions)


@pytest.mark.parametrize("fen_type", ["large_string", "string_view", "dictionary"])
def test_string_types(tmp_path, tiny_table, tiny, fen_type):
    fen = tiny_table.column("fen")
    if fen_type == "large_string":
        fen = fen.cast(pa.large_string())
    elif fen_type == "string_view":
        fen = fen.cast(pa.string_view())
    else:
        fen = fen.dictionary_encode()
    t = pa.table({"fen": fen, "result": tiny_table.column("result")})
    ds = load_dataset(write(t, tmp_path / "t.parquet"))
    np.testing.assert_array_equal(ds.positions, tiny.positions)
    assert ds.score_cp is None


def test_small_batches_and_row_groups(tmp_path, tiny_table, tiny):
    p = write(tiny_table, tmp_path / "rg.parquet", row_group_size=333)
    for batch in (1, 7, 1000, 100_000):
        ds = load_dataset(p, batch_rows=batch)
        np.testing.assert_array_equal(ds.positions, tiny.positions)
        np.testing.assert_array_equal(ds.results, tiny.results)


@pytest.mark.parametrize("large", [False, True])
def test_parse_fen_array_slices(tiny_table, tiny, large):
    fen = tiny_table.column("fen").combine_chunks()
    if large:
        fen = fen.cast(pa.large_string())
    for start, length in [(0, 10), (1, 1), (17, 300), (3999, 1), (5, 0)]:
        pos, status = parse_fen_array(fen.slice(start, length))
        assert len(pos) == length and (status == 0).all()
        np.testing.assert_array_equal(pos, tiny.positions[start:start + length])


def _bad_table():
    fens = ["rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"] * 10
    fens[2] = None
    fens[4] = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQ1BNR w KQkq - 0 1"  # no white king
    fens[9] = "not a fen"
    results = [1.0, 0.5, 0.0, None, 1.0, 0.25, 0.0, 1.0, float("nan"), 0.5]
    return pa.table({"fen": pa.array(fens, pa.string()),
                     "result": pa.array(results, pa.float64()),
                     "score_cp": pa.array(range(10), pa.int16())})


def test_bad_rows_skip(tmp_path, capsys):
    p = write(_bad_table(), tmp_path / "bad.parquet")
    ds = load_dataset(p, batch_rows=3, keep_row_index=True)
    bad = dict(ds.bad_rows)
    assert ds.n_bad == 6 and sorted(bad) == [2, 3, 4, 5, 8, 9]
    assert bad[2] == "fen is null"
    assert bad[3] == "result is null"
    assert "White has 0 kings" in bad[4] and bad[4].startswith("bad FEN: piece placement")
    assert "bad result 0.25" in bad[5]
    assert bad[8].startswith("bad result nan")
    assert "bad FEN" in bad[9]
    np.testing.assert_array_equal(ds.row_index, [0, 1, 6, 7])
    np.testing.assert_array_equal(ds.results, [1.0, 0.5, 0.0, 1.0])
    np.testing.assert_array_equal(ds.score_cp, [0, 1, 6, 7])
    err = capsys.readouterr().err
    assert "skipped 6 bad row(s) of 10" in err and "row 4: bad FEN" in err
    load_dataset(p, quiet=True)
    assert capsys.readouterr().err == ""


def test_read_rows_reads_only_the_row_groups_of_the_rows_asked_for(tmp_path, monkeypatch):
    table = pa.concat_tables([_bad_table()] * 3)  # 30 rows, 18 bad ones
    p = write(table, tmp_path / "rg.parquet", row_group_size=7)  # 5 row groups
    whole = load_dataset(p, quiet=True, keep_row_index=True)
    with DatasetReader(p, quiet=True, batch_rows=3) as reader:
        for _ in reader.batches():
            pass
        assert list(reader.bad_file_rows()) == [r for r in range(30) if r % 10 not in (0, 1, 6, 7)]
        kept = np.array([1, 2, 5, 9, 10])
        rows = reader.file_rows(kept)
        np.testing.assert_array_equal(rows, whole.row_index[kept])
        groups = []
        iter_batches = reader.pf.iter_batches
        monkeypatch.setattr(reader.pf, "iter_batches", lambda **kw: groups.append(
            kw["row_groups"]) or iter_batches(**kw))
        positions, results, scores = reader.read_rows(rows)
        assert groups == [[0], [1], [3]]  # rows 1 and 6, 11, 21 and 26: not groups 2 and 4
        np.testing.assert_array_equal(positions, whole.positions[kept])
        np.testing.assert_array_equal(results, whole.results[kept])
        np.testing.assert_array_equal(scores, whole.score_cp[kept])
        with pytest.raises(DatasetError, match=r"row 3: changed since it was read"):
            reader.read_rows(np.array([0, 3]))


ILLEGAL_ROWS = [  # (FEN, reason): each rule of tuner.chess.legality, reported per row
    ("4k3/8/8/8/8/8/8/4r1K1 b - - 0 1", "bad FEN: side to move: Black to move, but White's king on g1 is in check"),
    ("4k3/8/8/8/8/8/8/4K3 w KQ - 0 1", "bad FEN: castling: right 'K' names no White rook"),
    ("4k3/8/8/8/8/8/8/4K3 w - e6 0 1", "bad FEN: en passant: e6, but no Black pawn stands on e5"),
    ("4k3/8/8/8/8/1P6/PPPPPPPP/4K3 w - - 0 1", "bad FEN: piece placement: White has 9 pawns"),
]


def test_illegal_positions_are_bad_rows(tmp_path):
    good = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
    fens = [good] + [f for f, _ in ILLEGAL_ROWS] + [good]
    p = write(pa.table({"fen": pa.array(fens, pa.string()),
                        "result": pa.array([0.5] * len(fens), pa.float64())}), tmp_path / "i.parquet")
    ds = load_dataset(p, quiet=True, keep_row_index=True)
    np.testing.assert_array_equal(ds.row_index, [0, len(fens) - 1])
    bad = dict(ds.bad_rows)
    assert sorted(bad) == list(range(1, len(fens) - 1))
    for row, (_, reason) in enumerate(ILLEGAL_ROWS, start=1):
        assert bad[row].startswith(reason), (bad[row], reason)


def test_no_valid_rows(tmp_path):
    t = _bad_table()
    bad = write(pa.table({"fen": pa.array([None, "x"], pa.string()),
                          "result": pa.array([1.0, 0.5])}), tmp_path / "allbad.parquet")
    with pytest.raises(DatasetError, match=r"allbad\.parquet: no valid rows \(all 2 rows"):
        load_dataset(bad)
    empty = write(t.slice(0, 0), tmp_path / "empty.parquet")
    with pytest.raises(DatasetError, match=r"empty\.parquet: no valid rows \(the file is empty"):
        load_dataset(empty)


def test_bad_rows_strict(tmp_path):
    p = write(_bad_table(), tmp_path / "bad.parquet")
    with pytest.raises(DatasetError) as e:
        load_dataset(p, policy="strict")
    msg = str(e.value)
    assert str(p) in msg and "6 bad row(s) of 10" in msg and "row 2: fen is null" in msg
    with pytest.raises(ValueError, match="policy"):
        load_dataset(p, policy="lenient")


def test_bad_rows_list_is_capped(tmp_path, monkeypatch):
    import tuner.data.loader as loader
    monkeypatch.setattr(loader, "MAX_BAD_KEPT", 3)
    p = write(_bad_table(), tmp_path / "bad.parquet")
    ds = load_dataset(p, quiet=True)
    assert ds.n_bad == 6 and len(ds.bad_rows) == 3


def test_integer_columns_cast(tmp_path, tiny_table):
    n = tiny_table.num_rows
    base = {"fen": tiny_table.column("fen"), "result": tiny_table.column("result")}
    ok = pa.table({**base, "score_cp": pa.array(np.arange(n) - 2000, pa.int64()),
                   "game": pa.array(np.arange(n) % 7, pa.uint8()),
                   "ply": pa.array(np.arange(n), pa.int64())})
    ds = load_dataset(write(ok, tmp_path / "ok.parquet"), with_game=True)
    assert ds.score_cp.dtype == np.int32 and ds.score_cp[0] == -2000
    assert ds.game.dtype == np.int64 and ds.ply.dtype == np.int32 and ds.game[8] == 1
    big = pa.table({**base, "score_cp": pa.array(np.full(n, 2 ** 40), pa.int64())})
    with pytest.raises(DatasetError, match="score_cp.*do not fit int32"):
        load_dataset(write(big, tmp_path / "big.parquet"))
    f32 = pa.table({"fen": base["fen"], "result": base["result"].cast(pa.float32())})
    assert len(load_dataset(write(f32, tmp_path / "f32.parquet"))) == n


def test_all_null_scores_are_absent(tmp_path, tiny_table):
    t = pa.table({"fen": tiny_table.column("fen"), "result": tiny_table.column("result"),
                  "score_cp": pa.nulls(tiny_table.num_rows, pa.int32())})
    p = write(t, tmp_path / "n.parquet")
    assert load_dataset(p).score_cp is None
    with pytest.raises(DatasetError, match="no scores"):
        load_dataset(p, need_scores=True)


@pytest.mark.parametrize("columns,match", [
    ({"result": pa.array([1.0])}, "missing required column 'fen'"),
    ({"fen": pa.array(["x"])}, "missing required column 'result'"),
    ({"fen": pa.array([1]), "result": pa.array([1.0])}, "'fen' has type int64, expected string"),
    ({"fen": pa.array(["x"]), "result": pa.array(["w"])}, "'result' has type string"),
    ({"fen": pa.array(["x"]), "result": pa.array([1])}, "'result' has type int64"),
    ({"fen": pa.array(["x"]), "result": pa.array([1.0]), "score_cp": pa.array([1.5])},
     "'score_cp' has type double, expected an integer"),
    ({"fen": pa.array(["x"]), "result": pa.array([1.0]), "game": pa.array(["g"])},
     "'game' has type string"),
])
def test_wrong_schema(tmp_path, columns, match):
    p = write(pa.table(columns), tmp_path / "w.parquet")
    with pytest.raises(DatasetError, match="wrong schema") as e:
        load_dataset(p)
    assert str(p) in str(e.value)
    assert e.match(match)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(DatasetError, match="nope.parquet: no such file$"):
        load_dataset(tmp_path / "nope.parquet")
    with pytest.raises(DatasetError, match="is a directory"):
        load_dataset(tmp_path)


@pytest.mark.parametrize("content", [b"", b"PAR1", b"rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/"
                                     b"RNBQKBNR w KQkq - 0 1;w\n" * 10])
def test_not_parquet(tmp_path, content):
    p = tmp_path / "x.parquet"
    p.write_bytes(content)
    with pytest.raises(DatasetError, match="not a Parquet file, or corrupted") as e:
        load_dataset(p)
    assert str(p) in str(e.value)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """tiny converted by tuner convert (page checksums on)."""
    d = tmp_path_factory.mktemp("conv")
    convert_files([SAMPLES / "tiny.txt"], d / "c.parquet", row_group_rows=1000)
    return d / "c.parquet"


@pytest.mark.parametrize("source", ["shipped", "converted"])
def test_truncated(tmp_path, converted, source):
    raw = (TINY if source == "shipped" else converted).read_bytes()
    for cut in (len(raw) - 1, len(raw) - 8, len(raw) // 2, 100, 4):
        p = tmp_path / f"cut{cut}.parquet"
        p.write_bytes(raw[:cut])
        with pytest.raises(DatasetError, match="corrupted") as e:
            load_dataset(p)
        assert str(p) in str(e.value)


@pytest.mark.parametrize("source", ["shipped", "converted"])
def test_flipped_bytes_never_load_altered_data(tmp_path, converted, tiny, source):
    """Page checksums (the shipped files and the converter's output have them) make any flip
    in the data either an error or harmless."""
    raw = (TINY if source == "shipped" else converted).read_bytes()
    rng = random.Random(5)
    errors = 0
    for _ in range(60):
        b = bytearray(raw)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        p = tmp_path / "flip.parquet"
        p.write_bytes(bytes(b))
        try:
            ds = load_dataset(p, quiet=True)
        except DatasetError as e:
            assert str(p) in str(e)
            errors += 1
            continue
        assert len(ds) == 4000 and ds.n_bad == 0
        np.testing.assert_array_equal(ds.positions, tiny.positions)
        np.testing.assert_array_equal(ds.results, tiny.results)
    assert errors > 30


# ---- agreement with python-chess ------------------------------------------------------------

SEEDS = [f.split(";")[0] for f in (SAMPLES / "tiny.txt").read_text().splitlines()[::97]]


def python_chess_valid(fen: str) -> bool:
    """python-chess's verdict for the rules tuner.chess implements (see chess_oracle)."""
    try:
        return python_chess_flags(fen) == 0
    except ValueError:
        return False


@st.composite
def mutated_fen(draw):
    placement, stm, *_ = draw(st.sampled_from(SEEDS)).split()
    chars = list(placement)
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["replace", "delete", "insert"]))
        k = draw(st.integers(0, max(len(chars) - 1, 0)))
        c = draw(st.sampled_from(list("pnbrqkPNBRQK12345678/x ")))
        if op == "replace" and chars:
            chars[k] = c
        elif op == "delete" and chars:
            del chars[k]
        else:
            chars.insert(k, c)
    return f"{''.join(chars)} {stm} - - 0 1"


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fens=st.lists(mutated_fen(), min_size=1, max_size=40))
def test_validity_agrees_with_python_chess(tmp_path_factory, fens):
    verdicts = [python_chess_valid(f) for f in fens]
    d = tmp_path_factory.mktemp("agree")
    # loader
    t = pa.table({"fen": pa.array(fens, pa.string()),
                  "result": pa.array([0.5] * len(fens), pa.float64())})
    pq.write_table(t, d / "a.parquet")
    if any(verdicts):
        ds = load_dataset(d / "a.parquet", quiet=True, keep_row_index=True)
        assert list(ds.row_index) == [k for k, v in enumerate(verdicts) if v], fens
    else:
        with pytest.raises(DatasetError, match="no valid rows"):
            load_dataset(d / "a.parquet", quiet=True)
    # converter
    (d / "a.txt").write_text("".join(f"{f};d\n" for f in fens))
    if any(verdicts):
        s = convert_files([d / "a.txt"], d / "c.parquet")
        assert s.rows == sum(verdicts)
        bad_lines = [int(b.split(":")[1]) for b in s.bad]
        assert bad_lines == [k + 1 for k, v in enumerate(verdicts) if not v]
    else:
        with pytest.raises(DatasetError, match="no valid positions"):
            convert_files([d / "a.txt"], d / "c.parquet")
