"""Command-line interface: `tuner train|bench|eval|export|convert|data`."""
import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tuner")
def main() -> None:
    """Fast Texel tuning of hand-crafted chess evaluations."""


# --- evaluation commands (eval, export) -------------------------------------------------------

# --- dataset commands (convert, data stats) ---------------------------------------------------
from tuner.data.commands import convert_cmd, data_group  # noqa: E402  (light: click only)

main.add_command(convert_cmd)
main.add_command(data_group)

# --- training commands (train, bench) ---------------------------------------------------------
