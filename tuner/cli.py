"""Command-line interface: `tuner train|bench|eval|export|convert|data`."""
import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tuner")
def main() -> None:
    """Fast Texel tuning of hand-crafted chess evaluations."""


# --- evaluation commands (eval, export) -------------------------------------------------------

# --- dataset commands (convert, data stats) ---------------------------------------------------

# --- training commands (train, bench) ---------------------------------------------------------
