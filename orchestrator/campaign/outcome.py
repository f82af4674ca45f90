"""`promote`, `rollback` and `export` on a campaign: each target's sub-job (all, or those on ``--node``).

- promote: every succeeded target's rows of the mode (``tune-remote promote`` on one job, its engaged check
  and report included), then each target's promoted rows onto the other chosen targets of its GPU kind
  (spread.py); a target that holds them already changes nothing.
- rollback: on every chosen target, every promotion that changed its live table, newest first: the rows
  other targets of its kind spread onto it and its own (all rounds), so each live table and JIT module end
  byte for byte as before the campaign promoted anything there.
- export: one model_configs file per variant with the proven rows of every chosen target (each row keeps
  its gfx/cu_num), offline.
The campaign's comparison CSV(s) and report are written again afterwards (merge.py).
"""

from __future__ import annotations

import time
from pathlib import Path

from ..context import Ctx, Settings
from ..errors import TuneRemoteError, UsageError
from ..state import JobState, Status, Workspace
from ..ui import Ui
from .driver import sub_jobs
from .merge import write_outputs
from .spread import peer_backup_dir, spread


def _ctx(sub: JobState, subws: Workspace, runner, ui=None) -> Ctx:
    from .targets import TargetRef
    target = runner.open(TargetRef(sub.node, sub.container))
    return Ctx(job=sub, workspace=subws, target=target, settings=Settings(), ui=ui or Ui(quiet=True))


def _note(job: JobState, workspace: Workspace, command: str, lines: list[str]) -> None:
    camp = job.request.campaign
    camp.later = [*(camp.later or []), {"command": f"tune-remote {command}", "at": time.time(), "lines": lines}]
    write_outputs(job, workspace, sub_jobs(job, workspace))
    workspace.save(job)


def promote(job: JobState, workspace: Workspace, subws: Workspace, subs: list[JobState], runner, mode: str,
            ui) -> list[dict]:
    from ..steps.report import refresh_after
    from ..steps import promote as step
    rows, changes = [], []
    for sub in subs:
        row = {"node": sub.node, "container": sub.container, "variant": sub.variant, "job_id": sub.job_id}
        rows.append(row)
        if sub.state != Status.SUCCEEDED or not sub.remote.live_csv:
            row["skipped"] = f"target job {sub.state}" + ("" if sub.remote.live_csv else ", no staging table")
            continue
        ctx = _ctx(sub, subws, runner)
        try:
            row.update(step.promote_summary(sub, refresh_after(ctx, step.later(ctx, mode))))
        except TuneRemoteError as exc:
            row["error"] = exc.one_line()
        finally:
            ctx.target.close()
            subws.save(sub)
        if row.get("promoted_now"):
            changes.append(f"{sub.node}/{sub.container} {sub.variant}: {row['promoted_now']} row(s) of its own "
                           f"promoted now ({row['promoted']} in all)")
    lines = spread(job, subws, runner, [s for s in subs if s.state == Status.SUCCEEDED], ui, later=True,
                   changed=changes)
    for row in rows:
        row["spread"] = [x for x in lines if f" on {row['node']} " in x]
    if changes:
        job.request.campaign.spread = lines or job.request.campaign.spread or []
        _note(job, workspace, f"promote --rows {mode}", changes)
    return rows


def rollback(job: JobState, workspace: Workspace, subws: Workspace, subs: list[JobState], runner) -> list[dict]:
    from ..steps.report import refresh_after
    from ..steps import promote as step
    others = {s.job_id: s.node for s in sub_jobs(job, workspace)}
    rows, changes = [], []
    for sub in subs:
        row = {"node": sub.node, "container": sub.container, "variant": sub.variant, "job_id": sub.job_id,
               "undone": []}
        rows.append(row)
        records = [(p.get("time") or 0, "peer", p) for p in sub.remote.peer_promotions or []]
        if (sub.remote.promotion or {}).get("promoted"):
            records.append((sub.remote.promotion.get("time") or 0, "own", sub.remote.promotion))
        if not records:
            row["note"] = "nothing promoted on this target"
            continue
        ctx = _ctx(sub, subws, runner)
        try:
            for _, kind, rec in sorted(records, key=lambda r: r[0], reverse=True):   # newest first
                if kind == "own":
                    res = refresh_after(ctx, step.rollback(ctx))
                    what = "its own rows"
                else:
                    src = others.get(rec.get("from"), "?")
                    res = ctx.call("rollback", {"backup_dir": rec.get("backup_dir") or peer_backup_dir(sub, src)})
                    res.pop("ok", None)
                    rec.update({k: res[k] for k in ("rolled_back", "rolled_back_at") if k in res})
                    what = f"the rows of {src}"
                if not res.get("already"):
                    row["undone"].append(f"{what} ({len(res.get('promoted') or [])} row(s))")
            row["restored"] = ("every live table and JIT module this campaign changed here, as before its first "
                               "promotion")
        except TuneRemoteError as exc:
            row["error"] = exc.one_line()
        finally:
            ctx.target.close()
            subws.save(sub)
        row["already"] = not row["undone"] and not row.get("error")
        if row["undone"]:
            changes.append(f"{sub.node}/{sub.container} {sub.variant}: rolled back " + ", then ".join(row["undone"]))
    if changes:
        rolled = {r["node"] for r in rows if r["undone"]}
        job.request.campaign.spread = [
            x + (" (rolled back)" if any(f" on {n} " in x for n in rolled) and not x.endswith("(rolled back)")
                 else "") for x in job.request.campaign.spread or []]
        _note(job, workspace, "rollback", changes)
    return rows


def export(job: JobState, workspace: Workspace, subws: Workspace, subs: list[JobState], name: str,
           dest: Path | None, guards_for=None) -> dict:
    """One ``<NAME>_<tuned base>.csv`` per variant, with the proven rows of each chosen target.
    ``guards_for(subs of the variant)``: the level-0 guards to run on one of them (``export_many``'s
    ``guards``), or None."""
    from ..steps.export import export_many
    out = {}
    dest = Path(dest) if dest else workspace.job_dir(job.job_id) / "export"
    for variant in dict.fromkeys(s.variant for s in subs):
        mine = [(s, subws.job_dir(s.job_id)) for s in subs if s.variant == variant and s.remote.tuned_csv]
        if not mine:
            raise UsageError(f"job {job.job_id}: no target of {variant} has a tuned table",
                             hint=f"tune-remote status {job.job_id}")
        out[variant] = export_many(mine, name, dest, f"campaign `{job.job_id}`",
                                   guards=guards_for([s for s, _ in mine]) if guards_for else None)
    return out
