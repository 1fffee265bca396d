"""The error of a training run that cannot start or continue."""
from __future__ import annotations

from tuner.errors import TunerError


class TrainingError(TunerError, RuntimeError):
    """A run that cannot start or continue; the message says why and what was kept."""
