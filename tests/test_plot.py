"""The loss picture (tuner.train.plot): what it draws, checked on the matplotlib Figure, and the
PNG file it writes, decoded by Pillow (matplotlib's own image dependency)."""
from __future__ import annotations

import math
import os

import numpy as np
import pytest
from PIL import Image

from tuner import fileio
from tuner.plots.figure import DPI
from tuner.train import plot
from tuner.train.plot import loss_figure, write_loss_plot

NAN = float("nan")


def history(n: int, *, val: bool = True, lr=None) -> dict:
    """n epochs (1-based) of a decreasing loss, its validation (or NaN) and a learning rate."""
    train = [0.1 + 0.15 / e for e in range(1, n + 1)]
    return {"epoch": list(range(1, n + 1)), "train_loss": train,
            "val_loss": [t + 0.01 for t in train] if val else [NAN] * n,
            "lr": lr if lr is not None else [1.0] * n}


def labels(fig) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def line(ax, label: str):
    (found,) = [ln for ln in ax.get_lines() if ln.get_label() == label]
    return found


def test_writes_a_png_of_the_figure_size(tmp_path):
    path = tmp_path / "loss.png"
    write_loss_plot(path, history(5), best_epoch=3, title="clockwork loss")
    with Image.open(path) as img:
        assert img.format == "PNG"
        assert img.size == (round(plot.SIZE[0] * DPI), round(plot.SIZE[1] * DPI))
        pixels = np.asarray(img.convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 10  # something is drawn, in colour


def test_panels_axes_labels_and_legend():
    fig = loss_figure(history(20), best_epoch=12, title="clockwork loss")
    ax, ax_lr = fig.axes  # the loss axes and its twin for the learning rate
    assert ax.get_xlabel() == "epoch" and "loss" in ax.get_ylabel()
    assert ax_lr.get_ylabel() == "learning rate"
    assert ax.get_title() == "clockwork loss"
    assert labels(fig) == ["training loss", "validation loss", "best epoch 12", "learning rate"]


def test_series_are_the_history():
    h = history(8, lr=[2.0 ** -e for e in range(8)])
    fig = loss_figure(h, best_epoch=None, title="")
    ax, ax_lr = fig.axes
    train, val = line(ax, "training loss"), line(ax, "validation loss")
    np.testing.assert_array_equal(train.get_xdata(), h["epoch"])
    np.testing.assert_array_equal(train.get_ydata(), h["train_loss"])
    np.testing.assert_array_equal(val.get_ydata(), h["val_loss"])
    np.testing.assert_array_equal(line(ax_lr, "learning rate").get_ydata(), h["lr"])
    assert "best epoch" not in " ".join(labels(fig))


def test_no_validation_draws_none_and_marks_the_best_training_loss():
    h = history(10, val=False)
    fig = loss_figure(h, best_epoch=4, title="")
    ax = fig.axes[0]
    assert "validation loss" not in labels(fig)
    best = line(ax, "best epoch 4")
    assert list(best.get_xdata()) == [4] and list(best.get_ydata()) == [h["train_loss"][3]]


def test_best_epoch_sits_on_the_validation_curve():
    h = history(10)
    ax = loss_figure(h, best_epoch=7, title="").axes[0]
    best = line(ax, "best epoch 7")
    assert list(best.get_ydata()) == [h["val_loss"][6]]
    vertical = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [7, 7]]
    assert len(vertical) == 1  # the vertical line at the best epoch


def test_a_long_decaying_run_gets_log_scales():
    n = 1000
    h = history(n, lr=[10 * 0.91 ** max(0, e - 6) for e in range(n)])
    ax, ax_lr = loss_figure(h, best_epoch=n, title="").axes
    assert ax.get_xscale() == "log" and ax_lr.get_yscale() == "log"
    assert ax.get_yscale() == "linear"  # 0.1..0.26: a log loss axis would not help


def test_a_short_run_stays_linear_and_a_wide_loss_goes_log():
    ax, ax_lr = loss_figure(history(20), best_epoch=None, title="").axes
    assert (ax.get_xscale(), ax.get_yscale(), ax_lr.get_yscale()) == ("linear",) * 3
    wide = history(20)
    wide["train_loss"] = [10.0 ** -e for e in range(20)]
    assert loss_figure(wide, best_epoch=None, title="").axes[0].get_yscale() == "log"


def test_nan_values_break_the_line_not_the_plot(tmp_path):
    h = history(5)
    h["train_loss"][2] = NAN
    write_loss_plot(tmp_path / "loss.png", h, best_epoch=None, title="")
    train = line(loss_figure(h, best_epoch=None, title="").axes[0], "training loss")
    assert math.isnan(train.get_ydata()[2])


def test_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "loss.png"
    write_loss_plot(path, history(3), best_epoch=None, title="")
    before = path.read_bytes()

    def crash(src, dst):
        raise OSError("simulated crash before the rename")

    monkeypatch.setattr(fileio.os, "replace", crash)  # the shared atomic writer
    with pytest.raises(OSError, match="simulated"):
        write_loss_plot(path, history(4), best_epoch=None, title="other")
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["loss.png"]  # the temporary file was removed


def _without(key):
    h = history(3)
    del h[key]
    return h


def _with(key, value):
    h = history(3)
    h[key] = value
    return h


@pytest.mark.parametrize("h, best, message", [
    (_without("lr"), None, "missing key(s) lr"),
    (_with("val_loss", [0.1]), None, "val_loss has 1 values for 3 epochs"),
    ({"epoch": [], "train_loss": [], "val_loss": [], "lr": []}, None, "no epochs"),
    (_with("epoch", [0, 1, 2]), None, "epoch 0.0 is not a 1-based epoch number"),
    (_with("epoch", [1, NAN, 3]), None, "epoch nan is not"),
    (history(3), 5, "best epoch 5 is not one of its epochs (1..3)"),
])
def test_bad_history_is_a_clear_error_and_writes_nothing(tmp_path, h, best, message):
    with pytest.raises(ValueError) as err:
        write_loss_plot(tmp_path / "loss.png", h, best_epoch=best, title="")
    assert message in str(err.value) and "\n" not in str(err.value)
    assert os.listdir(tmp_path) == []


def rising(n: int) -> dict:
    """A run that overfits: the validation loss climbs to the top right corner."""
    h = history(n, lr=[0.5 ** (e // 10) for e in range(n)])
    h["val_loss"] = [0.12 + 0.2 * (e / n) ** 2 for e in range(1, n + 1)]
    return h


@pytest.mark.parametrize("h, best", [(rising(20), 20), (rising(20), 1), (history(8), 5),
                                     (history(150, lr=[1.0 - e / 150 for e in range(150)]), 150)])
def test_the_legend_covers_no_curve_and_not_the_best_epoch(h, best):
    """Wherever the curves and the best epoch's star fall (a validation loss climbing to the top
    right, where the legend used to be; a best epoch first or last), the legend's box holds none
    of their points."""
    n = len(h["epoch"])
    fig = loss_figure(h, best_epoch=best, title="t")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.axes[0].get_legend().get_window_extent(renderer)
    assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1)
    points = 0
    for ax in fig.axes:
        for ln in ax.get_lines():
            xy = ax.transData.transform(np.column_stack([ln.get_xdata(), ln.get_ydata()]))
            xy = xy[np.isfinite(xy).all(axis=1)]
            points += len(xy)
            inside = ((xy[:, 0] >= box.x0) & (xy[:, 0] <= box.x1) & (xy[:, 1] >= box.y0)
                      & (xy[:, 1] <= box.y1))
            assert not inside.any(), ln.get_label()
    assert points >= 3 * n  # training, validation and learning-rate curves were checked
