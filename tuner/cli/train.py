"""Click commands of the training layer: `tuner train`, `tuner configs` and `tuner bench`.

Their errors are reported as ``error: ...`` with exit code 2 (`TrainingCommand`).
"""
from __future__ import annotations

import sys

import click

from tuner.errors import ConfigError
from tuner.interrupt import exit_status, sigterm_as_interrupt
from tuner.train.config import MAX_EPOCHS, MAX_THREADS, MAX_WORKERS, RAY_OPTIONAL

from .errors import TrainingCommand


@click.command("train", cls=TrainingCommand)
@click.option("--config", "config_name", metavar="CONFIG",
              help="TOML configuration file, or the name of a shipped one (`tuner configs`; "
                   "keys: --help-config). Required unless --resume.")
@click.option("--epochs", type=click.IntRange(min=1, max=MAX_EPOCHS),
              help="Train until this many epochs are done (overrides [training] epochs; on "
                   "--resume, default: the epochs the run was started or last resumed with).")
@click.option("--threads", type=click.IntRange(min=0, max=MAX_THREADS),
              help="Worker threads, 0 = all cores (overrides [training] threads). "
                   "The result is bitwise identical for any value.")
@click.option("--out", type=click.Path(file_okay=False),
              help="Output directory (default runs/<config name>-<date>-<time>).")
@click.option("--resume", type=click.Path(file_okay=False, exists=True),
              help="Continue the run in this directory from its last checkpoint; the result "
                   "is identical to an uninterrupted run.")
@click.option("--cluster", "cluster", metavar="ADDRESS",
              help="Ray for --workers (overrides [cluster] address): 'local' (a Ray on this "
                   "machine), 'auto' (the cluster of `ray start`) or 'ray://HOST:PORT'. "
                   f"{RAY_OPTIONAL}.")
@click.option("--workers", type=click.IntRange(min=0, max=MAX_WORKERS),
              help="Ray actors computing the batches, each with --threads threads (overrides "
                   "[cluster] workers; 0: this machine only). The result is bitwise identical "
                   f"for any value. {RAY_OPTIONAL}.")
@click.option("--help-config", is_flag=True, help="Print every configuration key and exit.")
def train_cmd(config_name, epochs, threads, out, resume, cluster, workers, help_config):
    """Tune an evaluation's parameters on labelled positions.

    Writes, in the output directory: train.log (one line per epoch), checkpoint.npz (after every
    epoch, atomically), params.json and params.hpp (current parameters), loss.csv and loss.png.
    One process at a time trains in a directory; --resume first brings the outputs up to date
    with the checkpoint. SIGTERM stops like Ctrl-C, keeping the last completed epoch.

    With [validation] folds = N, a cross-validation by game: N runs (per pull tried), each
    holding out 1/N of the games, choose the epochs and the pull; then one run on every
    training game, and best.json / best.hpp hold its parameters, or the starting ones when the
    folds do not show an improvement larger than their spread. --resume continues it.
    """
    from tuner.shipped import find_config, shipped_configs
    from tuner.train.config import describe
    from tuner.train.loop import start_run

    from .terminal import TerminalObserver, compile_errors
    if help_config:
        click.echo(describe())
        click.echo(f"Shipped configurations (--config NAME; `tuner configs` lists them): "
                   f"{', '.join(shipped_configs())}")
        return
    _check_cluster(cluster, workers)
    try:
        with sigterm_as_interrupt():
            config_path = None if config_name is None else find_config(config_name)
            if _cross_validation(config_path, resume):
                from tuner.train.cv import CrossValidation
                cv = CrossValidation(config_path, out, resume, epochs, threads, log=click.echo,
                                     observer=TerminalObserver())
                click.echo(f"output: {cv.out}")
                with compile_errors(cv.host.evaluation.name):
                    cv.run()
                click.echo(f"done: the result in {cv.out / 'best.json'} and .hpp")
                return
            run = start_run(config_path, out, resume, epochs, threads, log=click.echo,
                            observer=TerminalObserver())
            run.use_cluster(cluster, workers)
            run.log(f"output: {run.out}")
            with compile_errors(run.evaluation.name):
                run.run()
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM
        click.echo("\ninterrupted; the checkpoint of the last completed epoch is kept (resume "
                   "with --resume DIR)", err=True)
        sys.exit(exit_status(e))
    best = (f"; best epoch ({run.best_epoch}) in {run.out / 'best.json'} and .hpp"
            if run.best_epoch else "")
    click.echo(f"done: last parameters in {run.out / 'params.json'} and .hpp{best}")


def _check_cluster(address: str | None, workers: int | None) -> None:
    """--cluster and --workers refused (one line) before anything is made: an address that is
    not one, or either without Ray installed."""
    from tuner.train.config import check_address, require_ray
    if address is not None and check_address(address):
        raise ConfigError(f"--cluster: {check_address(address)}, got {address!r}")
    if address is not None or workers:
        require_ray("--cluster" if address is not None else f"--workers {workers}")


def _cross_validation(config_path, resume) -> bool:
    """Whether `tuner train` is to run (or resume) a cross-validation."""
    from tuner.train.config import load_config
    from tuner.train.cv import is_cross_validation, is_cross_validation_dir
    if resume is not None:
        return is_cross_validation_dir(resume)
    return config_path is not None and is_cross_validation(load_config(config_path))


def config_summary(path) -> str:
    """One line on what a configuration does: evaluation, epochs and datasets."""
    from tuner.train.config import load_config
    cfg = load_config(path)
    return (f"{cfg['evaluation']['name']}, {cfg['training']['epochs']} epochs on "
            f"{', '.join(cfg['data']['train'])}")


@click.command("configs", cls=TrainingCommand)
@click.argument("name", required=False)
def configs_cmd(name):
    """The configurations shipped with tuner (use one with `tuner train --config NAME`), or
    the text of the configuration NAME, to start a configuration of your own from:

    \b
      tuner configs default > tune.toml
    """
    from tuner.shipped import shipped_configs
    shipped = shipped_configs()
    if name is None:
        for config, path in shipped.items():
            click.echo(f"{config:<16}{config_summary(path)}")
        return
    if name not in shipped:
        raise ConfigError(f"{name}: not a shipped configuration (shipped: {', '.join(shipped)})")
    click.echo(shipped[name].read_text(encoding="utf-8"), nl=False)


@click.command("bench", cls=TrainingCommand)
@click.option("--threads", type=click.IntRange(min=0), default=0, show_default=True,
              help="Worker threads (0 = all cores); the signature does not depend on it.")
@click.option("--epochs", type=click.IntRange(min=1), default=3, show_default=True,
              help="Epochs to time.")
@click.option("--dataset", default="selfplay-std", show_default=True,
              help="Dataset name or Parquet path to run on.")
@click.option("--mode", type=click.Choice(["replay", "eager"]), default="replay",
              show_default=True, help="Epoch mode (see [training] mode); the signature does not "
              "depend on it.")
def bench_cmd(threads, epochs, dataset, mode):
    """Time a fixed training run and print its speed and a `Bench: <signature>` line.

    The run (data, seeds, settings) is fixed, so the signature is identical across runs and
    thread counts and changes when the evaluation or the tape's arithmetic changes.
    """
    from tuner.train.bench import run_bench

    from .terminal import TRAINING_KERNELS, announce_compiling
    run_bench(dataset, epochs, threads, mode, click.echo, announce=lambda: announce_compiling(TRAINING_KERNELS))
