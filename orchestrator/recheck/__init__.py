"""Recheck (issue 29): do the rows tune-remote promoted on a container still win, under the AITER (ROCm, GPU)
it runs now? No CLI code here: ``run_recheck`` is the entry point of ``tune-remote recheck`` and of ``watch``
(after an upgrade); ``undo`` restores what a ``--demote`` removed.

For every live row the workspace's jobs promoted on the container, the shape is measured with the live table
and with the same table without the rows under recheck (measure.py), judged by ``run``'s rules (judge.py);
``<ws>/recheck-<id>/`` gets recheck.csv, recheck.json and report.md (report.py); ``demote`` removes the
``slower_now`` rows (demote.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..errors import JobError, UsageError
from ..state import Workspace
from ..variants import get_variant
from .judge import VERDICTS
from .rows import Promoted, all_jobs, containers_in_store, containers_of, from_store, merged, promoted_rows

__all__ = ["VERDICTS", "NoFreeGpu", "NothingToRecheck", "RecheckResult", "run_recheck", "undo"]

DEFAULT_REPEATS = 3


class NothingToRecheck(UsageError):
    """The workspace's jobs promoted nothing (not rolled back) on that node/container."""


class NoFreeGpu(JobError):
    """Every GPU of the container is busy or reserved: nothing was measured (``watch`` tries next cycle)."""


@dataclass
class RecheckResult:
    path: Path                                     # <ws>/recheck-<id>
    counts: dict                                   # verdict -> n (every verdict; not_measured when any)
    id: str = ""
    rows: list = field(default_factory=list)       # one dict per row (recheck.json's "rows")
    demoted: int = 0                               # rows removed from live tables (--demote)
    versions: dict = field(default_factory=dict)   # {"now": facts, "at_promotion": {job_id: facts}}
    undo: str | None = None                        # the command that restores what --demote removed
    node: str = ""
    missing: list = field(default_factory=list)    # rows promoted there (workspace or store) not in the live table
    warning: str | None = None                     # the store could not be written


def _workspace(workspace) -> Workspace:
    return workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))


def _target(jobs, node: str, container: str, inventory_loader: Callable, settings):
    """(target, closer): the demo's embedded node when the jobs ran there, else the inventory node."""
    demo = next((j.request.demo_dir for j in jobs if j.node == node and j.request.demo_dir), None)
    if demo:
        from ..demo import demo_target
        target = demo_target(demo, node)
        return target, target.close
    from ..campaign.targets import InventorySource
    source = InventorySource(inventory_loader(), [node], container)
    ref = source.targets()[0]                    # an unknown node or container: one line, exit 2
    runner = source.runner(accept_new_host_key=settings.accept_new_host_key)
    target = runner.open(ref)

    def close():
        target.close()
        runner.close()
    return target, close


def _pick(jobs, node: str, container: str | None, variant: str | None,
          team: list[dict] | None = None) -> tuple[str, list[Promoted]]:
    """The container and its rows: the workspace's jobs' and (``team``: ``store.query.promoted_on``'s, None
    without a store) the rows the team's store says any laptop promoted there."""
    if container is None:
        have = sorted(set(containers_of(jobs, node)) | set(containers_in_store(team or [], node)))
        if len(have) > 1:
            raise UsageError(f"jobs promoted rows on {len(have)} containers of {node}: say which",
                             hint="add --container NAME (one of: " + ", ".join(have) + ")")
        container = have[0] if have else None
    rows = promoted_rows(jobs, node, container, variant) if container else []
    if team is not None and container:
        rows = merged(rows, from_store(team, node, container, variant))
    if not rows:
        where = f"{node}/{container}" if container else node
        whose = "no job in this workspace" if team is None else "no job in this workspace or the team's store"
        raise NothingToRecheck(f"{whose} promoted a row on {where}"
                               + (f" for {variant}" if variant else "") + " (or every promotion was rolled back)",
                               hint="recheck looks at the jobs of --workspace DIR and the store's (--store URL); "
                                    "promote with `tune-remote run --promote proven` or `tune-remote promote JOB`")
    return container, rows


def run_recheck(workspace, inventory_loader: Callable, settings, ui, *, node: str, container: str | None = None,
                variant: str | None = None, repeats: int | None = None, demote: bool = False,
                store=None, team: list[dict] | None = None) -> RecheckResult:
    """Measure every promoted live row of ``node``/``container`` with and without it; write
    ``<ws>/recheck-<id>/``; with ``demote`` remove the ``slower_now`` rows. Never prompts.
    ``inventory_loader()`` -> the Inventory (called only when the node is not the demo's). ``store``: the
    team's store (None: the workspace's rows only): the rows any laptop promoted there are rechecked too
    (``team``: its ``promoted_on`` answer, when the caller asked it already), the verdicts and demotions are
    written to it as the recheck ends."""
    from .container import Recheck
    repeats = DEFAULT_REPEATS if repeats is None else int(repeats)
    if repeats < 1:
        raise UsageError(f"--repeats {repeats}: at least 1", hint="--repeats 3 (the default) gives run's verdicts")
    ws = _workspace(workspace)
    if variant is not None:
        get_variant(variant)
    jobs = all_jobs(ws)
    if store is not None and team is None:
        from ..store.query import promoted_on
        team = promoted_on(store, [node])
    container, rows = _pick(jobs, node, container, variant, team if store is not None else None)
    if store is not None:
        here = origin(ws)
        rows = [r if r.origin else replace(r, origin=here) for r in rows]
    rid = ws.claim(f"recheck-{time.strftime('%Y%m%d-%H%M%S')}-{node}"[:81])
    path = ws.root / rid
    with ws.keeping(rid):
        target, close = _target(jobs, node, container, inventory_loader, settings)
        try:
            doc = Recheck(ws, target, settings, ui, rid=rid, node=node, container=container,
                          repeats=repeats, team=store is not None).run(rows, demote=demote, path=path)
        finally:
            close()
    from .report import write
    write(path, doc)
    warning = record(store, path) if store is not None else None
    ui.event(f"recheck {rid}: " + ", ".join(f"{k} {v}" for k, v in doc["counts"].items()) + f" -> {path}")
    dem = doc.get("demotion") or {}
    return RecheckResult(path=path, counts=doc["counts"], id=rid, rows=doc["rows"],
                         demoted=sum(len(t.get("demoted") or []) for t in dem.get("tables") or []),
                         versions={"now": doc["now"], "at_promotion": doc["at_promotion"]},
                         undo=dem.get("undo") if dem.get("tables") else None, node=node,
                         missing=doc.get("missing") or [], warning=warning)


def origin(ws: Workspace) -> str:
    """This laptop and workspace, as the store names a job's (``host:workspace``)."""
    import socket
    return f"{socket.gethostname()}:{Path(ws.root).resolve()}"


def record(store, path: Path) -> str | None:
    """The recheck's verdicts and demotions into the team's store; a store gone away: the warning to give
    (the recheck's directory keeps them: `tune-remote store import WORKSPACE` writes them later)."""
    from ..store.events import sync_recheck
    try:
        sync_recheck(store, path)
    except Exception as exc:  # noqa: BLE001  the store's failure is never the recheck's
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        return (f"the team's store: {first}; the recheck's records stay in {path} (`tune-remote store import "
                "WORKSPACE` writes them)")
    return None


def undo(workspace, inventory_loader: Callable, settings, ui, *, node: str, recheck_id: str, store=None) -> dict:
    """Restore the live tables and modules a ``recheck --demote`` changed (the node's ``rollback`` op on each
    demotion record); ``{"restored": [...], "already": bool}``. Repeating it changes nothing."""
    ws = _workspace(workspace)
    d = ws.root / recheck_id
    try:
        doc = json.loads((d / "recheck.json").read_text())
    except (OSError, ValueError):
        raise UsageError(f"no recheck {recheck_id!r} in workspace {ws.root}",
                         hint="give the recheck-<id> directory name a `recheck --demote` printed") from None
    if doc.get("node") != node:
        raise UsageError(f"recheck {recheck_id} ran on {doc.get('node')}, not {node}",
                         hint=f"tune-remote recheck --node {doc.get('node')} --undo {recheck_id}")
    tables = (doc.get("demotion") or {}).get("tables") or []
    if not tables:
        raise UsageError(f"recheck {recheck_id} demoted nothing", hint="nothing to undo")
    from .container import restore
    jobs = all_jobs(ws)
    target, close = _target(jobs, node, doc["container"], inventory_loader, settings)
    try:
        target.connect()
        answers = restore(target, settings, ui, tables)
    finally:
        close()
    doc["demotion"]["undone"] = answers
    from .report import write
    write(d, doc)
    warning = record(store, d) if store is not None else None
    out = {"restored": [a.get("live") for a in answers], "already": all(a.get("already") for a in answers)}
    return {**out, "warning": warning} if warning else out


def summary(res: RecheckResult) -> dict:
    """What the CLI prints (one JSON document)."""
    out = {"recheck": res.id, "dir": str(res.path), "counts": res.counts,
           "csv": str(res.path / "recheck.csv"), "report": str(res.path / "report.md")}
    if res.demoted or res.undo:
        out.update(demoted=res.demoted, undo=res.undo)
    if res.missing:
        out["missing"] = res.missing
    return out


def run_all_nodes(workspace, inventory_loader: Callable, settings, ui, *, node_args, container: str | None = None,
                  variant: str | None = None, repeats: int | None = None, demote: bool = False,
                  store=None, team_of: Callable | None = None) -> dict:
    """``recheck --all-nodes``: every inventory node of the GPU kinds of ``node_args`` (fleet.py), each
    rechecked as ``run_recheck`` does (the workspace's rows and, with ``store``, every laptop's: ``team_of(nodes)``
    asks it, None when it cannot say). A node
    with nothing promoted, or that fails, is said and the others go on; ``{"kinds", "rechecks": [summary
    + "node"], "skipped": [{"node", "why"}], "failed": [{"node", "why", "exit_code"}]}``."""
    from ..errors import TuneRemoteError
    from ..fleet import lacks, same_kind
    inventory = inventory_loader()
    fleet = same_kind(inventory, node_args, container, settings.accept_new_host_key)
    team = None
    if store is not None:
        from ..store.query import promoted_on
        team = team_of(fleet.nodes) if team_of is not None else promoted_on(store, fleet.nodes)
        if team is None:           # the store could not say (team_of warned): the workspace's rows only
            store = None
    out = {"kinds": fleet.kind_text(), "nodes": fleet.nodes, "rechecks": [], "skipped": list(fleet.skipped),
           "failed": [], "warnings": []}
    for node in fleet.nodes:
        why = lacks(inventory.node(node), container)
        if why:
            out["skipped"].append({"node": node, "why": why})
            continue
        ui.event(f"recheck --all-nodes ({out['kinds']}): {node}")
        try:
            res = run_recheck(workspace, inventory_loader, settings, ui, node=node, container=container,
                              variant=variant, repeats=repeats, demote=demote, store=store,
                              team=[t for t in team or [] if t["node"] == node] if store is not None else None)
        except NothingToRecheck:
            out["skipped"].append({"node": node, "why": "nothing promoted there"
                                   + (" (workspace or the team's store)" if store is not None else "")})
            continue
        except TuneRemoteError as exc:
            out["failed"].append({"node": node, "why": exc.one_line(), "exit_code": int(exc.exit_code)})
            continue
        out["rechecks"].append({"node": node, **summary(res)})
        if res.warning:
            out["warnings"].append(res.warning)
    if not out["rechecks"] and not out["failed"]:
        raise NothingToRecheck(f"nothing promoted on the {len(fleet.nodes)} node(s) of {out['kinds']} ("
                               + ", ".join(fleet.nodes) + ")" + ("" if store is not None else " by this workspace"),
                               hint="recheck looks at the jobs of --workspace DIR and the team's store (--store URL)")
    return out
