"""``python -m tuner.cli``: the ``tuner`` command."""
from tuner.cli import main

main(prog_name="tuner")
