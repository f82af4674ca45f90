"""What a job's lifecycle asks of its caller (the CLI's terminal, a watch): events, the plan, the confirmation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class Console:
    """``ui`` for events (and the live view), ``show`` for the plan, ``confirm`` for the question before anything
    is launched (None: ask nothing, as with --yes)."""
    ui: object
    show: Callable[[str], None]
    confirm: Callable[[str], bool] | None = None


class Declined(Exception):
    """The user said no at the plan's confirmation: nothing was launched."""
