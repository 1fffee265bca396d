"""benchmarks/peers.py's own logic: the peers' tiled text files, the modes of ours it runs, and
the skip messages where no peer is built (the timings themselves are the benchmark's)."""
import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def peers():
    sys.path.insert(0, str(BENCH))  # peers.py imports its siblings (roofline, scaling)
    try:
        spec = importlib.util.spec_from_file_location("peers_bench", BENCH / "peers.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize("start, stop", [(0, 3), (0, 11), (2, 9), (5, 5), (7, 16)])
def test_write_tiled_is_the_sample_repeated(peers, tmp_path, start, stop):
    lines = ["a", "b", "c", "d"]
    path = tmp_path / "out.txt"
    peers.write_tiled(path, lines, start, stop)
    got = path.read_text(encoding="ascii").splitlines()
    assert got == (lines * 5)[start:stop]


def test_our_modes_skips_what_the_config_rejects(peers, monkeypatch, capsys):
    monkeypatch.setitem(peers.MODES, "bogus", {"mode": "no-such-mode"})
    modes = peers.our_modes(["replay", "eager", "bogus"])
    assert modes == {"replay": {"mode": "replay"}, "eager": {"mode": "eager"}}
    assert "ours, bogus: not offered by this version" in capsys.readouterr().out


def test_no_peer_built_says_how_to_build_and_stops(peers, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["peers.py", "--dir", str(tmp_path), "--tools", "TOOLS"])
    peers.main()
    out = capsys.readouterr().out
    assert f"TOOLS/build-texel-tuner.sh CLONE {tmp_path / 'texel-tuner'}" in out
    for mode in ("seed", "head"):
        assert f"TOOLS/build-clockwork.sh {mode} CLOCKWORK_CLONE ROSE_CLONE " \
               f"{tmp_path / 'clockwork'}" in out
    assert out.rstrip().endswith("no peer built: nothing to compare with")
