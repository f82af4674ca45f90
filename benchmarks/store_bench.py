"""The team store's cost to a plan (issue 39): the plan-time query (which of a job's shapes the team already
holds a proven row for on this GPU kind) against a store of 100,000 tuned rows and 10 million benchmark
samples, and the bytes a sample takes.

The store is filled through the schema of orchestrator/store (Alembic-migrated, as `--store` opens it):
1,000 jobs of 100 rows each (10 GPU kinds x 5 tables), every row promoted (team_rows), every row a result
with 2 arms x 50 samples. Then, in a fresh process as a plan would: open the store (connect, check the
schema revision) and ask `store.query.proven` for 119 keys (the demo's job size), half of them held, with the
validator's question (the same kernel-list fingerprint, else the exact AITER version: 3 of 4 jobs carry a
fingerprint, their versions spread over three releases), the held rows' tuned rows coming back with them.

Run: python benchmarks/store_bench.py [--scale 0.1] [--url postgresql://...]  (default: a fresh SQLite file)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KINDS = [("gfx950", 256), ("gfx942", 304), ("gfx942", 80), ("gfx950", 128), ("gfx942", 228),
         ("gfx90a", 110), ("gfx950", 64), ("gfx942", 152), ("gfx1201", 64), ("gfx950", 32)]
TABLES = [f"variant{i}_tuned_gemm.csv" for i in range(5)]
FP = "f" * 64        # the kernel-list fingerprint the plan asks with (nodeside/kernellist.py)
ASK = {"aiter": "0.1.20", "kernel_list": FP}     # the validator's question: the same list, else this version


def key(i: int) -> str:
    return f"m={1 << (i % 16)},n={512 * (1 + i // 16 % 64)},k={256 * (1 + i // 1024)}"


def fill(url: str, rows: int, per_result: int) -> dict:
    import sqlalchemy as sa
    from orchestrator.store import Store
    from orchestrator.store import schema
    store = Store.open(url)
    t0 = time.monotonic()
    jobs = max(1, rows // 100)
    with store.engine.begin() as conn:
        conn.execute(sa.insert(schema.jobs), [
            {"uid": f"{j:040d}", "job_id": f"job-{j}", "origin": "bench:/ws", "node": f"node{j % 50}",
             "variant": "a8w8_blockscale", "created": float(j), "state": "succeeded", "gfx": KINDS[j % 10][0],
             "cu_num": KINDS[j % 10][1], "aiter_version": ("0.1.19", "0.1.20", "0.1.21")[j % 3],
             "kernel_list": None if j % 4 == 3 else FP} for j in range(jobs)])   # a quarter: revision-0001 records
        for lo in range(0, rows, 20000):
            batch = range(lo, min(rows, lo + 20000))
            tr = [{"job_uid": f"{i // 100:040d}", "table_name": TABLES[i // 100 // 10 % 5],
                   "gfx": KINDS[i // 100 % 10][0], "cu_num": KINDS[i // 100 % 10][1], "row_key": key(i),
                   "row": json.dumps({"M": i}), "kernel": "k", "us": 1.0} for i in batch]
            conn.execute(sa.insert(schema.tuned_rows), tr)
            conn.execute(sa.insert(schema.team_rows), [
                {k: r[k] for k in ("gfx", "cu_num", "table_name", "row_key", "job_uid")} for r in tr])
            conn.execute(sa.insert(schema.results), [
                {"id": i + 1, "job_uid": r["job_uid"], "row_key": r["row_key"], "verdict": "improved",
                 "speedup_pct": 5.0} for i, r in zip(batch, tr)])
    filled_rows = time.monotonic() - t0
    before = size(store, url)
    t0 = time.monotonic()
    n = rows * per_result
    per_arm = per_result // 2

    def gen():
        for rid in range(1, rows + 1):
            for arm in (0, 1):
                for s in range(per_arm):
                    yield rid, arm, s, 100.0 + (rid * 7 + s) % 13 * 0.01
    raw = store.engine.raw_connection()
    try:
        cur = raw.cursor()
        if store.dialect == "postgresql":
            with cur.copy("COPY samples (result_id, arm, n, value) FROM STDIN") as cp:
                for row in gen():
                    cp.write_row(row)
        else:
            cur.executemany("INSERT INTO samples (result_id, arm, n, value) VALUES (?, ?, ?, ?)", gen())
        raw.commit()
    finally:
        raw.close()
    filled_samples = time.monotonic() - t0
    after = size(store, url)
    return {"rows": rows, "samples": n, "fill_rows_s": round(filled_rows, 1), "fill_samples_s": round(filled_samples, 1),
            "bytes_per_sample": round((after - before) / n, 1), "store_bytes": after}


def size(store, url: str) -> int:
    import sqlalchemy as sa
    if store.dialect == "postgresql":
        with store.engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT pg_database_size(current_database())")).scalar())
    path = sa.engine.make_url(url).database
    with store.engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


PLAN = """
import json, sys, time
t0 = time.perf_counter()
from orchestrator.store import Store
from orchestrator.store.query import proven
t1 = time.perf_counter()
store = Store.open(sys.argv[1])
t2 = time.perf_counter()
sys.path.insert(0, sys.argv[2])
from store_bench import ASK, KINDS, TABLES, key
keys = [key(i) for i in range(0, 119 * 2, 2)]
got = proven(store, gfx=KINDS[0][0], cu_num=KINDS[0][1], table_name=TABLES[0], row_keys=keys, **ASK)
t3 = time.perf_counter()
warm = []
for _ in range(20):
    a = time.perf_counter()
    proven(store, gfx=KINDS[0][0], cu_num=KINDS[0][1], table_name=TABLES[0], row_keys=keys, **ASK)
    warm.append(time.perf_counter() - a)
print(json.dumps({"import_s": t1 - t0, "open_s": t2 - t1, "first_query_s": t3 - t2, "warm_query_s": sorted(warm)[10],
                  "asked": len(keys), "held": len(got)}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="fraction of 100,000 rows / 10 million samples")
    ap.add_argument("--url", default=None, help="an EMPTY store to fill (default: a fresh SQLite file)")
    ap.add_argument("--runs", type=int, default=5, help="fresh plan processes measured")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="store-bench-")
    url = a.url or f"sqlite:///{tmp}/store.sqlite"
    rows = max(100, int(100_000 * a.scale))
    fig = fill(url, rows, 100)
    runs = []
    for _ in range(a.runs):
        out = subprocess.run([sys.executable, "-c", PLAN, url, str(Path(__file__).parent)], capture_output=True,
                             text=True, check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        runs.append(json.loads(out.stdout.splitlines()[-1]))
    med = {k: round(statistics.median(r[k] for r in runs), 4) for k in ("import_s", "open_s", "first_query_s",
                                                                         "warm_query_s")}
    fig.update(med, held=runs[0]["held"], asked=runs[0]["asked"],
               added_to_plan_s=round(med["import_s"] + med["open_s"] + med["first_query_s"], 3),
               store=url.split("://")[0])
    print(json.dumps(fig, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
