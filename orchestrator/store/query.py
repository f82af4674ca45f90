"""What the team has: the team's rows (promoted first for a GPU kind and key) with their provenance, and the
model_configs-style CSV of them (`tune-remote rows`, `rows --export`)."""

from __future__ import annotations

import csv
import io
import json

import sqlalchemy as sa

from ..errors import UsageError
from . import schema


def team_rows(store, *, variant: str | None = None, gpu: str | None = None, aiter: str | None = None) -> list[dict]:
    """One dict per team row: its table and key, the tuned row, the benchmark verdict, who promoted it where."""
    t, j, r, res = schema.team_rows, schema.jobs, schema.tuned_rows, schema.results
    q = (sa.select(t.c.table_name, t.c.row_key, t.c.gfx, t.c.cu_num, t.c.at, j.c.job_id, j.c.origin, j.c.node,
                   j.c.variant, j.c.gpu_model, j.c.pci_device_id, j.c.aiter_version, j.c.aiter_commit,
                   j.c.rocm_version, r.c.row, r.c.kernel, r.c.us, res.c.speedup_pct, res.c.verdict)
         .join(j, j.c.uid == t.c.job_uid)
         .outerjoin(r, sa.and_(r.c.job_uid == t.c.job_uid, r.c.table_name == t.c.table_name,
                               r.c.row_key == t.c.row_key))
         .outerjoin(res, sa.and_(res.c.job_uid == t.c.job_uid, res.c.row_key == t.c.row_key)))
    if variant:
        from ..variants import get_variant
        q = q.where(j.c.variant == get_variant(variant).name)
    if gpu:
        q = q.where(sa.or_(sa.func.lower(j.c.gpu_model).contains(gpu.lower()), j.c.gfx == gpu,
                           j.c.pci_device_id == gpu))
    if aiter:
        q = q.where(j.c.aiter_version == aiter)
    q = q.order_by(t.c.table_name, t.c.gfx, t.c.cu_num, t.c.row_key)
    with store.engine.connect() as conn:
        out = []
        for m in conn.execute(q).mappings():
            d = dict(m)
            d["row"] = json.loads(d["row"]) if d["row"] else None
            d["promoted_at"] = d.pop("at")
            out.append(d)
    return out


def proven(store, *, gfx: str, cu_num: int, table_name: str, row_keys, aiter: str | None = None,
           kernel_list: str | None = None) -> dict:
    """The plan's question: which of ``row_keys`` the team already holds a row for on this GPU kind (gfx and
    cu_num) and table, tuned where the variant's kernel list was this one; ``{row_key: provenance and the
    tuned row}``. The validator: the row's job recorded the same kernel-list fingerprint (``kernel_list``,
    probed on the node: nodeside/kernellist.py), whatever its AITER version; a job recorded without one (a
    revision-0001 record) or this job without one: the exact AITER version ``aiter`` (None and no
    fingerprint: any). One indexed look-up per 500 keys (team_rows' primary key)."""
    t, j, res, r = schema.team_rows, schema.jobs, schema.results, schema.tuned_rows
    keys, out = list(dict.fromkeys(row_keys)), {}
    if kernel_list is not None:
        valid = sa.or_(j.c.kernel_list == kernel_list,
                       sa.and_(j.c.kernel_list.is_(None), j.c.aiter_version == aiter))
    else:
        valid = j.c.aiter_version == aiter if aiter is not None else None
    with store.engine.connect() as conn:
        for i in range(0, len(keys), 500):
            q = (sa.select(t.c.row_key, j.c.job_id, j.c.origin, j.c.node, j.c.aiter_version, j.c.kernel_list,
                           res.c.speedup_pct, res.c.verdict, r.c.row)
                 .join(j, j.c.uid == t.c.job_uid)
                 .outerjoin(res, sa.and_(res.c.job_uid == t.c.job_uid, res.c.row_key == t.c.row_key))
                 .outerjoin(r, sa.and_(r.c.job_uid == t.c.job_uid, r.c.table_name == t.c.table_name,
                                       r.c.row_key == t.c.row_key))
                 .where(t.c.gfx == gfx, t.c.cu_num == cu_num, t.c.table_name == table_name,
                        t.c.row_key.in_(keys[i:i + 500])))
            if valid is not None:
                q = q.where(valid)
            for m in conn.execute(q).mappings():
                d = dict(m)
                d["row"] = json.loads(d["row"]) if d["row"] else None
                out[d["row_key"]] = d
    return out


def export_csv(rows: list[dict]) -> str:
    """The team rows of ONE table as that table's CSV (its own columns, in the order the tuner wrote them)."""
    tables = sorted({r["table_name"] for r in rows})
    if len(tables) > 1:
        raise UsageError(f"the rows are of {len(tables)} tables ({', '.join(tables)})",
                         hint="pick one with --variant (and --gpu)")
    body = [r["row"] for r in rows if r["row"]]
    if not body:
        return ""
    cols = list(body[0])
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    w.writerows(body)
    return buf.getvalue()


LIFE = ("promotion", "rollback", "demotion", "demotion_undone")


def promoted_on(store, nodes, *, table_name: str | None = None) -> list[dict]:
    """The rows the store says are live on ``nodes`` (promoted there by any laptop): for each (node, table,
    key) the newest promotion whose job was not rolled back since (its last later change) and that no recheck
    demoted after it (unless that demotion was undone); one dict each with the provenance: job, laptop and
    workspace (``origin``), container, variant, GPU kind, AITER and ROCm versions, when."""
    e, j = schema.events, schema.jobs
    q = (sa.select(e.c.kind, e.c.natural, e.c.job_uid, e.c.table_name, e.c.row_key, e.c.node, e.c.at,
                   j.c.job_id, j.c.origin, j.c.container, j.c.variant, j.c.gfx, j.c.cu_num, j.c.gpu_model,
                   j.c.aiter_version, j.c.aiter_commit, j.c.rocm_version)
         .outerjoin(j, j.c.uid == e.c.job_uid)
         .where(e.c.kind.in_(LIFE), e.c.node.in_(list(nodes))))
    if table_name is not None:
        q = q.where(e.c.table_name == table_name)
    with store.engine.connect() as conn:
        events = [dict(m) for m in conn.execute(q).mappings()]
    changes: dict[str, list] = {}          # job uid -> [(at, kind)] of its later changes (rows not named)
    undone = {ev["natural"] for ev in events if ev["kind"] == "demotion_undone"}
    demoted: dict[tuple, float] = {}       # (node, table, key) -> when a recheck last demoted it
    for ev in events:
        if ev["row_key"] is None and ev["kind"] in ("promotion", "rollback"):
            changes.setdefault(ev["job_uid"], []).append((ev["at"] or 0.0, ev["kind"]))
        elif ev["kind"] == "demotion" and ev["natural"] not in undone:
            k = (ev["node"], ev["table_name"], ev["row_key"])
            demoted[k] = max(demoted.get(k, 0.0), ev["at"] or 0.0)
    rolled_back = {uid for uid, ch in changes.items() if max(ch)[1] == "rollback"}
    live: dict[tuple, dict] = {}
    for ev in events:
        if ev["kind"] != "promotion" or ev["row_key"] is None or ev["job_uid"] in rolled_back:
            continue
        k = (ev["node"], ev["table_name"], ev["row_key"])
        at = ev["at"] or 0.0
        if k in demoted and demoted[k] >= at:
            continue
        if k not in live or at >= (live[k]["promoted_at"] or 0.0):
            d = {c: ev[c] for c in ev if c not in ("kind", "natural", "at")}
            live[k] = {**d, "promoted_at": ev["at"]}
    return sorted(live.values(), key=lambda d: (d["node"] or "", d["table_name"] or "", d["row_key"]))
