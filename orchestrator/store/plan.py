"""The plan consults the store (`--reuse proven`, the default; issue 39): a shape whose key the team already
holds a proven row for on this GPU kind (gfx and cu_num) and table, tuned where the variant's kernel list was
the one this node has (the validator: query.proven), is not tuned again. Its row is offered instead: it goes
into the job's staging table as if the tuner had written it (steps/prepare.py), is benchmarked before/after
with the rest and promoted only where this node's measurement proves it, by the same verdict and promotion
rules. The plan says where each row came from (job, node, laptop)."""

from __future__ import annotations

import collections
from pathlib import Path

from .keys import row_key
from .query import proven


def simulated(job) -> bool:
    """A demo's job (simulated nodes): its rows are a simulator's."""
    req = getattr(job, "request", None) or {}
    return bool(req.get("demo_dir") or req.get("demo_nodes"))


def plan_hook(ctx, shapes: list[dict], described: list[str], *, mode: str, url: str | None, explicit: bool,
              warn) -> list[dict]:
    """The shapes step's hook (steps/shapes.py PLAN_HOOKS; registered by cli/store.py with the command's
    --reuse and --store): the shapes to tune. The default store never stops a plan (``warn`` once and every
    shape is tuned); a demo reads only a store asked for, as it writes only there."""
    if mode != "proven" or url is None or not shapes or (simulated(ctx.job) and not explicit):
        return shapes
    from . import shown
    from .live import forget, opened
    try:
        return reuse_proven(opened(url), ctx, shapes, described)
    except Exception as exc:  # noqa: BLE001  the store's failure is never the plan's
        forget(url)
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        warn(f"store {shown(url)}: {first}; --reuse proven: the plan goes on without the store, every shape "
             "is tuned")
        return shapes


def reuse_proven(store, ctx, shapes: list[dict], described: list[str]) -> list[dict]:
    """The shapes the store holds no valid proven row for; the others' rows in ``steps.shapes.info.reused``
    (their key, provenance and row), for the shapes step to keep in the job and prepare to stage."""
    job, variant = ctx.job, ctx.variant
    if not shapes or job.facts.gfx is None or job.facts.cu_num is None:
        return shapes
    gfx, cu = job.facts.gfx, int(job.facts.cu_num)
    keys = variant.key_columns
    fp = (job.facts.get("probes") or {}).get("kernel_list")
    got = proven(store, gfx=gfx, cu_num=cu, table_name=Path(variant.tuned_csv).name,
                 row_keys=[row_key(s, keys) for s in shapes], aiter=job.facts.version, kernel_list=fp)
    got = {k: g for k, g in got.items() if g.get("row")}     # a team row whose tuned row is not stored: tuned
    if not got:
        return shapes
    keep = [s for s in shapes if row_key(s, keys) not in got]
    whose = collections.Counter((g["job_id"], g["node"], g["origin"]) for g in got.values())
    versions = sorted({str(g["aiter_version"]) for g in got.values()})
    valid = (f"the same {variant.name} kernel list (fingerprint {fp[:12]}; AITER {', '.join(versions)})"
             if fp else f"AITER {job.facts.version}")
    line = (f"{len(got)} shape(s) have a proven row for {gfx}/cu_num={cu} with {valid} in the team's store ("
            + "; ".join(f"{n} from job {j} on {node} ({o})" for (j, node, o), n in whose.most_common())
            + "): not tuned again, their rows go into the staging table and are measured on this node before "
            "any is promoted (--reuse proven; --reuse none tunes them)")
    job.note(line)
    described.append(line)
    job.step_state("shapes").info["reused"] = [
        {"key": {c: s.get(c) for c in keys}, **{k: v for k, v in got[row_key(s, keys)].items() if k != "row_key"}}
        for s in shapes if row_key(s, keys) in got]
    return keep

