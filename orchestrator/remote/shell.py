"""Commands as values, and the ONE place where a value is quoted for a remote shell."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Mapping

MASK = "******"


@dataclass(frozen=True)
class Cmd:
    """An argv list with optional environment and working directory.

    ``secret_env`` names environment variables whose values never appear in ``display()``.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    secret_env: frozenset[str] = frozenset()

    def __post_init__(self):
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))
        if not self.argv:
            raise ValueError("empty command")


def quote(value: str) -> str:
    """Quote one value for a POSIX shell. Every value that reaches a remote shell goes through here."""
    return shlex.quote(str(value))


def _render(cmd: Cmd, mask: bool) -> str:
    parts: list[str] = []
    if cmd.env:
        parts.append("env")
        for key, value in cmd.env.items():
            if not key.replace("_", "a").isalnum():
                raise ValueError(f"invalid environment variable name {key!r}")
            shown = MASK if (mask and key in cmd.secret_env) else value
            parts.append(quote(f"{key}={shown}"))
    parts.extend(quote(a) for a in cmd.argv)
    line = " ".join(parts)
    if cmd.cwd:
        line = f"cd {quote(cmd.cwd)} && exec {line}"
    return line


def render(cmd: Cmd) -> str:
    """The shell line that runs ``cmd`` exactly (no globbing, no expansion of any value)."""
    return _render(cmd, mask=False)


def display(cmd: Cmd) -> str:
    """The same line for logs and reports, with secret values masked."""
    return _render(cmd, mask=True)


def sh(script: str, *args: str) -> Cmd:
    """A fixed shell snippet run by ``sh -c``; user values are passed as positional args ($1, $2 ...).

    The snippet itself must be a constant written in this code base, never built from user input.
    """
    return Cmd(("sh", "-c", script, "sh", *args))
