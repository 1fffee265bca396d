"""Cross-check of tuner.chess against python-chess on real positions.

Positions: a fixed random sample of selfplay-std (standard) and selfplay-dfrc (DFRC, Shredder-FEN
castling) plus every FEN of the spec's clockwork-eval-vectors.jsonl. For each position: piece
placement, side to move, castling rook files, en passant, clocks, phase, piece_on, every piece's
attack set (python-chess ``attacks_mask`` = the spec model: no x-ray, pins ignored), every
square's attacker count per colour, attackers_to, and the FEN round trip.
"""

import json
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

import chess  # noqa: E402  (the dev extra installs it; a missing one is a failure)

import shared  # noqa: E402
import magic_sliders  # noqa: E402

from tuner.chess import attacks as A  # noqa: E402
from tuner.chess import bitboard as B  # noqa: E402
from tuner.chess.fen import parse_fen, parse_fen_list, to_fen, to_fens  # noqa: E402
from tuner.chess.position import (  # noqa: E402
    NO_PIECE, W_BLACK, W_META, W_PAWN, W_WHITE, castling_rook_file, ep_square, fullmove_number,
    halfmove_clock, phase, piece_on, side_to_move)

DATASETS = str(shared.DATASETS)
SPEC = str(shared.SPEC)
N_STD = 14000
N_DFRC = 8000
# python-chess's own attackers() is slow (~1 ms/position); it is checked on this many positions
# per source, and the full samples use counts derived from python-chess attack sets.
N_ATTACKERS = 1500


def _sample(name, n, seed):
    fens = pq.read_table(os.path.join(DATASETS, name), columns=["fen"]).column("fen").to_pylist()
    rng = np.random.default_rng(seed)
    idx = np.sort(rng.choice(len(fens), size=min(n, len(fens)), replace=False))
    return [fens[i] for i in idx]


@pytest.fixture(scope="module")
def samples():
    vec = [json.loads(line)["fen"] for line in open(os.path.join(SPEC, "clockwork-eval-vectors.jsonl"))]
    return {
        "std": _sample("selfplay-std.parquet", N_STD, 1),
        "dfrc": _sample("selfplay-dfrc.parquet", N_DFRC, 2),
        "vectors": vec,
    }


def _reference(fens):
    """python-chess view of each FEN: words, attack table and attacker counts."""
    n = len(fens)
    words = np.zeros((n, 8), np.uint64)
    att = np.zeros((n, 64), np.uint64)
    colour_of = np.zeros((n, 64), np.int8)  # 0 white, 1 black, -1 empty
    boards = []
    for i, fen in enumerate(fens):
        b = chess.Board(fen, chess960=True)
        boards.append(b)
        words[i] = [b.occupied_co[chess.WHITE], b.occupied_co[chess.BLACK], b.pawns, b.knights,
                    b.bishops, b.rooks, b.queens, b.kings]
        colour_of[i] = -1
        for s in chess.scan_forward(b.occupied):
            att[i, s] = b.attacks_mask(s)
            colour_of[i, s] = 0 if b.color_at(s) == chess.WHITE else 1
    # counts[i, c, s] = number of colour-c pieces whose attack set holds s
    counts = np.zeros((n, 2, 64), np.int32)
    for s in range(64):
        hit = ((att >> np.uint64(s)) & np.uint64(1)).astype(bool)
        for c in (0, 1):
            counts[:, c, s] = np.count_nonzero(hit & (colour_of == c), axis=1)
    return boards, words, att, counts


@pytest.fixture(scope="module", params=["std", "dfrc", "vectors"])
def checked(request, samples):
    fens = samples[request.param]
    positions, status = parse_fen_list(fens)
    assert np.all(status == 0), [fens[i] for i in np.flatnonzero(status)[:5]]
    boards, words, att, counts = _reference(fens)
    return request.param, fens, positions, boards, words, att, counts


def test_sample_sizes(samples):
    total = sum(len(v) for v in samples.values())
    assert len(samples["std"]) == N_STD and len(samples["dfrc"]) == N_DFRC
    assert len(samples["vectors"]) == 3024
    assert total >= 20000


def test_placement_and_meta(checked):
    name, fens, positions, boards, words, _, _ = checked
    np.testing.assert_array_equal(positions[:, :8], words)
    for i, b in enumerate(boards):
        pos = positions[i]
        assert side_to_move(pos) == (0 if b.turn == chess.WHITE else 1)
        assert (int(pos[W_META]) & 1) == (0 if b.turn == chess.WHITE else 1)
        assert halfmove_clock(pos) == b.halfmove_clock
        assert fullmove_number(pos) == b.fullmove_number
        # python-chess keeps the FEN's en passant square as written
        assert ep_square(pos) == (-1 if b.ep_square is None else b.ep_square)
        # castling rook files == python-chess's cleaned castling rights (chess960 mode)
        rights = b.clean_castling_rights()
        for colour, back in ((0, chess.BB_RANK_1), (1, chess.BB_RANK_8)):
            ksq = b.king(chess.WHITE if colour == 0 else chess.BLACK)
            got = set()
            for qs in (False, True):
                f = castling_rook_file(pos, colour, qs)
                if f >= 0:
                    sq = (0 if colour == 0 else 56) + f
                    assert (sq > ksq) == (not qs)
                    got.add(sq)
            assert got == set(chess.scan_forward(rights & back)), fens[i]
        p = (bin(b.knights).count("1") + bin(b.bishops).count("1") + 2 * bin(b.rooks).count("1")
             + 4 * bin(b.queens).count("1"))
        assert phase(pos) == min(p, 24)


def test_piece_on(checked):
    _, _, positions, boards, _, _, _ = checked
    for i in range(0, len(boards), 7):
        pos, b = positions[i], boards[i]
        for s in range(64):
            pc = b.piece_at(s)
            want = -1 if pc is None else (pc.piece_type - 1) + (0 if pc.color == chess.WHITE else 6)
            assert piece_on(pos, s) == want


def test_round_trip(checked):
    name, fens, positions, _, _, _, _ = checked
    assert to_fens(positions) == fens
    for i in range(0, len(fens), 97):
        assert to_fen(positions[i]) == fens[i]
        np.testing.assert_array_equal(parse_fen(fens[i]), positions[i])


def test_piece_attack_sets(checked):
    _, fens, positions, _, _, att, _ = checked
    got = A.piece_attack_table(positions)
    bad = np.argwhere(got != att)
    assert len(bad) == 0, [(fens[i], s, hex(int(got[i, s])), hex(int(att[i, s]))) for i, s in bad[:5]]


def test_attacker_counts(checked):
    _, fens, positions, _, _, _, counts = checked
    got = A.attacker_count_table(positions)
    bad = np.argwhere(got != counts)
    assert len(bad) == 0, [(fens[i], c, s, got[i, c, s], counts[i, c, s]) for i, c, s in bad[:5]]
    # the njit single-position entry point with a caller-provided buffer
    out = np.full((2, 64), -7, np.int32)
    A.attacker_counts(positions[0], out)
    np.testing.assert_array_equal(out, counts[0])


def test_attackers_against_python_chess_attackers(checked):
    """len(board.attackers(colour, sq)) for every square, on a subset (python-chess is slow)."""
    _, fens, positions, boards, _, _, _ = checked
    idx = np.linspace(0, len(fens) - 1, min(N_ATTACKERS, len(fens))).astype(int)
    counts = A.attacker_count_table(positions[idx])
    sets = A.attackers_to_table(positions[idx])
    for k, i in enumerate(idx):
        b = boards[i]
        for c, colour in ((0, chess.WHITE), (1, chess.BLACK)):
            for s in range(64):
                mask = b.attackers_mask(colour, s)
                assert int(sets[k, c, s]) == mask, (fens[i], c, s)
                assert counts[k, c, s] == bin(mask).count("1"), (fens[i], c, s)


def test_single_piece_functions(checked):
    """The public per-piece functions agree with python-chess attack sets directly."""
    _, fens, positions, boards, _, att, _ = checked
    for i in range(0, len(boards), 11):
        pos = positions[i]
        occ = int(pos[W_WHITE] | pos[W_BLACK])
        for s in chess.scan_forward(occ):
            pt = boards[i].piece_type_at(s)
            colour = 0 if boards[i].color_at(s) == chess.WHITE else 1
            fn = {chess.PAWN: lambda: A.pawn_attacks(s, colour), chess.KNIGHT: lambda: A.knight_attacks(s),
                  chess.BISHOP: lambda: A.bishop_attacks(s, np.uint64(occ)),
                  chess.ROOK: lambda: A.rook_attacks(s, np.uint64(occ)),
                  chess.QUEEN: lambda: A.queen_attacks(s, np.uint64(occ)),
                  chess.KING: lambda: A.king_attacks(s)}[pt]
            assert int(fn()) == int(att[i, s])
            assert int(A.piece_attacks(pt - 1, colour, s, np.uint64(occ))) == int(att[i, s])
        # pawn set attacks == union of single pawn attacks
        for colour in (0, 1):
            pawns = int(pos[colour] & pos[W_PAWN])
            union = 0
            for s in chess.scan_forward(pawns):
                union |= int(att[i, s])
            assert int(A.pawn_attacks_set(np.uint64(pawns), colour)) == union


def test_sliders_exhaustive_against_magic():
    """Classical ray attacks == magic lookups == python-chess on random occupancies."""
    rng = np.random.default_rng(7)
    occs = rng.integers(0, 2**63, size=400, dtype=np.uint64) * np.uint64(2) + rng.integers(
        0, 2, size=400, dtype=np.uint64)
    sparse = occs & rng.integers(0, 2**63, size=400, dtype=np.uint64) & rng.integers(
        0, 2**63, size=400, dtype=np.uint64)
    for occ in list(occs[:120]) + list(sparse) + [np.uint64(0), np.uint64(2**64 - 1)]:
        for s in range(0, 64, 3):
            r = int(A.rook_attacks(s, occ))
            b = int(A.bishop_attacks(s, occ))
            assert r == int(magic_sliders.rook_attacks_magic(s, occ))
            assert b == int(magic_sliders.bishop_attacks_magic(s, occ))
            assert r == (chess.BB_RANK_ATTACKS[s][int(occ) & chess.BB_RANK_MASKS[s]]
                         | chess.BB_FILE_ATTACKS[s][int(occ) & chess.BB_FILE_MASKS[s]])
            assert b == chess.BB_DIAG_ATTACKS[s][int(occ) & chess.BB_DIAG_MASKS[s]]


def test_spec_worked_examples():
    """docs/reference-eval.md section 4.3 examples."""
    start = parse_fen("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1")
    assert int(A.attacks_from(start, chess.A1)) == chess.BB_A2 | chess.BB_B1
    assert int(A.attacks_from(start, chess.D1)) == (chess.BB_C1 | chess.BB_E1 | chess.BB_C2
                                                    | chess.BB_D2 | chess.BB_E2)
    pos = parse_fen("4k3/8/P7/8/8/8/8/R3K3 w - - 0 1")
    counts = np.zeros((2, 64), np.int32)
    A.attacker_counts(pos, counts)
    # the rook attacks a2..a6 (a6 holds the first blocker) but not a7 (no x-ray); the a6 pawn
    # attacks b7 only
    assert counts[0, chess.A6] == 1 and counts[0, chess.A7] == 0 and counts[0, chess.B7] == 1
    assert int(A.rook_attacks(chess.A1, pos[W_WHITE] | pos[W_BLACK])) == (
        chess.BB_A2 | chess.BB_A3 | chess.BB_A4 | chess.BB_A5 | chess.BB_A6 | chess.BB_B1
        | chess.BB_C1 | chess.BB_D1 | chess.BB_E1)
    # section 4.2 example (section 9.3 position): b6 attacked by the c5 pawn only
    pos = parse_fen("8/3k4/8/2P5/8/8/8/4K3 w - - 0 1")
    A.attacker_counts(pos, counts)
    assert counts[0, chess.B6] == 1 and counts[1, chess.B6] == 0
    # empty square: attacks_from is 0; piece_on is -1
    assert int(A.attacks_from(pos, chess.A1)) == 0 and piece_on(pos, chess.A1) == NO_PIECE


def test_bitboard_helpers_on_positions(checked):
    _, _, positions, _, _, _, _ = checked
    for pos in positions[::53]:
        occ = int(pos[W_WHITE] | pos[W_BLACK])
        assert B.popcount(np.uint64(occ)) == bin(occ).count("1")
        assert B.lsb(np.uint64(occ)) == (occ & -occ).bit_length() - 1
        assert B.msb(np.uint64(occ)) == occ.bit_length() - 1
        assert int(pos[W_BLACK]) & int(pos[W_WHITE]) == 0


def test_njit_types_are_uint64():
    from numba import types

    occ = np.uint64(0x0000FFFF0000FFFF)
    pos = parse_fen("r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1")
    # call each entry point from Python so that its dispatcher holds a compiled signature
    A.rook_attacks(5, occ), A.bishop_attacks(5, occ), A.queen_attacks(5, occ)
    A.knight_attacks(5), A.king_attacks(5), A.pawn_attacks(5, 0), A.pawn_attacks_set(occ, 0)
    A.attacks_from(pos, 0), A.attackers_to(pos, 3, 0)
    A.rook_attacks(5, 12345), A.pawn_attacks_set(12345, 1)  # signed ints are accepted
    for fn in (A.rook_attacks, A.bishop_attacks, A.queen_attacks, A.knight_attacks,
               A.king_attacks, A.pawn_attacks, A.pawn_attacks_set, A.attacks_from,
               A.attackers_to):
        sigs = fn.nopython_signatures
        assert sigs and all(sig.return_type == types.uint64 for sig in sigs), fn
