"""What a step works with: the job, the workspace, the node session (session.py: the connection, retries,
reconnect, the helpers) and the UI. ``Ctx`` is a job plus a session; what talks to a container without a job
(audit, recheck, the campaign plan) uses a ``NodeSession`` alone."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .session import NodeLink, NodeSession, Settings, docker_exec, node_transport
from .state import JobState, Workspace
from .variants import AiterProfile, KernelVariant

Target = NodeLink       # the node + container connection, by the name the runners and older code import

__all__ = ["Ctx", "NodeLink", "NodeSession", "Settings", "Target", "docker_exec", "node_transport", "owner"]


@dataclass
class Ctx:
    job: JobState
    workspace: Workspace
    target: Target
    settings: Settings
    ui: "object"
    sleep: Callable[[float], None] = time.sleep
    # answers a step received ahead for the next one, in memory only (a resumed job asks again):
    # "manifest" -> (node paths, the manifest op's answer) from the poll that saw the pipeline end
    prefetched: dict = field(default_factory=dict)
    _session: NodeSession | None = field(default=None, repr=False)

    @property
    def session(self) -> NodeSession:
        """The job's node session: its calls name the job (a lost connection says `tune-remote resume JOB`),
        its facts are the job's. Made again when the job, the target, the settings, the UI or ``sleep`` is
        replaced."""
        s = self._session
        if (s is None or s.target is not self.target or s.settings is not self.settings or s.ui is not self.ui
                or s.sleep is not self.sleep or s.job_id != self.job.job_id or s.node != self.job.node):
            s = self._session = NodeSession(self.target, self.settings, self.ui, sleep=self.sleep,
                                            node=self.job.node, job_id=self.job.job_id)
        s.facts = self.job.facts
        return s

    @property
    def job_dir(self) -> Path:
        return self.workspace.job_dir(self.job.job_id)

    def save(self) -> None:
        self.workspace.save(self.job)

    @property
    def variant(self) -> KernelVariant:
        return self.session.variant(self.job.variant)

    @property
    def profile(self) -> AiterProfile:
        """The job's facts' profile, computed once per settling of them (``NodeSession.profile``)."""
        return self.session.profile

    def call(self, op: str, request: dict | None = None, *, host: bool = False, timeout: float = 300) -> dict:
        """One helper round trip, retried with back-off across transport failures (``NodeSession.call``)."""
        return self.session.call(op, request, host=host, timeout=timeout)

    def call_batch(self, calls: list[tuple[str, dict]], *, timeout: float = 300, soft_last: bool = False) -> list[dict]:
        """Several container ops in ONE round trip (``NodeSession.call_batch``)."""
        return self.session.call_batch(calls, timeout=timeout, soft_last=soft_last)


def owner(ctx: "Ctx | None" = None, *, workspace: Workspace | None = None) -> dict:
    """Who launches, for the node-side lock (no secrets: user@host, the workspace, pid). The workspace
    tells two laptops apart (a second workspace is a second owner); a resume from the same one is not."""
    import getpass
    import socket
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    out = {"who": f"{user}@{socket.gethostname()}", "pid": os.getpid()}
    workspace = ctx.workspace if ctx is not None else workspace
    if workspace is not None:
        out["workspace"] = str(workspace.root.resolve())
    return out
