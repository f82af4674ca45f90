"""`tune-remote recheck`: do the rows tune-remote promoted on a container still win under what runs there now?"""
from __future__ import annotations

import json

import click

from ..errors import UsageError
from .base import ACCEPT_NEW_HOST_KEY, Env, cli


@cli.command()
@click.option("--node", required=True, metavar="NODE", help="the inventory node whose promoted rows to recheck")
@click.option("--container", default=None, metavar="NAME",
              help="the container (needed when jobs promoted on several of the node's containers)")
@click.option("--variant", default=None, metavar="V", help="only this variant's rows (default: every variant)")
@click.option("--repeats", type=int, default=None, metavar="R",
              help="benchmark runs per arm, interleaved  [default: 3]")
@click.option("--demote", is_flag=True,
              help="remove the slower_now rows from the live table (backup, new file + rename, module set aside)")
@click.option("--undo", "undo_id", default=None, metavar="RECHECK",
              help="restore what `recheck --demote` RECHECK (its recheck-<id>) removed, byte for byte")
@ACCEPT_NEW_HOST_KEY
@click.pass_obj
def recheck(env: Env, node, container, variant, repeats, demote, undo_id, accept_new_host_key):
    """Measure every live row tune-remote promoted on the container with the live table and without that
    row (what AITER then serves: its padded-M row or the default kernel), interleaved on one pinned GPU,
    by the verdict rules of `run`: still_faster, no_longer_faster, slower_now. Writes
    <workspace>/recheck-<id>/recheck.csv and report.md (AITER, ROCm and GPU at promotion and now).
    Never prompts. Exit 0 when measured, whatever the verdicts."""
    from .. import recheck as rc
    from ..context import Settings
    from ..inventory import load_inventory
    settings = Settings(yes=True, accept_new_host_key=accept_new_host_key, interactive=False)   # never prompts
    loader = lambda: load_inventory(env.inventory_path)
    if undo_id is not None:
        if demote or repeats is not None or variant is not None:
            raise UsageError("--undo restores an earlier demotion; it takes no --demote, --repeats or --variant",
                             hint=f"tune-remote recheck --node {node} --undo {undo_id}")
        out = rc.undo(env.workspace, loader, settings, env.ui(), node=node, recheck_id=undo_id)
        click.echo(json.dumps(out) if env.wants_json() else
                   ("already restored: " if out["already"] else "restored: ") + ", ".join(out["restored"]))
        return
    res = rc.run_recheck(env.workspace, loader, settings, env.ui(), node=node, container=container,
                         variant=variant, repeats=repeats, demote=demote)
    out = rc.summary(res)
    if env.wants_json():
        click.echo(json.dumps(out))
        return
    click.echo(f"recheck {res.id}: " + ", ".join(f"{k} {v}" for k, v in res.counts.items()) + f" -> {res.path}")
    if demote:
        click.echo(f"demoted {res.demoted} slower_now row(s)" + (f"; undo: {res.undo}" if res.undo else ""))
