"""Alias module: the former ``tuner.evals.common``, now `tuner.evals.clockwork.common` (the
helpers Clockwork's evaluations share). Every name resolves to that module's."""
from __future__ import annotations

from .clockwork.common import *  # noqa: F401,F403
from .clockwork.common import __all__  # noqa: F401
