"""Progress reporting: the compilation watch, a run's observer events, the terminal lines."""
import shutil

import numpy as np
import pytest
from numba import njit

from shared import REPO
from tuner.compiling import COMPILING, watch_compilation
from tuner.cli.terminal import TerminalObserver
from tuner.train.config import load_config
from tuner.train.loop import Run, load_data
from tuner.train.progress import Observer

pytestmark = pytest.mark.usefixtures("no_loss_plot")  # conftest.py: no loss.png drawn


def test_the_watch_sees_a_compilation_once_and_before_it():
    @njit(cache=False)
    def fresh(x):
        return x + 1

    calls = []
    with watch_compilation(lambda: calls.append("start")) as w:
        assert fresh(1) == 2
        assert fresh(2) == 3
    assert calls == ["start"] and w.compiled and w.seconds > 0
    with watch_compilation(lambda: calls.append("again")) as w:
        assert fresh(3) == 4  # compiled already: no event
    assert calls == ["start"] and not w.compiled and w.seconds == 0


class Recorder(Observer):
    def __init__(self):
        self.events = []

    def compile_start(self):
        self.events.append(("compile_start",))

    def compile_end(self, seconds):
        self.events.append(("compile_end", seconds))

    def load_start(self, names):
        self.events.append(("load_start", tuple(names)))

    def load_end(self, n, seconds):
        self.events.append(("load_end", n))

    def record_start(self, n):
        self.events.append(("record_start", n))

    def record_progress(self, n):
        self.events.append(("record_progress", n))

    def record_end(self):
        self.events.append(("record_end",))

    def epoch_start(self, epoch, epochs, n):
        self.events.append(("epoch_start", epoch, epochs, n))

    def epoch_progress(self, done, loss):
        assert np.isfinite(loss)
        self.events.append(("epoch_progress", done))

    def epoch_end(self):
        self.events.append(("epoch_end",))

    def epoch_done(self, stats):
        self.events.append(("epoch_done", stats["epoch"]))


def _config(tmp_path, epochs=2):
    """The tutorial's config beside a fresh copy of its evaluation (never compiled before)."""
    shutil.copy(REPO / "examples" / "kingsafety.py", tmp_path / "kingsafety.py")
    text = (REPO / "examples" / "kingsafety.toml").read_text()
    text = text.replace("epochs = 5", f"epochs = {epochs}")
    assert f"epochs = {epochs}" in text
    (tmp_path / "run.toml").write_text(text)
    return load_config(tmp_path / "run.toml")


def _collapse(events):
    """Events with runs of progress events folded into one (kind, [arguments])."""
    out = []
    for e in events:
        if e[0].endswith("_progress") and out and out[-1][0] == e[0]:
            out[-1][1].append(e[1])
        elif e[0].endswith("_progress"):
            out.append((e[0], [e[1]]))
        else:
            out.append(e)
    return out


def test_a_run_reports_its_steps_in_order_with_compilation_first(tmp_path):
    cfg = _config(tmp_path)
    (tmp_path / "out").mkdir()
    lines = []
    obs = Recorder()
    run = Run(cfg, tmp_path / "out", log=lines.append, observer=obs)
    run.run()
    ev = _collapse(obs.events)
    kinds = [e[0] for e in ev]
    # Compilation (this file's evaluation at least, everything on a cold cache) may start before
    # the load (the bulk FEN parser warms first) or after it, and ends before anything timed.
    assert [k for k in kinds if k.startswith("compile")] == ["compile_start", "compile_end"]
    assert kinds.index("compile_end") < kinds.index("record_start")
    rest = [e for e in ev if not e[0].startswith("compile")]
    # A replay run records its positions as it reads them: recording happens inside the load.
    assert [e[0] for e in rest] == ["load_start", "record_start", "record_progress",
                                    "record_end", "load_end"] + ["epoch_start", "epoch_progress",
                                                                 "epoch_end", "epoch_done"] * 2
    assert rest[0] == ("load_start", ("tiny",)) and rest[4] == ("load_end", 4000)
    assert rest[1] == ("record_start", 4000) and sum(rest[2][1]) == 4000
    n_train = len(load_data(cfg, lambda line: None).train)  # whole games: about 90 %
    assert 3000 < n_train < 4000
    assert rest[5] == ("epoch_start", 1, 2, n_train) and rest[6][1][-1] == n_train
    assert rest[6][1] == sorted(rest[6][1]) and rest[8] == ("epoch_done", 1)
    assert rest[9] == ("epoch_start", 2, 2, n_train)
    assert any(line.startswith("compiled the kernels in") for line in lines)
    assert "compiled the kernels in" in (tmp_path / "out" / "train.log").read_text()

    # The same evaluation again: compiled in this process already, so no compile events.
    (tmp_path / "again").mkdir()
    again = Recorder()
    Run(cfg, tmp_path / "again", epochs=1, observer=again).run()
    assert again.events[0] == ("load_start", ("tiny",))


def test_terminal_lines_without_a_terminal(capsys):
    obs = TerminalObserver(tty=False, what="the test kernels")
    obs.compile_start()
    obs.load_start(["tiny", "other"])
    obs.load_end(4000, 0.25)
    obs.record_start(4000)
    obs.record_progress(4000)
    obs.record_end()
    obs.epoch_start(1, 3, 3600)
    obs.epoch_progress(3600, 0.125)
    obs.epoch_end()
    err = capsys.readouterr().err.splitlines()
    assert err == [f"{COMPILING}: Numba is compiling the test kernels (later runs load the "
                   f"machine code from the cache) ...",
                   "loading tiny, other ...", "loaded 4,000 positions in 0.25 s",
                   "recording 4,000 positions ..."]  # epochs: the run's own log line says it
