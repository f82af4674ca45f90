"""tune-remote's command line: one click group (base), the commands by concern in sibling modules."""
from __future__ import annotations

from . import audit, campaign, jobs, offline, outcome, recheck, views, watch, watchloop  # noqa: F401  (registers the commands on the group)
from .base import Env, cli, console_main, main

__all__ = ["Env", "cli", "console_main", "main"]
