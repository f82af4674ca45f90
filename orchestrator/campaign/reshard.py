"""A lost target's untuned shapes go to the surviving targets of its GPU kind.

A sub-job that ended ``lost`` (container restarted, process gone) -- or, on ``resume``, whose target
cannot be reached -- keeps what it tuned in its own staging table; the shapes of its shard that have no
row there are split over the sub-jobs of the same variant and kind that succeeded, as new sub-jobs
(``<sub id>.r<n>``) run like any other. Each lost sub-job is re-sharded once.
"""

from __future__ import annotations

import time

from ..context import Ctx, Settings
from ..errors import TuneRemoteError
from ..parsing.untuned import read_shapes_csv, write_untuned_csv
from ..state import JobState, Status, Workspace, atomic_write
from ..ui import Ui
from . import plan as planning
from .targets import Runner, TargetRef


def _label(s: JobState) -> str:
    return f"{s.node}/{s.container}"


def _tuned_on_node(sub: JobState, subws: Workspace, runner: Runner, cols: list[str]) -> set[tuple]:
    """Keys with a row in the lost sub-job's staging table, if its node still answers; else none."""
    if not sub.remote.tuned_csv:
        return set()
    target = None
    try:
        target = runner.open(TargetRef(sub.node, sub.container))
        ctx = Ctx(job=sub, workspace=subws, target=target, settings=Settings(reconnect_s=5), ui=Ui(quiet=True))
        res = ctx.call("tuned_keys", {"patterns": [sub.remote.tuned_csv], "key_columns": cols,
                                      "cu_num": sub.facts.cu_num, "gfx": sub.facts.gfx})
        return {tuple(str(v) for v in k) for keys in (res.get("files") or {}).values() for k in keys}
    except TuneRemoteError:
        return set()
    finally:
        if target is not None:
            target.close()


def reshard(job: JobState, workspace: Workspace, subws: Workspace, runner: Runner, subs: list[JobState],
            ui) -> list[JobState]:
    """New sub-jobs for the untuned shapes of every lost sub-job not re-sharded yet."""
    camp = job.request.campaign
    kinds = camp.kinds or {}
    done = camp.resharded = camp.resharded or {}
    new: list[JobState] = []
    for lost in subs:
        if lost.state != Status.LOST or lost.job_id in done:
            continue
        kind = kinds.get(_label(lost))
        survivors = [s for s in subs if s.variant == lost.variant and s.state == Status.SUCCEEDED
                     and kinds.get(_label(s)) == kind and _label(s) != _label(lost)]
        shard = read_shapes_csv(lost.request.shapes_csv, lost.variant) if lost.request.shapes_csv else []
        cols = [c for c in shard[0]] if shard else []
        have = _tuned_on_node(lost, subws, runner, cols) if cols else set()
        untuned = [s for s in shard if tuple(str(s[c]) for c in cols) not in have]
        if not survivors or not untuned:
            done[lost.job_id] = [] if untuned else ["(nothing left to tune)"]
            ui.event(f"{_label(lost)}: {lost.variant} lost; " + (
                f"{len(untuned)} untuned shape(s) have no surviving target of kind {kind}" if untuned
                else "every shape of its shard has a row"))
            continue
        by_label = {_label(s): s for s in survivors}
        parts = planning.shard(untuned, {TargetRef(s.node, s.container): max(1, len(s.facts.tune_gpus or []))
                                         for s in survivors})
        done[lost.job_id] = []
        for ref, rows in parts.items():
            if not rows:
                continue
            base = by_label[ref.label]
            sid = f"{base.job_id}.r{sum(len(v) for v in done.values()) + 1}"[-81:]
            path = workspace.job_dir(job.job_id) / "shards" / f"{sid}.csv"
            atomic_write(path, write_untuned_csv(rows, lost.variant).encode())
            req = dict(base.request, shapes_csv=str(path), resharded_from=lost.job_id)
            sub = JobState(job_id=sid, node=base.node, container=base.container, variant=base.variant,
                           created=time.time(), request=req)
            subws.save(sub)
            camp.sub_jobs.append(sid)
            done[lost.job_id].append(sid)
            new.append(sub)
            ui.event(f"{_label(lost)} lost: {len(rows)} of its untuned shape(s) moved to {ref.label} ({sid})")
    workspace.save(job)
    return new
