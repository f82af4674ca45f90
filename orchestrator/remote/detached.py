"""Laptop side of the pushed node helper: push it once, call one op per round trip.

Detached jobs are handles = a run directory on the node (see docs/internals.md): ``launch`` is
idempotent per run directory, ``status`` reads the node's truth, ``cancel`` kills the tree.
"""

from __future__ import annotations

import collections
import hashlib
import io
import json
import os
import tarfile
import threading
import time
from importlib import resources

from ..errors import JobError, RemoteCommandError
from .channel import HelperChannel, HelperGone, idle_s
from .shell import Cmd
from .transport import TransportError, Transport

# the helper package, pushed as one tarball: node_helper.py is the entry point, the rest are its modules
HELPER_FILES = ("node_helper.py", "common.py", "text.py", "files.py", "discovery.py", "gpus.py", "argpatch.py",
                "procs.py", "staging.py", "runlog.py", "killing.py", "tables.py", "locks.py", "watch.py",
                "longpoll.py", "channel.py", "shapelog.py", "jitlogs.py", "pipeline.sh")
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
    """Runs node helper ops in the target: over one persistent channel when the transport can hold one
    (``python3 -u node_helper.py --serve``, see remote/channel.py), else one ``python3 node_helper.py <op>``
    exec per op with the JSON request on stdin. Either way the same answers; ops are idempotent, so a
    request the helper died under is sent again once to a new helper."""

    RETRY_STREAM_S = 30.0   # after the persistent helper failed to start, use one exec per op this long

    def __init__(self, transport: Transport, python: str = "python3", base_dir: str = "/tmp/tune-remote"):
        self.transport = transport
        self.python = python
        self.version, self._tarball = _bundle()
        self.dir = f"{base_dir}/helper-{self.version}"
        self.path = f"{self.dir}/node_helper.py"
        self.calls = 0
        self.ops: collections.Counter = collections.Counter()  # op -> calls, for round-trip figures
        self.helpers_started = 0
        self._channel_requests = 0
        self.channel: HelperChannel | None = None
        self._stream_ok = os.environ.get("TUNE_REMOTE_HELPER_CHANNEL", "1") != "0"
        self._stream_failed_at: float | None = None
        self._lock = threading.Lock()

    @property
    def round_trips(self) -> int:
        """Requests answered over persistent channels (each costs one network round trip, no new channel)."""
        return self._channel_requests + (self.channel.requests if self.channel else 0)

    def push(self) -> None:
        self.transport.run(Cmd((self.python, "-c", _EXTRACT, self.dir)), stdin=self._tarball, timeout=120)

    def call(self, op: str, request: dict | None = None, *, timeout: float | None = 300) -> dict:
        with self._lock:
            answer = self._call_channel(op, request or {}, timeout)
            if answer is None:
                answer = self._call_exec(op, request or {}, timeout)
            self.calls += 1
            self.ops[op] += 1
        if not answer.get("ok", False):
            raise HelperCallError(
                f"{op} on {self.transport.label}: {answer.get('error', 'failed')}",
                hint=answer.get("hint"),
            )
        return answer

    def close(self) -> None:
        """Drop the persistent channel (the helper exits on its stdin EOF)."""
        if self.channel is not None:
            self._channel_requests += self.channel.requests
            self.channel.close()
            self.channel = None

    # ---- persistent channel --------------------------------------------------------------------
    def _call_channel(self, op: str, request: dict, timeout: float | None) -> dict | None:
        """The answer over the persistent channel, or None when this target must use one exec per op."""
        for attempt in (1, 2):
            if self.channel is None and self._start() is None:
                return None
            try:
                return self.channel.request(op, request, timeout)
            except HelperGone:        # killed, idle-timed-out, or its channel closed: a new helper, once
                code = self.channel.stream.exit_code()
                self.close()
                if attempt == 2:
                    raise RemoteCommandError(f"node helper on {self.transport.label} exited during {op} "
                                             f"twice (exit {code})") from None
            except BaseException:
                self.close()
                raise
        return None  # not reached

    def _start(self) -> HelperChannel | None:
        opener = getattr(self.transport, "open_stream", None)
        if opener is None or not self._stream_ok:
            return None
        if self._stream_failed_at is not None and time.monotonic() - self._stream_failed_at < self.RETRY_STREAM_S:
            return None
        cmd = Cmd((self.python, "-u", self.path, "--serve", "--idle", f"{idle_s():g}"))
        for attempt in (1, 2):
            try:
                stream = opener(cmd)
            except NotImplementedError:   # e.g. docker exec over srun: one exec per op
                self._stream_ok = False
                return None
            channel = HelperChannel(stream, self.transport.label)
            try:
                hello = channel.start()
            except BaseException:
                channel.close()
                raise
            if hello is not None and hello.get("ok"):
                self.channel = channel
                self.helpers_started += 1
                return channel
            code, err = _exit_status(stream)
            channel.close()
            if hello is None and code == 2 and b"can't open file" in err and attempt == 1:
                self.push()
                continue
            if hello is None and code != 0 and any(m in err for m in _DAEMON_REFUSALS):
                line = err.decode("utf-8", "replace").strip().splitlines()[-1][:200]
                raise ContainerUnavailable(f"{self.transport.label}: docker exec refused: {line}",
                                           hint="the container is restarting, paused or stopped; retrying")
            break
        # the helper cannot run persistently here (too old a Python, a crash at start): one exec per op,
        # whose answer carries the real error; try the persistent helper again later
        self._stream_failed_at = time.monotonic()
        return None

    # ---- one exec per op -----------------------------------------------------------------------
    def _call_exec(self, op: str, request: dict, timeout: float | None) -> dict:
        payload = json.dumps(request).encode()
        cmd = Cmd((self.python, self.path, op))
        result = self.transport.run(cmd, stdin=payload, timeout=timeout, check=False)
        if result.exit_code == 2 and b"can't open file" in result.stderr:
            self.push()
            result = self.transport.run(cmd, stdin=payload, timeout=timeout, check=False)
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
        return answer


def _exit_status(stream) -> tuple[int | None, bytes]:
    """Exit code and stderr of a stream whose stdout closed (the exit status follows within moments)."""
    end = time.monotonic() + 2.0
    code = stream.exit_code()
    while code is None and time.monotonic() < end:
        time.sleep(0.01)
        code = stream.exit_code()
    return code, stream.stderr()


def _last_json(stdout: bytes) -> dict | None:
    for line in reversed(stdout.decode("utf-8", "replace").strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None

