"""Commands on a finished job's outcome: promote (its rows into the live table later), rollback, export;
a campaign's go to each target (orchestrator/campaign/outcome.py)."""
from __future__ import annotations

import sys

import click

from ..context import Ctx, Settings
from ..errors import ExitCode, UsageError
from ..state import JobState, Status
from .base import ACCEPT_NEW_HOST_KEY, JOB_ARG, Env, target_for, cli, resolve_job
from .views import emit, export_words, promote_words, rollback_words, targets_words
from .control import NODE_OPTION


def _finished(env: Env, job_id: str, what: str, nodes=()) -> JobState:
    job = env.workspace.load(job_id)
    if job.state == Status.RUNNING:
        raise UsageError(f"job {job_id} is still running; {what} waits for its end",
                         hint=f"tune-remote status {job_id} (or resume it)")
    if job.is_campaign:
        return job               # its targets' sub-jobs hold the tables (campaign/outcome.py)
    from .pick import check_nodes
    check_nodes(env, job, nodes)
    if not job.remote.live_csv:
        raise UsageError(f"job {job_id} has no staging table (it never reached prepare, or predates staging)",
                         hint="nothing on the node can be promoted or rolled back for it")
    return job


def _with_ctx(env: Env, job: JobState, accept_new_host_key: bool, fn, what: str):
    env.workspace.own(job.job_id, what)     # one process changes a job's outcome at a time
    target = target_for(env, job, accept_new_host_key)
    ctx = Ctx(job=job, workspace=env.workspace, target=target, settings=Settings(), ui=env.ui())
    try:
        from ..steps.report import refresh_after   # lazily: pandas and jinja2 (test_lazy_imports)
        return refresh_after(ctx, fn(ctx))
    finally:
        target.close()
        env.workspace.save(job)


@cli.command()
@JOB_ARG
@click.option("--rows", type=click.Choice(["proven", "all"]), default="proven", show_default=True,
              help="proven: rows whose verdict is improved; all: every tuned row (asks first when some are "
                   "proven slower)")
@click.option("--yes", "-y", is_flag=True, help="never prompt (--rows all promotes rows proven slower too)")
@ACCEPT_NEW_HOST_KEY
@NODE_OPTION
@click.pass_obj
def promote(env: Env, job_id, rows, yes, accept_new_host_key, nodes):
    """Merge a finished job's rows into the live table (after a backup); the rows of --rows not promoted yet
    (e.g. --rows all after the proven rows); repeating it changes nothing. A campaign: every succeeded target
    (or those on --node), then each target's rows onto the other targets of its GPU kind."""
    from ..steps import promote as step
    job_id = resolve_job(env, job_id)
    job = _finished(env, job_id, "promotion", nodes)
    if rows == "all" and not yes:
        _ask_for_slower(env, job, nodes)
    if job.is_campaign:
        return _campaign(env, job, nodes, accept_new_host_key, "promote", rows)
    if job.state != Status.SUCCEEDED:
        raise UsageError(f"job {job_id} {job.state}; only a succeeded job's rows can be promoted",
                         hint=f"tune-remote status {job_id}")
    res = _with_ctx(env, job, accept_new_host_key, lambda ctx: step.later(ctx, rows), "promote")
    summary = step.promote_summary(job, res)
    emit(env, {"job_id": job_id, **summary}, promote_words(job_id, summary))


def _ask_for_slower(env: Env, job: JobState, nodes) -> None:
    """`promote --rows all` with rows proven slower (not promoted yet): a question on a terminal; elsewhere
    one line, exit 2, unless --yes."""
    if job.is_campaign:
        from .pick import select
        subws, subs = select(env, job, nodes)
        dirs = [subws.job_dir(s.job_id) for s in subs]
    else:
        dirs = [env.workspace.job_dir(job.job_id)]
    slower = sum(_slower_not_promoted(d / "comparison.csv") for d in dirs)
    if not slower:
        return
    what = f"{slower} row(s) of job {job.job_id} are proven slower than what they replace"
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        raise UsageError(f"{what}; --rows all would promote them",
                         hint="add --yes to promote them anyway, or promote only the proven rows (--rows proven)")
    if not click.confirm(f"{what}. Promote them too?", default=False, err=True):
        click.echo("nothing promoted", err=True)
        raise SystemExit(ExitCode.JOB_FAILED)


def _slower_not_promoted(path) -> int:
    import csv
    if not path.is_file():
        return 0
    with open(path, newline="") as fh:
        return sum(1 for r in csv.DictReader(fh) if r.get("verdict") == "regressed" and r.get("promoted") != "true")


@cli.command()
@JOB_ARG
@ACCEPT_NEW_HOST_KEY
@NODE_OPTION
@click.pass_obj
def rollback(env: Env, job_id, accept_new_host_key, nodes):
    """Restore the live table the job changed (byte for byte, as before its first promotion) and the live JIT
    module. A campaign: on every target (or those on --node), its own rows and those spread onto it."""
    from ..steps import promote as step
    job_id = resolve_job(env, job_id)
    job = _finished(env, job_id, "rollback", nodes)
    if job.is_campaign:
        return _campaign(env, job, nodes, accept_new_host_key, "rollback")
    if not job.remote.promotion:
        raise UsageError(f"job {job_id} never promoted anything", hint="nothing to undo; the live table is as it was")
    res = _with_ctx(env, job, accept_new_host_key, step.rollback, "rollback")
    summary = step.rollback_summary(res)
    emit(env, {"job_id": job_id, **summary}, rollback_words(job_id, summary))


@cli.command("export")
@JOB_ARG
@click.option("--model-config", "model_config", required=True, metavar="NAME",
              help="model name: writes <NAME>_<tuned base name>.csv, a file for aiter/configs/model_configs/")
@click.option("--dest", type=click.Path(file_okay=False), default=None,
              show_default="<job dir>/export", help="the directory it is written to")
@NODE_OPTION
@click.pass_obj
def export_cmd(env: Env, job_id, model_config, dest, nodes):
    """Write the job's proven rows as an AITER model_configs CSV + a Markdown summary (offline). A campaign:
    one file per variant with the proven rows of every target (or those on --node)."""
    from pathlib import Path

    from ..steps.export import export
    job_id = resolve_job(env, job_id)
    job = env.workspace.load(job_id)
    if job.state == Status.RUNNING:
        raise UsageError(f"job {job_id} is still running", hint=f"tune-remote status {job_id}")
    if job.is_campaign:
        from ..campaign import outcome as camp
        from .pick import select
        subws, subs = select(env, job, nodes)

        def guards_for(variant_subs):       # on the first target whose AITER ships them; a Slurm allocation ended
            s = next((s for s in variant_subs if (s.facts.get("probes") or {}).get("tuning_tests")), None)
            return None if s is None or job.request.campaign.slurm else _guards(env, s, subws, where=True)
        res = camp.export(job, env.workspace, subws, subs, model_config, Path(dest) if dest else None, guards_for)
        emit(env, {"job_id": job_id, "variants": res}, export_words(job_id, res, True))
        return
    from .pick import check_nodes
    check_nodes(env, job, nodes)
    guards = _guards(env, job, env.workspace) if (job.facts.get("probes") or {}).get("tuning_tests") else None
    res = export(job, env.workspace.job_dir(job.job_id), model_config, Path(dest) if dest else None, guards)
    emit(env, {"job_id": job_id, **res}, export_words(job_id, res, False))


def _guards(env: Env, job: JobState, workspace, where: bool = False):
    """Upstream's level-0 guards (the node's AITER ships op_tests/tuning_tests) run on ``job``'s target with the
    exported file added; ``where``: the answer names the target (a campaign's file spans several)."""
    def guards(file_name, text):
        from ..errors import TuneRemoteError
        from ..steps.provenance import run_guards
        try:
            target = target_for(env, job, False)
        except TuneRemoteError as exc:          # the node left the inventory since
            return {"error": exc.one_line(), **({"on": f"{job.node}/{job.container}"} if where else {})}
        try:
            ran = run_guards(Ctx(job=job, workspace=workspace, target=target, settings=Settings(), ui=env.ui()),
                             file_name, text)
        finally:
            target.close()
        return {**ran, "on": f"{job.node}/{job.container}"} if where and ran else ran
    return guards


def _campaign(env: Env, job: JobState, nodes, accept_new_host_key: bool, what: str, rows: str = "proven") -> None:
    """promote / rollback on a campaign's targets (campaign/outcome.py), one JSON row per target."""
    from ..campaign import outcome as camp
    from .pick import campaign_runner, select
    subws, subs = select(env, job, nodes)
    if job.request.campaign.slurm:
        raise UsageError(f"job {job.job_id} ran on a Slurm allocation, which ended with it: its compute nodes "
                         f"cannot be reached to {what} any more",
                         hint="each target's record and backups are in <its job dir>/promotion* on its node")
    env.workspace.own(job.job_id, what)     # one process changes a campaign's targets at a time
    with campaign_runner(env, job, accept_new_host_key) as runner:
        if what == "promote":
            out = camp.promote(job, env.workspace, subws, subs, runner, rows, env.ui())
        else:
            if not any((s.remote.promotion or {}).get("promoted") or s.remote.peer_promotions
                       for s in subs):
                raise UsageError(f"job {job.job_id} never promoted anything"
                                 + (f" on {', '.join(nodes)}" if nodes else ""),
                                 hint="nothing to undo; the live tables are as they were")
            out = camp.rollback(job, env.workspace, subws, subs, runner)
    emit(env, {"job_id": job.job_id, "targets": out}, targets_words(job.job_id, what, out))
    if any(r.get("error") for r in out):
        from ..errors import JobError
        bad = [f"{r['node']}/{r['container']} {r['variant']}: {r['error']}" for r in out if r.get("error")]
        raise JobError(f"{what} failed on {len(bad)} target(s): " + "; ".join(bad),
                       hint=f"tune-remote {what} {job.job_id} --node NODE again once it is reachable")
