"""Click commands of the dataset layer: ``tuner convert`` and ``tuner data stats|list``.

Registered on the main group in tuner/cli/__init__.py ("dataset commands" section). Heavy
imports (pyarrow, numba) happen inside the commands so ``tuner --help`` stays quick.
"""
from __future__ import annotations

import json
import os
import sys

import click

from tuner.interrupt import exit_status, sigterm_as_interrupt

FORMAT_CHOICES = ("auto", "clockwork", "bracket", "pipe", "epd")
PROGRESS_MIN_BYTES = 16 << 20


@click.command("convert")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False),
              help="Parquet file to write (replaced atomically on success).")
@click.option("--format", "fmt", type=click.Choice(FORMAT_CHOICES), default="auto",
              show_default=True,
              help="Input format; 'auto' detects it per file. clockwork: FEN;w|d|b; "
                   "bracket: FEN [1.0] (or [1-0], [1/2-1/2], [0-1]); pipe: FEN | score | wdl; "
                   'epd: 4 FEN fields + c9 "1-0";')
@click.option("--policy", type=click.Choice(("skip", "strict")), default="skip",
              show_default=True,
              help="skip: leave bad lines out and report them; strict: any bad line fails "
                   "and nothing is written.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: inputs over 16 MB, stderr a terminal).")
def convert_cmd(inputs, output, fmt, policy, progress):
    """Convert text files of labelled positions (INPUT...) into one Parquet file.

    Bad lines are reported as file:line: reason (the first 10; with more, every one is written
    to OUTPUT.bad.txt). Binary inputs (a Parquet file, ...) are refused. The output gets the
    columns fen (string),
    result (double, White's point of view) and, for the pipe format, score_cp (int32),
    zstd-compressed in row groups of 131,072 rows. Inputs may be gzip/zstd/bz2/lz4
    compressed (detected from their first bytes).
    """
    from tuner.data.convert import convert_files

    total = 0
    for p in inputs:
        try:
            total += os.path.getsize(p)
        except OSError:
            pass
    show = progress if progress is not None else (total >= PROGRESS_MIN_BYTES
                                                   and sys.stderr.isatty())
    try:
        with sigterm_as_interrupt():
            if show:
                with click.progressbar(length=total, label="converting", file=sys.stderr,
                                       show_percent=True, show_eta=True) as bar:
                    summary = convert_files(list(inputs), output, fmt, policy,
                                            progress=bar.update)
            else:
                summary = convert_files(list(inputs), output, fmt, policy)
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM: the partial output is already removed
        click.echo(f"\ninterrupted; {output} was not written (an existing one is left as it was)", err=True)
        sys.exit(exit_status(e))
    for msg in summary.messages:
        click.echo(msg, err=True)
    for fs in summary.files:
        click.echo(f"  {fs.path}: {fs.format}, {fs.rows:,} rows, {fs.n_bad:,} bad lines")
    rate = summary.rows / summary.seconds if summary.seconds > 0 else 0.0
    click.echo(f"wrote {output}: {summary.rows:,} rows, {summary.n_bad:,} bad lines skipped, "
               f"{summary.bytes_in / 1e6:.1f} MB read in {summary.seconds:.2f} s "
               f"({rate:,.0f} rows/s)")


@click.group("data")
def data_group():
    """Inspect datasets (registry names or Parquet files)."""


@data_group.command("stats")
@click.argument("dataset")
@click.option("--policy", type=click.Choice(("skip", "strict")), default="skip",
              show_default=True, help="strict: fail if the file has bad rows.")
@click.option("--json", "as_json", is_flag=True, help="Print the statistics as JSON.")
def stats_cmd(dataset, policy, as_json):
    """Rows, results, phase histogram and standard/DFRC counts of DATASET (a registered name,
    see `tuner data list`, or a Parquet file).

    \b
    Phase = knights + bishops + 2*rooks + 4*queens (both sides), capped at 24.
    Variant, decided per position from its castling rights:
      DFRC     a right with the king off the e-file or the rook off the
               a/h-file, or a Shredder-style castling field (HAha, GAfd ...);
      standard rights present, all standard, written KQkq;
      unknown  no castling rights left (either variant).
    """
    from tuner.data.stats import dataset_stats, format_stats

    s = dataset_stats(dataset, policy=policy)
    if as_json:
        click.echo(json.dumps(s.to_dict(), indent=2))
    else:
        click.echo(format_stats(s))


@data_group.command("list")
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="Check files against the registry's checksums.")
@click.option("--config", "config_name", metavar="CONFIG",
              help="Show the lookup for the dataset names of this configuration (a file or a "
                   "shipped name): its project's registry comes first.")
def list_cmd(verify, config_name):
    """The registries dataset names are looked up in, in order, and their datasets.

    \b
    A value with a '/' or ending in .parquet is a file path (relative to the
    configuration file it comes from). A name is looked up in:
      1. the project's datasets/registry.toml: the nearest one in the folder of
         the configuration or a parent; without one, ./datasets/registry.toml;
      2. $TUNER_DATASETS (a folder holding registry.toml, or a .toml file);
      3. the sample sets shipped with tuner.
    The first registry listing a name wins; a name none lists is read as a file of
    that name, if there is one. Paths in a registry are relative to it.
    """
    from tuner.data.errors import DatasetError
    from tuner.data.registry import not_a_file, registries, search_path, verify_entry
    from tuner.shipped import find_config

    config = None if config_name is None else find_config(config_name)
    found = registries(config)
    click.echo("dataset names are looked up in (first match wins; paths are read as files):")
    counts = {step: len(entries) for step, entries in found}
    number = {}
    for i, step in enumerate(search_path(config), 1):
        number[step] = i
        state = (f"{counts[step]} datasets" if step in counts
                 else "not set" if step.path is None else "none there")
        click.echo(f"  {i}. {step.label}: {state}")
    seen: dict[str, int] = {}
    for step, entries in found:
        click.echo(f"\n{number[step]}. {step.label}:")
        if not entries:
            click.echo("  (no datasets registered)")
        for name, e in entries.items():
            if name in seen:
                state = f"shadowed by registry {seen[name]}"
            elif not_a_file(e.path) is not None:
                state = f"{not_a_file(e.path)}, not a Parquet file"
            elif not e.path.is_file():
                state = f"missing; create with: {e.convert_command()}" if e.sha256 is None \
                    else f"MISSING ({e.missing_hint()})"
            elif verify:
                try:
                    verify_entry(e)
                    state = "ok" if e.sha256 else "present (no checksum)"
                except DatasetError as err:
                    state = f"ERROR: {err}"
            else:
                state = "present"
            seen.setdefault(name, number[step])
            rows = f"{e.rows:,} rows" if e.rows else ""
            file = os.path.relpath(e.path, step.path.parent)
            click.echo(f"  {name:<15}{file:<24}{rows:>14}  {state}")
