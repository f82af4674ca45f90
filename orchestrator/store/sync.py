"""A job's records from its state and its directory into the store: run after every save (the Workspace's
observer, cli/store.py) and by `tune-remote store import`. Every record is keyed by its natural key, so a
re-sync (after a database outage, or an import of a job already synced) writes nothing twice: the job
directory is the queue of what the store has not taken yet."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shlex
import socket
import time
from pathlib import Path

from ..outcome.keys import norm_key_value
from . import schema
from .keys import job_uid, row_key
from .samples import bench_samples

_SEEN: dict[tuple, str] = {}      # (store url, job uid, part) -> digest of what the store already holds


def _digest(*parts) -> str:
    return hashlib.sha1(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def key_columns(job) -> tuple[str, ...]:
    try:
        from ..variants import get_variant
        return get_variant(job.variant).key_columns
    except Exception:     # a variant this code does not know (a newer writer's job): the shapes' own keys
        return tuple(sorted(job.shapes[0])) if job.shapes else ()


def job_record(workspace, job) -> dict:
    f, r = job.facts.to_dict(), job.remote.to_dict()
    camp = job.request.campaign
    targets = ({"nodes": camp.nodes, "sub_jobs": camp.sub_jobs} if camp is not None
               else [{"node": job.node, "container": job.container}])
    cu = f.get("cu_num")
    return {"uid": job_uid(job), "job_id": job.job_id,
            "origin": f"{socket.gethostname()}:{Path(workspace.root).resolve()}",
            "node": job.node, "container": job.container, "variant": job.variant, "created": job.created,
            "updated": time.time(), "state": str(job.state),
            "request": json.dumps(job.request.to_dict(), sort_keys=True, default=str),
            "targets": json.dumps(targets, sort_keys=True, default=str),
            "gfx": f.get("gfx"), "cu_num": int(cu) if isinstance(cu, (int, float)) else None,
            "gpu_model": f.get("gpu_name"), "pci_device_id": f.get("gpu_device_id"),
            "aiter_version": f.get("version"), "aiter_commit": f.get("git_commit"),
            "rocm_version": f.get("rocm_version"), "kernel_list": (f.get("probes") or {}).get("kernel_list"),
            "tuner_command": shlex.join(str(a) for a in r["tune_argv"]) if r.get("tune_argv") else None}


def table_name(job) -> str | None:
    path = job.remote.live_csv or job.remote.tuned_csv
    return Path(path).name if path else None


def tuned_rows(job, job_dir: Path, keys) -> tuple[list[dict], list[str], bytes | None]:
    """The rows of the job's tuned table for its GPU and its shapes, and the table's key columns in order."""
    if not job.remote.tuned_csv:
        return [], [], None
    raw = _read(job_dir / Path(job.remote.tuned_csv).name)
    if not raw:
        return [], [], raw
    reader = csv.DictReader(io.StringIO(raw.decode("utf-8", errors="replace")))
    cols = {c.lower(): c for c in reader.fieldnames or []}
    order = [c.lower() for c in reader.fieldnames or [] if c.lower() in keys]
    wanted = {row_key(s, keys) for s in job.shapes}
    gfx, cu = job.facts.gfx, norm_key_value(job.facts.cu_num)
    out = []
    for row in reader:
        low = {c.lower(): v for c, v in row.items() if c is not None}
        if "gfx" in cols and gfx and low.get("gfx") != str(gfx):
            continue
        if "cu_num" in cols and cu is not None and norm_key_value(low.get("cu_num")) != cu:
            continue
        k = row_key(low, keys)
        if wanted and k not in wanted:
            continue
        names = [low[c] for c in sorted(low) if c.startswith("kernelname") and low[c] not in ("", "nan", "None")]
        us = norm_key_value(low.get("us"))
        out.append({"row_key": k, "row": json.dumps(row), "kernel": " + ".join(names) or None,
                    "us": float(us) if isinstance(us, (int, float)) else None})
    return out, order, raw


def promoted_keys(job, order: list[str], keys) -> list[str]:
    """The row keys the job promoted (its promotion record's key tuples: gfx, cu_num, then the key columns in
    the table's order), none once the job's last change was a rollback."""
    later = (job.steps.get("promote").info.get("later") if "promote" in job.steps else None) or []
    if later and str(later[-1].get("command", "")).startswith("tune-remote rollback"):
        return []
    return record_keys(job.remote.promotion or {}, order, keys)


def record_keys(prom: dict, order: list[str], keys) -> list[str]:
    out = []
    for t in prom.get("promoted") or []:
        vals = list(t)[2:] if len(t) == len(order) + 2 else list(t)[-len(order):] if order else []
        out.append(row_key(dict(zip(order, vals)), keys))
    return out


def peer_keys(job, order: list[str], keys) -> list[tuple[str, str, float]]:
    """(source job, row key, when) of the rows a campaign spread onto this job's node from a peer of the same
    GPU kind (``remote.peer_promotions``), rolled-back ones left out: live there, so the team's store lists
    them for `recheck`/`audit` from any laptop (events only: the source job holds the team's key)."""
    out = []
    for rec in job.remote.peer_promotions or []:
        if rec.get("promoted") and not rec.get("rolled_back"):
            at = float(rec.get("time") or job.created or 0)
            out += [(str(rec.get("from")), k, at) for k in record_keys(rec, order, keys)]
    return out


def sync_job(store, workspace, job) -> dict:
    """Write what changed since the last sync of this process; ``{"lost": [...]}``: the keys another job
    promoted first (one wins, the other is told)."""
    uid, jd = job_uid(job), Path(workspace.job_dir(job.job_id))
    keys = key_columns(job)
    rec = job_record(workspace, job)
    table = table_name(job)
    rows, order, raw = tuned_rows(job, jd, keys)
    comp_raw = _read(jd / "comparison.json")
    prom = promoted_keys(job, order, keys)
    peers = peer_keys(job, order, keys)
    later = (job.steps["promote"].info.get("later") or []) if "promote" in job.steps else []
    parts = {"job": _digest({k: v for k, v in rec.items() if k != "updated"}), "tuned": _digest(raw),
             "compare": _digest(comp_raw), "promo": _digest(prom, later, peers)}
    todo = {p for p, d in parts.items() if _SEEN.get((store.url, uid, p)) != d}
    lost: list[dict] = []
    if not todo:
        return {"lost": lost}
    with store.engine.begin() as conn:
        store.upsert(conn, schema.jobs, [rec], ["uid"])
        if "tuned" in todo and table:
            store.upsert(conn, schema.tuned_rows, [{**r, "job_uid": uid, "table_name": table, "gfx": rec["gfx"],
                                                    "cu_num": rec["cu_num"]} for r in rows],
                         ["job_uid", "table_name", "row_key"])
        if "compare" in todo and comp_raw:
            write_comparison(store, conn, job, jd, uid, json.loads(comp_raw), keys)
        if "promo" in todo and table:
            lost = write_promotions(store, conn, job, uid, rec, table, prom, later)
            if peers:
                store.upsert(conn, schema.events, [
                    {"job_uid": uid, "table_name": table, "gfx": rec["gfx"], "cu_num": rec["cu_num"],
                     "node": job.node, "kind": "promotion", "natural": f"{uid}|{table}|peer {src}|{k}",
                     "row_key": k, "at": at, "detail": json.dumps({"spread_from": src})} for src, k, at in peers],
                    ["kind", "natural"], update=False)
    for p, d in parts.items():
        _SEEN[(store.url, uid, p)] = d
    # a key held by the very job whose row this job reused and promoted again: the team keeps that row
    same = {(row_key(r.get("key") or {}, keys), r.get("job_id"))
            for r in (job.steps["shapes"].info.get("reused") or [] if "shapes" in job.steps else [])}
    return {"lost": [x for x in lost if (x["row_key"], x["held_by"]) not in same]}


def write_comparison(store, conn, job, jd: Path, uid: str, comp: dict, keys) -> None:
    res = [{"job_uid": uid, "row_key": row_key(r, keys), "metric": r.get("metric") or comp.get("metric"),
            "before": _float(r.get("before")), "after": _float(r.get("after")),
            "speedup_pct": _float(r.get("speedup_pct")), "verdict": r.get("verdict") or r.get("status"),
            "promoted": 1 if str(r.get("promoted")).lower() == "true" else 0} for r in comp.get("rows") or []]
    store.upsert(conn, schema.results, res, ["job_uid", "row_key"])
    ids = store.result_ids(conn, uid)
    out = []
    for arm, (k, values) in bench_samples(job, jd, keys):
        rid = ids.get(k)
        if rid is not None:
            out += [{"result_id": rid, "arm": arm, "n": n, "value": v} for n, v in enumerate(values)]
    for i in range(0, len(out), 5000):
        store.upsert(conn, schema.samples, out[i:i + 5000], ["result_id", "arm", "n"])


def write_promotions(store, conn, job, uid: str, rec: dict, table: str, prom: list[str], later: list) -> list:
    base = {"job_uid": uid, "table_name": table, "gfx": rec["gfx"], "cu_num": rec["cu_num"], "node": job.node}
    at = (job.steps["promote"].finished if "promote" in job.steps else None) or time.time()
    ev = [{**base, "kind": "promotion", "natural": f"{uid}|{table}|{k}", "row_key": k, "at": at, "detail": None}
          for k in prom]
    ev += [{**base, "kind": "rollback" if str(x.get("command", "")).startswith("tune-remote rollback")
            else "promotion", "natural": f"{uid}|{table}|{x.get('at')}", "row_key": None, "at": x.get("at"),
            "detail": json.dumps(x, default=str)} for x in later]
    store.upsert(conn, schema.events, ev, ["kind", "natural"], update=False)
    store.release(conn, uid, table)           # the job's keys now: what it still holds after a rollback
    if rec["gfx"] is None or rec["cu_num"] is None:
        return []
    return store.claim(conn, uid, [{"gfx": rec["gfx"], "cu_num": rec["cu_num"], "table_name": table,
                                    "row_key": k, "at": at} for k in prom])


def _float(v):
    v = norm_key_value(v)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
