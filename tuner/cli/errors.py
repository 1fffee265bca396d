"""The one place where a problem becomes what the user sees: a line on stderr and an exit code.

The layers below raise the project's exceptions (`tuner.errors.TunerError` and its subclasses,
each message one line naming the problem and where it is) or `OSError` (which names the path);
they never print, exit or raise Click's exceptions. `TunerGroup`, the class of the main group,
catches those from every command and ends it here: a command's `ErrorStyle` says how (Click's
``Error: ...`` and exit code 1 for most; the training commands' ``error: ...`` and exit code 2).
Problems with the command line itself (a missing argument, an option value out of range) stay
Click's usage errors (exit code 2), which Click reports the same way for every command.
"""
from __future__ import annotations

import errno
import sys
from dataclasses import dataclass

import click

from tuner.errors import TunerError


@dataclass(frozen=True)
class ErrorStyle:
    """How a command reports a `TunerError`: the word before the message and the exit code."""

    prefix: str
    exit_code: int


#: Click's own form (that of a `click.ClickException`): the commands but the training ones.
COMMAND_ERRORS = ErrorStyle("Error", click.ClickException.exit_code)
#: The training commands' form (`tuner train`, `configs`, `bench`).
TRAINING_ERRORS = ErrorStyle("error", 2)


class StyledCommand(click.Command):
    """A command whose errors are reported in `error_style`."""

    error_style = COMMAND_ERRORS


class TrainingCommand(StyledCommand):
    """A training command: errors as ``error: ...``, exit code 2."""

    error_style = TRAINING_ERRORS


def report(error: Exception, style: ErrorStyle) -> None:
    """End the command on `error`: its message on stderr after ``style.prefix``, then exit."""
    click.echo(f"{style.prefix}: {error}", err=True)
    sys.exit(style.exit_code)


def is_user_error(error: BaseException) -> bool:
    """Whether `error` is one the user can fix and is shown as one line: a `TunerError`, or an
    `OSError` (a file that cannot be read or written; not a closed pipe, which Click handles)."""
    return isinstance(error, TunerError) or (isinstance(error, OSError)
                                             and error.errno != errno.EPIPE)


class TunerGroup(click.Group):
    """The main group: reports the user errors of every command, in the command's style."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except Exception as e:
            if not is_user_error(e):
                raise
            command = self.get_command(ctx, ctx.invoked_subcommand or "")
            report(e, getattr(command, "error_style", COMMAND_ERRORS))
