"""What `recheck`/`audit` pay to read the team's store (issue 39): ``store.query.promoted_on`` (the rows live
on a node, by anyone: each key's newest promotion not rolled back nor demoted) against 100,000 promotion
events (50 nodes x 20 jobs x 100 keys), for one node (a `recheck --node`) and ten (an `--all-nodes` of a GPU
kind). The events table has no index on its node: the question is one scan, and its rows are read in Python.

Run: python benchmarks/store_readers_bench.py [--url postgresql://...]  (default: a fresh SQLite file)
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from orchestrator.store import Store, schema
from orchestrator.store.query import promoted_on

T = "a8w8_blockscale_tuned_gemm.csv"


def fill(store, nodes: int = 50, jobs: int = 20, keys: int = 100) -> int:
    with store.engine.begin() as conn:
        jrec, ev = [], []
        for n in range(nodes):
            for j in range(jobs):
                uid = f"{n:03d}{j:03d}".ljust(40, "0")
                jrec.append({"uid": uid, "job_id": f"j{n}-{j}", "origin": "lap:/ws", "node": f"n{n}",
                             "container": "c", "variant": "a8w8_blockscale", "gfx": "gfx950", "cu_num": 256})
                ev += [{"kind": "promotion", "natural": f"{uid}|{T}|{k}", "job_uid": uid, "table_name": T,
                        "row_key": f"m={k},n={j * 64},k=7168", "gfx": "gfx950", "cu_num": 256, "node": f"n{n}",
                        "at": float(j), "detail": None} for k in range(keys)]
        store.upsert(conn, schema.jobs, jrec, ["uid"])
        for i in range(0, len(ev), 5000):
            store.upsert(conn, schema.events, ev[i:i + 5000], ["kind", "natural"], update=False)
    return len(ev)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=None, help="a store URL (default: a fresh SQLite file)")
    args = ap.parse_args()
    url = args.url or f"sqlite:///{Path(tempfile.mkdtemp(prefix='readers-bench-')) / 'store.sqlite'}"
    store = Store.open(url)
    t0 = time.perf_counter()
    n = fill(store)
    print(f"{n} promotion events written in {time.perf_counter() - t0:.2f} s ({store.dialect})")
    for nodes in (["n7"], [f"n{i}" for i in range(10)]):
        t0 = time.perf_counter()
        got = promoted_on(store, nodes)
        print(f"promoted_on({len(nodes)} node(s)): {len(got)} live rows in {(time.perf_counter() - t0) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
