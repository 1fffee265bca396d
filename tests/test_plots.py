"""`tuner plot` and `tuner diff` (tuner.plots): boards where the engine indexes its tables, the
panels every registry gets, the ranking of changes, valid PNGs and clear errors for wrong files."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner
from PIL import Image

from tuner.cli import main
from tuner.evals.clockwork import evaluate_fen
from tuner.evals.registry import ParamRegistry
from tuner.plots.diff import changes, check_same_layout, format_changes
from tuner.plots.params import (FirstSquare, ParamFileError, board_grid, boards_figure,
                                is_board, load_params, tables_figure)

CLOCKWORK = "tuner/evals/params/clockwork.json"
HEAD = "tuner/evals/params/clockwork-10d79e6.json"


def square(grid_index: tuple[int, int]) -> str:
    rank, file = grid_index
    return "abcdefgh"[file] + str(rank + 1)


def marked_square(values: np.ndarray, first: FirstSquare) -> str:
    """The square board_grid puts the one non-zero entry of `values` on."""
    grid = board_grid(values, first)
    (hit,) = np.argwhere(np.nan_to_num(grid) != 0)
    return square(tuple(hit))


def small_registry(path) -> ParamRegistry:
    """A knight table, a pawn table, two scalar pairs, an array and a value, written to `path`."""
    rng = np.random.default_rng(3)

    def pairs(n):
        return [[int(a), int(b)] for a, b in rng.integers(-50, 50, size=(n, 2))]

    groups = [("KNIGHT_PSQT", "pair", [64]), ("PAWN_PSQT", "pair", [48]),
              ("KNIGHT_MAT", "pair", []), ("TEMPO", "pair", []),
              ("MOBILITY", "pair", [9]), ("BIAS", "value", [])]
    params, offsets = [], {"pair": 0, "value": 0}
    for name, kind, shape in groups:
        n = int(np.prod(shape, dtype=np.int64))
        values = pairs(n) if kind == "pair" else [int(v) for v in rng.integers(-9, 9, size=n)]
        params.append({"name": name, "kind": kind, "shape": shape, "offset": offsets[kind],
                       "values": values, "constant": [False] * n})
        offsets[kind] += n
    path.write_text(json.dumps({"K": 0.0025, "params": params}))
    return ParamRegistry.from_json(path)


def titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes if ax.get_title()]


# --- boards --------------------------------------------------------------------------------------
def test_boards_put_the_engines_entries_on_their_squares():
    """Clockwork indexes a White knight on c3 and a pawn on e4 (king on b1: no mirror) into the
    table entries that the picture draws on c3 and e4."""
    reg = ParamRegistry.from_json(CLOCKWORK)
    counts = evaluate_fen("6k1/8/8/8/4P3/2N5/8/1K6 w - - 0 1")[5]
    for name, sq in (("KNIGHT_PSQT", "c3"), ("PAWN_PSQT", "e4")):
        table = counts[reg.group(name).slice]
        assert (table != 0).sum() == 1
        assert marked_square(table, FirstSquare.A8) == sq


@pytest.mark.parametrize("size, index, first, expected", [
    (64, 0, FirstSquare.A8, "a8"), (64, 7, FirstSquare.A8, "h8"), (64, 56, FirstSquare.A8, "a1"),
    (64, 63, FirstSquare.A8, "h1"), (64, 0, FirstSquare.A1, "a1"), (64, 9, FirstSquare.A1, "b2"),
    (48, 0, FirstSquare.A8, "a7"), (48, 47, FirstSquare.A8, "h2"), (48, 0, FirstSquare.A1, "a2"),
    (48, 47, FirstSquare.A1, "h7"),
])
def test_board_grid_square_order(size, index, first, expected):
    values = np.zeros(size)
    values[index] = 1.0
    assert marked_square(values, first) == expected


def test_a_pawn_board_leaves_the_first_and_last_rank_empty():
    grid = board_grid(np.arange(1.0, 49.0), FirstSquare.A8)
    assert np.isnan(grid[[0, 7]]).all() and np.isfinite(grid[1:7]).all()
    with pytest.raises(ValueError, match="64 or 48 squares, not 9"):
        board_grid(np.zeros(9), FirstSquare.A8)


def test_boards_figure_draws_mg_and_eg_on_one_signed_scale(tmp_path):
    reg = small_registry(tmp_path / "p.json")
    fig = boards_figure(reg, reg.defaults, FirstSquare.A8, "t")
    boards = [ax for ax in fig.axes if ax.images and ax.get_title()]
    assert [ax.get_title() for ax in boards] == ["KNIGHT_PSQT mg", "KNIGHT_PSQT eg",
                                                 "PAWN_PSQT mg", "PAWN_PSQT eg"]
    knight = reg.values_of(reg.defaults, "KNIGHT_PSQT")
    for k, ax in enumerate(boards[:2]):
        image = ax.images[0]
        assert image.origin == "lower"  # a1 at the bottom left
        np.testing.assert_array_equal(image.get_array(), board_grid(knight[:, k], FirstSquare.A8))
        assert image.norm.vmin == -image.norm.vmax == -np.abs(knight).max()
    assert len(fig.axes) == 4 + 2  # four boards and one colour bar per table


def test_every_clockwork_table_is_a_board_and_every_other_group_a_bar_chart():
    for path in (CLOCKWORK, HEAD):
        reg = ParamRegistry.from_json(path)
        tables = [g.name for g in reg.groups if g.name.endswith("_PSQT")]
        assert [g.name for g in reg.groups if is_board(g)] == tables
        boards = titles(boards_figure(reg, reg.defaults, FirstSquare.A8, "t"))
        assert boards == [f"{t} {p}" for t in tables for p in ("mg", "eg")]
        arrays = [g.name for g in reg.groups if g.shape and not is_board(g)]
        expected = [g.name for g in reg.groups if not g.shape] + arrays  # a panel a scalar
        assert titles(tables_figure(reg, reg.defaults, reg.value_defaults, "t")) == expected


def test_tables_figure_bars_are_the_values(tmp_path):
    reg = small_registry(tmp_path / "p.json")
    fig = tables_figure(reg, reg.defaults, reg.value_defaults, "t")
    knight, tempo, bias, mobility = fig.axes
    assert [ax.get_title() for ax in fig.axes] == ["KNIGHT_MAT", "TEMPO", "BIAS", "MOBILITY"]
    for ax, name in ((knight, "KNIGHT_MAT"), (tempo, "TEMPO")):  # mg above eg
        (bars,) = ax.containers
        assert [p.get_width() for p in bars] == list(reg.defaults[reg.index(name)])
        assert [p.get_y() for p in bars][0] > [p.get_y() for p in bars][1]
    assert [p.get_width() for p in bias.containers[0]] == list(reg.value_defaults)
    heights = [[p.get_height() for p in c] for c in mobility.containers]
    np.testing.assert_array_equal(np.array(heights).T, reg.values_of(reg.defaults, "MOBILITY"))


def test_plot_command_writes_valid_pngs(tmp_path):
    small_registry(tmp_path / "p.json")
    result = CliRunner().invoke(main, ["plot", str(tmp_path / "p.json")])
    assert result.exit_code == 0, result.output
    written = [tmp_path / "p.boards.png", tmp_path / "p.tables.png"]
    assert result.output.split() == [w for p in written for w in ("wrote", str(p))]
    for path in written:
        with Image.open(path) as img:
            assert img.format == "PNG" and min(img.size) > 300
    only = CliRunner().invoke(main, ["plot", "tuner/evals/params/material.json",
                                     "-o", str(tmp_path / "m")])
    assert only.exit_code == 0, only.output  # material has no table: bar charts only
    assert sorted(p.name for p in tmp_path.glob("m.*")) == ["m.tables.png"]


# --- diff ----------------------------------------------------------------------------------------
def edited(path, tmp_path, pair_edits: dict, value_edits: dict | None = None) -> str:
    reg = ParamRegistry.from_json(path)
    v, vv = reg.defaults.copy(), reg.value_defaults.copy()
    for (name, *idx), delta in pair_edits.items():
        v[reg.index(name, *idx)] += delta
    for name, delta in (value_edits or {}).items():
        vv[reg.index(name)] += delta
    out = tmp_path / "b.json"
    reg.to_json(v, out, vv)
    return str(out)


def test_diff_ranks_by_the_largest_component_and_keeps_registry_order_on_ties(tmp_path):
    b = edited(HEAD, tmp_path, {("QUEEN_MAT",): (-12, 40), ("KNIGHT_PSQT", 10): (30, -5),
                                ("PAWN_MAT",): (0, -30), ("ROOK_MOBILITY", 3): (0.5, 0)},
               {"WINNABLE_ASYM": 100})
    found = changes(ParamRegistry.from_json(HEAD), ParamRegistry.from_json(b))
    # PAWN_MAT and KNIGHT_PSQT entry 10 (c7: entry 0 is a8) tie at 30: PAWN_MAT is first.
    assert [c.name for c in found] == ["WINNABLE_ASYM", "QUEEN_MAT", "PAWN_MAT",
                                       "KNIGHT_PSQT[c7]", "ROOK_MOBILITY[3]"]
    assert [c.size for c in found] == [100, 40, 30, 30, 0.5]
    queen = found[1]
    assert queen.after[0] - queen.before[0] == -12 and queen.delta == (-12, 40)
    assert math.isnan(found[0].before[1])  # a value has no eg


def test_diff_command_prints_and_draws_the_top_changes(tmp_path):
    b = edited(CLOCKWORK, tmp_path, {("KING_PSQT", 3): (7, 0), ("TEMPO_VAL",): (0, 2),
                                     ("QUEEN_MOBILITY", 27): (-9, 9)})
    result = CliRunner().invoke(main, ["diff", CLOCKWORK, b, "--top", "2"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "3 entries changed; the 2 largest:"
    assert lines[1].split()[:2] == ["name", "mg"]
    reg = ParamRegistry.from_json(CLOCKWORK)
    mg0, eg0 = reg.defaults[reg.index("QUEEN_MOBILITY", 27)]
    assert lines[2].split() == ["QUEEN_MOBILITY[27]", f"{mg0:g}", f"{mg0 - 9:g}", "-9",
                                f"{eg0:g}", f"{eg0 + 9:g}", "9"]
    assert lines[3].split()[0] == "KING_PSQT[d8]" and len(lines) == 5
    assert lines[4] == f"wrote {tmp_path / 'b.diff.png'}"
    with Image.open(tmp_path / "b.diff.png") as img:
        assert img.format == "PNG"
    same = CliRunner().invoke(main, ["diff", CLOCKWORK, CLOCKWORK])
    assert same.exit_code == 0 and "no parameter differs" in same.output


def test_format_changes_marks_the_missing_eg_of_a_value(tmp_path):
    b = edited(HEAD, tmp_path, {}, {"WINNABLE_BIAS": -3})
    text = format_changes(changes(load_params(HEAD), load_params(b)), 5)
    assert text.splitlines()[1].split()[4:] == ["-", "-", "-"]


# --- errors --------------------------------------------------------------------------------------
@pytest.mark.parametrize("content, message", [
    (None, "no such file"),
    ("{\n  \"params\": [1,\n}", ":3:1: not JSON (Expecting value)"),
    ("[1, 2]", 'not a parameter file: expected an object with a "params" list'),
    ('{"K": 0.0025}', 'not a parameter file: expected an object with a "params" list'),
    ('{"params": [{"name": "X", "shape": [3], "offset": 0, "values": [[1, 2]]}]}',
     "params[0] (X).values: must be a list of 3 entries for shape (3,)"),
    (b"\xff\xfe\x00binary", "not a text file"),
])
def test_wrong_parameter_files_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "p.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    with pytest.raises(ParamFileError) as err:
        load_params(path)
    assert str(err.value).startswith(str(path)) and message in str(err.value)
    for args in (["plot", str(path)], ["diff", CLOCKWORK, str(path)]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 1 and result.exception.__class__ is SystemExit
        assert result.output == f"Error: {err.value}\n"


def test_diff_of_two_evaluations_names_the_first_differing_group():
    a, b = load_params(CLOCKWORK), load_params(HEAD)
    with pytest.raises(ParamFileError, match=r"group 6 is BISHOP_XRAY_PAWNS \(pair, shape \[\]\) "
                                             r"there and BISHOP_PAIR_VAL"):
        check_same_layout(a, b, "a.json", "b.json")
    with pytest.raises(ParamFileError, match=r"6 groups vs 50 \(first extra group: BISHOP_PAIR_VAL "
                                             r"in a.json\)"):
        check_same_layout(a, ParamRegistry(a.groups[:6], a.defaults[:6]), "a.json", "b.json")


def test_an_unwritable_output_is_a_one_line_error(tmp_path):
    small_registry(tmp_path / "p.json")
    missing = tmp_path / "no" / "such" / "dir"
    result = CliRunner().invoke(main, ["plot", str(tmp_path / "p.json"), "-o", str(missing)])
    assert (result.exit_code, result.output) == (
        1, f"Error: cannot write {missing}.boards.png: No such file or directory (ENOENT)\n")
    b = edited(CLOCKWORK, tmp_path, {("TEMPO_VAL",): (1, 1)})
    result = CliRunner().invoke(main, ["diff", CLOCKWORK, b, "-o", str(missing / "d.png")])
    assert result.exit_code == 1
    assert result.output.splitlines()[-1] == (f"Error: cannot write {missing / 'd.png'}: No such "
                                              f"file or directory (ENOENT)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "p.json"]


def test_every_scalar_is_drawn_on_its_own_scale():
    """QUEEN_MAT (thousands) and TEMPO_VAL (tens) in separate panels, each axis spanning its
    own values: TEMPO's bars fill most of their axis instead of a sliver of QUEEN_MAT's."""
    reg = ParamRegistry.from_json(HEAD)
    fig = tables_figure(reg, reg.defaults, reg.value_defaults, "t")
    by_title = {ax.get_title(): ax for ax in fig.axes}
    scalars = [g.name for g in reg.groups if not g.shape]
    assert len({id(by_title[n]) for n in scalars}) == len(scalars)
    for name in ("QUEEN_MAT", "TEMPO_VAL", "WINNABLE_BIAS"):
        g = reg.group(name)
        v = (reg.defaults[g.offset] if g.kind == "pair" else reg.value_defaults[[g.offset]])
        lo, hi = by_title[name].get_xlim()
        span = max(hi, 0) - min(lo, 0)
        assert np.abs(v).max() >= 0.5 * span, (name, v, (lo, hi))
    assert abs(reg.defaults[reg.index("QUEEN_MAT")]).max() > 50 * abs(
        reg.defaults[reg.index("TEMPO_VAL")]).max()  # the case the separate scales are for


def test_the_legend_of_the_tables_is_outside_every_panel(tmp_path):
    reg = small_registry(tmp_path / "p.json")
    fig = tables_figure(reg, reg.defaults, reg.value_defaults, "t")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["mg", "eg", "value"]
    box = legend.get_window_extent(renderer)
    assert not any(box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes)


def test_table_entries_are_named_by_square(tmp_path):
    """`tuner diff` names a changed entry of a 64-entry table by its square, in the order
    `tuner plot` draws it (--first-square), and a 64-entry value table's bars are labelled so."""
    reg = small_registry(tmp_path / "a.json")
    after = reg.defaults.copy()
    after[reg.index("KNIGHT_PSQT", 8)] += 50          # entry 8: a7 (a8 first) or a2 (a1 first)
    after[reg.index("PAWN_PSQT", 0)] += 40            # a pawn table's entry 0: a7 or a2
    after[reg.index("MOBILITY", 3)] += 30
    reg.to_json(after, tmp_path / "b.json", reg.value_defaults)
    b = ParamRegistry.from_json(tmp_path / "b.json")
    assert [c.name for c in changes(reg, b)] == ["KNIGHT_PSQT[a7]", "PAWN_PSQT[a7]", "MOBILITY[3]"]
    assert [c.name for c in changes(reg, b, FirstSquare.A1)][:2] == ["KNIGHT_PSQT[a2]",
                                                                     "PAWN_PSQT[a2]"]
    r = CliRunner().invoke(main, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"),
                                  "--first-square", "a1"])
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[2].startswith("KNIGHT_PSQT[a2] ")
    table = ParamRegistry.from_dict({"params": [{"name": "PST", "kind": "value", "shape": [2, 64],
                                                 "offset": 0, "values": [0] * 128}]})
    fig = tables_figure(table, table.defaults, table.value_defaults, "t")
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels[:2] == ["0,a8", "0,b8"] and labels[64 + 36] == "1,e4"


def test_no_negative_zero_in_boards_or_diffs(tmp_path):
    reg = ParamRegistry.from_dict({"params": [{"name": "T", "shape": [64], "offset": 0,
                                               "values": [[-0.3, 50]] + [[0, 0]] * 63}]})
    fig = boards_figure(reg, reg.defaults, FirstSquare.A8, "t")
    a8 = [t.get_text() for t in fig.axes[0].texts if t.get_position() == (0, 7)]
    assert a8 == ["0"]  # -0.3 on a scale of 50: whole numbers, and no "-0"
    before = ParamRegistry.from_dict({"params": [{"name": "X", "shape": [], "offset": 0,
                                                  "values": [[-0.0, 1]]}]})
    after = ParamRegistry.from_dict({"params": [{"name": "X", "shape": [], "offset": 0,
                                                 "values": [[-0.0, 2]]}]})
    row = format_changes(changes(before, after), 1).splitlines()[1].split()
    assert row == ["X", "0", "0", "0", "1", "2", "1"]
