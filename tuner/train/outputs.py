"""What a run writes for its user, besides the checkpoint: ``train.log``, ``params.json`` /
``params.hpp``, ``best.json`` / ``best.hpp``, ``loss.csv`` and ``loss.png``.

Each is written from the run's state (`tuner.train.checkpoint.TrainState`), atomically except
the log, which is appended to line by line (and also handed to the run's `log` function, which
prints it). The JSON files name the evaluation and hold the K the run trains with; the C++ files
are in the evaluation's export style, with the JSON's ``note`` (K first) as their first comment
lines.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from tuner.evals.export import cpp_comments
from tuner.fileio import WriteError, atomic_write
from .checkpoint import HISTORY_FIELDS, TrainState
from .workers import split_params

#: The run's log, in its directory.
LOG = "train.log"


class Outputs:
    """The output files of the run in `out` tuning `evaluation`; `echo(line)` also gets every
    line of the log."""

    def __init__(self, out: Path, evaluation, echo: Callable[[str], None]):
        self.out = Path(out)
        self.evaluation = evaluation
        self.echo = echo
        self.no_cpp = False  # set once the evaluation turned out to have no C++ export
        #: Whether `write_history` draws ``loss.png`` beside ``loss.csv`` (a cross-validation's
        #: fold runs draw none: `tuner.train.cv.run_fold`).
        self.draws_loss_plot = True

    def log(self, line: str) -> None:
        """Print `line` (`echo`) and append it to ``train.log``."""
        self.echo(line)
        path = self.out / LOG
        try:
            with open(path, "a", encoding="utf-8") as f:
                f.write(line + "\n")
        except OSError as e:
            raise WriteError(path, e) from None

    def write_params(self, stem: str, theta: np.ndarray, k: float | None,
                     note: dict | None = None) -> None:
        """``stem.json`` and ``stem.hpp`` of `theta` at K `k`. The JSON names the evaluation and
        holds K as ``"K"``; its ``"note"`` (K, then `note`) is also the C++'s first comment
        lines. An evaluation without a C++ export gets no ``.hpp`` (said once in the log)."""
        registry = self.evaluation.registry
        pairs, values = split_params(theta, registry.n_params)
        note = {"K": k, **(note or {})}
        with_meta = registry.with_meta(evaluation=self.evaluation.name, K=k)
        atomic_write(self.out / f"{stem}.json",
                     with_meta.dumps(pairs, value_values=values, note=note))
        try:
            cpp = self.evaluation.to_cpp(registry, pairs, values)
        except ValueError as e:  # no C++ layout for this evaluation: say so once
            if not self.no_cpp:
                self.log(f"no params.hpp: {e}")
            self.no_cpp = True
            return
        atomic_write(self.out / f"{stem}.hpp", cpp_comments(note) + cpp)

    def write_epoch(self, state: TrainState, best: bool) -> None:
        """params.* of `state`, and best.* when its epoch is the `best` so far."""
        self.write_params("params", state.theta, state.k)
        if best:
            self.write_params("best", state.best_theta, state.k,
                              note={"best_epoch": state.best_epoch,
                                    "validation_loss": state.best_val})

    def refresh(self, state: TrainState) -> None:
        """params.* and best.* from `state` (on resume: a kill after the checkpoint may have
        left them an epoch behind it)."""
        self.write_epoch(state, best=state.best_epoch > 0)

    def write_history(self, state: TrainState) -> None:
        """``loss.csv`` and, once an epoch is done (and unless `draws_loss_plot` is off),
        ``loss.png`` of `state`'s history."""
        h = state.history
        lines = [",".join(HISTORY_FIELDS)]
        for i in range(len(h["epoch"])):
            lines.append(",".join(f"{h[k][i]:.10g}" for k in HISTORY_FIELDS))
        atomic_write(self.out / "loss.csv", "\n".join(lines) + "\n")
        if h["epoch"] and self.draws_loss_plot:
            from .plot import write_loss_plot  # matplotlib (40 MB) loaded only when it draws

            write_loss_plot(self.out / "loss.png", h, best_epoch=state.best_epoch or None,
                            title=f"{self.evaluation.name} loss")
