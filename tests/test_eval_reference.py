"""A slow, independent implementation of docs/reference-eval.md sections 4-6 (python-chess attacks,
absolute coordinates, one colour at a time) checked against the njit evaluation on positions the
shared data does not contain: random games with forced promotions (extra queens, 3+ bishops, ...)."""
import random
from collections import Counter

import chess
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shared
from tuner.chess.fen import parse_fen_list
from tuner.evals import clockwork as cw

REG = cw.registry()
IDX = REG.index

LIGHT = 0x55AA55AA55AA55AA
CENTRAL = 0x3C3C3C3C3C3C3C3C
FULL = (1 << 64) - 1


def bits(bb):
    while bb:
        low = bb & -bb
        yield low.bit_length() - 1
        bb ^= low


def pc(bb):
    return bin(bb).count("1")


def rr(s, c):
    return s >> 3 if c == chess.WHITE else 7 - (s >> 3)


def ray_set(board, k, dirs):
    """Squares along each ray from k up to and including the first occupied square."""
    out = 0
    for df, dr in dirs:
        f, r = k & 7, k >> 3
        while True:
            f, r = f + df, r + dr
            if not (0 <= f < 8 and 0 <= r < 8):
                break
            out |= 1 << (8 * r + f)
            if board.occupied & (1 << (8 * r + f)):
                break
    return out


ORTHO = ((1, 0), (-1, 0), (0, 1), (0, -1))
DIAG = ((1, 1), (1, -1), (-1, 1), (-1, -1))


def reference_counts(board):
    cnt = Counter()
    for c in (chess.WHITE, chess.BLACK):
        sg = 1 if c == chess.WHITE else -1
        o = not c
        k = board.king(c)
        ko = board.king(o)
        P = int(board.pieces(chess.PAWN, c))
        Po = int(board.pieces(chess.PAWN, o))
        fwd = 8 if c == chess.WHITE else -8

        def att(sq):
            return int(board.attacks(sq))

        # PSQT and material
        mirror = 7 if (k & 7) >= 4 else 0
        names = {chess.PAWN: "PAWN", chess.KNIGHT: "KNIGHT", chess.BISHOP: "BISHOP",
                 chess.ROOK: "ROOK", chess.QUEEN: "QUEEN", chess.KING: "KING"}
        for pt, name in names.items():
            for s in board.pieces(pt, c):
                t = (s ^ 56 if c == chess.WHITE else s) ^ mirror
                if pt == chess.PAWN:
                    t -= 8
                cnt[IDX(f"{name}_PSQT", t)] += sg
                if pt != chess.KING:
                    cnt[IDX(f"{name}_MAT")] += sg

        # pieces(): mobility, king ring, bishop pawns, bishop pair
        blocked = sum(1 << s for s in bits(P) if board.occupied & (1 << (s + fwd)))
        early = sum(1 << s for s in bits(P) if rr(s, c) in (1, 2))
        enemy_pawn_att = 0
        for s in bits(Po):
            enemy_pawn_att |= att(s)
        own_pawn_att = 0
        for s in bits(P):
            own_pawn_att |= att(s)
        mob_mask = FULL & ~(blocked | early | enemy_pawn_att)
        ring = int(board.attacks(ko)) | (1 << ko)
        for pt, name in ((chess.KNIGHT, "KNIGHT"), (chess.BISHOP, "BISHOP"), (chess.ROOK, "ROOK"),
                         (chess.QUEEN, "QUEEN")):
            for s in board.pieces(pt, c):
                a = att(s)
                cnt[IDX(f"{name}_MOBILITY", pc(a & mob_mask))] += sg
                cnt[IDX(f"{name}_KING_RING", pc(a & ring))] += sg
                if pt == chess.BISHOP:
                    same = LIGHT if (LIGHT >> s) & 1 else FULL & ~LIGHT
                    n = min(8, pc(P & same))
                    m = (0 if (own_pawn_att >> s) & 1 else 1) + pc(blocked & CENTRAL)
                    cnt[IDX("BISHOP_PAWNS", n)] += sg * m
        cnt[IDX("KING_MOBILITY", pc(att(k) & mob_mask))] += sg
        if len(board.pieces(chess.BISHOP, c)) >= 2:
            cnt[IDX("BISHOP_PAIR_VAL")] += sg

        # pawns()
        cnt[IDX("DOUBLED_PAWN_VAL")] += sg * pc(P & (P << 8))
        for s in bits(P):
            f = s & 7
            ahead = [e for e in bits(Po) if abs((e & 7) - f) <= 1 and rr(e, c) > rr(s, c)]
            if not ahead:
                i = rr(s, c) - 1
                q = s + fwd
                cnt[IDX("PASSED_PAWN", i)] += sg
                if len(board.attackers(c, q)) > len(board.attackers(o, q)):
                    cnt[IDX("DEFENDED_PASSED_PUSH", i)] += sg
                if board.occupied & (1 << q):
                    cnt[IDX("BLOCKED_PASSED_PAWN", i)] += sg
                cnt[IDX("FRIENDLY_KING_PASSED_PAWN_DISTANCE", chess.square_distance(k, s))] += sg
                cnt[IDX("ENEMY_KING_PASSED_PAWN_DISTANCE", chess.square_distance(ko, s))] += sg
            if f > 0 and (P >> (s - 1)) & 1:
                cnt[IDX("PAWN_PHALANX", rr(s, c) - 1)] += sg
            if (own_pawn_att >> s) & 1:
                cnt[IDX("DEFENDED_PAWN", rr(s, c) - 2)] += sg

        # pawn push threats
        T = 0
        for s in bits(P):
            q = s + fwd
            if not board.occupied & (1 << q):
                T |= int(chess.BB_PAWN_ATTACKS[c][q])
        for pt, name in ((chess.KNIGHT, "KNIGHT"), (chess.BISHOP, "BISHOP"), (chess.ROOK, "ROOK"),
                         (chess.QUEEN, "QUEEN")):
            cnt[IDX(f"PAWN_PUSH_THREAT_{name}")] += sg * pc(T & int(board.pieces(pt, o)))

        # potential checkers against c's king (a penalty for c)
        s_n = int(chess.BB_KNIGHT_ATTACKS[k])
        s_o = ray_set(board, k, ORTHO)
        s_d = ray_set(board, k, DIAG)
        n = 0
        for x in board.pieces(chess.KNIGHT, o):
            n += pc(att(x) & s_n)
        for x in board.pieces(chess.ROOK, o) | board.pieces(chess.QUEEN, o):
            n += pc(att(x) & s_o)
        for x in board.pieces(chess.BISHOP, o) | board.pieces(chess.QUEEN, o):
            n += pc(att(x) & s_d)
        cnt[IDX("POTENTIAL_CHECKER_VAL")] += sg * n

        # threats
        by_type = {}
        for pt in (chess.PAWN, chess.KNIGHT, chess.BISHOP):
            u = 0
            for s in board.pieces(pt, c):
                u |= att(s)
            by_type[pt] = u
        for src, sname, targets in ((chess.PAWN, "PAWN", ("KNIGHT", "BISHOP", "ROOK", "QUEEN")),
                                    (chess.KNIGHT, "KNIGHT", ("BISHOP", "ROOK", "QUEEN")),
                                    (chess.BISHOP, "BISHOP", ("KNIGHT", "ROOK", "QUEEN"))):
            for tname in targets:
                tp = getattr(chess, tname)
                cnt[IDX(f"{sname}_THREAT_{tname}")] += sg * pc(by_type[src] & int(board.pieces(tp, o)))

        # rook files
        own_files = {s & 7 for s in bits(P)}
        their_files = {s & 7 for s in bits(Po)}
        for s in board.pieces(chess.ROOK, c):
            f = s & 7
            if f not in own_files and f not in their_files:
                cnt[IDX("ROOK_OPEN_VAL")] += sg
            elif f not in own_files:
                cnt[IDX("ROOK_SEMIOPEN_VAL")] += sg

        # outposts
        ranks = {3, 4, 5}
        for pt, name in ((chess.KNIGHT, "KNIGHT"), (chess.BISHOP, "BISHOP")):
            for s in board.pieces(pt, c):
                if rr(s, c) in ranks and (own_pawn_att >> s) & 1 and not (enemy_pawn_att >> s) & 1:
                    cnt[IDX(f"OUTPOST_{name}_VAL")] += sg

    cnt[IDX("TEMPO_VAL")] += 1 if board.turn == chess.WHITE else -1
    dense = np.zeros(REG.n_params, np.int64)
    for j, v in cnt.items():
        dense[j] += v
    return dense


def random_game_positions(seed, plies=160, promote_bias=0.7):
    """Positions along a random game that prefers promotions and pawn pushes."""
    rng = random.Random(seed)
    board = chess.Board()
    out = []
    for _ in range(plies):
        moves = list(board.legal_moves)
        if not moves or board.is_game_over():
            break
        promos = [m for m in moves if m.promotion]
        pushes = [m for m in moves if board.piece_type_at(m.from_square) == chess.PAWN]
        if promos and rng.random() < promote_bias:
            move = rng.choice(promos)
        elif pushes and rng.random() < 0.4:
            move = rng.choice(pushes)
        else:
            move = rng.choice(moves)
        board.push(move)
        out.append(board.copy(stack=False))
    return out


def _check(boards):
    fens = [b.fen() for b in boards]
    pos, status = parse_fen_list(fens)
    assert not status.any()
    counts, phases = cw.feature_counts(pos)
    for i, b in enumerate(boards):
        ref = reference_counts(b)
        if not np.array_equal(counts[i], ref):
            names = REG.entry_names()
            diff = {names[j]: (int(counts[i, j]), int(ref[j])) for j in np.nonzero(counts[i] != ref)[0]}
            pytest.fail(f"{fens[i]}: (njit, reference) {diff}")
        npc = sum(len(b.pieces(t, c)) * w for t, w in ((chess.KNIGHT, 1), (chess.BISHOP, 1),
                                                       (chess.ROOK, 2), (chess.QUEEN, 4))
                  for c in (chess.WHITE, chess.BLACK))
        assert phases[i] == min(24, npc)


def test_reference_on_worked_examples():
    _check([chess.Board(f) for f in (
        "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
        "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1",
        "8/3k4/8/1PP3p1/6P1/p4K2/R7/7r w - - 0 45",
        "QQQQQQQQ/QQQQQQQ1/8/8/8/8/8/k6K b - - 0 1",  # Black to move: White to move is illegal
        "1k6/8/8/8/8/8/8/BBBBKBBB b - - 0 1",
    )])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2 ** 32 - 1))
def test_reference_on_random_promotion_games(seed):
    _check(random_game_positions(seed))


VECTORS = str(shared.SPEC / "clockwork-eval-vectors.jsonl")


def test_reference_itself_matches_engine_vectors():
    """The oracle above is only worth something if it reproduces the engine's own counts."""
    import json
    with open(VECTORS) as f:
        vs = [json.loads(line) for k, line in enumerate(f) if k % 8 == 0]
    for v in vs:
        exp = np.zeros(REG.n_params, np.int64)
        for j, c in v["features"].items():
            exp[int(j)] = c
        assert np.array_equal(reference_counts(chess.Board(v["fen"], chess960=True)), exp), v["fen"]
