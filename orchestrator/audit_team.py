"""`audit --node` and the team's store: where each suspicious row came from (the store's newest live promotion
of its table and key on that node: job, laptop and workspace, AITER), the rows the store lists as promoted
there that the live tables lack (``missing_row``: the container recreated, a row replaced or removed by hand),
and the variant each audited table belongs to (the findings' keys as the store keys rows)."""
from __future__ import annotations

from pathlib import Path

from .outcome.keys import norm_key_value

MISSING = "missing_row"
SHOWN = ("job_id", "origin", "node", "container", "promoted_at", "aiter_version", "aiter_commit", "gpu_model",
         "job_uid")


def variant_of(label: str) -> str | None:
    """The variant whose tuned table ``label`` is or is merged into (model_configs/ siblings too), or None."""
    from .parsing.audit import merge_group
    from .variants import VARIANTS
    group = merge_group(label)
    return next((v.name for v in VARIANTS.values() if Path(v.tuned_csv).stem == group), None)


def _index(team: list[dict]) -> dict:
    return {(t["table_name"], t["row_key"]): t for t in team}


def promoted_by(entry: dict | None) -> dict | None:
    return {k: entry.get(k) for k in SHOWN} if entry else None


def provenance(findings: list[dict], team: list[dict]) -> list[dict]:
    """Each finding with ``promoted_by``: who promoted its row on the node (None: no promotion the store
    knows, e.g. a row AITER shipped)."""
    from .store.events import finding_key
    by_key = _index(team)
    out = []
    for f in findings:
        name = Path(str(f.get("file"))).name
        hits = [t for t in team if t["table_name"] == name][:1]
        k = finding_key(f, hits[0]["variant"]) if hits else None
        out.append({**f, "promoted_by": promoted_by(by_key.get((name, k)))})
    return out


def _keys_in(df, cols: list[str]) -> set:
    """(row key, gfx, cu_num) of every row of a table (gfx/cu_num None where it has no such column)."""
    low = {str(c).lower(): c for c in df.columns}
    if not all(c in low for c in cols):
        return set()
    from .store.keys import row_key
    out = set()
    for rec in df.to_dict("records"):
        r = {c: rec[low[c]] for c in low}
        out.add((row_key(r, cols), str(r["gfx"]) if "gfx" in r else None,
                 norm_key_value(r["cu_num"]) if "cu_num" in r else None))
    return out


def missing_rows(tables: list, team: list[dict]) -> list[dict]:
    """A finding per row the store says is live on the node that no audited table holds."""
    from .variants import get_variant
    out = []
    for t in team:
        try:
            cols = list(get_variant(t["variant"]).key_columns)
        except Exception:  # noqa: BLE001  a variant this version does not know: not ours to judge
            continue
        where = [(label, df) for label, df in tables if Path(label).name == t["table_name"]]
        held = set().union(*(_keys_in(df, cols) for _, df in where)) if where else set()
        if any(k == t["row_key"] and (g is None or g == t["gfx"]) and (c is None or c == t["cu_num"])
               for k, g, c in held):
            continue
        key = dict(kv.split("=", 1) for kv in str(t["row_key"]).split(",") if "=" in kv)
        if where:           # named as the table names its key columns (as every other finding's key)
            from .parsing.csvtools import key_columns
            have = {**key, "gfx": t["gfx"], "cu_num": t["cu_num"]}
            key = {c: str(have[c.lower()]) for c in key_columns(where[0][1])
                   if c.lower() in have and have[c.lower()] is not None} or key
        file = where[0][0] if where else t["table_name"]
        why = "it is not in the live table now" if where else "its table is not among the container's live tables"
        out.append({"kind": MISSING, "file": file, "key": key,
                    "detail": f"promoted by job {t['job_id']} ({t['origin']}) on AITER {t['aiter_version']}: {why} "
                              "(the container recreated, the row replaced or removed); `tune-remote rows --variant "
                              f"{t['variant']} --gpu {t['gfx']} --export` has the team's row",
                    "promoted_by": promoted_by(t)})
    return out


def record_findings(store, res, node: str, gone) -> None:
    """``res``'s findings into the store (events of kind audit); a store gone away: ``gone(url, exc, what)``
    once, the audit's output is whole anyway."""
    import time

    from .store.events import record_audit
    f = res.facts
    try:
        record_audit(store, res.findings, node=node, gfx=f.get("gfx"), cu_num=f.get("cu_num"), at=time.time(),
                     aiter={"version": f.get("version"), "commit": f.get("git_commit")},
                     variants={label: variant_of(label) for label, _ in res.tables})
    except Exception as exc:  # noqa: BLE001  the store's failure is never the audit's
        gone(store.url, exc, f"the {len(res.findings)} finding(s) of {node} are not in it")

