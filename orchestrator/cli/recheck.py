"""`tune-remote recheck`: do the rows tune-remote promoted on a container still win under what runs there now?"""
from __future__ import annotations

import json

import click

from ..errors import UsageError
from .base import ACCEPT_NEW_HOST_KEY, Env, cli
from .readers import ask, promoted_on, store_of
from .store import warn


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
@click.option("--all-nodes", is_flag=True,
              help="every inventory node of the GPU kind (gfx, cu_num) of --node (a node, group or all), "
                   "each probed; one recheck per node with promoted rows")
@ACCEPT_NEW_HOST_KEY
@click.pass_obj
def recheck(env: Env, node, container, variant, repeats, demote, undo_id, all_nodes, accept_new_host_key):
    """Measure every live row tune-remote promoted on the container with the live table and without that
    row (what AITER then serves: its padded-M row or the default kernel), interleaved on one pinned GPU,
    by the verdict rules of `run`: still_faster, no_longer_faster, slower_now. Writes
    <workspace>/recheck-<id>/recheck.csv and report.md (AITER, ROCm and GPU at promotion and now).
    With the team's store (--store, docs/store.md) the rows any laptop promoted there are rechecked too
    (their job and laptop in recheck.json), a row it lists that the live table lacks is reported, and the
    verdicts and demotions are written to it.
    Never prompts. Exit 0 when measured, whatever the verdicts."""
    from .. import recheck as rc
    from ..context import Settings
    from ..inventory import load_inventory
    settings = Settings(yes=True, accept_new_host_key=accept_new_host_key, interactive=False)   # never prompts
    loader = lambda: load_inventory(env.inventory_path)
    if undo_id is not None:
        if demote or repeats is not None or variant is not None or all_nodes:
            raise UsageError("--undo restores an earlier demotion; it takes no --demote, --repeats, --variant or "
                             "--all-nodes", hint=f"tune-remote recheck --node {node} --undo {undo_id}")
        out = rc.undo(env.workspace, loader, settings, env.ui(), node=node, recheck_id=undo_id, store=store_of(env))
        if out.get("warning"):
            warn(out.pop("warning"))
        click.echo(json.dumps(out) if env.wants_json() else
                   ("already restored: " if out["already"] else "restored: ") + ", ".join(out["restored"]))
        return
    store = store_of(env)
    if all_nodes:
        return _all_nodes(env, rc, loader, settings, store, node=node, container=container, variant=variant,
                          repeats=repeats, demote=demote)
    team = ask(env, store, promoted_on, [node]) if store is not None else None
    res = rc.run_recheck(env.workspace, loader, settings, env.ui(), node=node, container=container,
                         variant=variant, repeats=repeats, demote=demote, store=store if team is not None else None,
                         team=team)
    if res.warning:
        warn(res.warning)
    out = rc.summary(res)
    if env.wants_json():
        click.echo(json.dumps(out))
        return
    _text(res, demote)


def _text(res, demote: bool) -> None:
    click.echo(f"recheck {res.id}: " + ", ".join(f"{k} {v}" for k, v in res.counts.items()) + f" -> {res.path}")
    if demote:
        click.echo(f"demoted {res.demoted} slower_now row(s)" + (f"; undo: {res.undo}" if res.undo else ""))
    _missing(res.node, res.missing)


def _missing(node: str, missing: list[dict]) -> None:
    for m in missing:
        key = " ".join(f"{k}={v}" for k, v in m["key"].items())
        click.echo(f"missing on {node}: {m['variant']} {key} promoted by job {m['job_id']}"
                   + (f" ({m['origin']})" if m.get("origin") else "") + f": {m['why']}")


def _all_nodes(env: Env, rc, loader, settings, store, **kw) -> None:
    from ..errors import ExitCode
    out = rc.run_all_nodes(env.workspace, loader, settings, env.ui(), node_args=[kw.pop("node")], store=store,
                           team_of=lambda nodes: ask(env, store, promoted_on, nodes), **kw)
    for w in out.pop("warnings"):
        warn(w)
    if env.wants_json():
        click.echo(json.dumps(out))
    else:
        click.echo(f"recheck --all-nodes: {len(out['nodes'])} node(s) of {out['kinds']}")
        for r in out["rechecks"]:
            click.echo(f"{r['node']}: recheck {r['recheck']}: " + ", ".join(f"{k} {v}" for k, v in r["counts"].items())
                       + f" -> {r['dir']}")
            _missing(r["node"], r.get("missing") or [])
        for s in out["skipped"]:
            click.echo(f"{s['node']}: skipped, {s['why']}")
        for f in out["failed"]:
            click.echo(f"{f['node']}: failed, {f['why']}")
    if out["failed"]:
        raise SystemExit(out["failed"][0]["exit_code"] or ExitCode.JOB_FAILED)
