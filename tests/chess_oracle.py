"""python-chess as the oracle of tuner.chess.legality: the status flags of the rules we implement.

python-chess's ``Board.status()`` checks everything tuner.chess.legality does and also the number
and geometry of checkers (``STATUS_TOO_MANY_CHECKERS``, ``STATUS_IMPOSSIBLE_CHECK``), which we do
not; castling is read as Chess960 (``chess960=True``), as tuner.chess does.
"""
import chess

from tuner.chess.status import FenStatus

#: python-chess's status flags for the rules tuner.chess.legality implements (all but the number
#: and geometry of checkers), and the flags each of our legality statuses corresponds to.
IMPLEMENTED = (chess.STATUS_NO_WHITE_KING | chess.STATUS_NO_BLACK_KING | chess.STATUS_TOO_MANY_KINGS
               | chess.STATUS_TOO_MANY_WHITE_PIECES | chess.STATUS_TOO_MANY_BLACK_PIECES
               | chess.STATUS_TOO_MANY_WHITE_PAWNS | chess.STATUS_TOO_MANY_BLACK_PAWNS
               | chess.STATUS_PAWNS_ON_BACKRANK | chess.STATUS_BAD_CASTLING_RIGHTS
               | chess.STATUS_INVALID_EP_SQUARE | chess.STATUS_OPPOSITE_CHECK | chess.STATUS_EMPTY)
FLAGS_OF = {
    FenStatus.KINGS: (chess.STATUS_NO_WHITE_KING | chess.STATUS_NO_BLACK_KING
                      | chess.STATUS_TOO_MANY_KINGS | chess.STATUS_EMPTY),
    FenStatus.TOO_MANY_PIECES: chess.STATUS_TOO_MANY_WHITE_PIECES | chess.STATUS_TOO_MANY_BLACK_PIECES,
    FenStatus.TOO_MANY_PAWNS: chess.STATUS_TOO_MANY_WHITE_PAWNS | chess.STATUS_TOO_MANY_BLACK_PAWNS,
    FenStatus.PAWN_BACK_RANK: chess.STATUS_PAWNS_ON_BACKRANK,
    FenStatus.OPPOSITE_CHECK: chess.STATUS_OPPOSITE_CHECK,
    FenStatus.CASTLE_NO_KING: chess.STATUS_BAD_CASTLING_RIGHTS,
    FenStatus.CASTLE_NO_ROOK: chess.STATUS_BAD_CASTLING_RIGHTS,
    FenStatus.CASTLE_SAME_SIDE: chess.STATUS_BAD_CASTLING_RIGHTS,
    FenStatus.EP_NO_PAWN: chess.STATUS_INVALID_EP_SQUARE,
    FenStatus.EP_OCCUPIED: chess.STATUS_INVALID_EP_SQUARE,
}


def _dropped_queen_side_letter(board, castling):
    """python-chess drops a 'Q'/'q' without a flag when its colour has no rook at all on its back
    rank (``lsb(0) < king``); we reject it as a right naming no rook (a deliberate difference)."""
    for letter, colour in (("Q", chess.WHITE), ("q", chess.BLACK)):
        back = chess.BB_RANK_1 if colour == chess.WHITE else chess.BB_RANK_8
        if letter in castling and not board.pieces_mask(chess.ROOK, colour) & back:
            return True
    return False


def python_chess_flags(fen: str) -> int:
    """python-chess's status flags of fen for the rules in IMPLEMENTED (raises ValueError for a
    FEN python-chess cannot read)."""
    board = chess.Board(fen, chess960=True)
    flags = board.status()
    fields = fen.split()
    if len(fields) > 2 and _dropped_queen_side_letter(board, fields[2]):
        flags |= chess.STATUS_BAD_CASTLING_RIGHTS
    return flags & IMPLEMENTED
