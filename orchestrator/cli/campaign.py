"""CLI glue for campaigns (several targets and/or variants in one job): run, resume, cancel, status rows."""
from __future__ import annotations

import time

import click

from ..errors import UsageError
from ..inventory import Inventory
from ..state import JobState
from ..variants import get_variant
from .base import Env, _finish


def is_campaign_request(inv: Inventory, nodes: list[str], variants: list[str]) -> bool:
    """A single node named as a node, and a single named variant: the single-target job of old."""
    return len(nodes) > 1 or nodes[0] not in inv.nodes or len(variants) != 1 or variants == ["auto"]


def validate_campaign_inputs(inv: Inventory, nodes, container, variants, logs, shapes_csv, nk, detach) -> None:
    from ..campaign import InventorySource
    InventorySource(inv, nodes, container).targets()     # unknown node/group, missing --container: exit 2
    if "auto" in variants and len(variants) > 1:
        raise UsageError("--variant auto cannot be combined with named variants",
                         hint="use --variant auto, or list the variants: --variant a8w8_blockscale,moe")
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


def run_campaign(env: Env, inv: Inventory, nodes, container, variants, request, job_id, settings, dry_run) -> None:
    from ..campaign import InventorySource, driver
    from ..campaign.plan import plan_lines
    source = InventorySource(inv, nodes, container)
    refs = source.targets()
    if env.workspace.exists(job_id):
        raise UsageError(f"job {job_id} already exists in {env.workspace.root}",
                         hint=f"use `tune-remote resume {job_id}` or choose another --job-id")
    ui = env.ui()
    job = JobState(job_id=job_id, node=",".join(r.node for r in refs),
                   container=",".join(dict.fromkeys(r.container for r in refs)),
                   variant=",".join(variants), created=time.time(), request=dict(request))
    runner = source.runner(settings.accept_new_host_key)
    plan = driver.make_plan(job, runner, refs, variants, settings, ui)
    lines = plan_lines(plan)
    click.echo("plan:\n  " + "\n  ".join(lines), err=True)
    if dry_run:
        return
    if not settings.yes and settings.interactive and not ui.confirm(f"Run this campaign ({len(refs)} targets)?"):
        raise SystemExit(1)
    job.variant = ",".join(plan["variants"])
    subs = driver.create_sub_jobs(job, env.workspace, plan)
    kinds = {label: kind for groups in plan["variants"].values() for kind, shards in groups.items()
             for label in shards}
    job.request["campaign"] = {"sub_jobs": [s.job_id for s in subs], "plan_lines": lines, "kinds": kinds,
                               "unreachable": plan["unreachable"]}
    job.step = "remote"
    subws = driver.sub_workspace(env.workspace, job)
    for s in subs:
        subws.save(s)
    env.workspace.save(job)
    ui.event(f"job {job.job_id}: {len(subs)} target job(s) on {len(refs)} target(s); "
             f"state in {env.workspace.job_dir(job.job_id)}")
    driver.drive(job, env.workspace, runner, settings, ui)
    if plan["unreachable"] and job.state == "succeeded":
        job.state, job.error = "failed", "unreachable: " + "; ".join(plan["unreachable"])
        env.workspace.save(job)
    _finish(job, env)


def resume_campaign(env: Env, job: JobState, settings) -> None:
    from ..campaign import driver
    from ..inventory import load_inventory
    from ..campaign.targets import InventoryRunner
    runner = InventoryRunner(load_inventory(env.inventory_path), settings.accept_new_host_key)
    driver.drive(job, env.workspace, runner, settings, env.ui())
    _finish(job, env)


def cancel_campaign(env: Env, job: JobState, grace: float) -> None:
    from ..campaign import driver
    from ..campaign.targets import InventoryRunner
    from ..inventory import load_inventory
    sig, killed = driver.cancel(job, env.workspace, InventoryRunner(load_inventory(env.inventory_path)), grace)
    click.echo(f"job {job.job_id} cancelled ({sig} process(es) signalled, {killed} killed)")


def status_targets(env: Env, job: JobState) -> list[dict]:
    from ..campaign import driver
    return driver.targets_rows(job, env.workspace)


__all__ = ["cancel_campaign", "is_campaign_request", "resume_campaign", "run_campaign", "status_targets",
           "validate_campaign_inputs"]
