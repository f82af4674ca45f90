"""Which targets of a job a command acts on, and how each is reached (Fabric's ``Group`` over ``Connection``s is
the anchor): a single job is one target (itself, through the inventory or the demo's node); a campaign's targets
are its sub-jobs (``<ws>/<job>/targets/``), on the nodes ``--node`` names (repeatable) and of the ``--variant``
given, each reached through the campaign's own runner (the inventory's SSH + docker exec, or Slurm's srun: the
seam of ``targets.py``). ``--node`` on a single job must name its node (else exit 2)."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from ..context import Target
from ..errors import UsageError
from ..inventory import Inventory
from ..state import JobState, Workspace
from ..ui import Ui
from .single import job_target
from .targets import TargetRef

# driver and lifecycle (they import pandas) load where a campaign needs them: `status` of single jobs stays light


@dataclass
class Reach:
    """What reaching a job's nodes takes: the workspace, the inventory (read when asked), the ui's quietness
    and the host-key choice of a command that changes a node (promote, rollback)."""
    workspace: Workspace
    inventory: Callable[[], Inventory]
    quiet: bool = False
    accept_new_host_key: bool = False

    def ui(self) -> Ui:
        return Ui(quiet=self.quiet)


def single_target(reach: Reach, job: JobState, accept_new: bool = False) -> Target:
    """A single job's one target: the demo's simulated node, or its inventory node's container (single.py)."""
    return job_target(job, reach.inventory, accept_new)


def job_nodes(reach: Reach, job: JobState) -> list[str]:
    """The nodes a job runs on (a campaign: its targets' nodes, in order): driver.job_nodes'."""
    from . import driver
    return driver.job_nodes(job, reach.workspace)


def check_nodes(reach: Reach, job: JobState, nodes) -> None:
    """Every --node must be one of the job's nodes: one line, exit 2, nothing done (driver.check_nodes)."""
    from . import driver
    driver.check_nodes(job, reach.workspace, nodes)


def select(reach: Reach, job: JobState, nodes=(), variant: str | None = None) -> tuple[Workspace, list[JobState]]:
    """A campaign's sub-jobs on `nodes` (all when empty) and of `variant` (all when None)."""
    from . import driver, lifecycle
    lifecycle.refresh(reach.workspace, job, reach.inventory, reach.ui())    # what the nodes' drivers launched
    check_nodes(reach, job, nodes)
    subs = [s for s in driver.sub_jobs(job, reach.workspace)
            if (not nodes or s.node in nodes) and (variant is None or s.variant == variant)]
    if not subs:
        raise UsageError(f"job {job.job_id} has no target job" + (f" of {variant}" if variant else "")
                         + (f" on {', '.join(nodes)}" if nodes else ""),
                         hint="its targets: " + ", ".join(f"{s.node}/{s.container} {s.variant}"
                                                           for s in driver.sub_jobs(job, reach.workspace)))
    return driver.sub_workspace(reach.workspace, job), subs


@contextmanager
def campaign_runner(reach: Reach, job: JobState, accept_new_host_key: bool = False):
    """The campaign's runner (its targets' connections); it and its source are closed afterwards."""
    from . import lifecycle, sources
    source = sources.open_source(lifecycle.source_env(reach.workspace, job, reach.inventory, reach.ui(),
                                                      accept_new_host_key))
    runner = source.runner(accept_new_host_key)
    try:
        yield runner
    finally:
        runner.close()
        source.close()


@contextmanager
def opener(reach: Reach, job: JobState, accept_new_host_key: bool = False) -> Iterator[Callable]:
    """``open(sub) -> Target`` through the campaign's runner; the runner's source is closed afterwards."""
    with campaign_runner(reach, job, accept_new_host_key) as runner:
        yield lambda sub: runner.open(TargetRef(sub.node, sub.container))


def header(sub: JobState, what: str) -> str:
    return f"==> {sub.node}/{sub.container} {sub.variant}: {what} <=="
