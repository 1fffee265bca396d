"""A small UCI engine for the tests of `tuner verify`: it evaluates like the `material`
evaluation with its default parameters, counted with python-chess (not the tuner's code).

Speaks uci/uciok, isready/readyok, setoption, position fen, quit and an evaluation command that
prints `Evaluation (stm): N` (side to move's point of view). Flags make it misbehave on purpose:

  --off-by-one K    the K-th evaluation (1-based) is one too high
  --white           print `Evaluation (white): N` from White's point of view instead
  --command NAME    answer NAME instead of `eval`
  --chatty          print an `info string` line before each evaluation
  --no-chess960     do not offer UCI_Chess960
  --die-after K     exit (code 3, a line on stderr) at the (K+1)-th evaluation
  --hang-after K    never answer from the (K+1)-th evaluation on
  --log PATH        append every command received to PATH

A Chess960 FEN (castling rights by file) is refused with `Invalid fen` unless UCI_Chess960 is on;
the previous position is kept, as Clockwork does.
"""
import argparse
import sys
import time

import chess

#: (mg, eg) of pawn..queen and the tempo: tuner/evals/params/material.json's defaults.
MATERIAL = {chess.PAWN: (100, 120), chess.KNIGHT: (320, 300), chess.BISHOP: (330, 320),
            chess.ROOK: (500, 550), chess.QUEEN: (950, 1000)}
TEMPO = (20, 5)
PHASE = {chess.KNIGHT: 1, chess.BISHOP: 1, chess.ROOK: 2, chess.QUEEN: 4}
PHASE_MAX = 24


def white_pov(board: chess.Board) -> int:
    """The material evaluation from White's point of view, rounded half away from zero."""
    mg, eg = 0, 0
    for piece, (m, e) in MATERIAL.items():
        net = len(board.pieces(piece, chess.WHITE)) - len(board.pieces(piece, chess.BLACK))
        mg, eg = mg + net * m, eg + net * e
    sign = 1 if board.turn == chess.WHITE else -1
    mg, eg = mg + sign * TEMPO[0], eg + sign * TEMPO[1]
    ph = min(PHASE_MAX, sum(w * len(board.pieces(p, c)) for p, w in PHASE.items()
                            for c in chess.COLORS))
    alpha = ph / PHASE_MAX
    x = alpha * mg + (1 - alpha) * eg
    return int(x + 0.5) if x >= 0 else -int(-x + 0.5)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--off-by-one", type=int, default=0)
    ap.add_argument("--white", action="store_true")
    ap.add_argument("--command", default="eval")
    ap.add_argument("--chatty", action="store_true")
    ap.add_argument("--no-chess960", action="store_true")
    ap.add_argument("--die-after", type=int, default=-1)
    ap.add_argument("--hang-after", type=int, default=-1)
    ap.add_argument("--log")
    args = ap.parse_args()
    log = open(args.log, "a") if args.log else None
    board, chess960, evals = chess.Board(), False, 0
    for line in sys.stdin:
        line = line.strip()
        if log:
            log.write(line + "\n")
            log.flush()
        words = line.split()
        if not words:
            continue
        if words[0] == "uci":
            print("id name material-test-engine")
            if not args.no_chess960:
                print("option name UCI_Chess960 type check default false")
            print("uciok")
        elif words[0] == "isready":
            print("readyok")
        elif words[:3] == ["setoption", "name", "UCI_Chess960"]:
            chess960 = words[-1] == "true"
        elif words[:2] == ["position", "fen"]:
            try:
                new = chess.Board(" ".join(words[2:]), chess960=chess960)
                if not chess960 and new.castling_rights != new.clean_castling_rights():
                    raise ValueError("castling rights need UCI_Chess960")
                board = new
            except ValueError:
                print("Invalid fen")
        elif words[0] == args.command:
            if evals == args.die_after:
                print("dying on purpose", file=sys.stderr, flush=True)
                sys.exit(3)
            if evals == args.hang_after:
                time.sleep(3600)
            evals += 1
            value = white_pov(board) + (evals == args.off_by_one)
            if args.chatty:
                print("info string evaluating")
            if args.white:
                print(f"Evaluation (white): {value}")
            else:
                print(f"Evaluation (stm): {value if board.turn == chess.WHITE else -value}")
        elif words[0] == "quit":
            break
        else:
            print("Unknown command")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
