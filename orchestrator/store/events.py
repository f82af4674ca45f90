"""Records that are not a job's: a recheck's verdicts and demotions (``<ws>/recheck-<id>/recheck.json``,
written by `recheck` as it ends and by `store import`) and audit findings (``record_audit``, written by
`audit --node`). Keyed like the rest: again changes nothing."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import sqlalchemy as sa

from . import schema
from .keys import row_key


def _keys(variant: str, key: dict):
    try:
        from ..variants import get_variant
        return get_variant(variant).key_columns
    except Exception:      # a variant this code does not know: the row's own key columns
        return tuple(key)


def sync_recheck(store, path: Path) -> int:
    """A recheck's rows (kind ``recheck``) and demoted rows (kind ``demotion``: the team's row of that key is
    released; kind ``demotion_undone`` once `recheck --undo` restored it: the job that held the key holds it
    again where no other job took it since); the number of events it holds."""
    doc = json.loads((Path(path) / "recheck.json").read_text())
    rid, now = doc.get("id") or Path(path).name, doc.get("now") or {}
    gfx, cu = now.get("gfx"), now.get("cu_num")
    dem = doc.get("demotion") or {}
    demoted = {t.get("live") for t in dem.get("tables") or []}
    undone = bool(dem.get("undone"))
    ev, gone = [], []
    for r in doc.get("rows") or []:
        table = Path(r.get("live") or "").name
        k = row_key(r.get("key") or {}, _keys(r.get("variant"), r.get("key") or {}))
        base = {"table_name": table, "row_key": k, "gfx": gfx, "cu_num": cu, "node": doc.get("node"),
                "at": doc.get("time"), "detail": json.dumps(r, default=str), "job_uid": None}
        ev.append({**base, "kind": "recheck", "natural": f"{rid}|{table}|{k}"})
        if r.get("verdict") == "slower_now" and r.get("live") in demoted:
            if not undone:
                ev.append({**base, "kind": "demotion", "natural": f"{rid}|{table}|{k}"})
            else:
                ev.append({**base, "kind": "demotion_undone", "natural": f"{rid}|{table}|{k}"})
            gone.append((table, k, r.get("job_uid"), r.get("job_id"), r.get("promoted_at")))
    t, j = schema.team_rows, schema.jobs
    with store.engine.begin() as conn:
        store.upsert(conn, schema.events, ev, ["kind", "natural"], update=False)
        for table, k, uid, job_id, at in gone:    # the team's row goes with the demoted row of the job that held it
            uids = ([uid] if uid else
                    conn.execute(sa.select(j.c.uid).where(j.c.job_id == job_id)).scalars().all())
            if not undone:
                conn.execute(t.delete().where(t.c.gfx == gfx, t.c.cu_num == cu, t.c.table_name == table,
                                              t.c.row_key == k, t.c.job_uid.in_(uids)))
            elif len(uids) == 1 and gfx is not None and cu is not None:
                store.claim(conn, uids[0], [{"gfx": gfx, "cu_num": cu, "table_name": table, "row_key": k,
                                             "at": at}])
    return len(ev)


def finding_key(finding: dict, variant: str | None) -> str | None:
    """A finding's key as the store keys rows (``m=1,n=512,k=7168``: the variant's key columns, any case in
    the table), or None when the finding has no key or its table is no variant's."""
    key = finding.get("key")
    if not key or variant is None:
        return None
    low = {str(c).lower(): v for c, v in key.items()}
    cols = _keys(variant, low)
    if not all(c in low for c in cols):
        return None
    return row_key(low, cols)


def record_audit(store, findings: list[dict], *, node: str | None = None, gfx: str | None = None,
                 cu_num: int | None = None, at: float | None = None, aiter: dict | None = None,
                 variants: dict | None = None) -> int:
    """`audit`'s findings ({"kind", "file", "key", "detail"}, and ``promoted_by`` where the store knew it) as
    events of kind ``audit``: the table's file name, the key (the store's row key where ``variants`` maps the
    file to a variant, else the key as JSON), the node, its GPU kind, ``aiter`` (the AITER version and commit
    audited) in the detail. One event per finding, node and AITER: auditing again changes nothing."""
    ev = []
    for f in findings:
        core = {c: f.get(c) for c in ("kind", "file", "key", "detail")}
        natural = hashlib.sha1(json.dumps([node, aiter, core], sort_keys=True, default=str).encode()).hexdigest()
        key = f.get("key")
        text = finding_key(f, (variants or {}).get(f.get("file")))
        if text is None and key is not None:
            text = json.dumps(key, sort_keys=True, default=str)
        ev.append({"kind": "audit", "natural": natural, "job_uid": (f.get("promoted_by") or {}).get("job_uid"),
                   "table_name": Path(str(f.get("file"))).name, "row_key": text, "gfx": gfx, "cu_num": cu_num,
                   "node": node, "at": at,
                   "detail": json.dumps({**f, "aiter": aiter} if aiter else f, default=str)})
    with store.engine.begin() as conn:
        store.upsert(conn, schema.events, ev, ["kind", "natural"], update=False)
    return len(ev)
