"""The team's store on the command line (issue 39): `--store URL` (base.py), the sync after every save of a
job, `tune-remote store import WORKSPACE`, `tune-remote rows`.

An explicit store (``--store URL`` or ``$TUNE_REMOTE_STORE``) is opened before the command runs: unreachable
is one line and exit 3 (hint: ``--store none``), a newer schema exit 2. The default store (a per-user SQLite
file) never stops a command: when it cannot be opened or written, one warning line and the command goes on.
A write that fails mid-job (the database went away) never stops the job either: its records stay in the job
directory, the next save (or `store import`) writes them, keyed so that nothing is doubled (docs/store.md)."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import click

from ..state import Workspace
from . import watchloop  # noqa: F401  (watch registered before its --reuse below)
from .base import Env, cli

RETRY_S = 30.0          # after a failed write: the next try at most this often (a dead database costs a job nothing)
_QUIET = {"warned": set(), "failed_at": {}}


def _url(env: Env | None) -> str | None:
    from ..store import resolve_url
    return resolve_url(env.store_url if env is not None else None)


def explicit(env: Env | None) -> bool:
    """A store asked for (``--store URL`` or ``$TUNE_REMOTE_STORE``), not the default one."""
    return bool((env is not None and env.store_url) or os.environ.get("TUNE_REMOTE_STORE"))


def warn(text: str) -> None:
    if text not in _QUIET["warned"]:
        _QUIET["warned"].add(text)
        click.echo(f"tune-remote: warning: {text}", err=True)


def observe(workspace: Workspace, job) -> None:
    """After every save: the job's new records into the store. Never raises (a job outlives its store)."""
    env = Env.last
    if _simulated(job) and not explicit(env):
        return      # a demo's rows are a simulator's: never in the user's own store unless asked (--store URL)
    url = _url(env)     # (imports SQLAlchemy: after the demo's early return, which then costs nothing)
    if url is None or time.monotonic() - _QUIET["failed_at"].get(url, -RETRY_S) < RETRY_S:
        return
    from ..store import shown
    from ..store.live import forget, opened
    from ..store.sync import sync_job
    try:
        res = sync_job(opened(url), workspace, job)
    except Exception as exc:  # noqa: BLE001  the store's failure is never the job's
        _QUIET["failed_at"][url] = time.monotonic()
        forget(url)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        warn(f"store {shown(url)}: {first}; the job goes on, its records stay in its directory (written at its "
             "next save, or `tune-remote store import WORKSPACE`)")
        return
    for lost in res["lost"]:
        warn(f"{lost['table_name']} {lost['row_key']} on {lost['gfx']}/cu_num={lost['cu_num']}: the team's row "
             f"was promoted first by job {lost['held_by']} ({lost['origin']}); this job's promotion is recorded, "
             "the team keeps that one")


def _simulated(job) -> bool:
    req = getattr(job, "request", None) or {}
    return bool(req.get("demo_dir") or req.get("demo_nodes"))


Workspace.observers.append(observe)


def plan_hook(ctx, shapes: list[dict], described: list[str]) -> list[dict]:
    """The shapes step's hook: this command's --reuse (default proven, also for commands without the option:
    watch's jobs, a campaign's targets) and --store, handed to the store's plan (store/plan.py)."""
    env = Env.last
    mode = getattr(env, "reuse", None) or "proven"
    if mode != "proven":
        return shapes
    if _simulated(ctx.job) and not explicit(env):
        return shapes       # (before _url: a demo on the default store costs no SQLAlchemy import)
    from ..store.plan import plan_hook as hook
    return hook(ctx, shapes, described, mode=mode, url=_url(env), explicit=explicit(env), warn=warn)


def _reuse(ctx: click.Context, _param, value) -> None:
    ctx.find_object(Env).reuse = value


from ..steps import shapes as _shapes_step  # noqa: E402  (the hook's seam)

if plan_hook not in _shapes_step.PLAN_HOOKS:
    _shapes_step.PLAN_HOOKS.append(plan_hook)

REUSE_HELP = ("proven: a shape the team's store holds a proven row for (same GPU kind and table, "
              "the same kernel list on the node) is not tuned again; its row is measured on this node with the "
              "others and promoted only where proven; the plan says whose it is (docs/store.md). none: tune "
              "every shape")
for _name in ("run", "demo", "watch"):
    if _name in cli.commands:
        cli.commands[_name].params.append(click.Option(["--reuse"], type=click.Choice(["proven", "none"]),
                                                       default="proven", show_default=True, help=REUSE_HELP,
                                                       expose_value=False, callback=_reuse))


@cli.group("store")
def store_group():
    """The team's store: every job, tuned row, benchmark sample and promotion (docs/store.md)."""


def _need(env: Env):
    from ..errors import UsageError
    from ..store.live import opened
    url = _url(env)
    if url is None:
        raise UsageError("--store none: no store to use", hint="pass --store URL")
    return opened(url)


@store_group.command("import")
@click.argument("path", metavar="WORKSPACE", type=click.Path(file_okay=False, exists=True))
@click.pass_obj
def store_import(env: Env, path):
    """Every job of WORKSPACE (campaign targets too) and every recheck into the store; importing again
    changes nothing."""
    from ..store.sync import sync_job
    store = _need(env)
    n, lost = 0, 0
    for state in sorted(Path(path).rglob("state.json")):
        ws = Workspace(state.parent.parent)
        try:
            job = ws.load(state.parent.name)
        except Exception:  # noqa: BLE001  a corrupt or foreign state.json: skipped, said below
            click.echo(f"tune-remote: warning: {state} skipped (not a job's state)", err=True)
            continue
        lost += len(sync_job(store, ws, job)["lost"])
        n += 1
    from ..store.events import sync_recheck
    rechecks = [sync_recheck(store, p.parent) for p in sorted(Path(path).glob("*/recheck.json"))]
    out = {"store": _shown(store.url), "jobs": n, "rechecks": len(rechecks), "lost_promotions": lost,
           "counts": store.counts()}
    click.echo(json.dumps(out) if env.wants_json() else f"imported {n} job(s) and {len(rechecks)} recheck(s) into "
               f"{out['store']}: " + ", ".join(f"{k} {v}" for k, v in out["counts"].items()))


def _shown(url: str) -> str:
    from ..store import shown
    return shown(url)


@store_group.command("info")
@click.pass_obj
def store_info(env: Env):
    """The store's URL, schema revision and record counts."""
    from ..store.db import HEAD
    store = _need(env)
    out = {"store": _shown(store.url), "revision": HEAD, "counts": store.counts()}
    click.echo(json.dumps(out) if env.wants_json() else
               f"{out['store']} (schema {HEAD}): " + ", ".join(f"{k} {v}" for k, v in out["counts"].items()))


@cli.command("rows")
@click.option("--variant", default=None, metavar="V", help="only this variant's rows")
@click.option("--gpu", default=None, metavar="MODEL", help="only this GPU kind (model name, gfx or PCI device id)")
@click.option("--aiter", default=None, metavar="VERSION", help="only rows tuned on this AITER version")
@click.option("--export", is_flag=True, help="print the rows as their tuned table's CSV (model_configs style)")
@click.option("--json", "as_json", is_flag=True, help="print a JSON list of rows with their provenance")
@click.pass_obj
def rows(env: Env, variant, gpu, aiter, export, as_json):
    """What the team has: the first-promoted row of every GPU kind and key in the store, with its provenance."""
    from ..store.query import export_csv, team_rows
    found = team_rows(_need(env), variant=variant, gpu=gpu, aiter=aiter)
    if export:
        click.echo(export_csv(found), nl=False)
        return
    if as_json or env.wants_json():
        click.echo(json.dumps(found, indent=1, default=str))
        return
    for r in found:
        click.echo(f"{r['table_name']} {r['gfx']}/{r['cu_num']} {r['row_key']}: {r['kernel'] or '?'} "
                   f"({r['speedup_pct'] if r['speedup_pct'] is not None else '?'} %, {r['verdict'] or '?'}) "
                   f"job {r['job_id']} on {r['node']}, AITER {r['aiter_version'] or '?'}, from {r['origin']}")
    click.echo(f"{len(found)} row(s)", err=True)
