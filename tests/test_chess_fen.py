"""FEN parsing: accepted syntax, error reasons, bulk/single agreement, fuzzing, round trips."""

import os
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from numba import njit

import chess  # noqa: E402  (the dev extra installs it; a missing one is a failure)

import shared  # noqa: E402
from chess_oracle import FLAGS_OF, IMPLEMENTED, python_chess_flags  # noqa: E402

from tuner.chess import fen as fen_module  # noqa: E402
from tuner.chess import position as P  # noqa: E402
from tuner.chess.fen import (  # noqa: E402
    parse_fen, parse_fen_array, parse_fen_list, parse_fens, to_fen, to_fens, to_fens_arrow)
from tuner.chess.position import (  # noqa: E402
    POSITION_WORDS, W_META, castling_rook_file, ep_square, fullmove_number, halfmove_clock,
    side_to_move)
from tuner.chess.status import FIELD_NAMES, REASONS, FenStatus, status_kind, status_reason  # noqa: E402

HYP = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
START = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"
DATASETS = str(shared.DATASETS)
_WS = re.compile(r"[ \t\n\r\v\f]+")

EXTRA_VALID = [
    START,
    "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 1",
    "rnbqkbnr/ppp1pppp/8/3pP3/8/8/PPPP1PPP/RNBQKBNR w KQkq d6 0 2",
    "q1brkrnb/pppppppp/2n5/8/2P5/4P3/PP1P1PPP/RBNKBNRQ w GAfd - 1 3",
    "rqbbknnr/pp1p1ppp/4p3/2p5/8/2N4P/PPPPPPP1/RBK1QNBR w HAha - 0 3",
    "1r2k1r1/8/8/8/8/8/8/1R2K1R1 w GBgb - 0 1",
    "8/8/8/8/8/8/8/K6k w - -",
    "8/8/8/8/8/8/8/K6k b - - 100 9999",
    "RRRRRRRR/RRRRRRRK/8/8/8/8/8/7k w - - 0 1",  # 16 white pieces: allowed
]


def _pool():
    fens = list(EXTRA_VALID)
    for name in ("selfplay-std.parquet", "selfplay-dfrc.parquet"):
        col = pq.read_table(os.path.join(DATASETS, name), columns=["fen"]).column("fen").to_pylist()
        fens += col[:: max(1, len(col) // 150)]
    return fens


POOL = _pool()


def _canonical(fen):
    fields = [f for f in _WS.split(fen) if f]
    if len(fields) == 4:
        fields += ["0", "1"]
    elif len(fields) == 5:
        fields += ["1"]
    return " ".join(fields)


def _outcome(fen):
    try:
        return parse_fen(fen), None
    except ValueError as e:
        return None, str(e)


def _check(fens):
    """Single and bulk parser agree on every entry; accepted FENs round-trip and python-chess
    reads the same position; rejected ones have a "<field>: <reason>" message."""
    positions, status = parse_fen_list(fens)
    assert positions.shape == (len(fens), POSITION_WORDS) and positions.dtype == np.uint64
    assert status.shape == (len(fens),) and status.dtype == np.int32
    for i, fen in enumerate(fens):
        if fen is None:
            assert status[i] == FenStatus.NULL and not positions[i].any()
            assert status_reason(status[i]) == "fen: null entry"
            continue
        pos, msg = _outcome(fen)
        if pos is None:
            assert status[i] != 0, fen
            assert not positions[i].any()
            reason = status_reason(status[i])
            assert msg.startswith(reason), (msg, reason)
            assert reason.split(":")[0] in FIELD_NAMES, reason
        else:
            assert status[i] == 0, (fen, status_reason(status[i]))
            np.testing.assert_array_equal(positions[i], pos)
            canon = _canonical(fen)
            assert to_fen(pos) == canon
            b = chess.Board(canon, chess960=True)  # our syntax is a subset of python-chess's
            assert int(pos[0]) == b.occupied_co[chess.WHITE]
            assert int(pos[1]) == b.occupied_co[chess.BLACK]
            assert [int(x) for x in pos[2:8]] == [b.pawns, b.knights, b.bishops, b.rooks,
                                                  b.queens, b.kings]
            assert side_to_move(pos) == (0 if b.turn == chess.WHITE else 1)
            assert ep_square(pos) == (-1 if b.ep_square is None else b.ep_square)
            assert halfmove_clock(pos) == b.halfmove_clock
            assert fullmove_number(pos) == b.fullmove_number
            want = set(chess.scan_forward(b.clean_castling_rights()))
            got = {(0 if c == 0 else 56) + f for c in (0, 1) for q in (False, True)
                   for f in [castling_rook_file(pos, c, q)] if f >= 0}
            assert got == want, fen
            assert not b.status() & IMPLEMENTED, (fen, b.status())
    return positions, status


# ---------------------------------------------------------------------------------------------
# accepted inputs


def test_valid_examples_round_trip():
    positions, status = _check(EXTRA_VALID)
    assert np.all(status == 0)


def test_start_position_words():
    pos = parse_fen(START)
    assert pos.shape == (9,) and pos.dtype == np.uint64
    assert int(pos[P.W_WHITE]) == 0xFFFF and int(pos[P.W_BLACK]) == 0xFFFF << 48
    assert int(pos[P.W_PAWN]) == 0x00FF00000000FF00
    assert int(pos[P.W_KNIGHT]) == 0x4200000000000042
    assert int(pos[P.W_BISHOP]) == 0x2400000000000024
    assert int(pos[P.W_ROOK]) == 0x8100000000000081
    assert int(pos[P.W_QUEEN]) == 0x0800000000000008
    assert int(pos[P.W_KING]) == 0x1000000000000010
    meta = int(pos[W_META])
    assert meta & 1 == 0
    assert (meta >> P.META_FULLMOVE_SHIFT) & 0x3FFF == 1
    assert [castling_rook_file(pos, c, q) for c in (0, 1) for q in (False, True)] == [7, 0, 7, 0]
    assert meta >> 63 == 0
    assert P.phase(pos) == 24


def test_missing_clocks_default():
    pos = parse_fen("8/8/8/8/8/8/8/K6k w - -")
    assert halfmove_clock(pos) == 0 and fullmove_number(pos) == 1
    assert to_fen(pos) == "8/8/8/8/8/8/8/K6k w - - 0 1"
    pos = parse_fen("8/8/8/8/8/8/8/K6k b - - 7")
    assert halfmove_clock(pos) == 7 and fullmove_number(pos) == 1
    assert side_to_move(pos) == 1


def test_whitespace_is_flexible():
    a = parse_fen(START)
    for variant in ("  " + START + "\n", START.replace(" ", "\t"), START.replace(" ", "  \r\n ")):
        np.testing.assert_array_equal(parse_fen(variant), a)


@pytest.mark.parametrize("fen,rights", [
    # X-FEN K/Q = outermost rook on that side; Shredder letters name the file
    ("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1", [7, 0, 7, 0]),
    ("1r2k1r1/8/8/8/8/8/8/1R2K1R1 w KQkq - 0 1", [6, 1, 6, 1]),
    ("1r2k1r1/8/8/8/8/8/8/1R2K1R1 w GBgb - 0 1", [6, 1, 6, 1]),
    ("rk5r/8/8/8/8/8/8/RK5R w HAha - 0 1", [7, 0, 7, 0]),
    ("rk5r/8/8/8/8/8/8/RK5R w Ah - 0 1", [-1, 0, 7, -1]),
    ("r3k1rr/8/8/8/8/8/8/R3KR1R w KQk - 0 1", [7, 0, 7, -1]),  # K -> outermost (h) rook
    ("r3k1rr/8/8/8/8/8/8/R3KR1R w FQ - 0 1", [5, 0, -1, -1]),
    ("r3k1rr/8/8/8/8/8/8/R3K2R w KH - 0 1", [7, -1, -1, -1]),  # the same rook twice
    ("r3k1rr/8/8/8/8/8/8/RR2K2R w AQ - 0 1", [-1, 0, -1, -1]),
    ("4k3/8/8/8/8/8/8/4K2R w K - 0 1", [7, -1, -1, -1]),
])
def test_castling_rook_files(fen, rights):
    pos = parse_fen(fen)
    assert [castling_rook_file(pos, c, q) for c in (0, 1) for q in (False, True)] == rights
    assert to_fen(pos) == fen
    # the same rights as python-chess's cleaned castling rights
    b = chess.Board(fen, chess960=True)
    want = set(chess.scan_forward(b.clean_castling_rights()))
    got = {(0 if c == 0 else 56) + f for c in (0, 1) for q in (False, True)
           for f in [castling_rook_file(pos, c, q)] if f >= 0}
    assert got == want


@pytest.mark.parametrize("fen,message", [
    ("4k3/8/8/8/8/8/8/4K3 w KQkq - 0 1", "castling: right 'K' names no White rook on that side"),
    ("4k3/8/8/8/8/8/8/4K2R w KQkq - 0 1", "castling: right 'Q' names no White rook"),
    ("4k3/8/8/8/8/8/8/R3K3 w EA - 0 1", "castling: right 'E' names no White rook"),
    ("r6r/4k3/8/8/8/8/4K3/R6R w KQkq - 0 1", "castling: right 'K', but White's king is not on rank 1"),
    ("r6r/4k3/8/8/8/8/8/R3K2R w KQkq - 0 1", "castling: right 'k', but Black's king is not on rank 8"),
    ("r3k1rr/8/8/8/8/8/8/R3KR1R w FH - 0 1", "castling: right 'H' names a second White rook"),
    ("r3k1rr/8/8/8/8/8/8/R3KR1R w HF - 0 1", "castling: right 'F' names a second White rook"),
    ("r3k1rr/8/8/8/8/8/8/RR2K2R w BA - 0 1", "castling: right 'A' names a second White rook"),
    ("1r4k1/8/8/8/8/8/8/R3K2R w KQk - 0 1", "castling: right 'k' names no Black rook"),
])
def test_castling_rights_that_do_not_match_the_board(fen, message):
    """Rejected with the reason, and python-chess (Chess960 reading) calls them bad rights."""
    with pytest.raises(ValueError) as info:
        parse_fen(fen)
    assert str(info.value).startswith(message), str(info.value)
    assert chess.Board(fen, chess960=True).status() & chess.STATUS_BAD_CASTLING_RIGHTS


def test_en_passant_round_trip():
    pos = parse_fen("rnbqkbnr/ppp1pppp/8/3pP3/8/8/PPPP1PPP/RNBQKBNR w KQkq d6 0 2")
    assert ep_square(pos) == chess.D6
    pos = parse_fen("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq e3 0 1")
    assert ep_square(pos) == chess.E3


# ---------------------------------------------------------------------------------------------
# rejected inputs: field and reason

BASE = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR"
BAD = [
    ("", "fen: empty string"),
    ("   \t ", "fen: empty string"),
    (BASE, "side to move: missing"),
    (BASE + " w", "castling: missing"),
    (BASE + " w KQkq", "en passant: missing"),
    ("rnbqkbnr/ppppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w - - 0 1",
     "piece placement: rank 7 has 9 files (expected 8): 'ppppppppp'"),
    ("rnbqkbnr/ppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w - - 0 1", "piece placement: rank 7 has 7 files"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBN7 w - - 0 1", "piece placement: rank 1 has 14 files"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP w - - 0 1", "piece placement: 7 ranks (expected 8)"),
    ("rnbqkbnr/pppppppp/8/8/8/8/8/PPPPPPPP/RNBQKBNR w - - 0 1", "piece placement: 9 ranks"),
    ("/rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBN w - - 0 1", "piece placement: rank 8 has 0 files"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR/ w - - 0 1", "piece placement: 9 ranks"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPxPPP/RNBQKBNR w - - 0 1",
     "piece placement: unknown piece letter 'x' in rank 2"),
    ("rnbqkbnr/pppppppp/8/8/8/9/PPPPPPPP/RNBQKBNR w - - 0 1", "piece placement: unknown piece letter '9'"),
    ("rnbqkbnr/pppppppp/8/8/8/08/PPPPPPPP/RNBQKBNR w - - 0 1", "piece placement: unknown piece letter '0'"),
    ("rnbqkbnr/pppppppp/8/8/8/44/PPPPPPPP/RNBQKBNR w - - 0 1",
     "piece placement: two consecutive digits in rank 3"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQ1BNR w - - 0 1", "piece placement: White has 0 kings"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBKKBNR w - - 0 1", "piece placement: White has 2 kings"),
    ("rnbkkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w - - 0 1", "piece placement: Black has 2 kings"),
    ("rnbqkbnr/pppppppp/8/8/8/P7/PPPPPPPP/RNBQKBNR w - - 0 1", "piece placement: White has 17 pieces"),
    ("pnbqkbnr/1ppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w - - 0 1", "piece placement: pawn on a8"),
    ("4k3/8/8/8/8/8/8/4K2p w - - 0 1", "piece placement: pawn on h1"),
    (BASE + " W - - 0 1", "side to move: expected 'w' or 'b': 'W'"),
    (BASE + " wb - - 0 1", "side to move: expected 'w' or 'b'"),
    (BASE + " - - - 0 1", "side to move: expected 'w' or 'b'"),
    (BASE + " w KQkx - 0 1", "castling: invalid character 'x'"),
    (BASE + " w K-q - 0 1", "castling: '-' must stand alone"),
    (BASE + " w -- - 0 1", "castling: '-' must stand alone"),
    (BASE + " w KK - 0 1", "castling: duplicate 'K'"),
    (BASE + " w KQH - 0 1", "castling: more than 2 rights for White"),
    (BASE + " w kqKQ - 0 1", "castling: White's right 'K' after a Black right"),
    (BASE + " w KQkq e4 0 1", "en passant: e4 is not on rank 6 (White to move)"),
    (BASE + " b KQkq e6 0 1", "en passant: e6 is not on rank 3 (Black to move)"),
    (BASE + " w KQkq e9 0 1", "en passant: expected '-' or a square"),
    (BASE + " w KQkq i6 0 1", "en passant: expected '-' or a square"),
    (BASE + " w KQkq E6 0 1", "en passant: expected '-' or a square"),
    (BASE + " w KQkq e66 0 1", "en passant: expected '-' or a square"),
    (BASE + " w KQkq - -1 1", "half-move clock: not a non-negative decimal integer: '-1'"),
    (BASE + " w KQkq - 1.5 1", "half-move clock: not a non-negative decimal integer"),
    (BASE + " w KQkq - 101 1", "half-move clock: 101 exceeds 100"),
    (BASE + " w KQkq - 99999999999999999999 1", "half-move clock: a number >= 8388607 exceeds 100"),
    (BASE + " w KQkq - 05 1", "half-move clock: leading zero"),
    (BASE + " w KQkq - 0 0", "full-move number: leading zero or 0"),
    (BASE + " w KQkq - 0 01", "full-move number: leading zero or 0"),
    (BASE + " w KQkq - 0 10000", "full-move number: 10000 is outside 1..9999"),
    (BASE + " w KQkq - 0 +1", "full-move number: not a positive decimal integer"),
    (BASE + " w KQkq - 0 1 x", "extra fields: text after the full-move number (at most 6 fields): 'x'"),
    (BASE + " w KQkq - 0 1 ;w", "extra fields"),
    (BASE + " w KQkq - 0 1 0", "extra fields"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR\xa0w - - 0 1", "piece placement: unknown piece letter byte 0xc2"),
    ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w - - 0 1\x00", "full-move number: not a positive"),
]


@pytest.mark.parametrize("fen,message", BAD)
def test_rejections(fen, message):
    with pytest.raises(ValueError) as info:
        parse_fen(fen)
    assert str(info.value).startswith(message), str(info.value)
    positions, status = parse_fen_list([fen])
    assert status[0] != 0 and not positions[0].any()
    assert str(info.value).startswith(status_reason(status[0]))


def test_status_codes_are_described():
    """Every status kind has a reason naming a field; an unknown code raises, naming it."""
    assert set(REASONS) == set(FenStatus) - {FenStatus.OK}
    for kind in FenStatus:
        if kind != FenStatus.OK:
            assert status_reason(kind).split(":")[0] in FIELD_NAMES
            assert status_kind(kind) is kind
    assert status_reason(0) == "ok"
    with pytest.raises(ValueError, match="unknown FEN status code 255"):
        status_reason(255)


def _random_fen(rng):
    """A syntactically valid FEN that is often, but not always, legal: random pieces (one king
    each, rooks on back ranks, pawns off them and beside en-passant squares made likely; sometimes
    too many pieces or pawns of one colour), random side to move, castling letters and en-passant
    square."""
    b = chess.Board(None)
    letters = "PNBRQKpnbrqk"
    for s in rng.choice(64, size=int(rng.integers(0, 12)), replace=False):
        piece = chess.Piece.from_symbol(letters[int(rng.integers(0, 12))])
        if piece.piece_type != chess.PAWN or 8 <= s < 56 or rng.random() < 0.1:
            b.set_piece_at(int(s), piece)
    crowd = rng.random()
    colour = bool(rng.integers(0, 2))
    if crowd < 0.1:  # 9 or 10 pawns of one colour
        for s in rng.choice(range(8, 56), size=int(rng.integers(9, 11)), replace=False):
            b.set_piece_at(int(s), chess.Piece(chess.PAWN, colour))
    elif crowd < 0.2:  # 17 or more pieces of one colour
        for s in rng.choice(64, size=int(rng.integers(17, 20)), replace=False):
            b.set_piece_at(int(s), chess.Piece(chess.KNIGHT, colour))
    if rng.random() < 0.95:  # exactly one king each, most of the time on the back rank
        for colour in (chess.WHITE, chess.BLACK):
            for s in list(b.pieces(chess.KING, colour)):
                b.remove_piece_at(s)
            back = range(0, 8) if colour == chess.WHITE else range(56, 64)
            pool = list(back) if rng.random() < 0.7 else list(range(64))
            king = int(rng.choice(pool))
            b.set_piece_at(king, chess.Piece(chess.KING, colour))
            for s in rng.choice([s for s in back if s != king], size=int(rng.integers(0, 3))):
                b.set_piece_at(int(s), chess.Piece(chess.ROOK, colour))
    turn = bool(rng.integers(0, 2))
    white = "".join(c for c in "KQABCDEFGH" if rng.random() < 0.1)[:2]
    black = "".join(c for c in "kqabcdefgh" if rng.random() < 0.1)[:2]
    castling = white + black or "-"
    ep = "-"
    if rng.random() < 0.3:
        f = int(rng.integers(0, 8))
        rank = 5 if turn == chess.WHITE else 2
        ep_sq = chess.square(f, rank)
        if rng.random() < 0.8:  # the pawn that pushed, and its path usually cleared
            pawn_sq = ep_sq - 8 if turn == chess.WHITE else ep_sq + 8
            b.set_piece_at(pawn_sq, chess.Piece(chess.PAWN, not turn))
            if rng.random() < 0.6:
                b.remove_piece_at(ep_sq)
                b.remove_piece_at(ep_sq + 8 if turn == chess.WHITE else ep_sq - 8)
        ep = chess.square_name(ep_sq)
    return "%s %s %s %s 0 1" % (b.board_fen(), "w" if turn else "b", castling, ep)


def _agrees_with_python_chess(fen):
    """Our verdict is python-chess's status() for the rules we implement, and a rejection's
    reason is one of the flags python-chess raises. Returns our status kind."""
    flags = python_chess_flags(fen)
    positions, status = parse_fen_list([fen])
    kind = status_kind(status[0])
    assert (kind == FenStatus.OK) == (not flags & IMPLEMENTED), (fen, status_reason(status[0]), flags)
    if kind != FenStatus.OK:
        assert flags & FLAGS_OF[kind], (fen, status_reason(status[0]), flags)
    return kind


def test_legality_agrees_with_python_chess_on_random_positions():
    """3000 random positions (a fixed seed): every legality status occurs (the en-passant and
    same-side castling ones rarely, as earlier rules come first: ILLEGAL has them by hand), and
    many positions are legal."""
    rng = np.random.default_rng(3)
    kinds = [_agrees_with_python_chess(_random_fen(rng)) for _ in range(3000)]
    for kind in FLAGS_OF:
        assert kinds.count(kind) >= 2, (kind, kinds.count(kind))
    assert kinds.count(FenStatus.OK) >= 200


@HYP
@given(st.integers(0, 2**63))
def test_fuzz_legality_agrees_with_python_chess(seed):
    _agrees_with_python_chess(_random_fen(np.random.default_rng(seed)))


ILLEGAL = [
    # side not to move in check (python-chess: STATUS_OPPOSITE_CHECK)
    ("4k3/8/8/8/8/8/8/4r1K1 b - - 0 1", "side to move: Black to move, but White's king on g1"),
    ("4k3/8/8/8/8/8/8/4R1K1 b - - 0 1", None),  # the side to move in check: legal
    ("4k3/4R3/8/8/8/8/8/6K1 w - - 0 1", "side to move: White to move, but Black's king on e8 is in check"),
    ("8/8/8/8/8/8/5k2/6K1 w - - 0 1", "side to move: White to move, but Black's king on f2"),
    ("4k3/3P4/8/8/8/8/8/4K3 w - - 0 1", "side to move: White to move, but Black's king on e8"),
    # more than 8 pawns
    ("4k3/8/8/8/8/1P6/PPPPPPPP/4K3 w - - 0 1", "piece placement: White has 9 pawns (at most 8)"),
    ("4k3/pppppppp/p7/8/8/8/8/4K3 w - - 0 1", "piece placement: Black has 9 pawns"),
    # en passant: no pawn that could have pushed, or the squares behind it not empty
    ("4k3/8/8/8/8/8/8/4K3 w - e6 0 1", "en passant: e6, but no Black pawn stands on e5"),
    ("4k3/8/8/4P3/8/8/8/4K3 w - e6 0 1", "en passant: e6, but no Black pawn stands on e5"),
    ("4k3/8/4n3/4p3/8/8/8/4K3 w - e6 0 1", "en passant: e6 is occupied"),
    ("3k4/4n3/8/4p3/8/8/8/4K3 w - e6 0 1", "en passant: e7 is occupied"),
    ("4k3/8/8/8/3P4/8/3N4/4K3 b - d3 0 1", "en passant: d2 is occupied"),
]


@pytest.mark.parametrize("fen,message", ILLEGAL)
def test_illegal_positions_are_rejected_as_python_chess_does(fen, message):
    """Each rule by hand (None: a near miss that is legal)."""
    if message is None:
        parse_fen(fen)
    else:
        with pytest.raises(ValueError) as info:
            parse_fen(fen)
        assert str(info.value).startswith(message), str(info.value)
    _agrees_with_python_chess(fen)


def test_queen_side_letter_without_rooks_is_rejected():
    """Where python-chess silently drops the right, we name it (see chess_oracle)."""
    fen = "4k3/8/8/8/8/8/8/4K3 w Q - 0 1"
    assert chess.Board(fen, chess960=True).status() == chess.STATUS_VALID
    with pytest.raises(ValueError, match="castling: right 'Q' names no White rook"):
        parse_fen(fen)


def test_en_passant_without_a_capturer_is_accepted():
    """A documented choice: a square passed by a double push is kept even when no pawn can take
    there (python-chess keeps it too; engines that write it after every double push are read)."""
    fen = "4k3/8/8/4p3/8/8/8/4K3 w - e6 0 1"
    assert ep_square(parse_fen(fen)) == chess.E6
    assert not chess.Board(fen).has_legal_en_passant()
    assert _agrees_with_python_chess(fen) == FenStatus.OK


# ---------------------------------------------------------------------------------------------
# bulk parser


def test_bulk_matches_single_on_pool():
    positions, status = _check(POOL + [b for b, _ in BAD] + [None, ""])
    assert np.count_nonzero(status == 0) == len(POOL)


def test_parse_fens_buffers_int32_int64_and_slices():
    fens = POOL[:50] + ["bad fen", "", None, START]
    arr = pa.array(fens, type=pa.string())
    p1, s1 = parse_fen_array(arr)
    p2, s2 = parse_fen_array(arr.cast(pa.large_string()))
    np.testing.assert_array_equal(p1, p2)
    np.testing.assert_array_equal(s1, s2)
    # raw buffers, int32 and int64 offsets
    offs = np.frombuffer(arr.buffers()[1], dtype=np.int32, count=len(arr) + 1)
    data = np.frombuffer(arr.buffers()[2], dtype=np.uint8)
    p3, s3 = parse_fens(offs, data)
    p4, s4 = parse_fens(offs.astype(np.int64), data)
    np.testing.assert_array_equal(p3, p4)
    np.testing.assert_array_equal(s3, s4)
    valid = np.array([f is not None for f in fens])
    np.testing.assert_array_equal(p3[valid], p1[valid])
    np.testing.assert_array_equal(s3[valid], s1[valid])
    assert s1[fens.index(None)] == FenStatus.NULL
    # sliced and chunked arrays
    ps, ss = parse_fen_array(arr.slice(7, 20))
    np.testing.assert_array_equal(ps, p1[7:27])
    np.testing.assert_array_equal(ss, s1[7:27])
    chunked = pa.chunked_array([arr.slice(0, 10), arr.slice(10)])
    pc, sc = parse_fen_array(chunked)
    np.testing.assert_array_equal(pc, p1)
    np.testing.assert_array_equal(sc, s1)
    # empty inputs
    pe, se = parse_fens(np.zeros(1, np.int32), np.zeros(0, np.uint8))
    assert pe.shape == (0, 9) and se.shape == (0,)
    pe, se = parse_fen_list([])
    assert pe.shape == (0, 9) and se.shape == (0,)
    with pytest.raises(TypeError):
        parse_fens(np.zeros(2, np.float64), data)
    with pytest.raises(ValueError):
        parse_fens(np.array([0, 10**6], np.int64), data)


def test_to_fens_matches_to_fen():
    positions, status = parse_fen_list(POOL)
    assert to_fens(positions) == [to_fen(p) for p in positions] == [_canonical(f) for f in POOL]


# ---------------------------------------------------------------------------------------------
# fuzzing

FEN_ALPHABET = "KQRBNPkqrbnp12345678/ wb-ABCDEFGHabcdefgh0123456789\t"


PIECE_LETTERS = "KQRBNPkqrbnp"
TOKENS = ["w", "b", "-", "KQkq", "HAha", "GAfd", "Kk", "kK", "KQH", "Bb", "e3", "e6", "a1", "h6",
          "FH", "BA", "KH", "Qa", "Ek", "HBhb", "KQkq",
          "0", "1", "100", "101", "05", "9999", "10000", "x", "", "-1", "K-"]


def _mutate(fen, ops):
    """Apply edits: 0 delete a char, 1 insert, 2 replace, 3 swap two fields, 4 replace a piece
    letter by another (keeps the syntax valid, may break king counts / pawn ranks), 5 replace a
    field after the placement by a token, 6 drop the last field."""
    s = list(fen)
    for kind, pos, ch in ops:
        if not s:
            s = [ch]
            continue
        if kind <= 2:
            i = pos % (len(s) + (1 if kind == 1 else 0))
            if kind == 0:
                del s[i]
            elif kind == 1:
                s.insert(i, ch)
            else:
                s[i] = ch
            continue
        if kind == 4:
            letters = [i for i, c in enumerate(s) if c in PIECE_LETTERS]
            if letters:
                s[letters[pos % len(letters)]] = PIECE_LETTERS[pos % 12]
            continue
        fields = "".join(s).split(" ")
        if kind == 3 and len(fields) > 1:
            j = pos % len(fields)
            k = (j + 1) % len(fields)
            fields[j], fields[k] = fields[k], fields[j]
        elif kind == 5 and len(fields) > 1:
            fields[1 + pos % (len(fields) - 1)] = TOKENS[pos % len(TOKENS)]
        elif kind == 6 and len(fields) > 1:
            fields.pop()
        s = list(" ".join(fields))
    return "".join(s)


mutation = st.tuples(st.integers(0, 6), st.integers(0, 200), st.sampled_from(FEN_ALPHABET))
mutated_fens = st.builds(_mutate, st.sampled_from(POOL), st.lists(mutation, min_size=1, max_size=3))


@HYP
@given(st.text())
def test_fuzz_random_text(s):
    _check([s])


@HYP
@given(st.text(alphabet=FEN_ALPHABET, max_size=90))
def test_fuzz_fen_alphabet(s):
    _check([s])


@HYP
@given(mutated_fens)
def test_fuzz_mutated_valid_fens(s):
    _check([s])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(mutated_fens, st.sampled_from(POOL), st.text(max_size=30), st.none()),
                max_size=40))
def test_fuzz_bulk_lists(fens):
    _check(fens)


@pytest.mark.parametrize("name", ["selfplay-std.parquet", "selfplay-dfrc.parquet"])
def test_full_dataset_round_trip(name):
    """Every row of the shared datasets parses (bulk, from the Arrow column) and writes back to
    exactly the same string."""
    col = pq.read_table(os.path.join(DATASETS, name), columns=["fen"]).column("fen")
    positions, status = parse_fen_array(col)
    assert len(status) == len(col) > 100000
    assert np.all(status == 0)
    assert to_fens_arrow(positions).to_pylist() == col.to_pylist()


# ---------------------------------------------------------------------------------------------
# the fast paths against the reporting parsers


@njit
def _reporting_parse(offsets, data, out, status):
    """parse_fens without the fast path (`_scan_placement`): the parsers that
    say what is wrong, alone."""
    for r in range(out.shape[0]):
        bbs = out[r]
        bbs[:] = 0
        start, end = offsets[r], offsets[r + 1]
        s = fen_module._skip_ws(data, start, end)
        if s == end:
            st = fen_module.pack_status(FenStatus.EMPTY, 0, 0)
        else:
            st, e = fen_module._parse_placement(data, s, end, bbs)
            if st == 0:
                st = fen_module.material_status(bbs)
            if st == 0:
                st = fen_module._parse_tail(data, e, end, bbs)
        if st != 0:
            bbs[:] = 0
        status[r] = st


def _check_fast_paths(fens):
    arr = pa.array([f.encode("utf-8", "surrogatepass") for f in fens], type=pa.large_binary())
    offsets = np.frombuffer(arr.buffers()[1], np.int64, count=len(fens) + 1)
    data = np.frombuffer(arr.buffers()[2], np.uint8) if arr.buffers()[2] else np.zeros(1, np.uint8)
    positions, status = parse_fens(offsets, data)
    want_pos = np.empty_like(positions)
    want_status = np.empty_like(status)
    _reporting_parse(offsets, data, want_pos, want_status)
    np.testing.assert_array_equal(status, want_status)
    np.testing.assert_array_equal(positions, want_pos)


TAIL_TOKENS = ["w", "b", "-", "--", "KQkq", "Kk", "HAha", "e3", "e6", "d6", "0", "1", "00", "01",
               "100", "101", "9999", "10000", "x", ""]
#: a field of the FEN itself (its index) or a token
tail_fields = st.lists(st.one_of(st.integers(1, 5), st.integers(1, 5), st.sampled_from(TAIL_TOKENS)),
                       min_size=0, max_size=7)
separators = st.lists(st.sampled_from([" ", " ", "  ", "\t", ""]), min_size=8, max_size=8)


@HYP
@example("8/8/8/8/8/8/8/K6k w - - 0 1", [1, 3, 4, 5], [" ", "  ", " ", " ", "", "", "", ""])
@given(st.sampled_from(POOL), tail_fields, separators)
def test_fast_paths_agree_with_the_reporting_parsers(fen, tail, seps):
    """Valid placements followed by their own fields and tokens, dropped, repeated, swapped,
    separated by single spaces (the fast form) or not."""
    own = fen.split()
    fields = [own[0]] + [own[f] if isinstance(f, int) and f < len(own) else str(f) for f in tail]
    text = "".join(f + sep for f, sep in zip(fields, seps))
    _check_fast_paths([text, text.rstrip(), fen])


@HYP
@given(st.lists(st.one_of(mutated_fens, st.text(alphabet=FEN_ALPHABET, max_size=90)),
                min_size=1, max_size=20))
def test_fast_paths_agree_on_mutations(fens):
    _check_fast_paths(fens + POOL[:5])
