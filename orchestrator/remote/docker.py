"""DockerExecTransport: wraps ANY transport and runs each Cmd inside a named container.

It only ever `docker exec`s into the container it was given: it never creates, starts, restarts
or removes containers, and never touches the daemon.
"""

from __future__ import annotations

from . import trace
from .shell import Cmd, render
from .transport import CommandResult, Transport, TransportBase, check_result

DOCKER_MISSING = 127

class DockerExecTransport(TransportBase):
    def __init__(self, inner: Transport, container: str, docker: tuple[str, ...] = ("docker",),
                 user: str | None = None):
        self.inner = inner
        self.container = container
        self.docker = tuple(docker)
        self.user = user
        self.label = f"{inner.label}/{container}"

    def wrap(self, cmd: Cmd) -> Cmd:
        """The host-side Cmd: `docker exec -i CTR sh -c '<inner line>'` (inner quoted once, here)."""
        argv = [*self.docker, "exec", "-i"]
        if self.user:
            argv += ["-u", self.user]
        argv += [self.container, "sh", "-c", render(cmd)]
        return Cmd(tuple(argv))

    def run(self, cmd: Cmd, *, stdin: bytes | None = None, timeout: float | None = None,
            check: bool = True) -> CommandResult:
        with trace.span(self.label, "exec " + trace.argv_head(cmd.argv)):
            result = self.inner.run(self.wrap(cmd), stdin=stdin, timeout=timeout, check=False)
        result = CommandResult(cmd, result.exit_code, result.stdout, result.stderr)
        return check_result(result) if check else result

    @property
    def streams(self) -> bool:
        return self.inner.streams

    def open_stream(self, cmd: Cmd):
        """A long-lived process in the container (``docker exec -i``, never ``-t``) on one channel."""
        if not self.inner.streams:
            raise NotImplementedError(f"{self.inner.label} has no long-lived channels")
        wrapped = self.wrap(cmd)   # `sh -c 'exec ...'`: the helper is the exec'd process (a kill reaches it)
        argv = wrapped.argv[:-1] + ("exec " + wrapped.argv[-1],)
        return self.inner.open_stream(Cmd(argv))

    def close(self) -> None:
        self.inner.close()
