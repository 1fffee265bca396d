"""A disk that fills up at a new run's first checkpoint: the checkpoint's error is the one
reported (not that of the loss plot written after it), and the run leaves nothing behind."""
from __future__ import annotations

import errno
import os
from pathlib import Path

from click.testing import CliRunner

from disks import small_disk
from tuner import fileio
from tuner.cli import main
from tuner.train.loop import CHECKPOINT

ROOT = Path(__file__).resolve().parents[1]
TOML = f"""\
[data]
train = ["{ROOT / 'tuner' / 'samples' / 'tiny.parquet'}"]

[optimizer]
lr = 5.0

[training]
epochs = 2
batch_size = 1024
micro_batch_size = 256
threads = 1
"""
#: Room for a new run's first files (config.toml, run.json, train.log: a page each) and
#: loss.csv, not for its checkpoint (about 43 kB with Clockwork's parameters).
DISK = "32k"
#: Without a tmpfs: the atomic writes that succeed before the checkpoint's.
WRITES_BEFORE_CHECKPOINT = 3


def test_full_disk_at_the_first_checkpoint_reports_it_and_leaves_nothing(tmp_path, monkeypatch):
    cfg = tmp_path / "run.toml"
    cfg.write_text(TOML, encoding="utf-8")
    with small_disk(tmp_path / "disk", DISK) as disk:
        if disk is None:
            disk = tmp_path / "disk"
            real = fileio.finish_temp
            calls = []

            def failing(tmp, path):
                calls.append(path)
                if len(calls) > WRITES_BEFORE_CHECKPOINT:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                return real(tmp, path)

            monkeypatch.setattr(fileio, "finish_temp", failing)
        out = disk / "out"
        r = CliRunner().invoke(main, ["train", "--config", str(cfg), "--out", str(out)])
        assert r.exit_code == 2 and "Traceback" not in r.output, (r.output, r.exception)
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
        assert errors == [f"error: cannot write {out / CHECKPOINT}: No space left on device "
                          f"(ENOSPC)"], r.stderr
        assert not out.exists(), sorted(p.name for p in out.iterdir())
        assert list(disk.iterdir()) == []
