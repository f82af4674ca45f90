"""tune-remote's command line: one click group (base), the commands by concern in sibling modules."""
from __future__ import annotations

import os as _os
import sys as _sys

if _os.path.basename(_sys.argv[0]) == "tune-remote" \
        or _sys.argv[0].endswith(_os.path.join("orchestrator", "__main__.py")):
    from ..preconnect import speculate as _speculate    # the executable: it connects while the commands import
    _speculate(_sys.argv[1:])

from . import audit, control, jobs, offline, outcome, recheck, store, views, watchloop  # noqa: F401  (registers the commands on the group)
from .base import Env, cli, console_main, main

__all__ = ["Env", "cli", "console_main", "main"]
