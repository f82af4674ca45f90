"""A job's lifecycle, whatever its targets' source: targets, plan, confirmation, target jobs, the source's
release of what the plan left out, drive, close (``carry``: run, and resume after a crash); a single job is a
campaign of one from the one-node source (single.py), its own target job. ``cancel`` and ``status`` of a saved
campaign. The CLI parses options, answers ``Console`` and prints; the source is found by the kind saved in the
job (sources.py), so nothing here names one.
"""

from __future__ import annotations

import time
from typing import Callable

from ..context import Settings
from ..errors import ConnectionLost, TuneRemoteError, UsageError
from ..inventory import Inventory
from ..records import Campaign
from ..state import TERMINAL, JobState, Status, Workspace
from . import driver
from .console import Console, Declined  # noqa: F401 - lifecycle.Console, lifecycle.Declined, as callers name them
from .plan import plan_lines
from .sources import begin, open_source, source_class, source_kind
from .targets import SourceEnv, TargetRef


def new_job(job_id: str, nodes: list[str], container: str | None, variants: list[str], request: dict) -> JobState:
    """A new campaign's job (not saved): its targets' nodes, the one container when one was named, the
    variants and the run's request; ``start`` plans it and creates its target jobs."""
    job = JobState(job_id=job_id, node=",".join(nodes), container=container or "", variant=",".join(variants),
                   created=time.time(), request=dict(request, variants=list(variants)))
    job.request.campaign = Campaign(nodes=list(nodes), container=container, sub_jobs=[])
    return job


# run --detach: how long a scheduler's queue may take to grant the targets before run returns anyway
DETACH_PATIENCE_S = 5.0
# resume of a campaign planned while queued: how long it waits for a node's own driver still launching
PENDING_DRIVE_WAIT_S = 900.0


def source_env(workspace: Workspace, job: JobState, inventory: Callable[[], Inventory], ui,
               accept_new_host_key: bool = False, target=None) -> SourceEnv:
    return SourceEnv(job, inventory, lambda: workspace.save(job), ui, accept_new_host_key, target)


def start(workspace: Workspace, job: JobState, kind: str, options: dict, inventory: Callable[[], Inventory],
          settings: Settings, console: Console, dry_run: bool = False) -> None:
    """A new campaign from ``kind``'s targets (``options``: what the source was given on the command line)."""
    env = source_env(workspace, job, inventory, console.ui, settings.accept_new_host_key)
    lines = begin(kind, env, options)
    if lines is not None:           # the source's own plan: it cannot show the real one without acquiring
        console.show("plan:\n  " + "\n  ".join(lines))
        return
    if source_class(kind).acquires and not dry_run:
        workspace.own(job.job_id, "run")    # one driver per job
        workspace.save(job)                 # before it acquires: a resume after a lost answer asks for nothing twice
    carry(workspace, job, inventory, settings, console, dry_run)


def carry(workspace: Workspace, job: JobState, inventory: Callable[[], Inventory], settings: Settings,
          console: Console, dry_run: bool = False, only: tuple = (), target=None, owner: str = "run",
          announce: bool = False) -> None:
    """Targets, plan, target jobs, drive: whatever of it is not done yet (run, and resume after a crash), of a
    campaign or of a single job (a campaign of one: planned, its own target job). ``only``: the nodes to drive
    (resume --node); ``target``: the one the command made (a single job's: connected early by preconnect.py,
    the demo's, a watch's); ``owner``: the command driving it (R-05); ``announce``: a single job says where its
    state is (a campaign says it with its plan)."""
    over = job.is_campaign      # a campaign job over its target jobs; a single job is its own: its drive owns
    if over and not dry_run:    # it once connected (nothing half-made on a refused connection), run_job judges it
        workspace.own(job.job_id, owner)   # one driver per job and its sub-jobs
    ui = console.ui
    source = open_source(source_env(workspace, job, inventory, ui, settings.accept_new_host_key, target))
    runner = None
    try:
        planned = driver.planned(job)
        if job.request.get("detach") and not planned and not source.started(DETACH_PATIENCE_S):
            plan = source.pending_plan(job)     # queued: planned now when it can be (docs/internals.md)
            if isinstance(plan, dict):
                _ship(workspace, job, source, plan, console)
                return
            job.step = "submit"             # else the plan and the launch wait for `resume`
            workspace.save(job)
            ui.event(f"job {job.job_id}: targets asked for and queued ({plan}); `tune-remote resume "
                     f"{job.job_id}` plans and launches once they run, `tune-remote status` shows the queue")
            return
        if planned and source.adopt(job, workspace, wait_s=PENDING_DRIVE_WAIT_S):
            workspace.save(job)             # planned while queued: the grants and launches the nodes saw
        refs = source.targets()
        runner = source.runner(settings.accept_new_host_key)
        if planned and source.adopt(job, workspace, wait_s=PENDING_DRIVE_WAIT_S):
            workspace.save(job)             # and those of the targets granted while it waited
        if not planned:
            job.node = ",".join(dict.fromkeys(r.node for r in refs))
            job.container = ",".join(dict.fromkeys(r.container for r in refs))
            plan = driver.make_plan(job, runner, refs, job.request["variants"], settings, ui, workspace)
            lines = plan_lines(plan)
            console.show("plan:\n  " + "\n  ".join(lines))
            if dry_run:
                return
            if console.confirm is not None and not console.confirm(f"Run this campaign ({len(refs)} targets)?"):
                job.state, job.error = Status.CANCELLED, "cancelled at the plan confirmation"
                raise Declined()
            job.variant = ",".join(plan["variants"])
            subs = driver.create_sub_jobs(job, workspace, plan)
            kept = {s.node for s in subs}
            runner.keep_only(kept)          # the nodes the plan left out: connections closed,
            source.release(keep=kept)       # and whatever the source held for them given back (Slurm's GPUs)
            subws = driver.sub_workspace(workspace, job)
            for s in subs:
                subws.save(s)
            camp = job.request.campaign
            camp.sub_jobs, camp.plan_lines, camp.unreachable = [s.job_id for s in subs], lines, plan["unreachable"]
            camp.kinds = {label: kind for groups in plan["variants"].values() for kind, shards in groups.items()
                          for label in shards}
            job.step = "remote"
            workspace.save(job)
            ui.event(f"job {job.job_id}: {len(subs)} target job(s) on {len(refs)} target(s); "
                     f"state in {workspace.job_dir(job.job_id)}")
        driver.drive(job, workspace, runner, settings, ui, only=only, owner=owner, announce=announce)
    except ConnectionLost:
        raise                                   # the nodes go on; resume re-attaches
    except BaseException as exc:
        if over:                                # a single job's verdict is its own (engine.run_job)
            _judge(workspace, job, source, exc)
        raise
    finally:
        if runner is not None:
            runner.close()                      # the connections its targets shared
        if job.state in TERMINAL or dry_run:
            source.release()                    # the source gives back what it holds (Slurm: the holders end)
        source.close()


def _judge(workspace: Workspace, job: JobState, source, exc: BaseException) -> None:
    """What stopped the campaign, in its job's state: cancelled under it, else failed (an interrupt leaves it
    running for a resume)."""
    if source.ended_by_cancel(exc, job.state == Status.RUNNING):   # `cancel` ended the targets under it
        job.state, job.error = Status.CANCELLED, "cancelled by the user"
    if job.state == Status.RUNNING and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
        job.state, job.error = Status.FAILED, exc.one_line() if isinstance(exc, TuneRemoteError) else str(exc)
    if job.state in TERMINAL and workspace.exists(job.job_id):
        workspace.save(job)


def _ship(workspace: Workspace, job: JobState, source, plan: dict, console: Console) -> None:
    """``run --detach`` with the targets still queued: the plan made here, confirmed, handed to the source, whose
    targets carry it themselves once they start (Slurm: the node driver); `resume` finishes the campaign."""
    lines = plan_lines(plan)
    console.show("plan:\n  " + "\n  ".join(lines))
    n = sum(1 for groups in plan["variants"].values() for shards in groups.values() for rows in shards.values()
            if rows)
    if console.confirm is not None and not console.confirm(f"Run this campaign ({n} target jobs)?"):
        job.state, job.error = Status.CANCELLED, "cancelled at the plan confirmation"
        raise Declined()
    source.ship(job, workspace, plan, lines)
    workspace.save(job)
    console.ui.event(f"job {job.job_id}: targets queued; {n} target job(s) planned and put on the cluster: each "
                     f"node tunes its shard once the scheduler starts it, without this machine; `tune-remote "
                     f"resume {job.job_id}` finishes the campaign, `tune-remote status` shows it")


def cancel(workspace: Workspace, job: JobState, inventory: Callable[[], Inventory], ui, grace_s: float,
           nodes: tuple = ()) -> dict:
    """Cancel every target, or only those on ``nodes`` (the others go on; the job ends when they do): the
    source's own way where it has one (Slurm: TERM to its jobs, then the states), else each target through the
    runner. ``driver.cancel``'s answer, with the processes signalled and killed."""
    whole = source_class(source_kind(job)).cancelled_whole
    if whole and nodes:
        raise UsageError(whole, hint=f"tune-remote cancel {job.job_id}")
    source = open_source(source_env(workspace, job, inventory, ui))
    runner = source.runner()
    try:
        ended = source.cancel(grace_s)
        res = driver.cancel(job, workspace, runner, grace_s, remote=ended is None, nodes=nodes)
    finally:
        runner.close()
        source.close()
    if ended is not None:
        res["signalled"], res["killed"] = ended
    return res


def _ask_nodes(env: SourceEnv, workspace: Workspace, job: JobState, targets: list[dict]) -> None:
    """No driver attached (a detached campaign): each running target's state as its node says it now (one
    poll each; a vanished process: ``lost``), written to the sub-job, never the cached ``running``."""
    from ..context import Ctx
    from ..steps.remote import poll_once
    from ..ui import Ui
    subws = driver.sub_workspace(workspace, job)
    subs = {s.job_id: s for s in driver.sub_jobs(job, workspace)}
    live = [(t, s) for t, s in zip(targets, subs.values()) if s.state == "running" and s.remote.get("run_dir")]
    if not live:
        return
    try:
        source = open_source(env)
        runner = source.runner()
    except TuneRemoteError:
        return
    try:
        for t, sub in live:
            target = runner.open(TargetRef(sub.node, sub.container))
            try:
                ctx = Ctx(job=sub, workspace=subws, target=target, settings=Settings(reconnect_s=0),
                          ui=Ui(quiet=True))
                run = poll_once(ctx, wait=False)
            except TuneRemoteError:
                continue                       # unreachable now: the row keeps what was last seen
            finally:
                target.close()
            t["node_state"] = "waiting" if run.get("waiting_for") else run["state"]   # a chained variant
            if run["state"] in ("lost", "cancelled"):
                sub.state = run["state"]
                sub.error = sub.error or ("the job's process on the node is gone without an exit status"
                                          if run["state"] == "lost" else "cancelled on the node")
                t["state"] = sub.state
                subws.save(sub)
    finally:
        runner.close()
        source.close()


def _adopt(env: SourceEnv, workspace: Workspace, job: JobState) -> None:
    """No driver attached: what the targets' own drivers launched, into the sub-jobs (Slurm, planned while
    queued), so `status`, `logs` and `fetch` see the nodes' runs."""
    if not job.request.campaign.sub_jobs:
        return
    try:
        source = open_source(env)
    except TuneRemoteError:
        return
    try:
        if source.adopt(job, workspace):
            env.save()
    except TuneRemoteError:
        pass
    finally:
        source.close()


def refresh(workspace: Workspace, job: JobState, inventory: Callable[[], Inventory], ui) -> None:
    """``logs``/``fetch`` of a campaign no process drives: adopt what its targets' own drivers launched."""
    if job.state not in TERMINAL and not workspace.driven_elsewhere(job.job_id):
        _adopt(source_env(workspace, job, inventory, ui), workspace, job)


def status(workspace: Workspace, job: JobState, inventory: Callable[[], Inventory], ui) -> dict:
    """``targets`` (one row per sub-job) and whatever the source adds (Slurm: its jobs as squeue says)."""
    env = source_env(workspace, job, inventory, ui)
    if job.state not in TERMINAL and not workspace.driven_elsewhere(job.job_id):
        _adopt(env, workspace, job)
    targets = driver.targets_rows(job, workspace)
    if job.state not in TERMINAL and not workspace.driven_elsewhere(job.job_id):
        _ask_nodes(env, workspace, job, targets)
    return {"targets": targets, **source_class(source_kind(job)).status(env, targets, job.state not in TERMINAL)}
