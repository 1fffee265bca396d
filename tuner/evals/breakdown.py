"""The ``tuner eval --breakdown`` text of Clockwork's two evaluations (their ``explain``).

cde2ced: every parameter group's net counts and (mg, eg) contribution, the phase and the blend.
10d79e6: the three pair sums term by term, then the king-safety activations, winnable, the
endgame scale and the blend, integer (engine) beside continuous (tuner). Evaluations without an
``explain`` of their own get `tuner.evals.generic.explain`.
"""
from __future__ import annotations

import numpy as np


def _fmt_num(x) -> str:
    x = float(x)
    return str(int(x)) if x.is_integer() else f"{x:.4f}"


def _fmt_pair(p) -> str:
    return f"{_fmt_num(p[0]):>10} {_fmt_num(p[1]):>10}"


def _group_rows(groups, counts, values):
    """Table rows `name  net counts  mg  eg` of the groups with non-zero counts; their total."""
    rows = []
    total = np.zeros(2)
    for g in groups:
        cg = counts[g.slice]
        if not cg.any():
            continue
        contrib = cg.astype(np.float64) @ values[g.slice]
        total += contrib
        if g.shape:
            desc = " ".join(f"[{','.join(str(int(k)) for k in np.unravel_index(i, g.shape))}]"
                            f"{int(cg[i]):+d}" for i in np.nonzero(cg)[0])
        else:
            desc = f"{int(cg[0]):+d}"
        rows.append(f"{g.name:<36} {desc:<34} {_fmt_pair(contrib)}")
    return rows, total


_TABLE_HEAD = f"{'term':<36} {'net counts':<34} {'mg':>10} {'eg':>10}"


def explain_cde2ced(fen, pos, reg, int_eval_v):
    """Per-group (mg, eg) contributions of one position (net counts times values)."""
    from .clockwork import PHASE_MAX, feature_counts

    counts, phases = feature_counts(pos.reshape(1, 9))
    ph = int(phases[0])
    alpha = ph / PHASE_MAX
    rows, total = _group_rows(reg.groups, counts[0], reg.defaults)
    cont = alpha * total[0] + (1.0 - alpha) * total[1]
    return "\n".join([f"position: {fen}", _TABLE_HEAD, *rows,
                      f"{'total (MG, EG)':<36} {'':<34} {_fmt_pair(total)}",
                      f"phase: {ph}/{PHASE_MAX} (alpha = {alpha:.6f})",
                      f"continuous eval: {cont:.6f}",
                      f"integer eval (White POV): {int_eval_v}"])


def explain_10d79e6(fen, pos, reg, int_eval_v):
    """Every step of one position's 10d79e6 evaluation: the three pair sums term by term, then the
    activations, winnable, eg scale and blend, integer (engine) beside continuous (tuner)."""
    from . import clockwork_10d79e6 as ev

    b = ev.breakdown(pos, reg)
    c, i, ints = b["cont"], b["int"], b["counts"]["ints"]
    pairs = b["pairs"]
    lines = [f"position: {fen}", _TABLE_HEAD]
    rows, _ = _group_rows(reg.pair_groups, b["counts"]["linear"], pairs)
    lines += rows
    lines.append(f"{'linear sum L (tempo included)':<71} {_fmt_pair(c['l'])}")
    lines.append(f"{'  of which tempo':<71} {_fmt_pair(b['tempo'])}")
    for key, total, act, title in (
            ("attack_white", "aw", "actw", "A_W: White's attack on Black's king"),
            ("attack_black", "ab", "actb", "A_B: Black's attack on White's king")):
        rows, _ = _group_rows(reg.pair_groups, b["counts"][key], pairs)
        lines += ["", title, *rows,
                  f"{'  total':<71} {_fmt_pair(c[total])}",
                  f"{'  act = a*sigmoid(x/32 + c/32), continuous':<71} {_fmt_pair(c[act])}",
                  f"{'  act, integer (table)':<71} {_fmt_pair((i[act + '_mg'], i[act + '_eg']))}"]
    lines += ["",
              f"{'S = L + act(A_W) - act(A_B), continuous':<71} {_fmt_pair(c['s'])}",
              f"{'S, integer (16-bit halves)':<71} {_fmt_pair((i['s_mg'], i['s_eg']))}",
              f"winnable counts: pawns {ints[ev.WINNABLE_PAWNS]}, symmetric files "
              f"{ints[ev.WINNABLE_SYM]}, asymmetric files {ints[ev.WINNABLE_ASYM]}, pawn endgame "
              f"{ints[ev.WINNABLE_PAWN_ENDGAME]}, bias {ints[ev.WINNABLE_BIAS]}",
              f"winnable w = {c['w']:.6f} (integer, sign of eg applied: {i['winnable']})",
              f"eg after winnable: continuous {c['win'][1]:.6f}, integer {i['win_eg']}",
              f"eg scale (out of {ev.EG_SCALE_MAX}): {ints[ev.INT_ALPHA_WHITE]} if White is the "
              f"strong side (eg > 0), {ints[ev.INT_ALPHA_BLACK]} otherwise; integer applies "
              f"{i['alpha']}",
              f"eg after scaling: continuous {c['scaled'][1]:.6f}, integer {i['scaled_eg']}",
              f"phase: {ints[ev.INT_PHASE]}/{ev.PHASE_MAX}",
              f"continuous eval: {c['eval']:.6f}",
              f"integer eval (White POV): {int_eval_v}"]
    return "\n".join(lines)
