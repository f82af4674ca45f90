"""One SSH connection per host for a whole campaign (issue 9: "one channel per node").

A campaign opens a target many times: discover (plan), mine, each variant's sub-job, the promotion across
a GPU kind, a reshard, a Slurm node's state. Each used to be a new SSH connection: a handshake of ~5 round
trips, one more authentication (a hardware key's touch, an OTP on a login node), one more start on a
login node's ``MaxStartups``. ``HostPool`` keeps one connection per host for its owner's lifetime and
hands out ``Borrowed`` views of it (a second connection to the same host once PER_CONNECTION targets hold
views of the first: sshd's MaxSessions): each target's channels are counted on its own view (its job's
round trips), and closing a view leaves the connection to the pool. Channels of one connection are independent
(paramiko multiplexes them, one thread each); a connection that fails is closed by whoever saw it fail and
reopened by the next command (``SshTransport._drop``), so a dead node costs its sharers one retry each.
The connections of the nodes a campaign's plan left out are closed once the plan is made (``close_unused``).
"""

from __future__ import annotations

import threading
from typing import Callable

from .shell import Cmd
from .transport import CommandResult, Transport, TransportBase


# targets that share one connection: each holds up to ~4 sessions at once (its helper, the host helper, a copy,
# a command) and sshd refuses more than MaxSessions (10 by default) on one connection
PER_CONNECTION = 2


def close_quietly(things, how: str = "close") -> None:
    """``thing.close()`` (or ``how``) on each: closing a dead connection or channel must never mask the
    real error, nor stop the others from closing."""
    for t in things:
        try:
            getattr(t, how)()
        except Exception:  # noqa: BLE001
            pass


class Borrowed(TransportBase):
    """A pooled transport as one target sees it: its own round-trip count; ``close`` gives it back."""

    shared = True

    def __init__(self, inner: Transport, give_back: Callable[[], None] = lambda: None):
        self.inner = inner
        self.label = inner.label
        self.round_trips = 0
        self._give_back: Callable[[], None] | None = give_back

    @property
    def streams(self) -> bool:      # get_file & co. see what the inner offers
        return self.inner.streams

    def run(self, cmd: Cmd, *, stdin: bytes | None = None, timeout: float | None = None,
            check: bool = True) -> CommandResult:
        self.round_trips += 1
        return self.inner.run(cmd, stdin=stdin, timeout=timeout, check=check)

    def open_stream(self, cmd: Cmd):
        if not self.inner.streams:
            raise NotImplementedError(f"{self.inner.label} has no long-lived channels")
        self.round_trips += 1
        return self.inner.open_stream(cmd)

    def connect(self) -> None:
        self.inner.connect()

    def drop(self) -> None:
        """The path went silent: close the connection as it is now (every sharer's next command reconnects;
        SSH transports let the user's master live, the others close)."""
        self.inner.path_silent()

    def close(self) -> None:
        """Back to the pool (once); the connection stays open for its other users (HostPool.close ends it)."""
        give_back, self._give_back = self._give_back, None
        if give_back is not None:
            give_back()


class HostPool:
    def __init__(self, per_connection: int = PER_CONNECTION) -> None:
        self.per_connection = max(1, per_connection)
        self._hosts: dict[object, list[list]] = {}     # key -> [[transport, views not given back], ...]
        self._lock = threading.Lock()

    def borrow(self, key: object, make: Callable[[], Transport]) -> Borrowed:
        """A view of the least used of ``key``'s transports with room (``make`` another when none has; nothing
        connects yet)."""
        with self._lock:
            entries = self._hosts.setdefault(key, [])
            room = [e for e in entries if e[1] < self.per_connection]
            entry = min(room, key=lambda e: e[1]) if room else None
            if entry is None:
                entry = [make(), 0]
                entries.append(entry)
            entry[1] += 1
        return Borrowed(entry[0], lambda: self._give_back(entry))

    def _give_back(self, entry: list) -> None:
        with self._lock:
            entry[1] -= 1

    def close_unused(self) -> int:
        """Close the connections no view holds (the hosts a campaign's plan left out); how many."""
        with self._lock:
            idle = [e[0] for v in self._hosts.values() for e in v if e[1] <= 0]
            self._hosts = {k: kept for k, v in self._hosts.items() if (kept := [e for e in v if e[1] > 0])}
        close_quietly(idle)
        return len(idle)

    def connections(self, key: object) -> int:
        return len(self._hosts.get(key, ()))

    def __len__(self) -> int:
        return sum(len(v) for v in self._hosts.values())

    def close(self) -> None:
        with self._lock:
            hosts, self._hosts = [e[0] for v in self._hosts.values() for e in v], {}
        close_quietly(hosts)
