"""Command-line interface: `tuner train|configs|bench|eval|export|params|plot|diff|convert|data|examples`."""
import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tuner")
def main() -> None:
    """Fast Texel tuning of hand-crafted chess evaluations."""


# --- evaluation commands (eval, export, params) -----------------------------------------------
from tuner.evals.commands import (eval_cmd, examples_cmd, export_cmd,  # noqa: E402  (light: click only)
                                  params_cmd)

main.add_command(eval_cmd)
main.add_command(export_cmd)
main.add_command(params_cmd)
main.add_command(examples_cmd)
from tuner.evals.verify import verify_cmd  # noqa: E402  (light: click only)
main.add_command(verify_cmd)

# --- picture commands (plot, diff) ------------------------------------------------------------
from tuner.plots.commands import diff_cmd, plot_cmd  # noqa: E402  (light: click only)

main.add_command(plot_cmd)
main.add_command(diff_cmd)

# --- dataset commands (convert, data stats) ---------------------------------------------------
from tuner.data.commands import convert_cmd, data_group  # noqa: E402  (light: click only)

main.add_command(convert_cmd)
main.add_command(data_group)

# --- training commands (train, configs, bench) ------------------------------------------------
from tuner.train.commands import bench_cmd, configs_cmd, train_cmd  # noqa: E402  (light: click only)

main.add_command(train_cmd)
main.add_command(configs_cmd)
main.add_command(bench_cmd)

# --- sweeps (sweep) ---------------------------------------------------------------------------
from tuner.sweep_cli import sweep_cmd  # noqa: E402  (light: click only)
main.add_command(sweep_cmd)
