"""One target's sub-jobs, one after another: the one drive loop of a target (the laptop's campaign driver and the
Slurm node driver on the compute node). Detached, each launched run is the one the next variant's run waits
for on the node (``chain_after``); a sub-job stopped before its launch leaves the rest for a ``resume``.

Stdlib only (and ``orchestrator``): the Slurm node driver runs it with the node's python3 (bundle.py)."""

from __future__ import annotations

from typing import Callable

from ..state import TERMINAL, JobState, Status, Workspace

DONE, STOPPED, CANCELLED = "done", "stopped", "cancelled"


def chain_after(chain: list[JobState]) -> dict:
    """What a detached run waits for on the node: the last launched run of its target, and those before it."""
    return {"run_dir": chain[-1].remote.run_dir, "job_ids": [s.job_id for s in chain]}


def carry(ids: list[str], workspace: Workspace, prepare: Callable[[JobState, list], None],
          run: Callable[[JobState], None], detach: bool, cancelled: Callable[[], bool] | None = None) -> str:
    """Each unfinished sub-job of ``ids``: ``prepare(sub, chain)`` writes what its run needs (``chain``: the runs
    launched before it), ``run(sub)`` carries it (and says how it ended). DONE; STOPPED (detached, one not
    launched: the rest wait for a resume); CANCELLED (``cancelled()`` said so before a sub-job started)."""
    chain: list[JobState] = []
    for sid in ids:
        if cancelled is not None and cancelled():
            return CANCELLED
        sub = workspace.load(sid)
        if sub.state in TERMINAL:
            continue
        prepare(sub, chain)
        run(sub)
        sub = workspace.load(sid)
        if detach and sub.state == Status.RUNNING and sub.remote.get("run_dir"):
            chain.append(sub)    # launched: the next variant's run waits for it on the node
        elif detach and sub.state == Status.RUNNING:
            return STOPPED       # not launched (stopped before its pipeline): the rest at resume
    return DONE
