"""LocalTransport: runs Cmds on this machine (the demo's simulated node, and tests)."""

from __future__ import annotations

import os
import select
import subprocess
import time
from typing import Mapping

from ..errors import CommandTimeout
from .shell import Cmd
from .transport import CommandResult, TransportBase, check_result


class LocalTransport(TransportBase):
    """Runs argv directly (no shell), with an optional fixed environment overlay.

    ``base_env`` plays the role of a container's environment (the demo's simulated AITER sets
    PATH/PYTHONPATH there).
    """

    streams = True

    def __init__(self, base_env: Mapping[str, str] | None = None, label: str = "local"):
        self.base_env = dict(base_env or {})
        self.label = label
        self.commands: list[Cmd] = []  # what ran, for tests and round-trip counts

    def run(self, cmd: Cmd, *, stdin: bytes | None = None, timeout: float | None = None,
            check: bool = True) -> CommandResult:
        self.commands.append(cmd)
        env = self._env(cmd)
        try:
            proc = subprocess.run(
                list(cmd.argv), input=stdin if stdin is not None else b"", capture_output=True,
                cwd=cmd.cwd or None, env=env, timeout=timeout,
            )
        except subprocess.TimeoutExpired as exc:
            raise CommandTimeout(f"local command did not finish within {timeout:g}s: {cmd.argv[0]}") from exc
        except FileNotFoundError as exc:
            result = CommandResult(cmd, 127, b"", str(exc).encode())
            return check_result(result) if check else result
        result = CommandResult(cmd, proc.returncode, proc.stdout, proc.stderr)
        return check_result(result) if check else result

    def _env(self, cmd: Cmd) -> dict:
        env = dict(os.environ)
        env.update(self.base_env)
        env.update(cmd.env)
        return env

    def open_stream(self, cmd: Cmd) -> "_ProcessStream":
        self.commands.append(cmd)
        proc = subprocess.Popen(list(cmd.argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=cmd.cwd or None, env=self._env(cmd))
        return _ProcessStream(proc)

    def close(self) -> None:
        pass


class _ProcessStream:
    """A local process as a Stream (the demo's persistent helper)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self._err = bytearray()

    def send(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass  # the process is gone: recv() sees EOF

    def recv(self, timeout: float) -> bytes | None:
        out = self.proc.stdout.fileno()
        err = -1 if self.proc.stderr.closed else self.proc.stderr.fileno()
        end = time.monotonic() + max(0.0, timeout)
        while True:
            fds = [out] + ([err] if err >= 0 else [])
            ready, _, _ = select.select(fds, [], [], max(0.0, end - time.monotonic()))
            if not ready:
                return None
            if err in ready:
                chunk = os.read(err, 1 << 16)
                if chunk:
                    self._err += chunk[: max(0, (1 << 16) - len(self._err))]
                else:
                    self.proc.stderr.close()
                    err = -1
            if out in ready:
                return os.read(out, 1 << 16)

    def stderr(self) -> bytes:
        return bytes(self._err)

    def exit_code(self) -> int | None:
        return self.proc.poll()

    def close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
