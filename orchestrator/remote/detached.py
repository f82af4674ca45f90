"""Laptop side of the pushed node helper: push it once, call one op per round trip.

Detached jobs are handles = a run directory on the node (see docs/internals.md): ``launch`` is
idempotent per run directory, ``status`` reads the node's truth, ``cancel`` kills the tree.
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import tarfile
from importlib import resources

from ..errors import JobError, RemoteCommandError
from .shell import Cmd
from .transport import TransportError, Transport

# the helper package, pushed as one tarball: node_helper.py is the entry point, the rest are its modules
HELPER_FILES = ("node_helper.py", "common.py", "text.py", "files.py", "discovery.py", "argpatch.py",
                "procs.py", "staging.py", "runlog.py", "killing.py", "tables.py", "locks.py", "watch.py", "shapelog.py",
                "pipeline.sh")
_EXTRACT = (
    "import io,os,sys,tarfile\n"
    "d=sys.argv[1]; t=d+'.tmp'+str(os.getpid())\n"
    "tarfile.open(fileobj=io.BytesIO(sys.stdin.buffer.read())).extractall(t)\n"
    "os.makedirs(os.path.dirname(d),exist_ok=True)\n"
    "try:\n os.rename(t,d)\nexcept OSError:\n import shutil; shutil.rmtree(t,ignore_errors=True)\n"
)


def _bundle() -> tuple[str, bytes]:
    pkg = resources.files("orchestrator.remote.helpers")
    digest = hashlib.sha256()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in HELPER_FILES:
            data = pkg.joinpath(name).read_bytes()
            digest.update(name.encode() + b"\0" + data)
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    return digest.hexdigest()[:12], buf.getvalue()


class HelperCallError(RemoteCommandError):
    """The helper answered ok=false: a handled problem on the node, with the node's hint."""


class ContainerUnavailable(TransportError):
    """``docker exec`` was refused by the daemon (container restarting, paused, stopped): like a dropped
    connection, the caller retries within its reconnect window; the job in the container is not judged."""


_DAEMON_REFUSALS = (b"Error response from daemon", b"is restarting", b"is paused", b"is not running")


class NodeHelper:
    """Calls ``python3 node_helper.py <op>`` in the target with a JSON request on stdin."""

    def __init__(self, transport: Transport, python: str = "python3", base_dir: str = "/tmp/tune-remote"):
        self.transport = transport
        self.python = python
        self.version, self._tarball = _bundle()
        self.dir = f"{base_dir}/helper-{self.version}"
        self.path = f"{self.dir}/node_helper.py"
        self.calls = 0
        self.ops: collections.Counter = collections.Counter()  # op -> calls, for round-trip figures

    def push(self) -> None:
        self.transport.run(Cmd((self.python, "-c", _EXTRACT, self.dir)), stdin=self._tarball, timeout=120)

    def call(self, op: str, request: dict | None = None, *, timeout: float | None = 300) -> dict:
        payload = json.dumps(request or {}).encode()
        cmd = Cmd((self.python, self.path, op))
        result = self.transport.run(cmd, stdin=payload, timeout=timeout, check=False)
        if result.exit_code == 2 and b"can't open file" in result.stderr:
            self.push()
            result = self.transport.run(cmd, stdin=payload, timeout=timeout, check=False)
        self.calls += 1
        self.ops[op] += 1
        if result.exit_code == 127 and not result.stdout:
            raise JobError(
                f"{self.python} is not available in {self.transport.label}",
                hint="tune-remote needs python3 inside the container (AITER needs it too)",
            )
        answer = _last_json(result.stdout)
        if answer is None and result.exit_code != 0 and any(m in result.stderr for m in _DAEMON_REFUSALS):
            line = result.err_text.strip().splitlines()[-1][:200] if result.err_text.strip() else ""
            raise ContainerUnavailable(f"{self.transport.label}: docker exec refused: {line}",
                                       hint="the container is restarting, paused or stopped; retrying")
        if answer is None:
            tail = result.err_text.strip().splitlines()[-3:]
            raise RemoteCommandError(
                f"node helper '{op}' on {self.transport.label} crashed (exit {result.exit_code})"
                + (f": {' | '.join(tail)}" if tail else ""),
                result=result,
            )
        if not answer.get("ok", False):
            raise HelperCallError(
                f"{op} on {self.transport.label}: {answer.get('error', 'failed')}",
                hint=answer.get("hint"),
            )
        return answer


def _last_json(stdout: bytes) -> dict | None:
    for line in reversed(stdout.decode("utf-8", "replace").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None

