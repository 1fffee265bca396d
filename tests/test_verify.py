"""`tuner verify` against tests/uci_engine.py, a small UCI engine that evaluates like the
`material` evaluation (counted with python-chess) and misbehaves on request."""
import shlex
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from shared import stderr_lines
from tuner.cli import main

ENGINE = Path(__file__).with_name("uci_engine.py")
#: White and Black to move, an endgame, and (last) a Chess960 position whose castling rights
#: (B and G files) only an engine in UCI_Chess960 mode accepts.
FENS = ["rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
        "1r1qk1nr/1ppbppb1/p1np3p/6P1/2BPP3/P1N1BN2/1PP3PP/R2Q1RK1 b k - 1 13",
        "4kbr1/q7/p1n1p1p1/5nPp/NpQp4/5NB1/PPP1PP2/5RK1 b - - 5 22",
        "8/8/4k3/5p2/r7/3BK3/pB6/8 w - - 6 65",
        "1q1br1kr/ppn3pp/3p2n1/P1p2b2/5P2/3P1N2/1PP4P/NRBK1QRB w GBhe - 0 10"]


def engine(*flags: str) -> str:
    """The command line of the test engine with `flags`."""
    return shlex.join([sys.executable, str(ENGINE), *flags])


@pytest.fixture
def positions(tmp_path):
    """FENS as a conformance-style file (`FEN;eval`, the eval part ignored)."""
    f = tmp_path / "positions.txt"
    f.write_text("".join(f"{fen};0\n" for fen in FENS))
    return f


def verify(*args: str):
    return CliRunner().invoke(main, ["verify", "-e", "material", *args])


def _errors(r) -> list:
    return [line for line in stderr_lines(r) if not line.startswith("verifying ")]


def test_agrees_with_engine_and_switches_chess960_on(positions, tmp_path):
    log = tmp_path / "log.txt"
    r = verify("--engine", engine("--log", str(log)), "--file", str(positions))
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [f"{len(FENS)}/{len(FENS)} positions equal (0 different; "
                                     "engine 'material-test-engine', evaluation material)"]
    sent = log.read_text().splitlines()
    assert sent[:2] == ["uci", "setoption name UCI_Chess960 value true"]
    assert sent.count("eval") == len(FENS)
    assert f"position fen {FENS[-1]}" in sent


def test_chess960_not_sent_unless_offered(positions, tmp_path):
    """The engine refuses the Chess960 FEN and evaluates the previous position again: a mismatch
    that quotes what the engine said."""
    log = tmp_path / "log.txt"
    r = verify("--engine", engine("--no-chess960", "--log", str(log)), "--file", str(positions))
    assert r.exit_code == 1
    assert not any("UCI_Chess960" in line for line in log.read_text().splitlines())
    lines = r.stdout.splitlines()
    assert lines[0].startswith(f"{positions}:{len(FENS)}: {FENS[-1]}: engine ")
    assert lines[0].endswith("; the engine also printed: Invalid fen")
    assert lines[-1].startswith(f"{len(FENS) - 1}/{len(FENS)} positions equal (1 different")


def test_seeded_mismatch_exit_1_with_breakdown(positions):
    r = verify("--engine", engine("--off-by-one", "2"), "--file", str(positions), "--breakdown")
    assert r.exit_code == 1
    out = r.stdout
    tuner_value = -int(CliRunner().invoke(main, ["eval", "-e", "material", FENS[1]])
                       .stdout.rsplit(";", 1)[1])  # side to move (Black)
    # off by one from White's point of view: the engine says (white + 1), negated for Black
    first = out.splitlines()[0]
    assert first == (f"{positions}:2: {FENS[1]}: engine {-tuner_value + 1}, tuner "
                     f"{-tuner_value} (tuner - engine = -1)")
    assert f"position: {FENS[1]}" in out and "\nPAWN " in out  # the tuner's breakdown
    assert out.splitlines()[-1].startswith(f"{len(FENS) - 1}/{len(FENS)} positions equal "
                                           "(1 different")


def test_show_limits_printed_mismatches(positions):
    r = verify("--engine", engine("--off-by-one", "1"), "--file", str(positions), "--show", "0")
    assert r.exit_code == 1
    assert r.stdout.splitlines() == [f"{len(FENS) - 1}/{len(FENS)} positions equal (1 different; "
                                     "engine 'material-test-engine', evaluation material)"]


def test_command_reply_and_point_of_view_options(positions):
    flags = ("--white", "--command", "evaluate", "--chatty")
    reply = r"^Evaluation \(white\): (?P<eval>-?\d+)$"
    r = verify("--engine", engine(*flags), "--file", str(positions), "--command", "evaluate",
               "--reply", reply, "--pov", "white")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith(f"{len(FENS)}/{len(FENS)} positions equal (0 different")
    # the same numbers taken as the side to move's: the two Black-to-move positions differ
    r = verify("--engine", engine(*flags), "--file", str(positions), "--command", "evaluate",
               "--reply", reply)
    assert r.exit_code == 1
    labels = [line.split(": ", 1)[0] for line in r.stdout.splitlines()[:-1]]
    assert labels == [f"{positions}:2", f"{positions}:3"]
    assert "the engine also printed: info string evaluating" in r.stdout


def test_reply_without_match_is_one_line(positions):
    r = verify("--engine", engine("--white"), "--file", str(positions))
    assert r.exit_code == 1
    err = _errors(r)
    assert len(err) == 1 and err[0].startswith(f"Error: {positions}:1: engine "
                                               "'material-test-engine' on ")
    assert "no line matches --reply" in err[0] and "Evaluation (white): " in err[0]


def test_reply_group_not_an_integer(positions):
    r = verify("--engine", engine(), "--file", str(positions), "--reply", r"Evaluation (?P<eval>\S+)")
    assert r.exit_code == 1
    assert _errors(r) == [f"Error: {positions}:1: engine 'material-test-engine' on '{FENS[0]}': "
                          "'(stm):' in reply 'Evaluation (stm): 20' is not an integer"]


def test_engine_that_dies(positions):
    r = verify("--engine", engine("--die-after", "2"), "--file", str(positions))
    assert r.exit_code == 1
    assert _errors(r) == [f"Error: {positions}:3: engine 'material-test-engine' exited with code 3 "
                          f"while waiting for the reply to 'eval' on '{FENS[2]}'; its last "
                          "stderr line: 'dying on purpose'"]


def test_engine_that_never_answers(positions):
    r = verify("--engine", engine("--hang-after", "1"), "--file", str(positions),
               "--timeout", "0.5")
    assert r.exit_code == 1
    assert _errors(r) == [f"Error: {positions}:2: engine 'material-test-engine' did not answer "
                          f"within 0.5 s while waiting for the reply to 'eval' on '{FENS[1]}'"]


def test_engine_that_does_not_start(positions, tmp_path):
    missing = tmp_path / "no-such-engine"
    r = verify("--engine", str(missing), "--file", str(positions))
    assert r.exit_code == 1
    err = _errors(r)
    assert len(err) == 1 and err[0].startswith(f"Error: --engine '{missing}' cannot be started: ")


def test_reply_pattern_needs_the_named_group(positions):
    r = verify("--engine", engine(), "--file", str(positions), "--reply", r"Evaluation: (-?\d+)")
    assert r.exit_code == 2
    assert "needs a named group (?P<eval>...)" in r.stderr


def test_invalid_lines_are_reported_and_the_rest_verified(tmp_path):
    f = tmp_path / "mixed.txt"
    f.write_text(f"{FENS[0]}\n4k3/8/8/8/8/8/8/8 w - - 0 1\n{FENS[3]}\n")
    r = verify("--engine", engine(), "--file", str(f))
    assert r.exit_code == 1
    err = _errors(r)
    assert len(err) == 1 and err[0].startswith(f"{f}:2: ") and "king" in err[0]
    assert r.stdout.splitlines() == ["2/2 positions equal (0 different; engine "
                                     "'material-test-engine', evaluation material)"]


def test_no_valid_position(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text("4k3/8/8/8/8/8/8/8 w - - 0 1\n")
    r = verify("--engine", engine(), "--file", str(f))
    assert r.exit_code == 1
    assert _errors(r)[-1] == "Error: no valid position to verify"


def test_short_fen_gets_move_counters(tmp_path):
    log = tmp_path / "log.txt"
    r = verify("--engine", engine("--log", str(log)), "8/8/4k3/5p2/r7/3BK3/pB6/8 w - -")
    assert r.exit_code == 0, r.output
    assert "position fen 8/8/4k3/5p2/r7/3BK3/pB6/8 w - - 0 1" in log.read_text().splitlines()
