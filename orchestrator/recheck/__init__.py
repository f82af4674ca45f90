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
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import JobError, UsageError
from ..state import Workspace
from ..variants import get_variant
from .judge import VERDICTS
from .rows import Promoted, all_jobs, containers_of, promoted_rows

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


def _pick(jobs, node: str, container: str | None, variant: str | None) -> tuple[str, list[Promoted]]:
    if container is None:
        have = containers_of(jobs, node)
        if len(have) > 1:
            raise UsageError(f"jobs promoted rows on {len(have)} containers of {node}: say which",
                             hint="add --container NAME (one of: " + ", ".join(have) + ")")
        container = have[0] if have else None
    rows = promoted_rows(jobs, node, container, variant) if container else []
    if not rows:
        where = f"{node}/{container}" if container else node
        raise NothingToRecheck(f"no job in this workspace promoted a row on {where}"
                               + (f" for {variant}" if variant else "") + " (or every promotion was rolled back)",
                               hint="recheck looks at the jobs of --workspace DIR; promote with `tune-remote run "
                                    "--promote proven` or `tune-remote promote JOB`")
    return container, rows


def run_recheck(workspace, inventory_loader: Callable, settings, ui, *, node: str, container: str | None = None,
                variant: str | None = None, repeats: int | None = None, demote: bool = False) -> RecheckResult:
    """Measure every promoted live row of ``node``/``container`` with and without it; write
    ``<ws>/recheck-<id>/``; with ``demote`` remove the ``slower_now`` rows. Never prompts.
    ``inventory_loader()`` -> the Inventory (called only when the node is not the demo's)."""
    from .container import Recheck
    repeats = DEFAULT_REPEATS if repeats is None else int(repeats)
    if repeats < 1:
        raise UsageError(f"--repeats {repeats}: at least 1", hint="--repeats 3 (the default) gives run's verdicts")
    ws = _workspace(workspace)
    if variant is not None:
        get_variant(variant)
    jobs = all_jobs(ws)
    container, rows = _pick(jobs, node, container, variant)
    rid = ws.claim(f"recheck-{time.strftime('%Y%m%d-%H%M%S')}-{node}"[:81])
    path = ws.root / rid
    with ws.keeping(rid):
        target, close = _target(jobs, node, container, inventory_loader, settings)
        try:
            doc = Recheck(ws, target, settings, ui, rid=rid, node=node, container=container,
                          repeats=repeats).run(rows, demote=demote, path=path)
        finally:
            close()
    from .report import write
    write(path, doc)
    ui.event(f"recheck {rid}: " + ", ".join(f"{k} {v}" for k, v in doc["counts"].items()) + f" -> {path}")
    dem = doc.get("demotion") or {}
    return RecheckResult(path=path, counts=doc["counts"], id=rid, rows=doc["rows"],
                         demoted=sum(len(t.get("demoted") or []) for t in dem.get("tables") or []),
                         versions={"now": doc["now"], "at_promotion": doc["at_promotion"]},
                         undo=dem.get("undo") if dem.get("tables") else None)


def undo(workspace, inventory_loader: Callable, settings, ui, *, node: str, recheck_id: str) -> dict:
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
    return {"restored": [a.get("live") for a in answers], "already": all(a.get("already") for a in answers)}


def summary(res: RecheckResult) -> dict:
    """What the CLI prints (one JSON document)."""
    out = {"recheck": res.id, "dir": str(res.path), "counts": res.counts,
           "csv": str(res.path / "recheck.csv"), "report": str(res.path / "report.md")}
    if res.demoted or res.undo:
        out.update(demoted=res.demoted, undo=res.undo)
    return out
