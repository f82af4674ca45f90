"""CLI glue for campaigns (several targets and/or variants in one job, or targets from Slurm)."""
from __future__ import annotations

import time

import click

from ..errors import ConnectionLost, JobError, TuneRemoteError, UsageError
from ..inventory import Inventory
from ..state import TERMINAL, JobState, Status
from ..variants import get_variant
from .base import Env, _finish


def is_campaign_request(inv: Inventory, nodes: list[str], variants: list[str]) -> bool:
    """A single node named as a node, and a single named variant: the single-target job of old."""
    return len(nodes) != 1 or nodes[0] not in inv.nodes or len(variants) != 1 or variants == ["auto"]


def validate_campaign_inputs(inv: Inventory, nodes, container, variants, logs, shapes_csv, nk, detach,
                             slurm=None) -> None:
    from ..campaign import InventorySource
    if slurm:
        inv.cluster(slurm)
        if nodes:
            raise UsageError("--slurm takes its nodes from Slurm", hint="leave out --node (use --slurm-nodes N)")
    else:
        InventorySource(inv, nodes, container).targets()     # unknown node/group, missing --container: exit 2
    if "auto" in variants and len(variants) > 1:
        raise UsageError("--variant auto cannot be combined with named variants",
                         hint="use --variant auto, or list the variants: --variant a8w8_blockscale,moe_2stages")
    for v in variants:
        if v != "auto":
            get_variant(v)
    if "auto" in variants and not logs:
        raise UsageError("--variant auto finds the variants in server logs", hint="add --log PATH")
    if shapes_csv and len(variants) != 1:
        raise UsageError("--shapes-csv holds one variant's shapes", hint="name that one variant with --variant")
    if detach:
        raise UsageError("--detach is not available for campaigns yet",
                         hint="run it in the foreground (tmux/nohup); `resume JOB` re-attaches after a disconnect")


def campaign_inventory(env: Env, job: JobState) -> Inventory:
    """The inventory a campaign's targets come from (none for the demo's simulated nodes)."""
    if job.request.demo_nodes:
        return Inventory(path="(demo)", nodes={})
    from ..inventory import load_inventory
    return load_inventory(env.inventory_path)


def _source(env: Env, job: JobState, inv: Inventory, settings, nodes=None, container=None):
    from ..campaign import InventorySource
    if job.request.demo_nodes:
        from ..demo import DemoSource
        return DemoSource(job.request.demo_nodes)
    slurm = job.request["campaign"].get("slurm")
    if slurm:
        from ..campaign.slurm import SlurmSource
        return SlurmSource(inv.cluster(slurm["cluster"]), slurm, lambda: env.workspace.save(job), env.ui(),
                           settings.accept_new_host_key)
    return InventorySource(inv, nodes or job.request["campaign"]["nodes"],
                           container if container is not None else job.request["campaign"].get("container"))


def run_campaign(env: Env, inv: Inventory, nodes, container, variants, request, job_id, settings, dry_run,
                 slurm: str | None = None, slurm_nodes: int = 1) -> None:
    if env.workspace.exists(job_id):
        raise UsageError(f"job {job_id} already exists in {env.workspace.root}",
                         hint=f"use `tune-remote resume {job_id}` or choose another --job-id")
    job = JobState(job_id=job_id, node=",".join(nodes), container=container or "", variant=",".join(variants),
                   created=time.time(), request=dict(request, variants=list(variants)))
    job.request["campaign"] = {"nodes": list(nodes), "container": container, "sub_jobs": []}
    if slurm:
        from ..campaign.slurm import new_state
        spec = inv.cluster(slurm)
        if dry_run:
            click.echo(f"plan:\n  submit {slurm_nodes} Slurm job(s) to {slurm} through {spec.login}, then shard "
                       "over the nodes Slurm grants", err=True)
            return
        job.node, job.container = f"slurm:{slurm}", spec.container
        job.request["campaign"]["slurm"] = new_state(job_id, spec, slurm_nodes)
        job.step = "submit"
        env.workspace.own(job_id, "run")  # one driver per job
        env.workspace.save(job)           # before sbatch: a resume after a lost answer submits nothing twice
    _carry(env, job, inv, settings, dry_run)


def _carry(env: Env, job: JobState, inv: Inventory, settings, dry_run: bool = False, only: tuple = ()) -> None:
    """Targets, plan, sub-jobs, drive: whatever of it is not done yet (run, and resume after a crash)."""
    if not dry_run:
        env.workspace.own(job.job_id, "run")   # one driver per job and its sub-jobs
    from ..campaign import driver
    from ..campaign.plan import plan_lines
    source = _source(env, job, inv, settings)
    slurm = bool(job.request["campaign"].get("slurm"))
    ui = env.ui()
    runner = None
    try:
        refs = source.targets()
        runner = source.runner(settings.accept_new_host_key)
        if not job.request["campaign"]["sub_jobs"]:
            job.node = ",".join(dict.fromkeys(r.node for r in refs))
            job.container = ",".join(dict.fromkeys(r.container for r in refs))
            plan = driver.make_plan(job, runner, refs, job.request.variants, settings, ui, env.workspace)
            lines = plan_lines(plan)
            click.echo("plan:\n  " + "\n  ".join(lines), err=True)
            if dry_run:
                return
            if not settings.yes and settings.interactive and not ui.confirm(
                    f"Run this campaign ({len(refs)} targets)?"):
                job.state, job.error = Status.CANCELLED, "cancelled at the plan confirmation"
                raise SystemExit(1)
            job.variant = ",".join(plan["variants"])
            subs = driver.create_sub_jobs(job, env.workspace, plan)
            runner.keep_only({s.node for s in subs})    # the nodes the plan left out: connections closed,
            if slurm:                                    # and their Slurm jobs ended (the GPUs given back)
                source.release(keep={s.node for s in subs})
            subws = driver.sub_workspace(env.workspace, job)
            for s in subs:
                subws.save(s)
            job.request["campaign"].update(
                sub_jobs=[s.job_id for s in subs], plan_lines=lines, unreachable=plan["unreachable"],
                kinds={label: kind for groups in plan["variants"].values() for kind, shards in groups.items()
                       for label in shards})
            job.step = "remote"
            env.workspace.save(job)
            ui.event(f"job {job.job_id}: {len(subs)} target job(s) on {len(refs)} target(s); "
                     f"state in {env.workspace.job_dir(job.job_id)}")
        driver.drive(job, env.workspace, runner, settings, ui, only=only)
    except ConnectionLost:
        raise                                   # the nodes go on; resume re-attaches
    except BaseException as exc:
        from ..campaign.slurm import Cancelled
        if isinstance(exc, Cancelled) or (slurm and isinstance(exc, TuneRemoteError) and job.state == Status.RUNNING
                                          and source.cancel_requested()):   # `cancel` ended the Slurm jobs
            job.state, job.error = Status.CANCELLED, "cancelled by the user"
        if job.state == Status.RUNNING and not isinstance(exc, (KeyboardInterrupt, SystemExit)):
            job.state, job.error = Status.FAILED, exc.one_line() if hasattr(exc, "one_line") else str(exc)
        if job.state in TERMINAL and env.workspace.exists(job.job_id):
            env.workspace.save(job)
        raise
    finally:
        if runner is not None:
            runner.close()                      # the connections its targets shared
        if slurm and (job.state in TERMINAL or dry_run):
            source.release()                    # the holders end: Slurm gets its nodes back
        if hasattr(source, "close"):
            source.close()
    if not dry_run:
        _finish(job, env)


def resume_campaign(env: Env, job: JobState, settings, nodes=()) -> None:
    """Re-attach to every unfinished target job, or only to those on `nodes`."""
    _carry(env, job, campaign_inventory(env, job), settings, only=tuple(nodes))


def cancel_campaign(env: Env, job: JobState, grace: float, nodes=()) -> None:
    """Cancel every target, or only those on `nodes` (the others go on; the job ends when they do)."""
    from ..campaign import driver
    from ..context import Settings
    inv = campaign_inventory(env, job)
    slurm = job.request["campaign"].get("slurm")
    if slurm and nodes:
        raise UsageError("a Slurm campaign is cancelled as a whole (its batch jobs share one allocation plan)",
                         hint=f"tune-remote cancel {job.job_id}")
    plain = _source(env, job, inv, Settings())
    source = plain if slurm else None
    runner = plain.runner()
    try:
        if source:   # TERM to the whole Slurm job: its holder stops the container side, then scancel
            sig, killed = source.cancel(grace)
            res = driver.cancel(job, env.workspace, runner, grace, remote=False)
        else:
            res = driver.cancel(job, env.workspace, runner, grace, nodes=nodes)
            sig, killed = res["signalled"], res["killed"]
    finally:
        runner.close()
        if source:
            source.close()
    for line in res["tables"]:
        click.echo("tune-remote: the tuned table of " + line.replace("[tune-remote] table: ", ""), err=True)
    what = f"job {job.job_id}" + (f" on {', '.join(nodes)}" if nodes else "")
    if res["finished"]:
        click.echo(f"{len(res['finished'])} target(s) had already ended on their own: "
                   f"{'; '.join(res['finished'])}; `tune-remote resume {job.job_id}` collects their results")
    if res["remaining"]:
        raise JobError(f"{what}: {len(res['remaining'])} process(es) survived SIGKILL (node:pid "
                       f"{', '.join(res['remaining'])}; stuck in the kernel, e.g. a hung GPU)",
                       hint="check them with `ps -o pid,stat,wchan -p PID` in the container; they end with the "
                            "GPU reset or a container restart")
    if res["finished"]:       # the job goes on until a resume collects them: say what was cancelled
        click.echo(f"{what}: {res['cancelled']} target(s) cancelled ({sig} process(es) signalled, {killed} killed)")
    else:
        click.echo(f"{what} cancelled ({sig} process(es) signalled, {killed} killed)")


def status_targets(env: Env, job: JobState) -> list[dict]:
    from ..campaign import driver
    return driver.targets_rows(job, env.workspace)


def status_slurm(env: Env, job: JobState, targets: list[dict]) -> dict:
    """A Slurm campaign's jobs as squeue shows them now (a running campaign; else as last seen): the job
    row's ``slurm`` list, and each target's ``slurm`` (its job, state, pending reason). {} otherwise."""
    from ..campaign.slurm import SlurmSource, saved_rows
    from ..errors import TuneRemoteError
    from ..inventory import load_inventory
    state = job.request.get("campaign", {}).get("slurm")
    if not state:
        return {}
    rows = saved_rows(state)
    if job.state not in TERMINAL:
        try:
            source = SlurmSource(load_inventory(env.inventory_path).cluster(state["cluster"]), state, lambda: None,
                                 env.ui())
            try:
                rows = source.live()
            finally:
                source.close()
        except TuneRemoteError:
            pass
    by_node = {r["node"]: r for r in rows if r.get("node")}
    for t in targets:
        r = by_node.get(t["node"])
        if r:
            t["slurm"] = {k: r[k] for k in ("job", "id", "state", "reason")}
    return {"slurm": rows}
