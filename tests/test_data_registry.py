"""Dataset registries: the lookup order (project, current directory, $TUNER_DATASETS, shipped),
names, checksums, expected user-converted files."""
from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from tuner.cli import main
from tuner.data import DatasetError, convert_files, load_dataset
from tuner.data.registry import (ENV_VAR, Origin, known_datasets, load_registry, resolve,
                                 search_path, sha256_file, verify_entry)
from tuner.shipped import PACKAGE_DIR, SAMPLES_REGISTRY, find_config

REPO = Path(__file__).resolve().parents[1]
DATASETS = REPO / "datasets"
SAMPLES = REPO / "tuner" / "samples"
SHIPPED = {"selfplay-std": 274_281, "selfplay-dfrc": 116_687, "tiny": 4_000}
USER = ["v2.1", "v2.2", "v3", "dfrcv0", "dfrcv1",          # cde2ced recipe
        "v5_25knpm", "v4_8knpm", "v4_16knpm", "v4.1_8knpm", "v4.1_16knpm", "dfrcv2"]  # 10d79e6


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def test_shipped_registry_is_package_data(no_env):
    assert SAMPLES_REGISTRY == PACKAGE_DIR / "samples" / "registry.toml"
    assert SAMPLES_REGISTRY.resolve() == SAMPLES / "registry.toml"  # this checkout's package
    reg = load_registry(SAMPLES_REGISTRY)
    assert set(reg) == set(SHIPPED)
    for name, rows in SHIPPED.items():
        e = reg[name]
        assert e.rows == rows and e.sha256 and e.path == SAMPLES / f"{name}.parquet"
        verify_entry(e)
        assert pq.ParquetFile(e.path).metadata.num_rows == rows


def test_repository_registry_lists_the_user_sets(no_env, monkeypatch):
    monkeypatch.chdir(REPO)
    reg = load_registry(DATASETS / "registry.toml")
    assert set(reg) == set(USER)
    for name in USER:
        assert reg[name].sha256 is None and reg[name].path == DATASETS / f"{name}.parquet"
    known = known_datasets()  # from the repository's root: its registry, then the shipped one
    assert set(known) == set(USER) | set(SHIPPED)
    assert [s.origin for s in search_path()] == [Origin.CURRENT, Origin.ENV, Origin.SHIPPED]


def test_search_path_never_points_next_to_the_package(no_env, tmp_path, monkeypatch):
    """The bug of an installed copy: a registry looked for in the parent of the package."""
    monkeypatch.chdir(tmp_path)
    paths = [s.path for s in search_path(find_config("default"))]
    assert paths == [tmp_path / "datasets" / "registry.toml", None, SAMPLES_REGISTRY]
    assert PACKAGE_DIR.parent / "datasets" / "registry.toml" not in paths


@pytest.mark.parametrize("name", USER)
def test_missing_user_set_says_how_to_create_it(tmp_path, monkeypatch, name):
    # A copy of the repository's registry in an empty folder, found through $TUNER_DATASETS
    # from a folder without a registry: the user sets are missing there even on a machine
    # where they were converted.
    shutil.copy(DATASETS / "registry.toml", tmp_path / "registry.toml")
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(DatasetError) as e:
        load_dataset(name)
    msg = str(e.value)
    assert f"dataset '{name}'" in msg and "does not exist; create it with:" in msg
    assert f"tuner convert path/to/{name}.txt -o {tmp_path / name}.parquet" in msg, msg


def test_missing_user_set_command_is_relative_below_the_working_directory(no_env, monkeypatch):
    # from the repository root: the command names datasets/NAME.parquet
    monkeypatch.chdir(REPO)
    name = next((n for n in USER if not (DATASETS / f"{n}.parquet").exists()), None)
    assert name is not None, "every user set was converted here; remove one to run this test"
    with pytest.raises(DatasetError) as e:
        load_dataset(name)
    assert f"tuner convert path/to/{name}.txt -o datasets/{name}.parquet" in str(e.value)


def make_registry(tmp: Path, sha: str | None = None, rows: int | None = 4000,
                  extra: str = "") -> Path:
    shutil.copy(SAMPLES / "tiny.parquet", tmp / "t.parquet")
    lines = ['[datasets.mine]', 'file = "t.parquet"']
    if rows is not None:
        lines.append(f"rows = {rows}")
    if sha is not None:
        lines.append(f'sha256 = "{sha}"')
    (tmp / "registry.toml").write_text("\n".join(lines) + "\n" + extra)
    return tmp / "registry.toml"


def test_env_var_directory_and_file(tmp_path, monkeypatch):
    make_registry(tmp_path, sha=sha256_file(SAMPLES / "tiny.parquet"))
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert len(load_dataset("mine")) == 4000
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "registry.toml"))
    assert len(load_dataset("mine")) == 4000
    assert known_datasets()["tiny"].path == SAMPLES / "tiny.parquet"  # the shipped sets stay
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
    make_registry(tmp_path, sha=sha256_file(SAMPLES / "tiny.parquet"))
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
    with pytest.raises(DatasetError) as e:
        load_dataset("other")
    assert str(e.value) == (
        f"other: no such file, and not a registered dataset name (searched: "
        f"datasets/registry.toml (current directory); registry.toml ($TUNER_DATASETS); "
        f"{SAMPLES_REGISTRY} (shipped with tuner); registered: mine, "
        f"selfplay-dfrc, selfplay-std, tiny)")


def test_tiny_txt_converts_to_shipped_tiny(tmp_path):
    """The shipped text and Parquet forms of tiny hold the same rows."""
    s = convert_files([SAMPLES / "tiny.txt"], tmp_path / "t.parquet")
    assert s.rows == 4000 and s.n_bad == 0
    a, b = load_dataset(tmp_path / "t.parquet"), load_dataset(SAMPLES / "tiny.parquet")
    np.testing.assert_array_equal(a.positions, b.positions)
    np.testing.assert_array_equal(a.results, b.results)
    assert pq.read_table(tmp_path / "t.parquet").column("fen").equals(
        pq.read_table(SAMPLES / "tiny.parquet").column("fen"))


# -- the lookup order ---------------------------------------------------------------------------

def registry_of(folder: Path, name: str, file: str) -> Path:
    """A registry in ``folder`` naming ``name`` -> ``file`` (relative to it), with a copy of
    tiny there."""
    folder.mkdir(parents=True, exist_ok=True)
    target = (folder / file).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(SAMPLES / "tiny.parquet", target)
    (folder / "registry.toml").write_text(f'[datasets.{name}]\nfile = "{file}"\n')
    return target


@pytest.fixture
def project(tmp_path, monkeypatch, no_env):
    """proj/configs/c.toml with proj/datasets/registry.toml; a working directory with a
    registry of its own naming the same set; $TUNER_DATASETS with a third."""
    config = tmp_path / "proj" / "configs" / "c.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[data]\ntrain = ["mine"]\n')
    files = {"project": registry_of(tmp_path / "proj" / "datasets", "mine", "../data/p.parquet"),
             "cwd": registry_of(tmp_path / "cwd" / "datasets", "mine", "c.parquet"),
             "env": registry_of(tmp_path / "env", "mine", "e.parquet")}
    monkeypatch.chdir(tmp_path / "cwd")
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "env"))
    return config, files


def test_project_registry_of_the_config_comes_first(project):
    config, files = project
    # found from a parent of the config's folder; paths relative to the registry file
    assert resolve("mine", config=config).path == files["project"]
    assert files["project"] == config.parents[1] / "data" / "p.parquet"
    assert [s.origin for s in search_path(config)] == [Origin.PROJECT, Origin.ENV,
                                                       Origin.SHIPPED]


def test_without_a_project_the_working_directory_then_the_env_var(project, tmp_path,
                                                                  monkeypatch):
    config, files = project
    loose = tmp_path / "loose.toml"  # no datasets/registry.toml above it
    loose.write_text(config.read_text())
    assert resolve("mine", config=loose).path == files["cwd"]
    assert resolve("mine").path == files["cwd"]                      # the command line
    assert resolve("mine", config=find_config("default")).path == files["cwd"]  # shipped
    monkeypatch.chdir(tmp_path)                                      # no registry here
    assert resolve("mine").path == files["env"]
    assert resolve("tiny").path == SAMPLES / "tiny.parquet"          # the shipped sets last
    monkeypatch.delenv(ENV_VAR)
    with pytest.raises(DatasetError, match="mine: no such file, and not a registered"):
        resolve("mine")


def test_earlier_registries_shadow_the_shipped_sets(project, tmp_path):
    config, files = project
    (tmp_path / "env" / "registry.toml").write_text('[datasets.tiny]\nfile = "e.parquet"\n')
    assert resolve("tiny").path == files["env"]
    r = CliRunner().invoke(main, ["data", "list"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines[1:4] == [
        "  1. datasets/registry.toml (current directory): 1 datasets",
        f"  2. {tmp_path / 'env' / 'registry.toml'} ($TUNER_DATASETS): 1 datasets",
        f"  3. {SAMPLES_REGISTRY} (shipped with tuner): 3 datasets"]
    tiny = [ln for ln in lines if ln.strip().startswith("tiny ")]
    assert tiny[0].endswith("present (no checksum)") and tiny[1].endswith("shadowed by registry 2")
    r = CliRunner().invoke(main, ["data", "list", "--config", str(config)])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[1] == (f"  1. {tmp_path / 'proj' / 'datasets' / 'registry.toml'}"
                                        f" (project of the configuration): 1 datasets")


def test_paths_are_files_relative_to_the_config(project, tmp_path):
    config, files = project
    (config.parent / "mine").write_bytes(b"")           # a file named like the set: the name wins
    assert resolve("mine", config=config).entry is not None
    assert resolve("../data/p.parquet", config=config).entry is None
    assert resolve("../data/p.parquet", config=config).path == config.parent / "../data/p.parquet"
    with pytest.raises(DatasetError, match=r"^p.parquet: no such file$"):
        resolve("p.parquet", config=config)             # relative to the config, not the cwd
    (config.parent / "q").write_bytes(b"")
    assert resolve("q", config=config).path == config.parent / "q"  # unregistered: the file


def test_env_var_naming_no_registry_is_reported_by_data_list(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    r = CliRunner().invoke(main, ["data", "list"])
    assert r.exit_code == 1
    assert r.stderr.strip() == (f"Error: {tmp_path / 'nowhere' / 'registry.toml'}: no dataset "
                                f"registry there (set by ${ENV_VAR})")
