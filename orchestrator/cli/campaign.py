"""CLI glue for campaigns (several targets and/or variants in one job, or targets from a scheduler): the options
checked and handed to ``campaign/lifecycle.py``, which runs the campaign whatever its targets' source; the plan,
the confirmation and the outcome on this terminal."""
from __future__ import annotations


import click

from ..errors import UsageError
from ..inventory import Inventory
from ..state import JobState
from ..variants import get_variant
from .base import Env, finish_job


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


def run_campaign(env: Env, inv: Inventory, nodes, container, variants, request, job_id, settings, dry_run,
                 slurm: str | None = None, slurm_nodes: int = 1) -> None:
    from ..campaign import lifecycle
    if env.workspace.exists(job_id):
        raise UsageError(f"job {job_id} already exists in {env.workspace.root}",
                         hint=f"use `tune-remote resume {job_id}` or choose another --job-id")
    job = lifecycle.new_job(job_id, nodes, container, variants, request)
    kind, options = ("slurm", {"cluster": slurm, "nodes": slurm_nodes, "dry_run": dry_run}) if slurm else \
        ("demo" if request.get("demo_nodes") else "inventory", {})
    _carried(env, job, settings, lambda console: lifecycle.start(
        env.workspace, job, kind, options, lambda: inv, settings, console, dry_run), dry_run)


def resume_campaign(env: Env, job: JobState, settings, nodes=()) -> None:
    """Re-attach to every unfinished target job, or only to those on `nodes`."""
    from ..campaign import lifecycle
    _carried(env, job, settings, lambda console: lifecycle.carry(
        env.workspace, job, _inventory(env), settings, console, only=tuple(nodes)))


def _carried(env: Env, job: JobState, settings, carry, dry_run: bool = False) -> None:
    """The lifecycle with this terminal as its console (the plan on stderr, the confirmation asked unless
    --yes); the job's one result line at the end."""
    from ..campaign.lifecycle import Console, Declined
    ui = env.ui()
    ask = settings.interactive and not settings.yes
    try:
        carry(Console(ui=ui, show=lambda text: click.echo(text, err=True), confirm=ui.confirm if ask else None))
    except Declined:
        raise SystemExit(1) from None
    if not dry_run:
        finish_job(job, env)


def _inventory(env: Env):
    """The inventory, read when a source asks for it (the demo's never does)."""
    from ..inventory import load_inventory
    return lambda: load_inventory(env.inventory_path)
