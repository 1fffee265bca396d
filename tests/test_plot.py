"""The hand-made loss-curve PNG writer.

The PNG is decoded here from scratch (chunks, CRCs, IHDR, zlib IDAT, filter byte 0 on every row),
so these tests check the file format independently of the writer. Drawing is checked on the
decoded pixels: each series' exact colour appears inside the plot, the title is black text, lines
break at NaN, a constant series is a flat band and a decreasing series descends on screen.
"""
from __future__ import annotations

import os
import struct
import zlib

import numpy as np
import pytest

from tuner import fileio
from tuner.train import plot
from tuner.train.plot import write_loss_png

NAN, INF = float("nan"), float("inf")
BLUE, RED = plot._PALETTE[0], plot._PALETTE[1]  # colours of the first and second series
TITLE_ROWS = plot._PAD + plot._TEXT_H + 4  # the title row; the legend starts below it
PLOT_FROM = 60  # first row below title and one legend row (at the default size)


def read_png(path) -> np.ndarray:
    """Decode an 8-bit RGB, non-interlaced PNG whose rows all use filter 0, checking every CRC."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert len(body) == length
        assert zlib.crc32(kind + body) == crc, f"bad CRC in {kind!r}"
        chunks.append((kind, body))
        pos += 12 + length
    assert pos == len(data)
    kinds = [k for k, _ in chunks]
    assert kinds[0] == b"IHDR" and kinds[-1] == b"IEND" and chunks[-1][1] == b""
    assert b"IDAT" in kinds and set(kinds) == {b"IHDR", b"IDAT", b"IEND"}
    width, height, depth, colour, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, colour, comp, filt, interlace) == (8, 2, 0, 0, 0)
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    assert len(raw) == height * (1 + 3 * width)
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(height, 1 + 3 * width)
    assert (rows[:, 0] == 0).all(), "every row must use filter type 0"
    return rows[:, 1:].reshape(height, width, 3)


def colour_mask(img: np.ndarray, rgb) -> np.ndarray:
    """bool[h, w]: pixels of exactly ``rgb``."""
    return (img == np.array(rgb, dtype=np.uint8)).all(axis=2)


def plot_pixels(img: np.ndarray, rgb) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of ``rgb`` pixels below the title and legend, i.e. the drawn curve."""
    rows, cols = np.nonzero(colour_mask(img[PLOT_FROM:], rgb))
    return rows + PLOT_FROM, cols


def render(tmp_path, epochs, series, **kw) -> np.ndarray:
    path = tmp_path / "loss.png"
    write_loss_png(path, epochs, series, **kw)
    return read_png(path)


def test_valid_png_with_requested_size(tmp_path):
    img = render(tmp_path, [1, 2, 3], {"train": [0.5, 0.4, 0.35]}, width=640, height=360)
    assert img.shape == (360, 640, 3)
    assert (colour_mask(img, (255, 255, 255))).mean() > 0.8  # white background


def test_each_series_colour_is_drawn(tmp_path):
    epochs = list(range(20))
    train = [1.0 / (1 + 0.3 * e) for e in epochs]
    val = [t + 0.05 for t in train]
    img = render(tmp_path, epochs, {"train": train, "validation": val})
    for rgb in (BLUE, RED):
        assert plot_pixels(img, rgb)[0].size > 500
        assert colour_mask(img[TITLE_ROWS:PLOT_FROM], rgb).sum() > 50  # legend entry
    assert BLUE != RED


def test_title_is_black_text(tmp_path):
    img = render(tmp_path, [0, 1], {"train": [1.0, 0.5]}, title="Texel loss: 0.0815")
    assert colour_mask(img[:TITLE_ROWS], (0, 0, 0)).sum() > 100
    untitled = render(tmp_path, [0, 1], {"train": [1.0, 0.5]}, title="")
    assert colour_mask(untitled[:TITLE_ROWS], (0, 0, 0)).sum() == 0
    other = render(tmp_path, [0, 1], {"train": [1.0, 0.5]}, title="Texel loss: 0.0816")
    assert (colour_mask(other[:TITLE_ROWS], (0, 0, 0))
            != colour_mask(img[:TITLE_ROWS], (0, 0, 0))).any()


def test_nan_and_inf_are_skipped_and_break_the_line(tmp_path):
    img = render(tmp_path, [0, 1, 2, 3, 4], {"train": [1.0, NAN, 0.8, INF, 0.6]})
    rows, cols = plot_pixels(img, BLUE)
    assert rows.size > 0
    # Three isolated markers, no line between them: wide empty column gaps in the curve.
    used = np.unique(cols)
    assert (np.diff(used) > 50).sum() == 2


def test_all_nan_series_and_no_series_still_write_a_png(tmp_path):
    img = render(tmp_path, [0, 1, 2], {"train": [NAN, NAN, NAN], "validation": [0.3, NAN, 0.2]})
    assert plot_pixels(img, BLUE)[0].size == 0
    assert plot_pixels(img, RED)[0].size > 0
    assert render(tmp_path, [0, 1, 2], {}).shape == (480, 800, 3)


def test_single_epoch_is_a_marker(tmp_path):
    img = render(tmp_path, [7], {"train": [0.123456]})
    rows, cols = plot_pixels(img, BLUE)
    assert rows.size >= 36
    assert np.ptp(rows) <= 6 and np.ptp(cols) <= 6
    assert abs(cols.mean() - img.shape[1] / 2) < 60  # centred horizontally


@pytest.mark.parametrize("value", [0.0, 0.0831, -2.5, 1e6])
def test_constant_series_is_a_flat_band(tmp_path, value):
    img = render(tmp_path, list(range(10)), {"train": [value] * 10})
    rows, _ = plot_pixels(img, BLUE)
    assert rows.size > 500
    assert np.ptp(rows) <= 6  # markers are 6 px tall


@pytest.mark.parametrize("direction", [-1, 1])
def test_curve_direction_on_screen(tmp_path, direction):
    epochs = list(range(50))
    values = [0.3 + direction * 0.01 * e for e in epochs]
    img = render(tmp_path, epochs, {"train": values})
    rows, cols = plot_pixels(img, BLUE)
    w = img.shape[1]
    left, right = rows[cols < w / 3].mean(), rows[cols > 2 * w / 3].mean()
    if direction < 0:  # decreasing loss: lower on screen (larger row index) on the right
        assert right > left + 100
    else:
        assert right < left - 100
    # The y range is padded: the extremes stay clear of the x axis and of the plot's top edge.
    black = colour_mask(img, (0, 0, 0))
    x_axis_row = int(np.argmax(black.sum(axis=1)))
    y_axis_col = int(np.argmax(black.sum(axis=0)))
    plot_top = int(np.flatnonzero(black[:, y_axis_col])[0])
    assert x_axis_row - rows.max() > 15 and rows.min() - plot_top > 15


def test_y_labels_have_four_significant_digits_or_enough_to_differ():
    assert plot._labels(np.array([0.1, 0.2, 0.30000000000000004])) == ["0.1", "0.2", "0.3"]
    assert plot._labels(np.array([0.123456, 1234.5678])) == ["0.1235", "1235"]
    assert plot._labels(np.array([0.0831233, 0.0831234])) == ["0.0831233", "0.0831234"]


def test_font_covers_the_required_characters_with_distinct_glyphs():
    required = "0123456789.-+e: " + "".join(map(chr, range(65, 91))) + "".join(
        map(chr, range(97, 123)))
    assert set(required) <= set(plot._FONT)
    for glyph in plot._FONT.values():
        assert len(glyph) == 7 and all(0 <= row < 32 for row in glyph)
    visible = [g for ch, g in plot._FONT.items() if ch != " "]
    assert len(set(visible)) == len(visible)
    assert plot._text_mask("Ab").shape == (7 * plot._SCALE, 11 * plot._SCALE)


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "loss.png"
    write_loss_png(path, [0, 1], {"train": [1.0, 0.5]})
    before = path.read_bytes()

    def crash(src, dst):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(fileio.os, "replace", crash)  # the shared atomic writer
    with pytest.raises(OSError, match="simulated"):
        write_loss_png(path, [0, 1, 2], {"train": [1.0, 0.5, 0.2]})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["loss.png"]  # the temp file was removed


@pytest.mark.parametrize("epochs, series, kw", [
    ([0, 1], {"train": [1.0]}, {}),
    ([], {"train": []}, {}),
    ([0, NAN], {"train": [1.0, 0.5]}, {}),
    ([0, 1], {"train": [1.0, 0.5]}, {"width": 60, "height": 40}),
])
def test_bad_input_raises(tmp_path, epochs, series, kw):
    with pytest.raises(ValueError):
        write_loss_png(tmp_path / "x.png", epochs, series, **kw)
    assert os.listdir(tmp_path) == []
