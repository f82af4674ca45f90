"""The demo's target source: simulated nodes on this machine (``tune-remote demo --nodes N``), each one
'simulated' container reached through LocalTransport (orchestrator/demo.py makes them)."""

from __future__ import annotations

from ..context import Target
from ..demo import demo_target
from .targets import PooledRunner, SourceEnv, TargetRef, TargetSource


class DemoSource(TargetSource):
    kind = "demo"

    def __init__(self, dirs: dict[str, str]):
        self.dirs = dict(dirs)

    @classmethod
    def from_job(cls, env: SourceEnv) -> "DemoSource":
        return cls(env.job.request["demo_nodes"])

    def targets(self) -> list[TargetRef]:
        return [TargetRef(node, "simulated") for node in self.dirs]

    def runner(self, accept_new_host_key: bool = False) -> "DemoRunner":
        return DemoRunner(self.dirs)


class DemoRunner(PooledRunner):
    def __init__(self, dirs: dict[str, str]):
        super().__init__()
        self.dirs = dirs

    def open(self, ref: TargetRef) -> Target:
        """A new simulated target each time (its close shuts it: nothing pooled on this machine)."""
        return demo_target(self.dirs[ref.node], name=ref.node)
