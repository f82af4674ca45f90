"""``promote``, ``rollback`` and ``export`` of a finished job, whatever it is: one target's (its node's live table
through the promote step) or a campaign's (each chosen target's, outcome.py). Each returns ``(payload, several)``:
the command's JSON document and whether it is a campaign's (one row per target); nothing here prints."""
from __future__ import annotations

import csv
from pathlib import Path

from ..context import Ctx, Settings
from ..errors import JobError, TuneRemoteError, UsageError
from ..state import JobState, Status, Workspace
from .driver import check_nodes
from .reach import Reach, campaign_runner, select, single_target


def _on_target(reach: Reach, job: JobState, workspace: Workspace, fn, target=None):
    """``fn(ctx)`` on a single job's target (``target``: made already), which is closed afterwards."""
    target = target or single_target(reach, job, reach.accept_new_host_key)
    try:
        return fn(Ctx(job=job, workspace=workspace, target=target, settings=Settings(), ui=reach.ui()))
    finally:
        target.close()


def finished(workspace: Workspace, job_id: str, what: str, nodes=()) -> JobState:
    """The job, when it is over and (one target) has a staging table to promote from or roll back to."""
    job = workspace.load(job_id)
    if job.state == Status.RUNNING:
        raise UsageError(f"job {job_id} is still running; {what} waits for its end",
                         hint=f"tune-remote status {job_id} (or resume it)")
    if job.is_campaign:
        return job               # its targets' sub-jobs hold the tables (outcome.py)
    check_nodes(job, workspace, nodes)
    if not job.remote.live_csv:
        raise UsageError(f"job {job_id} has no staging table (it never reached prepare, or predates staging)",
                         hint="nothing on the node can be promoted or rolled back for it")
    return job


def slower_not_promoted(reach: Reach, job: JobState, nodes=()) -> int:
    """Rows proven slower than what they replace and not promoted yet (what ``promote --rows all`` asks about)."""
    if job.is_campaign:
        subws, subs = select(reach, job, nodes)
        dirs = [subws.job_dir(s.job_id) for s in subs]
    else:
        dirs = [reach.workspace.job_dir(job.job_id)]
    return sum(_slower(d / "comparison.csv") for d in dirs)


def _slower(path: Path) -> int:
    if not path.is_file():
        return 0
    with open(path, newline="") as fh:
        return sum(1 for r in csv.DictReader(fh) if r.get("verdict") == "regressed" and r.get("promoted") != "true")


def _changed(reach: Reach, job: JobState, fn, what: str):
    """``fn(ctx)`` on a single job's target, its report refreshed; one process changes a job's outcome at a time."""
    reach.workspace.own(job.job_id, what)
    target = single_target(reach, job, reach.accept_new_host_key)
    try:
        from ..steps.report import refresh_after   # lazily: pandas and jinja2 (test_lazy_imports)
        return _on_target(reach, job, reach.workspace, lambda ctx: refresh_after(ctx, fn(ctx)), target)
    finally:
        reach.workspace.save(job)


def promote(reach: Reach, job: JobState, rows: str, nodes=()) -> tuple[dict, bool]:
    if job.is_campaign:
        return _on_targets(reach, job, nodes, "promote", rows), True
    from ..steps import promote as step
    if job.state != Status.SUCCEEDED:
        raise UsageError(f"job {job.job_id} {job.state}; only a succeeded job's rows can be promoted",
                         hint=f"tune-remote status {job.job_id}")
    res = _changed(reach, job, lambda ctx: step.later(ctx, rows), "promote")
    return {"job_id": job.job_id, **step.promote_summary(job, res)}, False


def rollback(reach: Reach, job: JobState, nodes=()) -> tuple[dict, bool]:
    if job.is_campaign:
        return _on_targets(reach, job, nodes, "rollback"), True
    from ..steps import promote as step
    if not job.remote.promotion:
        raise UsageError(f"job {job.job_id} never promoted anything",
                         hint="nothing to undo; the live table is as it was")
    return {"job_id": job.job_id, **step.rollback_summary(_changed(reach, job, step.rollback, "rollback"))}, False


def _on_targets(reach: Reach, job: JobState, nodes, what: str, rows: str = "proven") -> dict:
    """promote / rollback on a campaign's targets (outcome.py), one row per target."""
    from . import outcome as camp
    subws, subs = select(reach, job, nodes)
    if job.request.campaign.slurm:
        raise UsageError(f"job {job.job_id} ran on a Slurm allocation, which ended with it: its compute nodes "
                         f"cannot be reached to {what} any more",
                         hint="each target's record and backups are in <its job dir>/promotion* on its node")
    reach.workspace.own(job.job_id, what)     # one process changes a campaign's targets at a time
    with campaign_runner(reach, job, reach.accept_new_host_key) as runner:
        if what == "promote":
            out = camp.promote(job, reach.workspace, subws, subs, runner, rows, reach.ui())
        else:
            if not any((s.remote.promotion or {}).get("promoted") or s.remote.peer_promotions for s in subs):
                raise UsageError(f"job {job.job_id} never promoted anything"
                                 + (f" on {', '.join(nodes)}" if nodes else ""),
                                 hint="nothing to undo; the live tables are as they were")
            out = camp.rollback(job, reach.workspace, subws, subs, runner)
    return {"job_id": job.job_id, "targets": out}


def check_targets(what: str, payload: dict) -> None:
    """After a campaign's promote / rollback was said: a target that failed is one line, exit 1."""
    bad = [f"{r['node']}/{r['container']} {r['variant']}: {r['error']}" for r in payload.get("targets") or []
           if r.get("error")]
    if bad:
        raise JobError(f"{what} failed on {len(bad)} target(s): " + "; ".join(bad),
                       hint=f"tune-remote {what} {payload['job_id']} --node NODE again once it is reachable")


def export(reach: Reach, job_id: str, model_config: str, dest: str | None, nodes=()) -> tuple[dict, bool]:
    """The job's proven rows as an AITER model_configs CSV + a Markdown summary (offline; a campaign: one file
    per variant over its chosen targets), with upstream's level-0 guards where the node's AITER ships them."""
    job = reach.workspace.load(job_id)
    if job.state == Status.RUNNING:
        raise UsageError(f"job {job_id} is still running", hint=f"tune-remote status {job_id}")
    if job.is_campaign:
        from . import outcome as camp
        subws, subs = select(reach, job, nodes)

        def guards_for(variant_subs):       # on the first target whose AITER ships them; a Slurm allocation ended
            s = next((s for s in variant_subs if (s.facts.get("probes") or {}).get("tuning_tests")), None)
            return None if s is None or job.request.campaign.slurm else _guards(reach, s, subws, where=True)
        res = camp.export(job, reach.workspace, subws, subs, model_config, Path(dest) if dest else None, guards_for)
        return {"job_id": job_id, "variants": res}, True
    from ..steps.export import export as export_one
    check_nodes(job, reach.workspace, nodes)
    guards = _guards(reach, job, reach.workspace) if (job.facts.get("probes") or {}).get("tuning_tests") else None
    res = export_one(job, reach.workspace.job_dir(job.job_id), model_config, Path(dest) if dest else None, guards)
    return {"job_id": job_id, **res}, False


def _guards(reach: Reach, job: JobState, workspace: Workspace, where: bool = False):
    """Upstream's level-0 guards (the node's AITER ships op_tests/tuning_tests) run on ``job``'s target with the
    exported file added; ``where``: the answer names the target (a campaign's file spans several)."""
    def guards(file_name, text):
        from ..steps.provenance import run_guards
        try:
            target = single_target(reach, job)
        except TuneRemoteError as exc:          # the node left the inventory since
            return {"error": exc.one_line(), **({"on": f"{job.node}/{job.container}"} if where else {})}
        ran = _on_target(reach, job, workspace, lambda ctx: run_guards(ctx, file_name, text), target)
        return {**ran, "on": f"{job.node}/{job.container}"} if where and ran else ran
    return guards
