"""The cache folders (tuner/cachedir.py): Numba's machine code, the generated players and the
replay stores are kept only where nobody else could have written, and what killed processes left
is cleaned up.

* Numba on an unusable cache home (a subprocess on a copy of the package): an edit to a function
  that another module's cached function calls takes effect, nothing is cached in the package's
  ``__pycache__``, a warning names the folder, and the private fallback folder is removed at exit;
  a killed process's fallback folder is removed by the next import.
* Players: folders 0700 and files 0600 under umask 000, so another uid (a forked child that
  drops root) can plant nothing; a folder owned by another uid or writable by its group is
  refused with a message naming it; a planted ``__pycache__`` file never runs; a planted symlink
  at the temporary name the old writer used is not followed; a file that is not UTF-8 is
  rewritten.
* Stores: the temporary files of killed writes are removed, the cache keeps the newest
  ``store_cache_keep`` stores, and a folder of another uid is not used.
"""
from __future__ import annotations

import builtins
import hashlib
import importlib.util
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from importlib._bootstrap_external import _code_to_timestamp_pyc
from pathlib import Path

import pytest

import tuner
from tuner import cachedir
from tuner.tape import Graph
from tuner.tape import specialise as sp
from tuner.tape.player import freeze_tape
from tuner.evals import get_evaluation
from tuner.tape.player import Store
from tuner.train.config import validate
from tuner.train.loop import Run
from tuner.train.record import record_store

#: The package under test (copied by the tests that edit it).
PACKAGE = Path(tuner.__file__).resolve().parent
#: A uid that owns nothing here (``nobody``).
OTHER_UID = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing owners and uids needs root")


def _tree_modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in root.rglob("*")}


@pytest.fixture
def open_tmp():
    """A folder (mode 755) that another uid can enter, unlike pytest's tmp_path (0700)."""
    path = Path(tempfile.mkdtemp(prefix="cachetest-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.fixture(scope="module")
def small_store():
    """A store of one template (``2 * x``): little to compile, and any store's player is written
    to the players' folder the same way."""
    g = Graph(1, 0, records=16)
    return freeze_tape(g.tape, (g.value_param(0) * 2.0).index)


@pytest.fixture
def player(small_store, monkeypatch):
    """(source, module name) of a player and a function that specialises it afresh (not the
    module imported already) with the players folder at the given path."""
    store = small_store
    source = sp.player_source(store)
    name = "tuner_player_" + hashlib.blake2b(source.encode(), digest_size=10).hexdigest()

    def fresh(folder: Path):
        monkeypatch.setattr(sp, "_folder", lambda: folder)
        monkeypatch.delitem(sys.modules, name, raising=False)
        return sp.specialise(store)
    return source, name, fresh


# -- Numba ---------------------------------------------------------------------------------------

#: Prints the phase of a position with two knights (2), compiled by `phase` (tuner/chess/position.py)
#: from `popcount` (tuner/chess/bitboard.py, another file), and where Numba's cache is.
PHASE_SCRIPT = """
import os, numpy as np, tuner
from tuner.chess.position import POSITION_WORDS, W_KNIGHT, phase
pos = np.zeros(POSITION_WORDS, np.uint64)
pos[W_KNIGHT] = 0b11
print(phase(pos), os.environ["NUMBA_CACHE_DIR"])
"""
POPCOUNT = "    return np.int64(_ctpop64(U64(x)))\n"


def _package_copy(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    shutil.copytree(PACKAGE, root / "tuner",
                    ignore=shutil.ignore_patterns("__pycache__", "samples", "configs"))
    return root


def _env(root: Path, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    blocker = tmp_path / "a-file"  # a cache home that even root cannot create folders in
    blocker.write_text("not a folder")
    (tmp_path / "tmp").mkdir()
    env.update(PYTHONPATH=str(root), XDG_CACHE_HOME=str(blocker / "cache"),
               TMPDIR=str(tmp_path / "tmp"))
    return env


def test_an_unusable_cache_home_never_serves_old_machine_code(tmp_path):
    root = _package_copy(tmp_path)
    env = _env(root, tmp_path)
    got, folders, warnings = [], [], []
    for edit in (False, True):
        if edit:  # popcount doubled: phase() must see it, although its own file is unchanged
            bitboard = root / "tuner" / "chess" / "bitboard.py"
            text = bitboard.read_text()
            assert text.count(POPCOUNT) == 1
            bitboard.write_text(text.replace(POPCOUNT, POPCOUNT.replace("return ", "return 2 * ")))
        r = subprocess.run([sys.executable, "-c", PHASE_SCRIPT], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        value, folder = r.stdout.split()
        got.append(int(value))
        folders.append(Path(folder).parent)
        warnings.append(f"tuner: {tmp_path / 'a-file' / 'cache'}" in r.stderr
                        and "this run only" in r.stderr)
    assert got == [2, 4]
    assert folders == [tmp_path / "tmp"] * 2 and warnings == [True, True]  # the private fallback
    cached = [p for p in root.rglob("*") if p.suffix in (".nbi", ".nbc")]
    assert cached == []
    assert list((tmp_path / "tmp").iterdir()) == []  # removed at exit


def test_a_killed_process_leaves_no_fallback_folder_behind(tmp_path):
    root = _package_copy(tmp_path)
    env = _env(root, tmp_path)
    tmp = tmp_path / "tmp"
    legacy_old, legacy_new = tmp / "tuner-players-old", tmp / "tuner-players-new"
    for p in (legacy_old, legacy_new):
        p.mkdir()
    os.utime(legacy_old, (time.time() - 2 * cachedir.LEGACY_AGE_S,) * 2)
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import os, time, tuner; print(os.environ['NUMBA_CACHE_DIR'], "
                               "flush=True); time.sleep(600)"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        folder = Path(sleeper.stdout.readline().strip())
    finally:
        sleeper.send_signal(signal.SIGKILL)
        sleeper.wait()
    assert folder.parent == tmp and folder.is_dir()  # left by the kill
    foreign = tmp / f"tuner-{sleeper.pid}-other"
    foreign.mkdir()
    if os.geteuid() == 0:
        os.chown(foreign, OTHER_UID, OTHER_UID)
    r = subprocess.run([sys.executable, "-c", "import tuner"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    left = sorted(p.name for p in tmp.iterdir())
    assert left == sorted([legacy_new.name] + ([foreign.name] if os.geteuid() == 0 else [])), left


#: Adds a function of the evaluations' layer to a package copy; it calls `popcount` (tuner/chess).
PROBE = """from numba import njit

from tuner.chess.bitboard import popcount
from tuner.jit import JIT


@njit(**JIT)
def probe(x):
    return popcount(x) + 100
"""
#: A user's evaluation module, outside the package, calling `popcount` too.
USER_MODULE = """from numba import njit

from tuner.chess.bitboard import popcount


@njit(cache=True)
def user(x):
    return popcount(x) + 1000
"""
#: A module generated into the tape layer's folder (as a specialised player is), run from there.
GENERATED = """from numba import njit

from tuner.jit import JIT


@njit(**JIT)
def generated(x):
    return x + 10000
"""
#: Calls each of them and prints (as JSON) the values and the functions Numba compiled.
LAYER_SCRIPT = f"""
import importlib.util, json, sys, numpy as np, tuner
sys.dont_write_bytecode = True  # gen.py runs from source, as a specialised player does
from numba.core import event
compiled = []
class Names(event.Listener):
    def on_start(self, ev):
        compiled.append(ev.data["dispatcher"].py_func.__name__)
    def on_end(self, ev):
        pass
from tuner.chess.bitboard import popcount
from tuner.evals.probe import probe
import user_eval
folder = tuner.cache_folder("tape") / "generated"
folder.mkdir(mode=0o700, exist_ok=True)
(folder / "gen.py").write_text({GENERATED!r})
spec = importlib.util.spec_from_file_location("gen", folder / "gen.py")
gen = sys.modules["gen"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gen)
x = np.uint64(3)
with event.install_listener("numba:compile", Names()):
    values = [int(popcount(x)), int(probe(x)), int(user_eval.user(x)), int(gen.generated(x))]
print(json.dumps({{"values": values, "compiled": sorted(set(compiled))}}))
"""


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def test_the_cache_is_keyed_per_layer(tmp_path):
    """An edit recompiles its own layer and those above, reuses the machine code of the layers
    below and never serves code compiled from other sources: a user's module (outside the
    package) is keyed by every source, a module generated into a layer's folder by that layer."""
    root = _package_copy(tmp_path)
    pkg = root / "tuner"
    (pkg / "evals" / "probe.py").write_text(PROBE)
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "user_eval.py").write_text(USER_MODULE)
    cache = tmp_path / "numba"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NUMBA_")}
    env.update(PYTHONPATH=os.pathsep.join([str(root), str(tmp_path / "user")]),
               NUMBA_CACHE_DIR=str(cache))
    cli = pkg / Path(importlib.util.find_spec("tuner.cli").origin).resolve().relative_to(PACKAGE)

    def run() -> tuple[list[int], list[str]]:
        r = subprocess.run([sys.executable, "-c", LAYER_SCRIPT], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr
        out = json.loads(r.stdout)
        return out["values"], out["compiled"]

    everything = ["generated", "popcount", "probe", "user"]
    assert run() == ([2, 102, 1002, 10003], everything)
    assert run() == ([2, 102, 1002, 10003], [])                     # all loaded
    _append(cli, "# a help string changed\n")                      # the top layer
    assert run() == ([2, 102, 1002, 10003], ["user"])
    _append(pkg / "evals" / "__init__.py", "# evaluations changed\n")
    assert run() == ([2, 102, 1002, 10003], ["probe", "user"])
    bitboard = pkg / "chess" / "bitboard.py"                        # popcount doubled
    text = bitboard.read_text()
    assert text.count(POPCOUNT) == 1
    bitboard.write_text(text.replace(POPCOUNT, POPCOUNT.replace("return ", "return 2 * ")))
    assert run() == ([4, 104, 1004, 10003], ["popcount", "probe", "user"])
    names = sorted(p.name.rsplit("-", 1)[0] for p in cache.iterdir())
    assert names == ["chess"] * 2 + ["cli"] * 4 + ["evals"] * 3 + ["tape"]
    assert [p.parent.parent.name.split("-")[0] for p in cache.rglob("gen.generated-*.nbi")] == ["tape"]
    assert {m for p, m in _tree_modes(cache).items() if (cache / p).is_dir()} == {0o700}


def test_older_versions_of_a_layer_are_removed(tmp_path):
    base = tmp_path / "numba"
    base.mkdir(mode=0o700)
    unlayered = base / "0123456789abcdef"  # a version before the cache was keyed per layer
    unlayered.mkdir()
    assert cachedir.remove_unlayered_versions(base) == [unlayered]
    now = time.time()
    for i, digest in enumerate(["a" * 16, "b" * 16, "c" * 16]):
        os.utime(cachedir.version_folder(base, "chess", digest, keep=2), (now - 100 + i,) * 2)
    other = cachedir.version_folder(base, "tape", "d" * 16, keep=2)
    assert sorted(p.name for p in base.iterdir()) == ["chess-" + "b" * 16, "chess-" + "c" * 16,
                                                      other.name]
    cachedir.version_folder(base, "chess", "b" * 16, keep=2)      # used: now the newest
    cachedir.version_folder(base, "chess", "e" * 16, keep=2)
    assert sorted(p.name for p in base.iterdir()) == ["chess-" + "b" * 16, "chess-" + "e" * 16,
                                                      other.name]


def test_layer_digests_cover_the_layers_below():
    """source_digest is the top layer's; every layer's digest differs from the one below; the
    layers of some files."""
    assert tuner.source_digest() == tuner.layer_digest(tuner.TOP)
    assert len({tuner.layer_digest(layer) for layer in tuner.LAYERS}) == len(tuner.LAYERS)
    assert [tuner.layer_of(PACKAGE / f) for f in ("jit.py", "tape/ops.py", "chess/fen.py",
                                                  "examples/kingsafety.py")] == \
        ["base", "tape", "chess", tuner.TOP]
    assert tuner.layer_of(Path(__file__)) is None
    with pytest.raises(ValueError, match="'nosuch': not a layer of the package"):
        tuner.layer_digest("nosuch")


# -- players -------------------------------------------------------------------------------------

@needs_root
def test_player_folders_are_private_whatever_the_umask(player, open_tmp):
    source, name, fresh = player
    players = open_tmp / "cache" / "players"
    old = os.umask(0)
    try:
        module = fresh(players)
    finally:
        os.umask(old)
    assert Path(module.__file__) == players / f"{name}.py"
    assert _tree_modes(open_tmp / "cache") == {"players": 0o700, f"players/{name}.py": 0o600}
    (open_tmp / "open").mkdir(mode=0o777)
    (open_tmp / "open").chmod(0o777)
    pid = os.fork()
    if pid == 0:  # another local user tries to plant a file in each folder
        code = 0
        try:
            os.setgid(OTHER_UID)
            os.setuid(OTHER_UID)
            for target, allowed in ((open_tmp / "open" / "x", True), (players / "x.py", False)):
                try:
                    target.write_text("planted")
                    code |= 0 if allowed else 1
                except PermissionError:
                    code |= 2 if allowed else 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0  # the open folder: yes; the players': no
    assert not (players / "x.py").exists() and (open_tmp / "open" / "x").exists()


@needs_root
@pytest.mark.parametrize("owner, mode, problem", [
    (OTHER_UID, 0o700, f"owned by uid {OTHER_UID}, not by this user (uid 0)"),
    (0, 0o770, "mode 770 lets its group or others write to it (`chmod go-w` it)"),
], ids=["another-owner", "group-writable"])
def test_a_players_folder_another_user_could_write_to_is_refused(player, tmp_path, capsys,
                                                                  owner, mode, problem):
    source, name, fresh = player
    players = tmp_path / "players"
    players.mkdir()
    planted = players / f"{name}.py"
    planted.write_text(source)
    os.chown(players, owner, owner)
    players.chmod(mode)
    module = fresh(players)
    assert Path(module.__file__).parent != players
    err = capsys.readouterr().err
    assert f"tuner: {players}: {problem}; not used as a cache" in err
    assert module.play.py_func.__name__ == "play"


@needs_root
def test_a_player_file_of_another_user_is_replaced(player, tmp_path):
    source, name, fresh = player
    players = tmp_path / "players"
    players.mkdir(mode=0o700)
    path = players / f"{name}.py"
    path.write_text(source)
    os.chown(path, OTHER_UID, OTHER_UID)
    module = fresh(players)
    assert Path(module.__file__) == path
    st = path.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600) and path.read_text() == source


def test_a_planted_bytecode_file_never_runs(player, tmp_path):
    source, name, fresh = player
    players = tmp_path / "players"
    path = Path(fresh(players).__file__)
    st = path.stat()
    planted = compile("import builtins\nbuiltins.PLANTED_PLAYER = True\nplay = None\n",
                      str(path), "exec")
    pyc = Path(importlib.util.cache_from_source(str(path)))
    pyc.parent.mkdir(exist_ok=True)
    pyc.write_bytes(_code_to_timestamp_pyc(planted, int(st.st_mtime), st.st_size))
    try:
        module = fresh(players)
        assert not hasattr(builtins, "PLANTED_PLAYER")
        assert module.play is not None and module.play.py_func.__name__ == "play"
    finally:
        if hasattr(builtins, "PLANTED_PLAYER"):
            del builtins.PLANTED_PLAYER


def test_a_planted_symlink_at_a_temporary_name_is_not_followed(player, tmp_path):
    source, name, fresh = player
    players = tmp_path / "players"
    players.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    # Where the writer before O_EXCL | O_NOFOLLOW temporaries put its file.
    (players / f".{name}.{os.getpid()}.tmp").symlink_to(victim)
    module = fresh(players)
    path = players / f"{name}.py"
    assert Path(module.__file__) == path and not path.is_symlink()
    assert path.read_text() == source and victim.read_text() == "precious"


def test_a_damaged_player_file_is_rewritten(player, tmp_path):
    source, name, fresh = player
    players = tmp_path / "players"
    players.mkdir(mode=0o700)
    path = players / f"{name}.py"
    path.write_bytes(b"\xff\xfe not UTF-8 \x80")
    module = fresh(players)
    assert Path(module.__file__) == path and path.read_text() == source
    assert module.play.py_func.__name__ == "play"


# -- the store cache -----------------------------------------------------------------------------

def _store_run(tmp_path: Path, cache: Path, **training) -> tuple[Run, list[str]]:
    raw = {"data": {"train": ["tiny"]}, "evaluation": {"name": "material"},
           "training": {"store_cache": str(cache), **training}}
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    lines: list[str] = []
    return Run(validate(raw, str(tmp_path / "x.toml")), out, log=lines.append), lines


#: Positions of the small stores below (real ones: a loaded store must pass `validate_store`).
STORE_N = 20


def _tiny_store(tiny, seed: int) -> Store:
    """A `material` store of `STORE_N` positions of `tiny` (different ones for each seed)."""
    rows = slice(seed * STORE_N, (seed + 1) * STORE_N)
    return record_store(get_evaluation("material"), tiny.positions[rows], tiny.results[rows],
                        0.0025, n_threads=1, micro=10)


def test_store_cache_temporaries_of_killed_writes_are_removed(tmp_path, tiny):
    cache = tmp_path / "cache"
    run, _ = _store_run(tmp_path, cache)
    run.keep_store(_tiny_store(tiny, 0), "a")
    left = cache / ".store-a.npz.k1ll3d.tmp"  # what a write killed before its rename leaves
    left.write_bytes(b"half a store")
    other = cache / ".notes.txt.k1ll3d.tmp"   # not a store's: not ours to remove
    other.write_bytes(b"")
    assert run.cached_store("a", STORE_N) is not None
    assert not left.exists() and other.exists()


def test_store_cache_keeps_the_newest_stores(tmp_path, tiny):
    cache = tmp_path / "cache"
    run, log = _store_run(tmp_path, cache, store_cache_keep=2)
    now = time.time()
    for i, key in enumerate("abc"):
        run.keep_store(_tiny_store(tiny, i), key)
        os.utime(cache / f"store-{key}.npz", (now - 100 + i,) * 2)
    assert sorted(p.name for p in cache.iterdir()) == ["store-b.npz", "store-c.npz"]
    assert run.cached_store("b", STORE_N) is not None    # loaded: now the newest
    run.keep_store(_tiny_store(tiny, 3), "d")
    assert sorted(p.name for p in cache.iterdir()) == ["store-b.npz", "store-d.npz"]
    assert f"replay: removed the older store {cache / 'store-c.npz'}" in log
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in cache.iterdir()} == {0o600}


@needs_root
def test_a_store_cache_of_another_user_is_not_used(tmp_path, tiny):
    cache = tmp_path / "cache"
    run, log = _store_run(tmp_path, cache)
    run.keep_store(_tiny_store(tiny, 0), "a")
    assert run.cached_store("a", STORE_N) is not None
    os.chown(cache, OTHER_UID, OTHER_UID)
    assert run.cached_store("a", STORE_N) is None
    assert log[-1] == (f"replay: store cache {cache}: owned by uid {OTHER_UID}, not by this "
                       f"user (uid 0); not used as a cache; recording")
