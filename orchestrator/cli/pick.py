"""``--node`` on status, logs, fetch, cancel and resume: which targets of a job a command acts on (issue 10).

The work is ``campaign/reach.py`` (a single job is one target, a campaign's targets its sub-jobs); these are
its calls with the command's environment.
"""
from __future__ import annotations

from ..state import JobState, Workspace
from .base import Env


def reach(env: Env, accept_new_host_key: bool = False):
    """The command's workspace, inventory, quietness and host-key choice, as ``campaign/reach.py`` takes them."""
    from ..campaign import reach as where
    from ..inventory import load_inventory
    return where.Reach(env.workspace, lambda: load_inventory(env.inventory_path), env.quiet, accept_new_host_key)


def job_nodes(env: Env, job: JobState) -> list[str]:
    """The nodes a job runs on (a campaign: its targets' nodes, in order)."""
    from ..campaign import reach as where
    return where.job_nodes(reach(env), job)


def check_nodes(env: Env, job: JobState, nodes: tuple[str, ...] | list[str]) -> None:
    """Every --node must be one of the job's nodes: one line, exit 2, nothing done."""
    from ..campaign import reach as where
    where.check_nodes(reach(env), job, nodes)


def select(env: Env, job: JobState, nodes=(), variant: str | None = None) -> tuple[Workspace, list[JobState]]:
    """A campaign's sub-jobs on `nodes` (all when empty) and of `variant` (all when None)."""
    from ..campaign import reach as where
    return where.select(reach(env), job, nodes, variant)


def campaign_runner(env: Env, job: JobState, accept_new_host_key: bool = False):
    """The campaign's runner (its targets' connections); it and its source are closed afterwards."""
    from ..campaign import reach as where
    return where.campaign_runner(reach(env), job, accept_new_host_key)
