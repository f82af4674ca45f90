"""What a recheck writes in ``<ws>/recheck-<id>/``: ``recheck.csv`` (the contract's columns), ``recheck.json``
(everything, for scripts and ``watch``) and ``report.md`` (versions at promotion and now, counts, the rows,
the demotion and how to undo it)."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from ..state import atomic_write

CSV_TAIL = ("kernelName", "with_row", "without_row", "speedup_pct", "verdict")


def csv_text(records: list[dict]) -> str:
    """The key columns (every variant's, in order; a ``variant`` column first when there are several), then
    kernelName, with_row, without_row, speedup_pct, verdict: one line per measured row."""
    keys: list[str] = []
    for r in records:
        keys += [c for c in r["key"] if c not in keys]
    several = len({r["variant"] for r in records}) > 1
    head = (["variant"] if several else []) + keys + list(CSV_TAIL)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(head)
    for r in records:
        if r.get("verdict") is None:
            continue
        w.writerow(([r["variant"]] if several else []) + [r["key"].get(c, "") for c in keys]
                   + [r.get("kernelName") or "", _num(r.get("with_row")), _num(r.get("without_row")),
                      _num(r.get("speedup_pct")), r["verdict"]])
    return buf.getvalue()


def _num(v) -> str:
    return "" if v is None else f"{v:g}"


def _facts_line(f: dict) -> str:
    version = f.get("version") or "unknown"
    raw = f.get("version_raw")
    if raw and raw != version:
        version = f"{version} ({raw})"
    gpu = " ".join(p for p in (f.get("gfx"), f"cu_num {f['cu_num']}" if f.get("cu_num") else None,
                               f"({f['gpu']})" if f.get("gpu") else None) if p)
    return f"AITER {version}, ROCm {f.get('rocm') or 'unknown'}, {gpu or 'GPU unknown'}"


def markdown(doc: dict) -> str:
    out = [f"# tune-remote recheck {doc['id']}", "",
           (f"{doc['node']}/{doc['container']}: {len(doc['rows'])} live row(s) tune-remote promoted, measured "
            f"with and without their row, {doc['repeats']} run(s) per arm interleaved on GPU {doc['gpu']} "
            "(private JIT dirs; `run`'s verdict rules)."), "",
           "## Versions", "", f"- now: {_facts_line(doc['now'])}"]
    for job_id, f in sorted(doc["at_promotion"].items()):
        out.append(f"- at promotion by job {job_id}: {_facts_line(f)}")
    c = doc["counts"]
    out += ["", "## Verdicts", "", ", ".join(f"{k}: {v}" for k, v in c.items()), "",
            "Values: " + "; ".join(f"{v}: {m}" for v, m in sorted((doc.get("metrics") or {}).items()))
            + "; speedup % is positive when the row is faster than what AITER serves without it.", "",
            "| variant | key | kernelName | with row | without row | speedup % | verdict | job |",
            "|---|---|---|---|---|---|---|---|"]
    for r in doc["rows"]:
        key = " ".join(f"{k}={v}" for k, v in r["key"].items())
        out.append(f"| {r['variant']} | {key} | {r.get('kernelName') or ''} | {_num(r.get('with_row'))} | "
                   f"{_num(r.get('without_row'))} | {_num(r.get('speedup_pct'))} | "
                   f"{r.get('verdict') or r.get('why') or 'not measured'} | {r['job_id']} |")
    dem = doc.get("demotion")
    if dem is not None:
        out += ["", "## Demotion", ""]
        if not dem["tables"]:
            out.append("No `slower_now` row: the live tables were not changed.")
        for t in dem["tables"]:
            eng = t.get("engaged") or {}
            aside = ", ".join(v for v in (t.get("modules") or {}).values() if v) or "none built"
            out.append(f"- {t['live']}: {len(t.get('demoted') or [])} row(s) removed; backup {t.get('backup')}; "
                       f"module(s) set aside: {aside}"
                       + (f"; fresh process serves {eng.get('engaged')}/{eng.get('total')} demoted shape(s) "
                          "as the without-row arm" if eng else ""))
        if dem["tables"]:
            out += ["", f"Undo: {dem['undo']}"]
    if doc.get("notes"):
        out += ["", "## Notes", "", *[f"- {n}" for n in doc["notes"]]]
    return "\n".join(out) + "\n"


def write(path: Path, doc: dict) -> None:
    atomic_write(path / "recheck.csv", csv_text(doc["rows"]).encode())
    atomic_write(path / "recheck.json", json.dumps(doc, indent=1, default=str).encode())
    atomic_write(path / "report.md", markdown(doc).encode())
