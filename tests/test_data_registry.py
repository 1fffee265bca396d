"""datasets/registry.toml: names, checksums, expected user-converted files, TUNER_DATASETS."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tuner.data import DatasetError, convert_files, load_dataset
from tuner.data.registry import (ENV_VAR, load_registry, registry_path, resolve, sha256_file,
                                 verify_entry)

DATASETS = Path(__file__).resolve().parents[1] / "datasets"
SHIPPED = {"selfplay-std": 274_281, "selfplay-dfrc": 116_687, "tiny": 4_000}
USER = ["v2.1", "v2.2", "v3", "dfrcv0", "dfrcv1",          # cde2ced recipe
        "v5_25knpm", "v4_8knpm", "v4_16knpm", "v4.1_8knpm", "v4.1_16knpm", "dfrcv2"]  # 10d79e6


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def test_default_registry_location(no_env):
    assert registry_path() == DATASETS / "registry.toml"


def test_shipped_entries_verify(no_env):
    reg = load_registry()
    assert set(reg) == set(SHIPPED) | set(USER)
    for name, rows in SHIPPED.items():
        e = reg[name]
        assert e.rows == rows and e.sha256 and e.path == DATASETS / f"{name}.parquet"
        verify_entry(e)
        assert pq.ParquetFile(e.path).metadata.num_rows == rows
    for name in USER:
        assert reg[name].sha256 is None and reg[name].path == DATASETS / f"{name}.parquet"


@pytest.mark.parametrize("name", USER)
def test_missing_user_set_says_how_to_create_it(tmp_path, monkeypatch, name):
    # A copy of the shipped registry in an empty folder: the user sets are missing there even on
    # a machine where they were converted.
    shutil.copy(DATASETS / "registry.toml", tmp_path / "registry.toml")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(DatasetError) as e:
        load_dataset(name)
    msg = str(e.value)
    assert f"dataset '{name}'" in msg and "does not exist; create it with:" in msg
    assert f"tuner convert path/to/{name}.txt -o {tmp_path / name}.parquet" in msg, msg


def test_missing_user_set_command_is_relative_below_the_working_directory(no_env, monkeypatch):
    # pytest runs from the repository root: the command names datasets/NAME.parquet
    monkeypatch.chdir(DATASETS.parent)
    name = next((n for n in USER if not (DATASETS / f"{n}.parquet").exists()), None)
    assert name is not None, "every user set was converted here; remove one to run this test"
    with pytest.raises(DatasetError) as e:
        load_dataset(name)
    assert f"tuner convert path/to/{name}.txt -o datasets/{name}.parquet" in str(e.value)


def make_registry(tmp: Path, sha: str | None = None, rows: int | None = 4000,
                  extra: str = "") -> Path:
    shutil.copy(DATASETS / "tiny.parquet", tmp / "t.parquet")
    lines = ['[datasets.mine]', 'file = "t.parquet"']
    if rows is not None:
        lines.append(f"rows = {rows}")
    if sha is not None:
        lines.append(f'sha256 = "{sha}"')
    (tmp / "registry.toml").write_text("\n".join(lines) + "\n" + extra)
    return tmp / "registry.toml"


def test_env_var_directory_and_file(tmp_path, monkeypatch):
    make_registry(tmp_path, sha=sha256_file(DATASETS / "tiny.parquet"))
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert len(load_dataset("mine")) == 4000
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "registry.toml"))
    assert len(load_dataset("mine")) == 4000
    assert "tiny" not in load_registry()  # the env var replaces the default registry
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(DatasetError, match="no dataset registry there"):
        load_dataset("mine")


def test_checksum_mismatch(tmp_path, monkeypatch):
    wrong = "0" * 64
    make_registry(tmp_path, sha=wrong)
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    actual = sha256_file(tmp_path / "t.parquet")
    with pytest.raises(DatasetError) as e:
        load_dataset("mine")
    msg = str(e.value)
    assert "checksum mismatch" in msg and "t.parquet" in msg
    assert f"expected sha256 {wrong}" in msg and f"actual {actual}" in msg


def test_modified_shipped_file_is_caught(tmp_path, monkeypatch):
    make_registry(tmp_path, sha=sha256_file(DATASETS / "tiny.parquet"))
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    p = tmp_path / "t.parquet"
    b = bytearray(p.read_bytes())
    b[len(b) // 2] ^= 0x10
    p.write_bytes(bytes(b))
    with pytest.raises(DatasetError, match="checksum mismatch"):
        load_dataset("mine")


def test_row_count_mismatch(tmp_path, monkeypatch):
    make_registry(tmp_path, rows=4001)
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(DatasetError, match="registry expects 4,001 rows, the file has 4,000"):
        load_dataset("mine")


def test_bad_registry_file(tmp_path, monkeypatch):
    (tmp_path / "registry.toml").write_text("[datasets.x]\nfile = \n")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    with pytest.raises(DatasetError, match="cannot read the dataset registry"):
        load_dataset("x")
    (tmp_path / "registry.toml").write_text("[datasets.x]\nrows = 3\n")
    with pytest.raises(DatasetError, match="needs a 'file'"):
        load_dataset("x")


def test_name_then_path(tmp_path, monkeypatch):
    make_registry(tmp_path)
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").write_bytes(b"not parquet")  # a file named like the dataset
    assert resolve("mine").entry is not None           # the name wins
    with pytest.raises(DatasetError, match="not a Parquet file"):
        load_dataset("./mine")                         # a path is a path
    assert resolve("t.parquet").entry is None
    with pytest.raises(DatasetError, match=r"registered: mine\)"):
        load_dataset("other")


def test_tiny_txt_converts_to_shipped_tiny(tmp_path):
    """The shipped text and Parquet forms of tiny hold the same rows."""
    s = convert_files([DATASETS / "tiny.txt"], tmp_path / "t.parquet")
    assert s.rows == 4000 and s.n_bad == 0
    a, b = load_dataset(tmp_path / "t.parquet"), load_dataset(DATASETS / "tiny.parquet")
    np.testing.assert_array_equal(a.positions, b.positions)
    np.testing.assert_array_equal(a.results, b.results)
    assert pq.read_table(tmp_path / "t.parquet").column("fen").equals(
        pq.read_table(DATASETS / "tiny.parquet").column("fen"))
