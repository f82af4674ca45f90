"""Laptop side of the persistent node helper: JSON lines over one long-lived channel.

``HelperChannel`` wraps a transport ``Stream`` running ``python3 -u node_helper.py --serve`` (see
nodeside/channel.py for the other end). One request at a time, matched by ``id``. While it waits for an
answer it pings every ``ping_s()``; the helper's reader thread answers pings even while an op runs, so a
slow op is told apart from a dead path: nothing heard for ``ping_s() * MISSES`` seconds = the path is dead
(a black-holed network shows nothing otherwise: TCP keepalive takes hours).
"""

from __future__ import annotations

import itertools
import json
import os
import time

from ..errors import CommandTimeout, RemoteCommandError
from .transport import PathSilent, Stream


def _env_float(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


def ping_s() -> float:
    """Ping after this long without a byte from the helper; MISSES pings unanswered = the path is dead."""
    return _env_float("TUNE_REMOTE_PING_S", 5.0)


def idle_s() -> float:
    """The helper exits after this long without a request (a laptop gone silently leaves nothing behind)."""
    return _env_float("TUNE_REMOTE_HELPER_IDLE_S", 120.0)


MISSES = 3
HELLO_S = 30.0       # docker exec + python start: ~0.1 s; a dead path: never
GRACE_S = 5.0                                            # the helper interrupts itself at the op's timeout


class HelperGone(Exception):
    """The helper's stdout closed (it was killed, timed out idle, or the channel closed under it)."""


class HelperChannel:
    def __init__(self, stream: Stream, label: str):
        self.stream = stream
        self.label = label
        self.hello: dict | None = None
        self.refusal: dict | None = None   # the helper's one answer instead of a hello (e.g. an untrusted dir)
        self.requests = 0                 # requests answered: one round trip each
        self.ping_s = ping_s()
        self._buf = bytearray()
        self._ids = itertools.count(1)
        self._first: tuple[str, dict, int] | None = None

    # ---- lines ----------------------------------------------------------------------------------
    def _line(self, timeout: float) -> bytes | None:
        """One line of output; None if none within ``timeout``; raises HelperGone at EOF."""
        end = time.monotonic() + max(0.0, timeout)
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[:nl + 1]
                return line
            chunk = self.stream.recv(max(0.0, end - time.monotonic()))
            if chunk is None:
                return None
            if chunk == b"":
                raise HelperGone()
            self._buf += chunk

    def _send(self, obj: dict) -> None:
        self.stream.send(json.dumps(obj, separators=(",", ":")).encode() + b"\n")

    # ---- protocol -------------------------------------------------------------------------------
    def start(self, first: tuple[str, dict, float | None] | None = None) -> dict | None:
        """Wait for the hello line; None if the helper exited first (the caller reads its stderr).
        ``first`` (op, request, timeout) is sent before the hello arrives (one round trip fewer for a new
        channel); ``request`` with the same op and request then only waits for its answer. A helper that
        never started never read it (the caller starts another one and sends it again)."""
        if first is not None:
            self._first = (first[0], first[1], self._send_request(*first))
        deadline = time.monotonic() + HELLO_S
        try:
            while True:
                line = self._line(deadline - time.monotonic())
                if line is None:
                    raise PathSilent(f"the node helper on {self.label} did not start within {HELLO_S:g}s "
                                         "(no answer: the path is presumably dead)")
                msg = _parse(line)
                if msg is not None and msg.get("hello"):
                    self.hello = msg
                    return msg
                if msg is not None and msg.get("ok") is False and "id" not in msg:
                    self.refusal = msg
        except HelperGone:
            return None

    def _send_request(self, op: str, req: dict, timeout: float | None) -> int:
        rid = next(self._ids)
        self._send({"id": rid, "op": op, "req": req, "timeout_s": timeout})
        return rid

    def request(self, op: str, req: dict, timeout: float | None) -> dict:
        first, self._first = self._first, None
        if first is not None and first[0] == op and first[1] is req:
            rid = first[2]            # sent with the channel's start
        else:
            rid = self._send_request(op, req, timeout)
        now = time.monotonic()
        heard = now
        next_ping = now + self.ping_s
        deadline = None if timeout is None else now + timeout + GRACE_S
        while True:
            wake = next_ping if deadline is None else min(next_ping, deadline)
            line = self._line(wake - time.monotonic())
            now = time.monotonic()
            if line is None:
                if deadline is not None and now >= deadline:
                    raise CommandTimeout(f"{op} on {self.label} did not answer within {timeout:g}s "
                                         "(the helper answers pings: it is alive, the op is stuck)",
                                         hint="it is retried; a new helper is started for the next request")
                if now - heard >= self.ping_s * MISSES:
                    raise PathSilent(f"the node helper on {self.label} answered none of {MISSES} pings in "
                                         f"{now - heard:.0f}s: connection presumed dead")
                if now >= next_ping:
                    self._send({"id": f"ping{rid}", "op": "ping"})
                    next_ping = now + self.ping_s
                continue
            heard = now
            next_ping = now + self.ping_s
            msg = _parse(line)
            if msg is None:
                raise RemoteCommandError(f"node helper on {self.label} wrote garbage during {op}: "
                                         f"{line[:120].decode('utf-8', 'replace')!r}")
            if msg.get("id") == rid:
                self.requests += 1
                return msg
            # a pong, or the late answer of a request given up on earlier: only proof of life

    def close(self) -> None:
        self.stream.close()


def _parse(line: bytes) -> dict | None:
    try:
        msg = json.loads(line.decode("utf-8", "replace"))
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None
