"""LocalTransport: runs Cmds on this machine (the demo's simulated node, and tests)."""

from __future__ import annotations

import os
import subprocess
from typing import Mapping

from .shell import Cmd
from .transport import CommandResult, TransportError, check_result


class LocalTransport:
    """Runs argv directly (no shell), with an optional fixed environment overlay.

    ``base_env`` plays the role of a container's environment (the demo's simulated AITER sets
    PATH/PYTHONPATH there).
    """

    def __init__(self, base_env: Mapping[str, str] | None = None, label: str = "local"):
        self.base_env = dict(base_env or {})
        self.label = label
        self.commands: list[Cmd] = []  # what ran, for tests and round-trip counts

    def run(self, cmd: Cmd, *, stdin: bytes | None = None, timeout: float | None = None,
            check: bool = True) -> CommandResult:
        self.commands.append(cmd)
        env = dict(os.environ)
        env.update(self.base_env)
        env.update(cmd.env)
        try:
            proc = subprocess.run(
                list(cmd.argv), input=stdin if stdin is not None else b"", capture_output=True,
                cwd=cmd.cwd or None, env=env, timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise TransportError(f"local command timed out after {timeout}s: {cmd.argv[0]}") from exc
        except FileNotFoundError as exc:
            result = CommandResult(cmd, 127, b"", str(exc).encode())
            return check_result(result) if check else result
        result = CommandResult(cmd, proc.returncode, proc.stdout, proc.stderr)
        return check_result(result) if check else result

    def close(self) -> None:
        pass
