"""Commands that watch a job: status, logs, cancel, fetch."""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from ..context import Ctx, Settings
from ..errors import JobError, TuneRemoteError, UsageError
from ..state import TERMINAL, JobState, Status
from ..ui import Ui
from ..workflow import LOG_STEP_NAMES, REMOTE_STEPS
from .base import ACCEPT_NEW_HOST_KEY, JOB_ARG, Env, target_for, cli, resolve_job


def _status_row(job: JobState, env: Env | None = None) -> dict:
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
    if job.is_campaign and env is not None:   # its targets live in the job's directory
        from .campaign import status_campaign
        row.update(status_campaign(env, job))    # its targets, and its source's view (Slurm: state, pending reason)
    return row


NODE_OPTION = click.option("--node", "nodes", multiple=True, metavar="NODE",
                           help="only the targets on this node (repeatable; a campaign's targets)")


@cli.command()
@click.argument("job_id", metavar="[JOB]", required=False)
@click.option("--json", "as_json", is_flag=True, help="print a JSON list of jobs")
@NODE_OPTION
@click.pass_obj
def status(env: Env, job_id, as_json, nodes):
    """Show jobs (from the workspace; a running job is checked against its node)."""
    from .pick import check_nodes, job_nodes
    job_id = resolve_job(env, job_id) if job_id else None
    jobs = [env.workspace.load(job_id)] if job_id else env.workspace.jobs()
    if job_id and nodes:
        check_nodes(env, jobs[0], nodes)
    elif nodes:
        jobs = [j for j in jobs if set(nodes) & set(job_nodes(env, j))]
    for job in jobs:   # running jobs are asked on their node; only `status JOB` saves what it learned
        if job.state == Status.RUNNING and job.remote.run_dir and not job.is_campaign:
            _refresh(env, job, save=bool(job_id))
    rows = [_status_row(j, env) for j in jobs]
    for r in rows:
        if nodes and r.get("targets") is not None:
            r["targets"] = [t for t in r["targets"] if t["node"] in nodes]
    if as_json or env.json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo(f"no jobs in {env.workspace.root}")
        return
    if sys.stdout.isatty():          # a table; piped: the lines scripts read today
        from .views import console, status_words
        return status_words(env, jobs, rows)(console())
    for r in rows:
        prog = r.get("progress") or {}
        extra = f" {prog.get('done')}/{prog.get('total')} batches" if prog.get("total") else ""
        node = (f"  (node: {r['node_state']}; `tune-remote resume {r['job_id']}` collects it)"
                if r.get("node_state") else "")
        click.echo(f"{r['job_id']}  {r['state']:<9} {r['step']:<8}{extra}  {r['node']}/{r['container']}  "
                   f"{r['variant']}" + (f"  ({r['error']})" if r.get("error") else "") + node)
        for t in r.get("targets") or []:       # a campaign's targets (only those on --node NODE when given)
            waiting = " (node: waiting)" if t.get("node_state") == "waiting" else ""   # a chained variant
            click.echo(f"    {t['node']}/{t['container']}  {t['variant']}  {t['state']}{waiting}  {t.get('step') or ''}")
        if r.get("slurm"):
            click.echo("    slurm: " + ", ".join(f"{s['job']} {str(s['state']).lower()}" + (
                f" ({s['reason']})" if s.get("reason") else "") + (f" on {s['node']}" if s.get("node") else "")
                for s in r["slurm"]))


def _refresh(env: Env, job: JobState, save: bool = True) -> None:
    """One poll of the node: turns a vanished process into 'lost'. Connection problems leave the cache.
    ``save=False`` (status of every job): shown, not saved, so a `run` owning the job is not overwritten."""
    from ..steps import remote as remote_step
    settings = Settings(reconnect_s=0)
    try:
        target = target_for(env, job, False)
    except TuneRemoteError:
        return
    ctx = Ctx(job=job, workspace=env.workspace, target=target, settings=settings, ui=Ui(quiet=True))
    try:
        run = remote_step.poll_once(ctx, wait=False)
        if run["state"] == Status.LOST:
            job.state = Status.LOST
            job.error = "the job's process on the node is gone without an exit status"
        elif run["state"] == Status.CANCELLED:
            job.state = Status.CANCELLED
        if save:
            env.workspace.save(job)
    except TuneRemoteError:
        pass
    finally:
        target.close()


@cli.command()
@JOB_ARG
@click.option("--step", "step", default="tune", metavar="STEP",
              help="baseline|tune|after (also bench_before|tuning|bench_after) or pipeline")
@click.option("--follow", "-f", is_flag=True, help="keep printing new lines until the job ends")
@NODE_OPTION
@click.option("--variant", default=None, help="a campaign: only the target jobs of this variant")
@click.pass_obj
def logs(env: Env, job_id, step, follow, nodes, variant):
    """Print a step's log (the local copy; --follow polls the node). A campaign: every target job's log,
    each under a '==> node/container variant: step <==' line; --node/--variant choose which."""
    from .views import as_document
    job_id = resolve_job(env, job_id)
    if follow and getattr(env, "json", False):
        raise UsageError("--follow prints lines as they come, not one JSON document", hint="leave out --json")
    with as_document(env, lambda text: {"job_id": job_id, "step": step, "log": text}):
        _logs(env, job_id, step, follow, nodes, variant)


def _logs(env: Env, job_id, step, follow, nodes, variant) -> None:
    job = env.workspace.load(job_id)
    names = {v: k for k, v in LOG_STEP_NAMES.items()}
    step = names.get(step, step)
    if step not in (*REMOTE_STEPS, "pipeline"):
        raise UsageError(f"unknown step {step!r}", hint="choose baseline, tune, after or pipeline")
    if not job.is_campaign:
        from .pick import check_nodes
        check_nodes(env, job, nodes)
        _one_log(env, env.workspace, job, step, follow, lambda: target_for(env, job, False))
        return
    from .pick import header, opener, select
    subws, subs = select(env, job, nodes, variant)
    if follow and len(subs) > 1:
        raise UsageError(f"--follow follows one target job; {len(subs)} match",
                         hint="choose one with --node NODE (and --variant V): "
                              + ", ".join(f"{s.node} {s.variant}" for s in subs))
    with opener(env, job) as open_target:
        for sub in subs:
            if len(subs) > 1:
                click.echo(header(sub, step))
            _one_log(env, subws, sub, step, follow, lambda sub=sub: open_target(sub), missing_ok=len(subs) > 1)


def _one_log(env: Env, ws, job: JobState, step: str, follow: bool, open_target, missing_ok: bool = False) -> None:
    node_path = job.remote.pipeline_log if step == "pipeline" else (job.remote.logs or {}).get(step)
    if not node_path:
        if missing_ok:
            click.echo(f"(no {step} log yet: {job.state}, step {job.step})")
            return
        raise UsageError(f"job {job.job_id} has no {step} log yet", hint=f"tune-remote status {job.job_id}")
    local = ws.job_dir(job.job_id) / "logs" / Path(node_path).name
    if step == "pipeline":
        local = ws.job_dir(job.job_id) / "pipeline.log"
    if job.state not in TERMINAL and job.remote.run_dir:
        _refresh_log(ws, job, step, node_path, local, open_target)
    printed = 0
    if local.is_file():
        sys.stdout.flush()
        data = local.read_bytes()
        sys.stdout.buffer.write(data)
        printed = len(data)
    if not follow or job.state in TERMINAL:
        sys.stdout.flush()
        return
    target = open_target()
    settings = Settings()
    ctx = Ctx(job=job, workspace=ws, target=target, settings=settings, ui=Ui(quiet=True))
    from ..steps import remote as remote_step
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


def _refresh_log(ws, job: JobState, step: str, node_path: str, local: Path, open_target) -> None:
    """Bring the local copy of a running (or detached) job's log up to date from the node; on a
    connection problem say so and show the local copy. state.json is not saved here (a `run` or
    `resume` may own the job right now); the polls' write-at-offset keeps the copies consistent."""
    from ..steps import fetch as fetch_step
    from ..steps import remote as remote_step
    try:
        target = open_target()
    except TuneRemoteError:
        return
    ctx = Ctx(job=job, workspace=ws, target=target, settings=Settings(reconnect_s=0),
              ui=Ui(quiet=True))
    try:
        if step == "pipeline":   # through the poll, which also records the sub-step markers
            while remote_step.poll_once(ctx, wait=False)["more"]:
                pass
        else:
            fetch_step.pull(ctx, {node_path: local}, record=False)
    except TuneRemoteError as exc:
        click.echo(f"tune-remote: warning: showing the local copy, the node did not answer: {exc.one_line()}",
                   err=True)
    finally:
        target.close()


@cli.command()
@JOB_ARG
@click.option("--grace", type=click.FloatRange(0), default=10.0, show_default=True,
              help="seconds between SIGTERM and SIGKILL")
@NODE_OPTION
@click.pass_obj
def cancel(env: Env, job_id, grace, nodes):
    """Stop a job's whole process tree in the container (TERM, grace, KILL). A campaign: every target, or
    only those on --node (the others go on)."""
    from .views import as_document
    job_id = resolve_job(env, job_id)
    with as_document(env, lambda text: {"job_id": job_id, "state": env.workspace.load(job_id).state,
                                        "said": text.strip()}):
        _cancel(env, job_id, grace, nodes)


def _cancel(env: Env, job_id, grace, nodes) -> None:
    from .pick import check_nodes
    job = env.workspace.load(job_id)
    check_nodes(env, job, nodes)
    if job.state in TERMINAL:
        click.echo(f"job {job_id} is already {job.state}")
        return
    if job.is_campaign:
        from .campaign import cancel_campaign
        cancel_campaign(env, job, grace, nodes)
        return
    if not job.remote.run_dir:
        job.state, job.error = Status.CANCELLED, "cancelled before anything ran on the node"
        env.workspace.update(job.job_id, _cancelled(job.error))
        click.echo(f"job {job_id} cancelled")
        return
    target = target_for(env, job, False)
    ctx = Ctx(job=job, workspace=env.workspace, target=target, settings=Settings(), ui=env.ui())
    from ..steps.remote import cancel as cancel_run
    try:
        res = cancel_run(ctx, grace)
    finally:
        target.close()
    table = res.get("table")
    if table and table.get("line"):
        click.echo(table["line"].replace("[tune-remote] table: ", "tune-remote: the tuned table "), err=True)
    _cancel_outcome(env, job, res)


def _cancelled(error: str):
    def change(job: JobState) -> None:
        job.state, job.error = Status.CANCELLED, error
    return change


def _cancel_outcome(env: Env, job: JobState, res: dict) -> None:
    """Say what the node answered: a job that had already ended keeps its own state (its results are still
    worth a `resume`); processes that survived SIGKILL are named and the command exits 1."""
    node_state = res.get("state")
    remaining = res.get("remaining") or []
    if res.get("already_finished") and node_state in (Status.SUCCEEDED, Status.FAILED):
        click.echo(f"job {job.job_id} had already {node_state} on the node (rc {res.get('rc')}); nothing to cancel; "
                   f"`tune-remote resume {job.job_id}` collects its results")
        return
    job.state, job.error = Status.CANCELLED, "cancelled by the user"
    env.workspace.update(job.job_id, _cancelled(job.error))   # never over a driver's newer state
    if remaining:
        raise JobError(f"job {job.job_id}: {len(remaining)} process(es) survived SIGKILL on the node "
                       f"(pids {', '.join(map(str, remaining))}; stuck in the kernel, e.g. a hung GPU)",
                       hint="check them with `ps -o pid,stat,wchan -p PID` in the container; they end with the "
                            "GPU reset or a container restart")
    click.echo(f"job {job.job_id} cancelled ({len(res.get('signalled') or [])} process(es) signalled, "
               f"{len(res.get('killed') or [])} killed)")


@cli.command()
@JOB_ARG
@click.option("--dest", type=click.Path(file_okay=False), default=None, show_default="the job's directory", help="where the files go")
@ACCEPT_NEW_HOST_KEY
@NODE_OPTION
@click.pass_obj
def fetch(env: Env, job_id, dest, accept_new_host_key, nodes):
    """Bring logs, CSVs and reports home (sha256-verified; unchanged files are skipped). A campaign: every
    target job (or those on --node) into its own directory under <job>/targets/ (or DEST/<target job>)."""
    job_id = resolve_job(env, job_id)
    job = env.workspace.load(job_id)
    if not job.is_campaign:
        from .pick import check_nodes
        check_nodes(env, job, nodes)
        if not job.remote.job_dir:
            raise JobError(f"job {job_id} produced nothing on the node yet", hint=f"tune-remote status {job_id}")
        outcome = _one_fetch(env.workspace, job, Path(dest) if dest else None,
                             lambda: target_for(env, job, accept_new_host_key), env.ui())
        env.workspace.save(job)
        from .views import emit, fetch_words
        emit(env, {"job_id": job_id, "files": outcome}, fetch_words(job_id, [{"files": outcome}], False))
        return
    from .pick import opener, select
    subws, subs = select(env, job, nodes)
    rows = []
    with opener(env, job, accept_new_host_key) as open_target:
        for sub in subs:
            row = {"node": sub.node, "container": sub.container, "variant": sub.variant, "job_id": sub.job_id}
            if sub.remote.job_dir:
                row["files"] = _one_fetch(subws, sub, Path(dest) / sub.job_id if dest else None,
                                          lambda sub=sub: open_target(sub), env.ui())
                subws.save(sub)
            else:
                row["files"], row["note"] = {}, "nothing on the node yet"
            rows.append(row)
    if not any(r.get("files") for r in rows) and all(r.get("note") for r in rows):
        raise JobError(f"job {job_id} produced nothing on its nodes yet", hint=f"tune-remote status {job_id}")
    from .views import emit, fetch_words
    emit(env, {"job_id": job_id, "targets": rows}, fetch_words(job_id, rows, True))


def _one_fetch(ws, job: JobState, dest: Path | None, open_target, ui) -> dict:
    from ..steps import fetch as fetch_step
    target = open_target()
    ctx = Ctx(job=job, workspace=ws, target=target, settings=Settings(), ui=ui)
    try:
        return fetch_step.run(ctx, dest)
    finally:
        target.close()
