"""status, logs, cancel and fetch of a job, over its targets (``reach.py``: a single job is one target, a
campaign many, its sub-jobs reached through its source's runner). The CLI parses, calls one of these, prints.

What a command says goes through ``echo(text, err=False)`` (the CLI's ``click.echo``); a log's bytes to
``sys.stdout`` as they are; a failure raises (``JobError``, ``UsageError``) with its exit code.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any, Callable

from ..context import Ctx, Settings, Target
from ..errors import JobError, TuneRemoteError, UsageError
from ..state import TERMINAL, JobState, Status, Workspace
from ..ui import Ui
from ..workflow import LOG_STEP_NAMES, REMOTE_STEPS
from .reach import Reach, check_nodes, header, job_nodes, opener, select, single_target

# lifecycle (it imports pandas) loads where a campaign needs it: `status` of single jobs stays light


def _ctx(job: JobState, ws: Workspace, target: Target, settings: Settings, ui=None) -> Ctx:
    return Ctx(job=job, workspace=ws, target=target, settings=settings, ui=ui or Ui(quiet=True))


# -- status ----------------------------------------------------------------------------------------------
def status(reach: Reach, job_id: str | None, nodes=()) -> tuple[list[JobState], list[dict]]:
    """The jobs (one, or the workspace's; on `nodes` when given) and a row for each. A running single job is
    asked on its node; only ``status JOB`` saves what it learned."""
    jobs = [reach.workspace.load(job_id)] if job_id else reach.workspace.jobs()
    if job_id and nodes:
        check_nodes(reach, jobs[0], nodes)
    elif nodes:
        jobs = [j for j in jobs if set(nodes) & set(job_nodes(reach, j))]
    for job in jobs:
        if job.state == Status.RUNNING and job.remote.run_dir and not job.is_campaign:
            refresh(reach, job, save=bool(job_id))
    rows = [status_row(reach, j) for j in jobs]
    for r in rows:
        if nodes and r.get("targets") is not None:
            r["targets"] = [t for t in r["targets"] if t["node"] in nodes]
    return jobs, rows


def status_row(reach: Reach, job: JobState) -> dict:
    row = {"job_id": job.job_id, "state": job.state, "step": job.step, "node": job.node,
           "container": job.container, "variant": job.variant,
           "created": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(job.created))}
    tail = job.step_state("remote").info.get("tail") or {}
    if tail.get("progress"):
        row["progress"] = tail["progress"]
    if job.error:
        row["error"] = job.error
    node_state = job.step_state("remote").info.get("state")
    if job.state == Status.RUNNING and node_state not in (None, Status.RUNNING, "starting"):
        row["node_state"] = node_state          # the node's truth, newer than this cache
    if job.is_campaign:   # its targets, and its source's view (Slurm: state, pending reason)
        from . import lifecycle
        row.update(lifecycle.status(reach.workspace, job, reach.inventory, reach.ui()))
    return row


def refresh(reach: Reach, job: JobState, save: bool = True) -> None:
    """One poll of the node: turns a vanished process into 'lost'. Connection problems leave the cache.
    ``save=False`` (status of every job): shown, not saved, so a `run` owning the job is not overwritten."""
    from ..steps import remote as remote_step
    try:
        target = single_target(reach, job)
    except TuneRemoteError:
        return
    ctx = _ctx(job, reach.workspace, target, Settings(reconnect_s=0))
    try:
        run = remote_step.poll_once(ctx, wait=False)
        if run["state"] == Status.LOST:
            job.state = Status.LOST
            job.error = "the job's process on the node is gone without an exit status"
        elif run["state"] == Status.CANCELLED:
            job.state = Status.CANCELLED
        if save:
            reach.workspace.save(job)
    except TuneRemoteError:
        pass
    finally:
        target.close()


# -- logs ------------------------------------------------------------------------------------------------
def logs(reach: Reach, job_id: str, step: str, follow: bool, nodes, variant, echo: Callable) -> None:
    """Print a step's log: a single job's; a campaign's target jobs' (on `nodes`, of `variant`), each under a
    header line when there are several. ``follow``: poll the node until the job ends."""
    job = reach.workspace.load(job_id)
    step = {v: k for k, v in LOG_STEP_NAMES.items()}.get(step, step)
    if step not in (*REMOTE_STEPS, "pipeline"):
        raise UsageError(f"unknown step {step!r}", hint="choose baseline, tune, after or pipeline")
    if not job.is_campaign:
        check_nodes(reach, job, nodes)
        one_log(reach.workspace, job, step, follow, lambda: single_target(reach, job), echo)
        return
    subws, subs = select(reach, job, nodes, variant)
    if follow and len(subs) > 1:
        raise UsageError(f"--follow follows one target job; {len(subs)} match",
                         hint="choose one with --node NODE (and --variant V): "
                              + ", ".join(f"{s.node} {s.variant}" for s in subs))
    with opener(reach, job) as open_target:
        for sub in subs:
            if len(subs) > 1:
                echo(header(sub, step))
            one_log(subws, sub, step, follow, lambda sub=sub: open_target(sub), echo, missing_ok=len(subs) > 1)


def one_log(ws: Workspace, job: JobState, step: str, follow: bool, open_target, echo: Callable,
            missing_ok: bool = False) -> None:
    node_path = job.remote.pipeline_log if step == "pipeline" else (job.remote.logs or {}).get(step)
    if not node_path:
        if missing_ok:
            echo(f"(no {step} log yet: {job.state}, step {job.step})")
            return
        raise UsageError(f"job {job.job_id} has no {step} log yet", hint=f"tune-remote status {job.job_id}")
    local = ws.job_dir(job.job_id) / "logs" / Path(node_path).name
    if step == "pipeline":
        local = ws.job_dir(job.job_id) / "pipeline.log"
    if job.state not in TERMINAL and job.remote.run_dir:
        _refresh_log(ws, job, step, node_path, local, open_target, echo)
    printed = 0
    if local.is_file():
        sys.stdout.flush()
        data = local.read_bytes()
        sys.stdout.buffer.write(data)
        printed = len(data)
    if not follow or job.state in TERMINAL:
        sys.stdout.flush()
        return
    follow_log(ws, job, local, printed, open_target())


def follow_log(ws: Workspace, job: JobState, local: Path, printed: int, target: Target) -> None:
    """``logs --follow``: poll the node (each poll brings the log's new bytes into ``local``) and print what
    came, until the job's process ended and nothing is left to bring; the target is closed afterwards."""
    from ..steps import remote as remote_step
    settings = Settings()
    ctx = _ctx(job, ws, target, settings)
    try:
        while True:
            run = remote_step.poll_once(ctx)
            ws.save(job)
            if local.is_file() and local.stat().st_size > printed:
                with open(local, "rb") as fh:
                    fh.seek(printed)
                    data = fh.read()
                sys.stdout.buffer.write(data)
                sys.stdout.flush()
                printed += len(data)
            if run["state"] not in (Status.RUNNING, "starting") and not run["more"]:
                break
            if not run["more"] and not run.get("long_poll"):   # a long poll already waited on the node
                time.sleep(settings.poll_s)
    finally:
        target.close()


def _refresh_log(ws: Workspace, job: JobState, step: str, node_path: str, local: Path, open_target,
                 echo: Callable) -> None:
    """Bring the local copy of a running (or detached) job's log up to date from the node; on a
    connection problem say so and show the local copy. state.json is not saved here (a `run` or
    `resume` may own the job right now); the polls' write-at-offset keeps the copies consistent."""
    from ..steps import fetch as fetch_step
    from ..steps import remote as remote_step
    try:
        target = open_target()
    except TuneRemoteError:
        return
    ctx = _ctx(job, ws, target, Settings(reconnect_s=0))
    try:
        if step == "pipeline":   # through the poll, which also records the sub-step markers
            while remote_step.poll_once(ctx, wait=False)["more"]:
                pass
        else:
            fetch_step.pull(ctx, {node_path: local}, record=False)
    except TuneRemoteError as exc:
        echo(f"tune-remote: warning: showing the local copy, the node did not answer: {exc.one_line()}", err=True)
    finally:
        target.close()


# -- cancel ----------------------------------------------------------------------------------------------
def cancel(reach: Reach, job_id: str, grace: float, nodes, echo: Callable) -> None:
    """Stop a job's whole process tree in the container (TERM, grace, KILL). A campaign: every target, or only
    those on `nodes` (the others go on)."""
    job = reach.workspace.load(job_id)
    check_nodes(reach, job, nodes)
    if job.state in TERMINAL:
        echo(f"job {job_id} is already {job.state}")
        return
    if job.is_campaign:
        _cancel_targets(reach, job, grace, nodes, echo)
        return
    if not job.remote.run_dir:
        job.state, job.error = Status.CANCELLED, "cancelled before anything ran on the node"
        reach.workspace.update(job.job_id, _cancelled(job.error))
        echo(f"job {job_id} cancelled")
        return
    from ..steps.remote import cancel as cancel_run
    target = single_target(reach, job)
    try:
        res = cancel_run(_ctx(job, reach.workspace, target, Settings(), reach.ui()), grace)
    finally:
        target.close()
    table = res.get("table")
    if table and table.get("line"):
        echo(table["line"].replace("[tune-remote] table: ", "tune-remote: the tuned table "), err=True)
    _cancel_outcome(reach, job, res, echo)


def _cancelled(error: str):
    def change(job: JobState) -> None:
        job.state, job.error = Status.CANCELLED, error
    return change


SURVIVED_HINT = ("check them with `ps -o pid,stat,wchan -p PID` in the container; they end with the GPU reset or "
                 "a container restart")


def _cancel_outcome(reach: Reach, job: JobState, res: dict, echo: Callable) -> None:
    """Say what the node answered: a job that had already ended keeps its own state (its results are still
    worth a `resume`); processes that survived SIGKILL are named and the command exits 1."""
    node_state = res.get("state")
    remaining = res.get("remaining") or []
    if res.get("already_finished") and node_state in (Status.SUCCEEDED, Status.FAILED):
        echo(f"job {job.job_id} had already {node_state} on the node (rc {res.get('rc')}); nothing to cancel; "
             f"`tune-remote resume {job.job_id}` collects its results")
        return
    job.state, job.error = Status.CANCELLED, "cancelled by the user"
    reach.workspace.update(job.job_id, _cancelled(job.error))   # never over a driver's newer state
    if remaining:
        raise JobError(f"job {job.job_id}: {len(remaining)} process(es) survived SIGKILL on the node "
                       f"(pids {', '.join(map(str, remaining))}; stuck in the kernel, e.g. a hung GPU)",
                       hint=SURVIVED_HINT)
    echo(f"job {job.job_id} cancelled ({len(res.get('signalled') or [])} process(es) signalled, "
         f"{len(res.get('killed') or [])} killed)")


def _cancel_targets(reach: Reach, job: JobState, grace: float, nodes, echo: Callable) -> None:
    """A campaign: every target, or only those on `nodes` (the others go on; the job ends when they do)."""
    from . import lifecycle
    res = lifecycle.cancel(reach.workspace, job, reach.inventory, reach.ui(), grace, tuple(nodes))
    sig, killed = res["signalled"], res["killed"]
    for line in res["tables"]:
        echo("tune-remote: the tuned table of " + line.replace("[tune-remote] table: ", ""), err=True)
    what = f"job {job.job_id}" + (f" on {', '.join(nodes)}" if nodes else "")
    if res["finished"]:
        echo(f"{len(res['finished'])} target(s) had already ended on their own: "
             f"{'; '.join(res['finished'])}; `tune-remote resume {job.job_id}` collects their results")
    if res["remaining"]:
        raise JobError(f"{what}: {len(res['remaining'])} process(es) survived SIGKILL (node:pid "
                       f"{', '.join(res['remaining'])}; stuck in the kernel, e.g. a hung GPU)", hint=SURVIVED_HINT)
    if res["finished"]:       # the job goes on until a resume collects them: say what was cancelled
        echo(f"{what}: {res['cancelled']} target(s) cancelled ({sig} process(es) signalled, {killed} killed)")
    else:
        echo(f"{what} cancelled ({sig} process(es) signalled, {killed} killed)")


# -- fetch -----------------------------------------------------------------------------------------------
def fetch(reach: Reach, job_id: str, dest: str | None, nodes, accept_new_host_key: bool = False) -> dict:
    """Bring logs, CSVs and reports home; the document `fetch --json` prints: ``{"job_id", "files"}`` of a
    single job, ``{"job_id", "targets": [row]}`` of a campaign (each target job into its own directory under
    <job>/targets/, or DEST/<target job>)."""
    job = reach.workspace.load(job_id)
    if not job.is_campaign:
        check_nodes(reach, job, nodes)
        if not job.remote.job_dir:
            raise JobError(f"job {job_id} produced nothing on the node yet", hint=f"tune-remote status {job_id}")
        files = _one_fetch(reach.workspace, job, Path(dest) if dest else None,
                           lambda: single_target(reach, job, accept_new_host_key), reach.ui())
        reach.workspace.save(job)
        return {"job_id": job_id, "files": files}
    subws, subs = select(reach, job, nodes)
    rows = []
    with opener(reach, job, accept_new_host_key) as open_target:
        for sub in subs:
            row: dict[str, Any] = {"node": sub.node, "container": sub.container, "variant": sub.variant,
                                   "job_id": sub.job_id}
            if sub.remote.job_dir:
                row["files"] = _one_fetch(subws, sub, Path(dest) / sub.job_id if dest else None,
                                          lambda sub=sub: open_target(sub), reach.ui())
                subws.save(sub)
            else:
                row["files"], row["note"] = {}, "nothing on the node yet"
            rows.append(row)
    if not any(r.get("files") for r in rows) and all(r.get("note") for r in rows):
        raise JobError(f"job {job_id} produced nothing on its nodes yet", hint=f"tune-remote status {job_id}")
    return {"job_id": job_id, "targets": rows}


def _one_fetch(ws: Workspace, job: JobState, dest: Path | None, open_target, ui) -> dict:
    from ..steps import fetch as fetch_step
    target = open_target()
    try:
        return fetch_step.run(_ctx(job, ws, target, Settings(), ui), dest)
    finally:
        target.close()
