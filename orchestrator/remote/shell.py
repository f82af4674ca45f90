"""Commands as values, and the ONE place where a value is quoted for a remote shell."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Mapping

@dataclass(frozen=True)
class Cmd:
    """An argv list with optional environment and working directory. No secret ever goes into one: the
    inventory's env values travel only in the launch request's JSON on stdin (S-06)."""

    argv: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "argv", tuple(str(a) for a in self.argv))
        if not self.argv:
            raise ValueError("empty command")


def quote(value: str) -> str:
    """Quote one value for a POSIX shell. Every value that reaches a remote shell goes through here."""
    return shlex.quote(str(value))


def render(cmd: Cmd) -> str:
    """The shell line that runs ``cmd`` exactly (no globbing, no expansion of any value)."""
    parts: list[str] = []
    if cmd.env:
        parts.append("env")
        for key, value in cmd.env.items():
            if not key.replace("_", "a").isalnum():
                raise ValueError(f"invalid environment variable name {key!r}")
            parts.append(quote(f"{key}={value}"))
    parts.extend(quote(a) for a in cmd.argv)
    line = " ".join(parts)
    if cmd.cwd:
        line = f"cd {quote(cmd.cwd)} && exec {line}"
    return line


def display(cmd: Cmd) -> str:
    """The same line, for logs and error messages."""
    return render(cmd)


def sh(script: str, *args: str) -> Cmd:
    """A fixed shell snippet run by ``sh -c``; user values are passed as positional args ($1, $2 ...).

    The snippet itself must be a constant written in this code base, never built from user input.
    """
    return Cmd(("sh", "-c", script, "sh", *args))
