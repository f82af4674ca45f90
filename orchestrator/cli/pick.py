"""``--node`` on status, logs, fetch, cancel and resume: which targets of a job a command acts on (issue 10).

A single-target job has one node: ``--node`` must name it (else exit 2). A campaign's targets are its
sub-jobs (``<ws>/<job>/targets/``); ``--node`` keeps those on the named nodes (repeatable), ``--variant``
(logs) those of one variant. Every sub-job is reached through the campaign's own runner (the inventory's
SSH + docker exec, or Slurm's srun), the seam of ``orchestrator/campaign/targets.py``.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from ..errors import UsageError
from ..state import JobState, Workspace
from .base import Env


def job_nodes(env: Env, job: JobState) -> list[str]:
    """The nodes a job runs on (a campaign: its targets' nodes, in order)."""
    if not job.is_campaign:
        return [job.node]
    from ..campaign import driver
    return list(dict.fromkeys(s.node for s in driver.sub_jobs(job, env.workspace))) or job.node.split(",")


def check_nodes(env: Env, job: JobState, nodes: tuple[str, ...] | list[str]) -> None:
    """Every --node must be one of the job's nodes: one line, exit 2, nothing done."""
    have = job_nodes(env, job)
    unknown = [n for n in nodes if n not in have]
    if unknown:
        raise UsageError(f"job {job.job_id} has no target on node {unknown[0]!r}",
                         hint="its nodes: " + ", ".join(have))


def select(env: Env, job: JobState, nodes=(), variant: str | None = None) -> tuple[Workspace, list[JobState]]:
    """A campaign's sub-jobs on `nodes` (all when empty) and of `variant` (all when None)."""
    from ..campaign import driver, lifecycle
    from ..inventory import load_inventory
    lifecycle.refresh(env.workspace, job, lambda: load_inventory(env.inventory_path), env.ui())  # nodes' launches
    check_nodes(env, job, nodes)
    subs = [s for s in driver.sub_jobs(job, env.workspace)
            if (not nodes or s.node in nodes) and (variant is None or s.variant == variant)]
    if not subs:
        raise UsageError(f"job {job.job_id} has no target job" + (f" of {variant}" if variant else "")
                         + (f" on {', '.join(nodes)}" if nodes else ""),
                         hint="its targets: " + ", ".join(f"{s.node}/{s.container} {s.variant}"
                                                           for s in driver.sub_jobs(job, env.workspace)))
    return driver.sub_workspace(env.workspace, job), subs


@contextmanager
def opener(env: Env, job: JobState, accept_new_host_key: bool = False) -> Iterator[Callable]:
    """``open(sub) -> Target`` through the campaign's runner; the runner's source is closed afterwards."""
    from ..campaign.targets import TargetRef
    with campaign_runner(env, job, accept_new_host_key) as runner:
        yield lambda sub: runner.open(TargetRef(sub.node, sub.container))


@contextmanager
def campaign_runner(env: Env, job: JobState, accept_new_host_key: bool = False):
    """The campaign's runner (its targets' connections); it and its source are closed afterwards."""
    from ..campaign import lifecycle, sources
    from ..inventory import load_inventory
    source = sources.open_source(lifecycle.source_env(env.workspace, job, lambda: load_inventory(env.inventory_path),
                                                      env.ui(), accept_new_host_key))
    runner = source.runner(accept_new_host_key)
    try:
        yield runner
    finally:
        runner.close()
        source.close()


def header(sub: JobState, what: str) -> str:
    return f"==> {sub.node}/{sub.container} {sub.variant}: {what} <=="
