"""One SSH connection per host for a whole campaign (issue 9: "one channel per node").

A campaign opens a target many times: discover (plan), mine, each variant's sub-job, the promotion across
a GPU kind, a reshard, a Slurm node's state. Each used to be a new SSH connection: a handshake of ~5 round
trips, one more authentication (a hardware key's touch, an OTP on a login node), one more start on a
login node's ``MaxStartups``. ``HostPool`` keeps one connection per host for its owner's lifetime and
hands out ``Borrowed`` views of it: each target's channels are counted on its own view (its job's round
trips), and closing a view leaves the connection to the pool. Channels of one connection are independent
(paramiko multiplexes them, one thread each); a connection that fails is closed by whoever saw it fail and
reopened by the next command (``SshTransport._drop``), so a dead node costs its sharers one retry each.
"""

from __future__ import annotations

import threading
from typing import Callable

from .shell import Cmd
from .transport import CommandResult, Transport


class Borrowed:
    """A pooled transport as one target sees it: its own round-trip count; ``close`` is the pool's."""

    def __init__(self, inner: Transport):
        self.inner = inner
        self.label = inner.label
        self.round_trips = 0
        if getattr(inner, "open_stream", None) is not None:   # optional (transport.Transport): kept so
            self.open_stream = self._open_stream                # get_file & co. see what the inner offers

    def run(self, cmd: Cmd, *, stdin: bytes | None = None, timeout: float | None = None,
            check: bool = True) -> CommandResult:
        self.round_trips += 1
        return self.inner.run(cmd, stdin=stdin, timeout=timeout, check=check)

    def _open_stream(self, cmd: Cmd):
        self.round_trips += 1
        return self.inner.open_stream(cmd)

    def connect(self) -> None:
        connect = getattr(self.inner, "connect", None)
        if connect is not None:
            connect()

    def close(self) -> None:
        """The connection stays open for the pool's other users (HostPool.close ends it)."""

    def __getattr__(self, name: str):
        if name == "open_stream":
            raise AttributeError(name)
        return getattr(self.inner, name)


class HostPool:
    def __init__(self) -> None:
        self._hosts: dict[object, Transport] = {}
        self._lock = threading.Lock()

    def borrow(self, key: object, make: Callable[[], Transport]) -> Borrowed:
        """A view of the pool's transport for ``key`` (made by ``make`` the first time; nothing connects yet)."""
        with self._lock:
            inner = self._hosts.get(key)
            if inner is None:
                inner = self._hosts[key] = make()
        return Borrowed(inner)

    def __len__(self) -> int:
        return len(self._hosts)

    def close(self) -> None:
        with self._lock:
            hosts, self._hosts = list(self._hosts.values()), {}
        for t in hosts:
            try:
                t.close()
            except Exception:  # noqa: BLE001 - closing a dead connection must never mask the real error
                pass
