"""The one transport protocol: run a Cmd (bytes in, bytes out), put bytes, get bytes, close."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..errors import ConnectionLost, RemoteCommandError
from .shell import Cmd, display, sh


@dataclass(frozen=True)
class CommandResult:
    cmd: Cmd
    exit_code: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @property
    def text(self) -> str:
        return self.stdout.decode("utf-8", "replace")

    @property
    def err_text(self) -> str:
        return self.stderr.decode("utf-8", "replace")


class TransportError(ConnectionLost):
    """The transport (not the command) failed: connection dropped, a dead path, EOF."""


class Stream(Protocol):
    """A long-lived remote process on one channel: bytes in, bytes out (the persistent helper)."""

    def send(self, data: bytes) -> None: ...

    def recv(self, timeout: float) -> bytes | None:
        """Some stdout bytes; None if none came within ``timeout``; b"" at EOF."""

    def stderr(self) -> bytes: ...

    def exit_code(self) -> int | None: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """What every transport offers. Wrapping transports (docker exec) hold another transport.

    ``open_stream(cmd) -> Stream`` is optional: without it the node helper runs one exec per op."""

    label: str

    def run(self, cmd: Cmd, *, stdin: bytes | None = None, timeout: float | None = None,
            check: bool = True) -> CommandResult: ...

    def close(self) -> None: ...


def check_result(result: CommandResult) -> CommandResult:
    if not result.ok:
        tail = (result.err_text or result.text).strip().splitlines()[-3:]
        raise RemoteCommandError(
            f"remote command failed (exit {result.exit_code}): {display(result.cmd)[:200]}"
            + (f": {' | '.join(tail)}" if tail else ""),
            result=result,
        )
    return result


_PUT_SCRIPT = 'set -e; d=$(dirname "$1"); mkdir -p "$d"; t="$1.tr-tmp.$$"; cat > "$t"; ' \
              'chmod "$2" "$t"; mv -f "$t" "$1"'


def put_bytes(transport: Transport, data: bytes, remote_path: str, mode: str = "644",
              timeout: float | None = 120) -> None:
    """Write a file atomically (temp name + rename) through any transport."""
    transport.run(sh(_PUT_SCRIPT, remote_path, mode), stdin=data, timeout=timeout)


def get_bytes(transport: Transport, remote_path: str, timeout: float | None = 600) -> bytes:
    return transport.run(Cmd(("cat", "--", remote_path)), timeout=timeout).stdout
