"""Records that are not a job's: a recheck's verdicts and demotions (``<ws>/recheck-<id>/recheck.json``,
written by `store import`) and audit findings (``record_audit``). Keyed like the rest: again changes nothing."""

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
    released, unless the demotion was undone); the number of events it holds."""
    doc = json.loads((Path(path) / "recheck.json").read_text())
    rid, now = doc.get("id") or Path(path).name, doc.get("now") or {}
    gfx, cu = now.get("gfx"), now.get("cu_num")
    dem = doc.get("demotion") or {}
    demoted = {t.get("live") for t in dem.get("tables") or []} if not dem.get("undone") else set()
    ev, gone = [], []
    for r in doc.get("rows") or []:
        table = Path(r.get("live") or "").name
        k = row_key(r.get("key") or {}, _keys(r.get("variant"), r.get("key") or {}))
        base = {"table_name": table, "row_key": k, "gfx": gfx, "cu_num": cu, "node": doc.get("node"),
                "at": doc.get("time"), "detail": json.dumps(r, default=str), "job_uid": None}
        ev.append({**base, "kind": "recheck", "natural": f"{rid}|{table}|{k}"})
        if r.get("verdict") == "slower_now" and r.get("live") in demoted:
            ev.append({**base, "kind": "demotion", "natural": f"{rid}|{table}|{k}"})
            gone.append((table, k, r.get("job_id")))
    t, j = schema.team_rows, schema.jobs
    with store.engine.begin() as conn:
        store.upsert(conn, schema.events, ev, ["kind", "natural"], update=False)
        for table, k, job_id in gone:       # the team's row goes with the demoted row of the job that held it
            uids = sa.select(j.c.uid).where(j.c.job_id == job_id).scalar_subquery()
            conn.execute(t.delete().where(t.c.gfx == gfx, t.c.cu_num == cu, t.c.table_name == table,
                                          t.c.row_key == k, t.c.job_uid.in_(uids)))
    return len(ev)


def record_audit(store, findings: list[dict], *, node: str | None = None, gfx: str | None = None,
                 cu_num: int | None = None, at: float | None = None) -> int:
    """`audit`'s findings ({"kind", "file", "key", "detail"}) as events of kind ``audit``."""
    ev = []
    for f in findings:
        natural = hashlib.sha1(json.dumps([node, f], sort_keys=True, default=str).encode()).hexdigest()
        key = f.get("key")
        ev.append({"kind": "audit", "natural": natural, "job_uid": None, "table_name": Path(str(f.get("file"))).name,
                   "row_key": json.dumps(key, sort_keys=True, default=str) if key is not None else None,
                   "gfx": gfx, "cu_num": cu_num, "node": node, "at": at, "detail": json.dumps(f, default=str)})
    with store.engine.begin() as conn:
        store.upsert(conn, schema.events, ev, ["kind", "natural"], update=False)
    return len(ev)
