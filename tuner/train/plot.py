"""Dependency-free loss-curve plots: rasterised with numpy, encoded as PNG by hand.

Training runs on machines without matplotlib or Pillow, so the tuner draws its own curves: each
series is a 2 px polyline over the epochs (markers on short runs), with axes, ticks, a legend and a
title in an embedded 5x7 bitmap font, on a white RGB canvas written as an 8-bit PNG.
"""
from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import numpy as np

from tuner.fileio import atomic_write

# 5x7 glyphs: 7 rows top to bottom, 5 bits per row, most significant bit = leftmost pixel.
# Characters outside the table are drawn as '?'.
_FONT = {
    '0': (14, 17, 19, 21, 25, 17, 14), '1': (4, 12, 4, 4, 4, 4, 14), '2': (14, 17, 1, 2, 4, 8, 31),
    '3': (31, 2, 4, 2, 1, 17, 14), '4': (2, 6, 10, 18, 31, 2, 2), '5': (31, 16, 30, 1, 1, 17, 14),
    '6': (6, 8, 16, 30, 17, 17, 14), '7': (31, 1, 2, 4, 8, 8, 8),
    '8': (14, 17, 17, 14, 17, 17, 14), '9': (14, 17, 17, 15, 1, 2, 12), ' ': (0, 0, 0, 0, 0, 0, 0),
    '.': (0, 0, 0, 0, 0, 12, 12), ',': (0, 0, 0, 0, 12, 4, 8), '-': (0, 0, 0, 31, 0, 0, 0),
    '+': (0, 4, 4, 31, 4, 4, 0), ':': (0, 12, 12, 0, 12, 12, 0), '=': (0, 0, 31, 0, 31, 0, 0),
    '_': (0, 0, 0, 0, 0, 0, 31), '/': (0, 1, 2, 4, 8, 16, 0), '(': (2, 4, 8, 8, 8, 4, 2),
    ')': (8, 4, 2, 2, 2, 4, 8), '?': (14, 17, 1, 2, 4, 0, 4), 'A': (14, 17, 17, 31, 17, 17, 17),
    'B': (30, 17, 17, 30, 17, 17, 30), 'C': (14, 17, 16, 16, 16, 17, 14),
    'D': (28, 18, 17, 17, 17, 18, 28), 'E': (31, 16, 16, 30, 16, 16, 31),
    'F': (31, 16, 16, 30, 16, 16, 16), 'G': (14, 17, 16, 23, 17, 17, 15),
    'H': (17, 17, 17, 31, 17, 17, 17), 'I': (14, 4, 4, 4, 4, 4, 14), 'J': (7, 2, 2, 2, 2, 18, 12),
    'K': (17, 18, 20, 24, 20, 18, 17), 'L': (16, 16, 16, 16, 16, 16, 31),
    'M': (17, 27, 21, 21, 17, 17, 17), 'N': (17, 17, 25, 21, 19, 17, 17),
    'O': (14, 17, 17, 17, 17, 17, 14), 'P': (30, 17, 17, 30, 16, 16, 16),
    'Q': (14, 17, 17, 17, 21, 18, 13), 'R': (30, 17, 17, 30, 20, 18, 17),
    'S': (15, 16, 16, 14, 1, 1, 30), 'T': (31, 4, 4, 4, 4, 4, 4),
    'U': (17, 17, 17, 17, 17, 17, 14), 'V': (17, 17, 17, 17, 17, 10, 4),
    'W': (17, 17, 17, 21, 21, 21, 10), 'X': (17, 17, 10, 4, 10, 17, 17),
    'Y': (17, 17, 17, 10, 4, 4, 4), 'Z': (31, 1, 2, 4, 8, 16, 31), 'a': (0, 0, 14, 1, 15, 17, 15),
    'b': (16, 16, 22, 25, 17, 17, 30), 'c': (0, 0, 14, 16, 16, 17, 14),
    'd': (1, 1, 13, 19, 17, 17, 15), 'e': (0, 0, 14, 17, 31, 16, 14), 'f': (6, 9, 8, 28, 8, 8, 8),
    'g': (0, 0, 15, 17, 15, 1, 14), 'h': (16, 16, 22, 25, 17, 17, 17),
    'i': (4, 0, 12, 4, 4, 4, 14), 'j': (2, 0, 6, 2, 2, 18, 12), 'k': (16, 16, 18, 20, 24, 20, 18),
    'l': (12, 4, 4, 4, 4, 4, 14), 'm': (0, 0, 26, 21, 21, 17, 17), 'n': (0, 0, 22, 25, 17, 17, 17),
    'o': (0, 0, 14, 17, 17, 17, 14), 'p': (0, 0, 30, 17, 30, 16, 16),
    'q': (0, 0, 13, 19, 15, 1, 1), 'r': (0, 0, 22, 25, 16, 16, 16), 's': (0, 0, 14, 16, 14, 1, 30),
    't': (8, 8, 28, 8, 8, 9, 6), 'u': (0, 0, 17, 17, 17, 19, 13), 'v': (0, 0, 17, 17, 17, 10, 4),
    'w': (0, 0, 17, 17, 21, 21, 10), 'x': (0, 0, 17, 10, 4, 10, 17),
    'y': (0, 0, 17, 17, 15, 1, 14), 'z': (0, 0, 31, 2, 4, 8, 31),
}
_SCALE = 2  # font pixels per glyph pixel
_TEXT_H = 7 * _SCALE

_WHITE = (255, 255, 255)
_BLACK = (0, 0, 0)
_GRID = (225, 225, 225)
# Distinct line colours (cycled beyond eight series); none is black, white or the grid grey.
_PALETTE = ((31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14),
            (148, 103, 189), (140, 86, 75), (227, 119, 194), (23, 190, 207))

_PAD = 10  # outer margin
_TICK = 5  # tick mark length
_INSET = 8  # gap between the axes and the outermost data points, so markers stay inside
_MARKER_MAX_POINTS = 60  # mark every point of series with at most this many finite values


def write_loss_png(path, epochs: Sequence[int], series: dict[str, Sequence[float]],
                   title: str = "loss", width: int = 800, height: int = 480) -> None:
    """Plot each series of ``series`` (name -> one loss per epoch) against ``epochs`` as a PNG.

    Non-finite values are skipped (the line breaks there); a lone point is drawn as a marker. The
    y range spans the finite values with 5% padding. The file is replaced atomically.
    Raises ValueError for no epochs, non-finite epochs, a series whose length differs from
    ``epochs``, or an image too small for the layout.
    """
    x = np.asarray(epochs, dtype=np.float64).reshape(-1)
    if x.size == 0:
        raise ValueError("no epochs to plot")
    if not np.isfinite(x).all():
        raise ValueError("epochs must be finite")
    ys = {}
    for name, values in series.items():
        v = np.asarray(values, dtype=np.float64).reshape(-1)
        if v.size != x.size:
            raise ValueError(f"series {name!r} has {v.size} values for {x.size} epochs")
        ys[name] = v
    img = _render(x, ys, title, int(width), int(height))
    atomic_write(path, _png_bytes(img))


def _render(x: np.ndarray, ys: dict[str, np.ndarray], title: str, width: int,
            height: int) -> np.ndarray:
    """The plot as an RGB uint8 array of shape (height, width, 3)."""
    img = np.empty((height, width, 3), dtype=np.uint8)
    img[:] = _WHITE
    colours = {name: _PALETTE[i % len(_PALETTE)] for i, name in enumerate(ys)}

    # Vertical layout: title row, legend rows, plot, x tick labels, x caption.
    _text(img, max(_PAD, (width - _text_mask(title).shape[1]) // 2), _PAD, title, _BLACK)
    top = _legend(img, _PAD + _TEXT_H + 8, colours) + 6
    bottom = height - (_PAD + 2 * _TEXT_H + _TICK + 12)

    finite = np.concatenate([v[np.isfinite(v)] for v in ys.values()] + [np.empty(0)])
    y_lo, y_hi = _y_range(finite)
    y_ticks = _ticks(y_lo, y_hi, _nice_step(y_hi - y_lo, max(3, (bottom - top) // 60)))
    y_labels = _labels(y_ticks)
    left = _PAD + max((_text_mask(s).shape[1] for s in y_labels), default=0) + _TICK + 6
    x_lo, x_hi = float(x.min()), float(x.max())
    x_label_w = max(_text_mask(str(int(v))).shape[1] for v in (x_lo, x_hi))
    right = width - max(_PAD + 6, x_label_w // 2 + 4)
    if right - left < 4 * _INSET or bottom - top < 4 * _INSET:
        raise ValueError(f"image {width}x{height} is too small for the plot")

    def px(v):
        if x_hi == x_lo:
            return np.full(np.shape(v), (left + right) // 2)
        frac = (np.asarray(v) - x_lo) / (x_hi - x_lo)
        return np.rint(left + _INSET + frac * (right - left - 2 * _INSET)).astype(np.int64)

    def py(v):
        frac = (np.asarray(v) - y_lo) / (y_hi - y_lo)
        return np.rint(bottom - _INSET - frac * (bottom - top - 2 * _INSET)).astype(np.int64)

    n_x = max(1, min(8, (right - left) // (x_label_w + 16)))
    x_ticks = _epoch_ticks(x_lo, x_hi, n_x)
    for t, s in zip(py(y_ticks), y_labels):
        _fill(img, left, t, right, t + 1, _GRID)
        _fill(img, left - _TICK, t, left, t + 1, _BLACK)
        _text(img, left - _TICK - 4 - _text_mask(s).shape[1], t - _TEXT_H // 2, s, _BLACK)
    for t in x_ticks:
        c = int(px(t))
        s = str(t)
        _fill(img, c, top, c + 1, bottom, _GRID)
        _fill(img, c, bottom, c + 1, bottom + _TICK, _BLACK)
        _text(img, c - _text_mask(s).shape[1] // 2, bottom + _TICK + 4, s, _BLACK)
    caption_w = _text_mask("epoch").shape[1]
    _text(img, (left + right - caption_w) // 2, bottom + _TICK + _TEXT_H + 10, "epoch", _BLACK)
    _fill(img, left, top, left + 1, bottom + 1, _BLACK)
    _fill(img, left, bottom, right, bottom + 1, _BLACK)

    cols = px(x)
    for name, v in ys.items():
        ok = np.isfinite(v)
        rows = py(np.where(ok, v, y_lo))
        _curve(img, cols, rows, ok, colours[name])
    return img


def _legend(img: np.ndarray, y: int, colours: dict) -> int:
    """Draw a swatch and the name of each series in its colour, wrapping rows; return the end y."""
    width = img.shape[1]
    cx, end = _PAD, y
    for name, colour in colours.items():
        w = 18 + 6 + _text_mask(name).shape[1]
        if cx > _PAD and cx + w > width - _PAD:
            cx, y = _PAD, y + _TEXT_H + 6
        _fill(img, cx, y + _TEXT_H // 2 - 2, cx + 18, y + _TEXT_H // 2 + 2, colour)
        _text(img, cx + 24, y, name, colour)
        cx += w + 18
        end = y + _TEXT_H
    return end


def _y_range(finite: np.ndarray) -> tuple[float, float]:
    """Loss axis limits: min to max padded by 5%; a (near-)constant or empty input gets a band."""
    if finite.size == 0:
        return 0.0, 1.0
    lo, hi = float(finite.min()), float(finite.max())
    scale = max(abs(lo), abs(hi))
    if hi - lo > 1e-9 * scale:
        pad = 0.05 * (hi - lo)
    else:  # constant: a flat line in the middle instead of a zero-height range
        pad = 0.05 * scale if scale > 0 else 0.5
    return lo - pad, hi + pad


def _nice_step(span: float, n: int) -> float:
    """The smallest 1/2/5 x 10^k step that divides ``span`` into at most about ``n`` parts."""
    raw = span / n
    mag = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _ticks(lo: float, hi: float, step: float) -> np.ndarray:
    """The multiples of ``step`` inside [lo, hi]."""
    k = np.arange(math.ceil(lo / step), math.floor(hi / step) + 1)
    return k * step + 0.0  # + 0.0 turns -0.0 into 0.0


def _epoch_ticks(lo: float, hi: float, n: int) -> list[int]:
    """Integer x ticks: multiples of a nice step >= 1 in [lo, hi]; the first epoch if none fit."""
    step = 1.0 if hi == lo else max(1.0, _nice_step(hi - lo, n))
    return [int(t) for t in _ticks(lo, hi, step)] or [int(round(lo))]


def _labels(ticks: np.ndarray) -> list[str]:
    """Tick labels with 4 significant digits, more if needed to tell neighbouring ticks apart."""
    for digits in range(4, 17):
        labels = [f"{t:.{digits}g}" for t in ticks]
        if len(set(labels)) == len(labels):
            break
    return labels


def _curve(img: np.ndarray, cols: np.ndarray, rows: np.ndarray, ok: np.ndarray,
           colour: tuple) -> None:
    """A 2 px polyline through the finite points, broken at gaps; markers on short series.

    Each segment is sampled once per pixel of its longer extent, and every sample stamps a 2x2
    block, so lines are 2 px thick at any slope without gaps.
    """
    seg = np.flatnonzero(ok[:-1] & ok[1:])
    dc, dr = np.diff(cols)[seg], np.diff(rows)[seg]
    n = np.maximum(np.abs(dc), np.abs(dr)) + 1
    which = np.repeat(np.arange(seg.size), n)
    t = (np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)) / np.repeat(np.maximum(n - 1, 1), n)
    xs = np.rint(cols[seg][which] + t * dc[which]).astype(np.int64)
    ys = np.rint(rows[seg][which] + t * dr[which]).astype(np.int64)
    for d_row in (0, 1):
        for d_col in (0, 1):
            img[ys + d_row, xs + d_col] = colour

    neighbour = np.zeros_like(ok)
    neighbour[1:] |= ok[:-1]
    neighbour[:-1] |= ok[1:]
    marked = ok if ok.sum() <= _MARKER_MAX_POINTS else ok & ~neighbour  # lone points always
    for d_row in range(-2, 4):  # 6x6 squares centred on the 2x2 line stamp
        for d_col in range(-2, 4):
            img[rows[marked] + d_row, cols[marked] + d_col] = colour


def _fill(img: np.ndarray, x0: int, y0: int, x1: int, y1: int, colour: tuple) -> None:
    """Paint the rectangle [x0, x1) x [y0, y1), clipped to the image."""
    img[max(int(y0), 0):max(int(y1), 0), max(int(x0), 0):max(int(x1), 0)] = colour


def _text_mask(s: str) -> np.ndarray:
    """bool[7 * scale, width]: the pixels of ``s`` in the embedded font, scaled by _SCALE."""
    rows = np.array([_FONT.get(ch, _FONT["?"]) for ch in s], dtype=np.int64).reshape(-1, 7)
    bits = (rows[:, :, None] >> np.arange(4, -1, -1)) & 1  # (chars, 7, 5)
    bits = np.pad(bits, ((0, 0), (0, 0), (0, 1)))  # one blank column after each glyph
    mask = bits.transpose(1, 0, 2).reshape(7, -1)[:, :-1].astype(bool)
    return mask.repeat(_SCALE, axis=0).repeat(_SCALE, axis=1)


def _text(img: np.ndarray, x: int, y: int, s: str, colour: tuple) -> None:
    """Draw ``s`` with its top-left corner at (x, y), clipped to the image."""
    mask = _text_mask(s)
    h, w = mask.shape
    x0, y0 = max(x, 0), max(y, 0)
    x1, y1 = min(x + w, img.shape[1]), min(y + h, img.shape[0])
    if x1 > x0 and y1 > y0:
        img[y0:y1, x0:x1][mask[y0 - y:y1 - y, x0 - x:x1 - x]] = colour


def _png_bytes(img: np.ndarray) -> bytes:
    """Encode an RGB uint8 array as a PNG: IHDR (8-bit RGB), one zlib IDAT (filter 0), IEND."""
    height, width, _ = img.shape

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (len(data).to_bytes(4, "big") + kind + data
                + zlib.crc32(kind + data).to_bytes(4, "big"))

    raw = np.zeros((height, 1 + 3 * width), dtype=np.uint8)  # column 0: filter type 0 (None)
    raw[:, 1:] = img.reshape(height, 3 * width)
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes((8, 2, 0, 0, 0))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(raw.tobytes())) + chunk(b"IEND", b""))
