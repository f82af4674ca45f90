"""Promotion across a GPU kind (issue 10): the rows a target promoted into its own live table are promoted
into the live table of every other target of the same kind (same gfx, cu_num, AITER profile), so each
shape is tuned once per kind and served everywhere. A transfer is an ordinary promotion on the receiving
node (its own backup dir ``<job dir>/promotion-from-<source>``, complete new file + rename, keys that
another merged table covers skipped, the stale module moved aside) followed by the engagement check."""

from __future__ import annotations

import base64
from pathlib import Path

from ..context import Ctx, Settings
from ..errors import TuneRemoteError
from ..state import JobState, Status, Workspace
from ..ui import Ui
from ..variants import table_modules
from .targets import Runner, TargetRef


def _kind(job: JobState, sub: JobState) -> str:
    return (job.request.campaign.kinds or {}).get(f"{sub.node}/{sub.container}", "?")


def spread(job: JobState, subws: Workspace, runner: Runner, subs: list[JobState], ui, later: bool = False,
           changed: list[str] | None = None) -> list[str]:
    """One line per transfer (or failure), for the report. ``later``: asked by `tune-remote promote JOB` after
    the job (whatever its --promote was); a target that holds the rows already changes nothing. ``changed``
    gets the lines of the transfers that changed a live table (or failed)."""
    if not later and (job.request.promote or "proven") == "none":
        return []
    lines: list[str] = []
    groups: dict[tuple, list[JobState]] = {}
    for s in subs:
        if s.state == Status.SUCCEEDED and s.remote.live_csv:
            groups.setdefault((s.variant, _kind(job, s)), []).append(s)
    for (variant, kind), members in groups.items():
        for src in members:
            rec = src.remote.promotion or {}
            keys = [] if rec.get("rolled_back") else list(rec.get("promoted") or [])
            staging = subws.job_dir(src.job_id) / Path(src.remote.tuned_csv).name
            if not keys or not staging.is_file():
                continue
            for dst in members:
                if dst is src:
                    continue
                try:
                    res = _transfer(dst, src, keys, staging.read_bytes(), subws, runner)
                    n, now = len(res.get("promoted") or []), len(res.get("promoted_now") or [])
                    lines.append(f"{variant}: {n} {'' if later else 'proven '}row(s) of {src.node} promoted on "
                                 f"{dst.node} ({kind})" + (f", {now} of them now" if later and now != n else ""))
                    if now and changed is not None:
                        changed.append(lines[-1])
                except TuneRemoteError as exc:
                    lines.append(f"{variant}: rows of {src.node} NOT promoted on {dst.node}: {exc.one_line()}")
                    if changed is not None:
                        changed.append(lines[-1])
                ui.event(lines[-1])
    return lines


def peer_backup_dir(dst: JobState, src_node: str) -> str:
    """Where the promotion of ``src_node``'s rows on ``dst`` keeps its record and backups (rollback's input)."""
    return f"{dst.remote.job_dir}/promotion-from-{src_node}"


def _transfer(dst: JobState, src: JobState, keys: list, staging: bytes, subws: Workspace, runner: Runner) -> dict:
    from ..steps import promote as step
    target = runner.open(TargetRef(dst.node, dst.container))
    ctx = Ctx(job=dst, workspace=subws, target=target, settings=Settings(), ui=Ui(quiet=True))
    try:
        job_dir = dst.remote.job_dir
        peer = f"{job_dir}/peers/{src.job_id}.csv"
        ctx.call("write_files", {"files": [{"path": peer, "content_b64": base64.b64encode(staging).decode(),
                                            "backup_dir": None}]})
        variant = ctx.variant
        env = {**(dst.facts.env or {}), **ctx.target.container.env}
        n = len(variant.key_columns)
        res = ctx.call("promote", {
            "live": dst.remote.live_csv, "staging": peer, "backup_dir": peer_backup_dir(dst, src.node),
            "key_columns": list(variant.key_columns), "keys": [[str(v) for v in k[-n:]] for k in keys],
            "gfx": dst.facts.gfx,
            "cu_num": str(dst.facts.cu_num) if dst.facts.cu_num is not None else None,
            "others": step._others(ctx), "modules": table_modules(variant.name, ctx.profile.name),
            "package_dir": dst.facts.package_dir, "jit_dir_env": env.get("AITER_JIT_DIR")})
        res.pop("ok", None)
        if not res.get("nothing"):     # one entry per source: its record (a later round updates it)
            peers = [p for p in dst.remote.peer_promotions or [] if p.get("from") != src.job_id]
            dst.remote.peer_promotions = peers + [
                {"from": src.job_id, "backup_dir": peer_backup_dir(dst, src.node),
                 **{k: v for k, v in res.items() if k != "promoted_now"}}]
        ctx.save()
        return res
    finally:
        target.close()
