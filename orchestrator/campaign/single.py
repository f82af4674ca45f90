"""The one-node target source: a single job is a campaign of one (run, demo, watch; resume of one).

The job is its own target job: its own directory, files and JSON (no campaign job over it, no plan: its
discover settles the node), carried through ``lifecycle.carry`` as every campaign is. A job without a
campaign record gets this source from the registry (sources.py), so a single job saved by any version loads
as a campaign of one. Its target is the one the command made already (``SourceEnv.target``: connected early
by preconnect.py, the demo's simulated node, a watch's), else the job's own: the demo's simulated node or the
inventory's node and container (a resume).
"""

from __future__ import annotations

from typing import Callable

from ..context import Target
from ..inventory import Inventory
from ..state import JobState
from .targets import PooledRunner, SourceEnv, TargetRef, TargetSource


def job_target(job: JobState, inventory: Callable[[], Inventory], accept_new: bool) -> Target:
    """A single job's target: the demo's simulated node, or the inventory's node and container."""
    if job.request.demo_dir:
        from ..demo import demo_target
        return demo_target(job.request.demo_dir)
    node = inventory().node(job.node)
    return Target(node, node.container(job.container), accept_new_host_key=accept_new)


class SingleSource(TargetSource):
    kind = "single"

    def __init__(self, env: SourceEnv):
        self.env = env

    @classmethod
    def from_job(cls, env: SourceEnv) -> "SingleSource":
        return cls(env)

    def targets(self) -> list[TargetRef]:
        return [TargetRef(self.env.job.node, self.env.job.container)]

    def runner(self, accept_new_host_key: bool = False) -> "SingleRunner":
        return SingleRunner(self.env)


class SingleRunner(PooledRunner):
    """The job's one target, used as it comes (the round trips since it was made are the job's) and shut by
    the job's drive, nothing pooled: the command made it, or it is made here."""

    def __init__(self, env: SourceEnv):
        super().__init__(env.accept_new_host_key)
        self.env, self._given = env, env.target

    def open(self, ref: TargetRef) -> Target:
        target, self._given = self._given, None
        return target or job_target(self.env.job, self.env.inventory, self.accept_new)
