"""A slow, plain-Python reference of Clockwork's evaluation at engine commit 10d79e6.

Written feature by feature from the engine's ``src/evaluation.cpp`` (with ``eval_types.hpp``,
``evaluation.hpp``, ``psqt_state.hpp``, ``position.hpp``, ``bitboard.hpp``, ``square.hpp`` and
``tuning/graph.cpp`` for the tuning build), independently of the compiled implementation. Board
logic (piece placement, pseudo-attacks, side to move) comes from python-chess; everything else is
plain Python integers on 64-bit masks. Parameter values are read at run time from
``clockwork-head-params.json`` in the shared spec folder (``tests/shared.py``'s ``SPEC``).

``reference_eval(board, params=None)`` returns a dict:

* ``white_pov``: the engine's integer evaluation ``evaluate_white_pov`` (i16 sums, the 256-entry
  sigmoid table with fixed-point interpolation, winnable, eg scale, truncating phase blend);
  ``None`` if some parameter is not an integer (the integer engine only exists for integer params).
* ``continuous``: the tuning build's f64 value (exact sigmoid, ``eg * (alpha/128)``, no rounding).
* ``linear``: the linear sum L = (mg, eg), White minus Black, **excluding** tempo: material + PSQT,
  pawns, pieces, outposts, space, threats, pawn-push threats and potential checkers.
* ``tempo``: +TEMPO_VAL if White is to move, else -TEMPO_VAL (added after the activations).
* ``attack_white`` (A_W, White attacking Black's king: ``evaluate_king_safety<Black>``) and
  ``attack_black`` (A_B, ``evaluate_king_safety<White>``): the king-safety pre-activation sums.
* ``act_white``, ``act_black``: the integer engine's table activations of A_W and A_B.
* ``pre_winnable``: S = L + act(A_W) - act(A_B) + tempo as the engine's i16 pair.
* ``winnable``: the i16 value w (before the sign flip) and ``winnable_counts``: the inputs
  (pawns, sym_files, asym_files, pawn_endgame).
* ``post_winnable``, ``alpha`` (the eg scale factor out of 128), ``post_scale`` (integer engine);
  ``alpha_continuous`` and the ``continuous_*`` intermediates of the tuning build.
* ``phase`` (min(24, white_phase + black_phase)), ``white_phase``, ``black_phase`` (unclamped),
  ``passers`` (white, black).
* ``counts``: the net feature counts of L, of A_W and of A_B, as three dicts
  ``(name, flat index within the parameter) -> count``.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from functools import lru_cache

import chess

import shared
from test_eval_reference import DIAG, ORTHO, ray_set

PARAMS_JSON = shared.SPEC / "clockwork-head" / "clockwork-head-params.json"

FULL = (1 << 64) - 1
FILE_A = 0x0101010101010101
FILE_H = FILE_A << 7
LIGHT = 0x55AA55AA55AA55AA          # Bitboard::squares_of_color(White): (file + rank) odd
DARK = 0xAA55AA55AA55AA55
CENTRAL_FILES = 0x3C3C3C3C3C3C3C3C  # Bitboard::central_files(): files c..f
WHITE, BLACK = chess.WHITE, chess.BLACK
PAWN, KNIGHT, BISHOP, ROOK, QUEEN, KING = (chess.PAWN, chess.KNIGHT, chess.BISHOP, chess.ROOK,
                                           chess.QUEEN, chess.KING)
# python-chess's piece types are 1..6 in the engine's PieceType order (Pawn = 1 ... King = 6), so
# the engine's "pt - PieceType::Pawn" table index is pt - 1 here.
NAMES = {PAWN: "PAWN", KNIGHT: "KNIGHT", BISHOP: "BISHOP", ROOK: "ROOK", QUEEN: "QUEEN",
         KING: "KING"}

SIGMOID_B = 32                     # TunableSigmoid<32>
LN_39 = 3.6635616461296463         # TunableSigmoid::LN_39
TABLE_SIZE = 256
FP_SHIFT = 16


# ------------------------------------------------------------------------------------------------
# parameters


def load_params(path=PARAMS_JSON):
    """{name: list of values}: pairs as (mg, eg) tuples, value (scalar) parameters as numbers,
    flattened row-major as in the JSON. Also returns the JSON's entry list (for flat offsets)."""
    with open(path) as f:
        doc = json.load(f)
    out = {}
    for e in doc["params"]:
        if e["kind"] == "pair":
            out[e["name"]] = [tuple(v) for v in e["values"]]
        else:
            out[e["name"]] = list(e["values"])
    return out, doc["params"]


@lru_cache(maxsize=1)
def default_params():
    return load_params()[0]


@lru_cache(maxsize=1)
def param_layout():
    """[(name, kind, offset, size)] in registration order, from the JSON."""
    entries = load_params()[1]
    return [(e["name"], e["kind"], e["offset"], len(e["values"])) for e in entries]


def params_from_flat(pairs, values):
    """The {name: values} form from flat vectors: ``pairs[i] = (mg, eg)`` at the JSON's pair
    offsets, ``values[j]`` at its value offsets (the tuner's two flat parameter vectors)."""
    out = {}
    for name, kind, off, size in param_layout():
        if kind == "pair":
            out[name] = [(pairs[off + i][0], pairs[off + i][1]) for i in range(size)]
        else:
            out[name] = [values[off + i] for i in range(size)]
    return out


def _resolve(params):
    if params is None:
        return default_params()
    if isinstance(params, dict):
        merged = dict(default_params())
        merged.update(params)
        return merged
    pairs, values = params
    return params_from_flat(pairs, values)


# ------------------------------------------------------------------------------------------------
# integer helpers (C++ semantics)


def i16(x):
    """static_cast<i16>: wrap to a signed 16-bit value."""
    return ((x + 0x8000) & 0xFFFF) - 0x8000


def unpack(mg, eg):
    """(mg(), eg()) of the engine's packed PScore holding the exact sums (mg, eg): the i32
    ``eg * 65536 + mg`` (mod 2^32), low half and rounded high half (eval_types.hpp PScore)."""
    packed = (eg * 65536 + mg) & 0xFFFFFFFF
    return i16(packed & 0xFFFF), i16(((packed + 0x8000) & 0xFFFFFFFF) >> 16)


def cdiv(a, b):
    """C++ integer division (truncation toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def lround(v):
    """std::lround: nearest integer, halves away from zero."""
    f = math.floor(v)
    d = v - f
    if d > 0.5 or (d == 0.5 and v > 0):
        return f + 1
    return f


def pc(bb):
    return bin(bb).count("1")


def bits(bb):
    while bb:
        low = bb & -bb
        yield low.bit_length() - 1
        bb ^= low


def lsb(bb):
    return (bb & -bb).bit_length() - 1


def msb(bb):
    return bb.bit_length() - 1


# Bitboard::shift (bitboard.hpp): no wrapping across the a/h files, bits leaving the board drop.
def north(b):
    return (b << 8) & FULL


def south(b):
    return b >> 8


def east(b):
    return ((b & ~FILE_H) << 1) & FULL


def west(b):
    return (b & ~FILE_A) >> 1


def north_east(b):
    return ((b & ~FILE_H) << 9) & FULL


def north_west(b):
    return ((b & ~FILE_A) << 7) & FULL


def south_east(b):
    return (b & ~FILE_H) >> 7


def south_west(b):
    return (b & ~FILE_A) >> 9


def rel_north(c, b):
    """shift_relative(c, North): board north for White, south for Black."""
    return north(b) if c == WHITE else south(b)


def rel_south(c, b):
    return south(b) if c == WHITE else north(b)


def rel_north_east(c, b):
    return north_east(b) if c == WHITE else south_west(b)


def rel_north_west(c, b):
    return north_west(b) if c == WHITE else south_east(b)


def file_mask(f):
    return FILE_A << f


def rank_mask(r):
    return 0xFF << (8 * r)


def fill_verticals(b):
    """Bitboard::fill_verticals: every file holding a member, as full files."""
    out = 0
    for f in range(8):
        if b & file_mask(f):
            out |= file_mask(f)
    return out


def relative_rank(sq, c):
    return chess.square_rank(sq) if c == WHITE else 7 - chess.square_rank(sq)


def forward_ranks(c, sq):
    """Bitboard::forward_ranks(c, sq): the ranks strictly ahead of sq from c's side."""
    r = chess.square_rank(sq)
    if c == WHITE:
        return sum(rank_mask(k) for k in range(r + 1, 8))
    return sum(rank_mask(k) for k in range(0, r))


def chebyshev(a, b):
    return max(abs(chess.square_file(a) - chess.square_file(b)),
               abs(chess.square_rank(a) - chess.square_rank(b)))


def _ring(sq):
    """king_ring_table[sq]: the square and its up to 8 neighbours."""
    b = 1 << sq
    return b | north(b) | south(b) | east(b) | west(b) | north_east(b) | south_east(b) \
        | north_west(b) | south_west(b)


def _extended_ring(sq):
    """extended_ring_table[sq]: the ring grown by one more step (5x5 clipped to the board)."""
    b = _ring(sq)
    return b | north(b) | south(b) | east(b) | west(b) | north_east(b) | south_east(b) \
        | north_west(b) | south_west(b)


def _full_diagonals(sq):
    """diagonal_squares_table[sq]: both full diagonals through sq, blockers ignored, sq excluded."""
    out = 0
    for step in (north_east, north_west, south_east, south_west):
        b = 1 << sq
        for _ in range(7):
            b |= step(b)
        out |= b
    return out & ~(1 << sq)


def _passed_span(c, sq):
    """passed_pawn_spans[c][sq]: own and adjacent files, strictly ahead of sq from c's side."""
    m = rel_north(c, 1 << sq)
    m |= east(m) | west(m)
    for _ in range(8):
        m |= rel_north(c, m)
    return m


def _king_flank(c, f):
    """king_flank[c][f] (evaluation.hpp): 4 files by the king's file, ranks 1-5 / 4-8."""
    start = (0, 0, 0, 2, 2, 4, 4, 4)[f]
    files = sum(file_mask(k) for k in range(start, start + 4))
    ranks = sum(rank_mask(r) for r in ((0, 1, 2, 3, 4) if c == WHITE else (3, 4, 5, 6, 7)))
    return files & ranks




# ------------------------------------------------------------------------------------------------
# the sigmoid king-safety activation (TunableSigmoid<32>, eval_types.hpp)


@lru_cache(maxsize=64)
def sigmoid_table(a, c):
    """TunableSigmoid::build_table for one component: (range_min, range_max, scale_fp, values)."""
    bound = SIGMOID_B * LN_39
    range_min = int(-bound) - c          # static_cast<i32> truncates
    range_max = int(bound) - c
    span = range_max - range_min
    scale_fp = ((TABLE_SIZE - 1) << FP_SHIFT) // span
    values = []
    for i in range(TABLE_SIZE):
        t = i / (TABLE_SIZE - 1)
        x = range_min + t * span
        z = (x + c) / SIGMOID_B
        sig = 1.0 / (1.0 + math.exp(-z))
        values.append(i16(lround(a * sig)))
    return range_min, range_max, scale_fp, tuple(values)


def sigmoid_lookup(x, table):
    """TunableSigmoid::lookup: clamp, 16.16 fixed point index, linear interpolation."""
    range_min, range_max, scale_fp, values = table
    x = min(max(x, range_min), range_max)
    idx_fp = (x - range_min) * scale_fp
    idx = idx_fp >> FP_SHIFT
    frac = idx_fp & ((1 << FP_SHIFT) - 1)
    v0 = values[idx]
    v1 = values[min(idx + 1, TABLE_SIZE - 1)]
    return i16(v0 + (((v1 - v0) * frac) >> FP_SHIFT))


def sigmoid_continuous(x, a, c):
    """The tuning build's TunableSigmoid::operator(): a * sigmoid(x / B + c / B), f64."""
    z = x / float(SIGMOID_B) + c / float(SIGMOID_B)
    return a * (1.0 / (1.0 + math.exp(-z)))


# ------------------------------------------------------------------------------------------------
# attack data (EvalData::init, Position attack tables)


class EvalData:
    """Mirror of evaluation.cpp's EvalData: per colour the attacked squares (any, twice or more,
    by piece type), attacker counts per square, piece counts and (filled by evaluate_pieces) the
    mobility area. Attacks are python-chess's pseudo-attacks: sliders stop at and include the
    first occupied square, pawns attack diagonally forward only, pins and checks are ignored."""

    def __init__(self, board):
        self.board = board
        self.count = {WHITE: [0] * 64, BLACK: [0] * 64}      # attack_table(c).read(sq).popcount()
        self.by_pt = {WHITE: dict.fromkeys(range(1, 7), 0), BLACK: dict.fromkeys(range(1, 7), 0)}
        self.piece_att = {}                                   # square -> attack set of its piece
        for sq, piece in board.piece_map().items():
            a = int(board.attacks(sq))
            self.piece_att[sq] = a
            self.by_pt[piece.color][piece.piece_type] |= a
            cnt = self.count[piece.color]
            for s in bits(a):
                cnt[s] += 1
        self.any = {c: sum(1 << s for s in range(64) if self.count[c][s] >= 1) for c in (WHITE, BLACK)}
        self.two = {c: sum(1 << s for s in range(64) if self.count[c][s] >= 2) for c in (WHITE, BLACK)}
        self.mobility_area = {}

    def attacked_by(self, c, pt=None):
        return self.any[c] if pt is None else self.by_pt[c][pt]

    def attacked_by_2(self, c):
        return self.two[c]


def bb(board, pt, c):
    return int(board.pieces(pt, c))


# ------------------------------------------------------------------------------------------------
# the evaluation terms; each adds (name, index) -> count to a Counter for colour c's side


def psqt(board, c, out):
    """PsqtState(pos) / PsqtState::add_piece: material + piece-square table per piece. White's
    squares are flipped vertically; a side whose own king is on files e..h is flipped
    horizontally; pawns index PAWN_PSQT[sq - 8]."""
    mirror = 7 if chess.square_file(board.king(c)) >= 4 else 0
    for sq, piece in board.piece_map().items():
        if piece.color != c:
            continue
        t = (sq ^ 56 if c == WHITE else sq) ^ mirror
        name = NAMES[piece.piece_type]
        if piece.piece_type == PAWN:
            out[(name + "_PSQT", t - 8)] += 1
        else:
            out[(name + "_PSQT", t)] += 1
        if piece.piece_type != KING:
            out[(name + "_MAT", 0)] += 1


def evaluate_pawns(board, data, c, out):
    """evaluate_pawns<color>: doubled, isolated, passed pawns (with their clear-path, push,
    blocked and king-distance terms), phalanx, defended pawns. Returns the number of passers."""
    them = not c
    our_king, their_king = board.king(c), board.king(them)
    pawns, opp_pawns = bb(board, PAWN, c), bb(board, PAWN, them)
    occ = int(board.occupied)

    pawn_files = fill_verticals(pawns)
    doubled = pawns & north(pawns)                 # absolute north, for both colours
    isolated = pawns & ~(east(pawn_files) | west(pawn_files))
    out[("DOUBLED_PAWN_VAL", 0)] += pc(doubled)
    out[("ISOLATED_PAWN_VAL", 0)] += pc(isolated)

    passers = 0
    for sq in bits(pawns):
        push = sq + 8 if c == WHITE else sq - 8
        span = _passed_span(c, sq)
        if opp_pawns & span:
            continue
        passers += 1
        i = relative_rank(sq, c) - 1               # RANK_2 = 1
        out[("PASSED_PAWN", i)] += 1
        if not span & data.attacked_by(them):
            out[("PASSED_CLEAR_STOPPERS", i)] += 1
        elif not forward_ranks(c, sq) & file_mask(chess.square_file(sq)) & data.attacked_by(them):
            out[("PASSED_CLEAR_FORWARD", i)] += 1
        elif data.count[c][push] > data.count[them][push]:
            out[("DEFENDED_PASSED_PUSH", i)] += 1
        if occ & (1 << push):
            out[("BLOCKED_PASSED_PAWN", i)] += 1
        out[("FRIENDLY_KING_PASSED_PAWN_DISTANCE", chebyshev(our_king, sq))] += 1
        out[("ENEMY_KING_PASSED_PAWN_DISTANCE", chebyshev(their_king, sq))] += 1

    phalanx = pawns & east(pawns)                  # pawns with an own pawn on their west side
    for sq in bits(phalanx):
        out[("PAWN_PHALANX", relative_rank(sq, c) - 1)] += 1
    defended = pawns & data.attacked_by(c, PAWN)
    for sq in bits(defended):
        out[("DEFENDED_PAWN", relative_rank(sq, c) - 2)] += 1   # RANK_3 = 2
    return passers


def evaluate_pawn_push_threats(board, c, out):
    """evaluate_pawn_push_threats<color>: enemy minors/majors a single pawn push would attack."""
    opp = not c
    pawns = bb(board, PAWN, c)
    occ = int(board.occupied)
    pushable = pawns & ~rel_south(c, occ)
    pushed = rel_north(c, pushable)
    push_attacks = rel_north_east(c, pushed) | rel_north_west(c, pushed)
    for pt in (KNIGHT, BISHOP, ROOK, QUEEN):
        out[("PAWN_PUSH_THREAT_" + NAMES[pt], 0)] += pc(push_attacks & bb(board, pt, opp))


def evaluate_pieces(board, data, c, out):
    """evaluate_pieces<color>: mobility (rooks and queens twice, the second time in a smaller
    area), bishop pawns, bishop x-ray pawns, rook lineups, bishop pair. Sets the mobility area."""
    opp = not c
    own_pawns = bb(board, PAWN, c)
    occ = int(board.occupied)
    blocked_pawns = own_pawns & rel_south(c, occ)
    early_ranks = rank_mask(1) | rank_mask(2) if c == WHITE else rank_mask(5) | rank_mask(6)
    excluded = blocked_pawns | (own_pawns & early_ranks) | data.attacked_by(opp, PAWN)
    area = FULL & ~excluded
    data.mobility_area[c] = area
    excluded2 = excluded

    for sq in bits(bb(board, KNIGHT, c)):
        out[("KNIGHT_MOBILITY", pc(data.piece_att[sq] & area))] += 1
    for sq in bits(bb(board, BISHOP, c)):
        out[("BISHOP_MOBILITY", pc(data.piece_att[sq] & area))] += 1
        same_colour = LIGHT if (LIGHT >> sq) & 1 else DARK
        n = min(8, pc(own_pawns & same_colour))
        pawn_defended = (data.attacked_by(c, PAWN) >> sq) & 1
        out[("BISHOP_PAWNS", n)] += (1 - pawn_defended) + pc(blocked_pawns & CENTRAL_FILES)
        out[("BISHOP_XRAY_PAWNS", 0)] += pc(_full_diagonals(sq) & bb(board, PAWN, opp))
    excluded2 |= data.attacked_by(opp, KNIGHT) | data.attacked_by(opp, BISHOP)
    area2 = FULL & ~excluded2
    queens = bb(board, QUEEN, c) | bb(board, QUEEN, opp)
    for sq in bits(bb(board, ROOK, c)):
        out[("ROOK_MOBILITY", pc(data.piece_att[sq] & area))] += 1
        out[("ROOK_MOBILITY", pc(data.piece_att[sq] & area2))] += 1
        out[("ROOK_LINEUP", 0)] += pc(file_mask(chess.square_file(sq)) & queens)
    excluded2 |= data.attacked_by(opp, ROOK)
    area2 = FULL & ~excluded2
    for sq in bits(bb(board, QUEEN, c)):
        out[("QUEEN_MOBILITY", pc(data.piece_att[sq] & area))] += 1
        out[("QUEEN_MOBILITY", pc(data.piece_att[sq] & area2))] += 1
    if len(board.pieces(BISHOP, c)) >= 2:
        out[("BISHOP_PAIR_VAL", 0)] += 1


def _pawn_fill_forward(c, pawns):
    """pawn_spans<color>(pawns): each pawn and every square ahead of it on its file (shifts by
    1, 2 and 4 ranks, each or-ed in)."""
    def north_n(b, n):
        for _ in range(n):
            b = rel_north(c, b)
        return b
    res = pawns
    res |= north_n(res, 1)
    res |= north_n(res, 2)
    res |= north_n(res, 4)
    return res


def evaluate_outposts(board, data, c, out):
    """evaluate_outposts<color>: knights/bishops on relative ranks 4-6, defended by an own pawn
    and outside the attack span (now or after any advance) of the enemy pawns."""
    opp = not c
    ranks = rank_mask(3) | rank_mask(4) | rank_mask(5) if c == WHITE \
        else rank_mask(2) | rank_mask(3) | rank_mask(4)
    span = _pawn_fill_forward(opp, bb(board, PAWN, opp))
    span_attacks = rel_north_east(opp, span) | rel_north_west(opp, span)
    viable = ranks & data.attacked_by(c, PAWN) & ~span_attacks
    out[("OUTPOST_KNIGHT_VAL", 0)] += pc(bb(board, KNIGHT, c) & viable)
    out[("OUTPOST_BISHOP_VAL", 0)] += pc(bb(board, BISHOP, c) & viable)


def evaluate_space(board, c, out):
    """evaluate_space<color>: rooks on open / half-open files, minors right behind a pawn."""
    them = not c
    ourfiles = fill_verticals(bb(board, PAWN, c))
    theirfiles = fill_verticals(bb(board, PAWN, them))
    openfiles = FULL & ~(ourfiles | theirfiles)
    half_open = ~ourfiles & theirfiles
    rooks = bb(board, ROOK, c)
    out[("ROOK_OPEN_VAL", 0)] += pc(openfiles & rooks)
    out[("ROOK_SEMIOPEN_VAL", 0)] += pc(half_open & rooks)
    minors = bb(board, KNIGHT, c) | bb(board, BISHOP, c)
    all_pawns = bb(board, PAWN, c) | bb(board, PAWN, them)
    out[("MINOR_BEHIND_PAWN", 0)] += pc(rel_north(c, minors) & all_pawns)


def evaluate_threats(board, data, c, out):
    """evaluate_threats<color>: minor/rook/king threats on weak or defended enemy men, hanging
    men, restricted squares, pawn threats and safe attacks on a lone enemy queen."""
    opp = not c
    opp_all = int(board.occupied_co[opp])
    opp_pawn = bb(board, PAWN, opp)
    opp_non_pawn = opp_all & ~opp_pawn
    strongly_protected = data.attacked_by(opp, PAWN) \
        | (data.attacked_by_2(opp) & ~data.attacked_by_2(c))
    defended = opp_non_pawn & strongly_protected
    weak = opp_all & ~strongly_protected & data.attacked_by(c)

    if defended | weak:
        b = (defended | weak) & (data.attacked_by(c, KNIGHT) | data.attacked_by(c, BISHOP))
        for sq in bits(b):
            out[("MINOR_THREAT", board.piece_type_at(sq) - 1)] += 1
        b = weak & data.attacked_by(c, ROOK)
        for sq in bits(b):
            out[("ROOK_THREAT", board.piece_type_at(sq) - 1)] += 1
        if weak & data.attacked_by(c, KING):
            out[("KING_THREAT", 0)] += 1
        b = weak & ((FULL & ~data.attacked_by(opp)) | (opp_non_pawn & data.attacked_by_2(c)))
        out[("HANGING_PAWN", 0)] += pc(b & opp_pawn)
        out[("HANGING_NON_PAWN", 0)] += pc(b & opp_non_pawn)

    out[("RESTRICTED_SQUARES", 0)] += pc(data.attacked_by(c) & ~strongly_protected
                                         & data.attacked_by(opp))

    pawn_attacks = data.attacked_by(c, PAWN)
    for pt in (KNIGHT, BISHOP, ROOK, QUEEN):
        out[("PAWN_THREAT_" + NAMES[pt], 0)] += pc(bb(board, pt, opp) & pawn_attacks)

    if len(board.pieces(QUEEN, opp)) == 1:
        imbalance = 1 if len(board.pieces(QUEEN, c)) == 0 else 0
        sq = lsb(bb(board, QUEEN, opp))
        safe = data.mobility_area[c] & ~bb(board, PAWN, c) & ~strongly_protected
        b = int(chess.BB_KNIGHT_ATTACKS[sq]) & data.attacked_by(c, KNIGHT) & safe
        out[("KNIGHT_ON_QUEEN", imbalance)] += pc(b)
        safe &= data.attacked_by_2(c)
        attacks = data.attacked_by(opp, QUEEN)
        a = attacks & _full_diagonals(sq)
        out[("BISHOP_ON_QUEEN", imbalance)] += pc(a & data.attacked_by(c, BISHOP) & safe)
        a = attacks ^ a
        out[("ROOK_ON_QUEEN", imbalance)] += pc(a & data.attacked_by(c, ROOK) & safe)


def evaluate_potential_checkers(board, data, c, out):
    """evaluate_potential_checkers<color>: (square, enemy piece) pairs where an enemy knight,
    rook/queen or bishop/queen attacks a square from which it would check c's king (knight
    squares, orthogonal / diagonal rays up to and including the first blocker). A penalty for c."""
    opp = not c
    k = board.king(c)
    knight_sq = int(chess.BB_KNIGHT_ATTACKS[k])
    orth_sq = ray_set(board, k, ORTHO)  # the superpiece ray extent of
    # Position::create_attack_table_superpiece_mask
    diag_sq = ray_set(board, k, DIAG)
    n = 0
    for sq in bits(bb(board, KNIGHT, opp)):
        n += pc(data.piece_att[sq] & knight_sq)
    for sq in bits(bb(board, ROOK, opp) | bb(board, QUEEN, opp)):
        n += pc(data.piece_att[sq] & orth_sq)
    for sq in bits(bb(board, BISHOP, opp) | bb(board, QUEEN, opp)):
        n += pc(data.piece_att[sq] & diag_sq)
    out[("POTENTIAL_CHECKER_VAL", 0)] += n


def king_shelter(board, data, c, out):
    """king_shelter<color>: for the three files around clamp(king file, b, g), the shelter pawn
    (own, not attacked by an enemy pawn) and the storm pawn (enemy), each the one nearest c's own
    back rank among those on or ahead of the king's rank (Bitboard::frontmost_square(opp))."""
    opp = not c
    ksq = board.king(c)
    on_or_ahead = FULL & ~forward_ranks(opp, ksq)
    our_pawns = bb(board, PAWN, c) & on_or_ahead & ~data.attacked_by(opp, PAWN)
    their_pawns = bb(board, PAWN, opp) & on_or_ahead
    center = min(max(chess.square_file(ksq), 1), 6)
    frontmost = msb if opp == WHITE else lsb          # frontmost_square(opp)
    for f in (center - 1, center, center + 1):
        fm = file_mask(f)
        b = our_pawns & fm
        our_rank = relative_rank(frontmost(b), c) if b else 0
        b = their_pawns & fm
        their_rank = relative_rank(frontmost(b), c) if b else 0
        edge = min(f, 7 - f)
        out[("KING_SHELTER", edge * 7 + our_rank)] += 1
        if our_rank and our_rank == their_rank - 1:
            out[("BLOCKED_SHELTER_STORM", their_rank)] += 1
        else:
            out[("SHELTER_STORM", edge * 7 + their_rank)] += 1


def evaluate_king_safety(board, data, c, out):
    """evaluate_king_safety<color>: the king-attack features on c's king (the attacker is the
    other colour): ring/outer-ring attacks per piece type, flank attack/defence, shelter/storm,
    and KS_NO_QUEEN if the attacker has no queen. Not linear: fed to the sigmoid."""
    opp = not c
    ksq = board.king(c)
    ring, ext = _ring(ksq), _extended_ring(ksq)
    flank = _king_flank(c, chess.square_file(ksq))
    for pt in (PAWN, KNIGHT, BISHOP, ROOK, QUEEN):
        attacked = data.attacked_by(opp, pt)
        out[("PT_INNER_RING_ATTACKS", pt - 1)] += pc(attacked & ring)
        out[("PT_OUTER_RING_ATTACKS", pt - 1)] += pc(attacked & ext & ~ring)
    out[("KS_FLANK_DEFENSE", 0)] += pc(data.attacked_by(c) & flank)
    out[("KS_FLANK_ATTACK", 0)] += pc(data.attacked_by(opp) & flank)
    out[("KS_FLANK_DOUBLE_DEFENSE", 0)] += pc(data.attacked_by_2(c) & flank)
    out[("KS_FLANK_DOUBLE_ATTACK", 0)] += pc(data.attacked_by_2(opp) & flank)
    king_shelter(board, data, c, out)
    if not board.pieces(QUEEN, opp):
        out[("KS_NO_QUEEN", 0)] += 1


# ------------------------------------------------------------------------------------------------
# the non-linear steps


def winnable_inputs(board, phase):
    """apply_winnable's inputs: total pawns, files with pawns of both colours, files with pawns of
    one colour only, and whether the (clamped) phase is 0."""
    wp, bp = bb(board, PAWN, WHITE), bb(board, PAWN, BLACK)
    wf, bf = fill_verticals(wp), fill_verticals(bp)
    return pc(wp | bp), pc(wf & bf) // 8, pc(wf ^ bf) // 8, 1 if phase == 0 else 0


def eg_scale_alpha(board, eg, white_phase, black_phase, passers):
    """apply_eg_scale: the eg factor out of 128. eg > 0 makes White the strong side, else Black
    (eg == 0 included). Phases are the unclamped per-side phases."""
    strong = WHITE if eg > 0 else BLACK
    weak = not strong
    sp, wp_ = (white_phase, black_phase) if strong == WHITE else (black_phase, white_phase)
    s_pass = passers[WHITE] if strong == WHITE else passers[BLACK]
    s_pawns = len(board.pieces(PAWN, strong))
    w_pawns = len(board.pieces(PAWN, weak))
    if s_pawns == 0:
        if sp - wp_ <= 1:
            return 0 if sp < 2 else (8 if wp_ <= 1 else 28)
    elif is_opposite_bishops(board):
        if sp == 1 and wp_ == 1:
            return 28 + 8 * s_pass + 8 * (1 if s_pawns >= w_pawns + 2 else 0)
        return 44 + 3 * pc(board.occupied_co[strong])      # pos.piece_count(strong): all men
    pcmul = 8 - s_pawns
    return 128 - pcmul * pcmul


def is_opposite_bishops(board):
    """Position::is_opposite_bishops: one bishop each, on squares of different colours."""
    wb, bb_ = board.pieces(BISHOP, WHITE), board.pieces(BISHOP, BLACK)
    if len(wb) == 1 and len(bb_) == 1:
        return ((LIGHT >> lsb(int(wb))) & 1) != ((LIGHT >> lsb(int(bb_))) & 1)
    return False


def _dot(counts, params):
    mg = eg = 0
    for (name, i), n in counts.items():
        if n:
            pmg, peg = params[name][i]
            mg += n * pmg
            eg += n * peg
    return mg, eg


def _is_integral(params):
    for vals in params.values():
        for v in vals:
            for x in (v if isinstance(v, tuple) else (v,)):
                if x != int(x):
                    return False
    return True


def feature_counts(board):
    """The net counts of the linear sum (White minus Black, tempo excluded) and of the two
    king-attack sums, plus phases and passers. Mirrors evaluate_white_pov up to the activation."""
    data = EvalData(board)
    linear, attack_w, attack_b = Counter(), Counter(), Counter()
    per_side = {}
    passers = {}
    for c in (WHITE, BLACK):
        side = Counter()
        psqt(board, c, side)
        passers[c] = evaluate_pawns(board, data, c, side)
        per_side[c] = side
    # evaluate_pieces must run for both colours before evaluate_threats (it sets mobility_area)
    for c in (WHITE, BLACK):
        evaluate_pieces(board, data, c, per_side[c])
    for c in (WHITE, BLACK):
        evaluate_outposts(board, data, c, per_side[c])
        evaluate_space(board, c, per_side[c])
        evaluate_threats(board, data, c, per_side[c])
        evaluate_pawn_push_threats(board, c, per_side[c])
        evaluate_potential_checkers(board, data, c, per_side[c])
    for key, n in per_side[WHITE].items():
        linear[key] += n
    for key, n in per_side[BLACK].items():
        linear[key] -= n
    evaluate_king_safety(board, data, BLACK, attack_w)   # white_king_attack_total
    evaluate_king_safety(board, data, WHITE, attack_b)   # black_king_attack_total

    def phase_of(c):
        return (len(board.pieces(KNIGHT, c)) + len(board.pieces(BISHOP, c))
                + 2 * len(board.pieces(ROOK, c)) + 4 * len(board.pieces(QUEEN, c)))

    return linear, attack_w, attack_b, phase_of(WHITE), phase_of(BLACK), passers


def reference_eval(board: chess.Board, params=None) -> dict:
    """evaluate_white_pov (integer engine) and the tuning build's continuous value; see the
    module docstring for the returned fields. ``params``: None (the JSON defaults), a dict
    {name: values} overriding some defaults, or (flat pairs, flat values) in the JSON's layout."""
    P = _resolve(params)
    linear, attack_w, attack_b, white_phase, black_phase, passers = feature_counts(board)
    phase = min(24, white_phase + black_phase)

    L = _dot(linear, P)
    AW = _dot(attack_w, P)
    AB = _dot(attack_b, P)
    tempo = P["TEMPO_VAL"][0] if board.turn == WHITE else tuple(-v for v in P["TEMPO_VAL"][0])
    (a_mg, a_eg), = P["KING_SAFETY_ACTIVATION.a"]
    (c_mg, c_eg), = P["KING_SAFETY_ACTIVATION.c"]
    n_pawns, sym, asym, pawn_endgame = winnable_inputs(board, phase)
    w_exact = (P["WINNABLE_PAWNS"][0] * n_pawns + P["WINNABLE_SYM"][0] * sym
               + P["WINNABLE_ASYM"][0] * asym + P["WINNABLE_PAWN_ENDGAME"][0] * pawn_endgame
               + P["WINNABLE_BIAS"][0])

    res = {
        "linear": L, "tempo": tempo, "attack_white": AW, "attack_black": AB,
        "phase": phase, "white_phase": white_phase, "black_phase": black_phase,
        "passers": (passers[WHITE], passers[BLACK]),
        "winnable_counts": {"pawns": n_pawns, "sym_files": sym, "asym_files": asym,
                            "pawn_endgame": pawn_endgame},
        "counts": {"linear": dict(linear), "attack_white": dict(attack_w),
                   "attack_black": dict(attack_b)},
    }

    # ---- integer engine (evaluate_white_pov, non-tuning PScore/TunableSigmoid) ----------------
    if _is_integral(P):
        ints = lambda t: tuple(int(v) for v in t)  # noqa: E731
        L_i, AW_i, AB_i, tempo_i = ints(L), ints(AW), ints(AB), ints(tempo)
        t_mg = sigmoid_table(int(a_mg), int(c_mg))
        t_eg = sigmoid_table(int(a_eg), int(c_eg))
        # king_safety_activation: lookup on the i16 mg()/eg() of each attack total
        aw16, ab16 = unpack(*AW_i), unpack(*AB_i)
        act_w = (sigmoid_lookup(aw16[0], t_mg), sigmoid_lookup(aw16[1], t_eg))
        act_b = (sigmoid_lookup(ab16[0], t_mg), sigmoid_lookup(ab16[1], t_eg))
        # eval += act_w - act_b; eval += +-TEMPO_VAL  (packed i32 arithmetic)
        s_mg, s_eg = unpack(L_i[0] + act_w[0] - act_b[0] + tempo_i[0],
                            L_i[1] + act_w[1] - act_b[1] + tempo_i[1])
        # apply_winnable: symmetry and winnable are static_cast<Score> (i16)
        symmetry = i16(int(P["WINNABLE_SYM"][0]) * sym + int(P["WINNABLE_ASYM"][0]) * asym)
        w = i16(int(P["WINNABLE_PAWNS"][0]) * n_pawns + symmetry
                + int(P["WINNABLE_PAWN_ENDGAME"][0]) * pawn_endgame + int(P["WINNABLE_BIAS"][0]))
        w_signed = i16(-w) if s_eg < 0 else w
        # PScore::complexity_add
        if s_eg == 0:
            wn_eg = s_eg
        else:
            total = i16(s_eg + w_signed)
            wn_eg = max(total, 0) if s_eg > 0 else min(total, 0)
        alpha = eg_scale_alpha(board, wn_eg, white_phase, black_phase, passers)
        sc_eg = i16(cdiv(wn_eg * alpha, 128))            # PScore::scale_eg<128>
        value = i16(cdiv(s_mg * phase + sc_eg * (24 - phase), 24))   # PScore::phase<24>
        res.update({"act_white": act_w, "act_black": act_b, "pre_winnable": (s_mg, s_eg),
                    "winnable": w, "post_winnable": (s_mg, wn_eg), "alpha": alpha,
                    "post_scale": (s_mg, sc_eg), "white_pov": value})
    else:
        res["white_pov"] = None

    # ---- tuning build (f64 autograd forward pass) ----------------------------------------------
    act_wc = (sigmoid_continuous(float(AW[0]), a_mg, c_mg), sigmoid_continuous(float(AW[1]), a_eg, c_eg))
    act_bc = (sigmoid_continuous(float(AB[0]), a_mg, c_mg), sigmoid_continuous(float(AB[1]), a_eg, c_eg))
    cm = float(L[0]) + (act_wc[0] - act_bc[0]) + tempo[0]
    ce = float(L[1]) + (act_wc[1] - act_bc[1]) + tempo[1]
    wv = float(w_exact)
    if ce < 0:
        wv = -wv
    # PairAddClampedSecond
    if ce > 0:
        ce_w = max(0.0, ce + wv)
    elif ce < 0:
        ce_w = min(0.0, ce + wv)
    else:
        ce_w = ce
    alpha_c = eg_scale_alpha(board, ce_w, white_phase, black_phase, passers)
    ce_s = ce_w * (alpha_c / 128.0)                   # ScaleEg: eg * (alpha / 128)
    p = phase / 24.0
    res.update({"continuous_act_white": act_wc, "continuous_act_black": act_bc,
                "continuous_pre_winnable": (cm, ce), "continuous_post_winnable": (cm, ce_w),
                "alpha_continuous": alpha_c, "continuous": p * cm + (1.0 - p) * ce_s})
    return res


def reference_eval_fen(fen: str, params=None) -> dict:
    """reference_eval on a FEN (parsed with chess960=True, so Shredder/X-FEN castling works)."""
    return reference_eval(chess.Board(fen, chess960=True), params)
