"""Command-line interface: `tuner train|sweep|configs|bench|eval|verify|export|params|examples|plot|diff|convert|data`.

Every Click command of the package lives in this package, one module per group of commands
(`evals`, `verify`, `plots`, `data`, `train`), and this package is the only one that talks to the
terminal (`tuner.cli.terminal`). The layers below report through observers, return values and
the project's exceptions, which `tuner.cli.errors` turns into one line and an exit code. The
command modules import only Click at the top: heavy imports (numba, pyarrow, an evaluation)
happen inside the commands, so ``tuner --help`` stays quick.
"""
import click

from .errors import TunerGroup


@click.group(cls=TunerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tuner")
def main() -> None:
    """Fast Texel tuning of hand-crafted chess evaluations."""


# --- evaluation commands (eval, export, params, examples, verify) ------------------------------
from .evals import eval_cmd, examples_cmd, export_cmd, params_cmd  # noqa: E402
from .verify import verify_cmd  # noqa: E402

main.add_command(eval_cmd)
main.add_command(export_cmd)
main.add_command(params_cmd)
main.add_command(examples_cmd)
main.add_command(verify_cmd)

# --- picture commands (plot, diff) ------------------------------------------------------------
from .plots import diff_cmd, plot_cmd  # noqa: E402

main.add_command(plot_cmd)
main.add_command(diff_cmd)

# --- dataset commands (convert, data stats|list) ----------------------------------------------
from .data import convert_cmd, data_group  # noqa: E402

main.add_command(convert_cmd)
main.add_command(data_group)

# --- training commands (train, configs, bench) ------------------------------------------------
from .train import bench_cmd, configs_cmd, train_cmd  # noqa: E402

main.add_command(train_cmd)
main.add_command(configs_cmd)
main.add_command(bench_cmd)

# --- sweeps (sweep) ---------------------------------------------------------------------------
from .sweep import sweep_cmd  # noqa: E402

main.add_command(sweep_cmd)
