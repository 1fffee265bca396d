"""The Click command `tuner sweep`: many runs over one base configuration, ranked by validation
loss (the library part is tuner/train/sweep.py)."""
from __future__ import annotations

import sys

import click

from tuner.interrupt import exit_status, sigterm_as_interrupt

from .errors import TrainingCommand


@click.command("sweep", cls=TrainingCommand)
@click.option("--config", "sweep_file", metavar="SWEEP.TOML", type=click.Path(dir_okay=False),
              help="The sweep file: a [sweep] table naming the base configuration and the keys "
                   "to vary (keys: --help-sweep). Required.")
@click.option("--out", type=click.Path(file_okay=False),
              help="The sweep's directory (default sweeps/<sweep file's name>). Running the same "
                   "command again resumes the sweep in it.")
@click.option("--cluster", metavar="ADDRESS",
              help="Run the trials as Ray tasks: 'local' (a Ray started on this machine), 'auto' "
                   "(the cluster of `ray start`) or 'ray://HOST:PORT'; '' runs them one after "
                   "another here (overrides [sweep] cluster). Ray is optional: "
                   "pip install 'tuner[ray]'.")
@click.option("--help-sweep", is_flag=True, help="Print every key of a sweep file and exit.")
def sweep_cmd(sweep_file, out, cluster, help_sweep):
    """Train one run per trial of a sweep and rank the trials by their best validation loss.

    Every trial is an ordinary run directory (trial-NNN/, what `tuner train` writes) in the
    sweep's directory, which also gets results.csv (the ranked table, also printed) and
    results.png (the validation loss against each swept key). A killed sweep resumes with the
    same command: finished trials are not run again, an unfinished one continues from its
    checkpoint (bit for bit the uninterrupted run). Runs are deterministic: the table is the
    same one after another or on Ray.

    \b
    [sweep]
    config = "default"
    [sweep.values]
    "optimizer.lr" = [2.0, 10.0]
    "training.batch_size" = [65536, 262144]
    """
    from tuner.train.sweep import RESULTS_CSV, RESULTS_PNG, describe_sweep, format_table, run_sweep

    from .terminal import TerminalObserver

    if help_sweep:
        click.echo(describe_sweep())
        return
    if sweep_file is None:
        raise click.UsageError("--config SWEEP.TOML is required (keys: --help-sweep)")
    try:
        with sigterm_as_interrupt():
            ranked, sweep = run_sweep(sweep_file, out, cluster=cluster, log=click.echo,
                                      observer=TerminalObserver())
    except KeyboardInterrupt as e:
        click.echo("\ninterrupted; finished trials are kept: run the same command again to "
                   "resume the sweep", err=True)
        sys.exit(exit_status(e))
    click.echo(format_table(ranked, sweep.keys))
    click.echo(f"done: {sweep.out / RESULTS_CSV} and {RESULTS_PNG}")
