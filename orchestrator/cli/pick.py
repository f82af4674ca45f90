"""``--node`` on status, logs, fetch, cancel and resume: which targets of a job a command acts on (issue 10).

A single-target job has one node: ``--node`` must name it (else exit 2). A campaign's targets are its
sub-jobs (``<ws>/<job>/targets/``); ``--node`` keeps those on the named nodes (repeatable), ``--variant``
(logs) those of one variant. Every sub-job is reached through the campaign's own runner (campaign/later.py's
``Reach``: the inventory's SSH + docker exec, or Slurm's srun), the seam of ``orchestrator/campaign/targets.py``.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from ..state import JobState, Workspace
from .base import Env


def _reach(env: Env, accept_new_host_key: bool = False):
    from ..campaign.later import Reach
    return Reach(env.workspace, env.inventory_path, env.ui(), accept_new_host_key)


def job_nodes(env: Env, job: JobState) -> list[str]:
    """The nodes a job runs on (a campaign: its targets' nodes, in order)."""
    from ..campaign import driver
    return driver.job_nodes(job, env.workspace)


def check_nodes(env: Env, job: JobState, nodes: tuple[str, ...] | list[str]) -> None:
    """Every --node must be one of the job's nodes: one line, exit 2, nothing done."""
    from ..campaign import driver
    driver.check_nodes(job, env.workspace, nodes)


def select(env: Env, job: JobState, nodes=(), variant: str | None = None) -> tuple[Workspace, list[JobState]]:
    """A campaign's sub-jobs on `nodes` (all when empty) and of `variant` (all when None)."""
    return _reach(env).select(job, nodes, variant)


@contextmanager
def opener(env: Env, job: JobState, accept_new_host_key: bool = False) -> Iterator[Callable]:
    """``open(sub) -> Target`` through the campaign's runner; the runner's source is closed afterwards."""
    from ..campaign.targets import TargetRef
    with campaign_runner(env, job, accept_new_host_key) as runner:
        yield lambda sub: runner.open(TargetRef(sub.node, sub.container))


def campaign_runner(env: Env, job: JobState, accept_new_host_key: bool = False):
    """The campaign's runner (its targets' connections); it and its source are closed afterwards."""
    return _reach(env, accept_new_host_key).runner(job)


def header(sub: JobState, what: str) -> str:
    return f"==> {sub.node}/{sub.container} {sub.variant}: {what} <=="
