"""Serving benchmark figures (vLLM's benchmark_serving / SGLang's bench_serving output) -> serving.csv.

Lines like ``Request throughput (req/s):   2.37`` or ``Mean TTFT (ms):  123.4``; the last value of a
metric in a log wins. serving.csv: metric,before,after,change_pct (after vs before, raw: for throughput
higher is better, for latencies (ms) lower is).
"""

from __future__ import annotations

import csv
import io
import re

_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9 ./\-]*?\((?:req/s|tok/s|ms|s)\))\s*:\s*([0-9]+(?:\.[0-9]+)?)\s*$",
                   re.MULTILINE)


def parse(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, value in _LINE.findall(text or ""):
        out[name.strip()] = float(value)
    return out


def better(metric: str, change_pct: float) -> bool:
    return change_pct < 0 if metric.endswith("(ms)") or metric.endswith("(s)") else change_pct > 0


def table(before: dict[str, float], after: dict[str, float]) -> list[dict]:
    rows = []
    for m in [*before, *[x for x in after if x not in before]]:
        b, a = before.get(m), after.get(m)
        ch = round((a / b - 1) * 100, 2) if a is not None and b else None
        rows.append({"metric": m, "before": b, "after": a, "change_pct": ch})
    return rows


def csv_text(rows: list[dict]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["metric", "before", "after", "change_pct"], lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if v is None else v for k, v in r.items()})
    return buf.getvalue()
