"""Comparison statistics: per-shape notes, counts and speedups per summary, group and size class."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from .compare_values import (SIZE_CLASS_NA, SIZE_CLASSES, STATUSES, Side, group_frame, round_or_none,
                             size_class_range)


def row_note(b: Side | None, a: Side | None, judged: bool = False) -> str:
    parts = []
    if b is None:
        parts.append("not in before run")
    elif b.mean is None:
        parts.append("no before value")
    elif not b.mean > 0:
        parts.append("before value not positive")
    if a is None:
        parts.append("not in after run")
    elif a.mean is None:
        parts.append("no after value")
    elif not a.mean > 0:
        parts.append("after value not positive")
    for name, s in (("before", b), ("after", a)):
        if s is not None and s.n > 1:
            txt = f"{name}: {'median' if judged else 'mean'} of {s.n}"
            if s.spread_pct is not None:
                txt += f" (spread {s.spread_pct:.2f}%)"
            parts.append(txt)
    return "; ".join(parts)


def group_of(k: tuple, key_columns: tuple[str, ...], group_columns: tuple[str, ...]) -> tuple:
    return tuple(k[key_columns.index(c)] for c in group_columns)


def _stats(recs: list[dict[str, Any]]) -> dict[str, Any]:
    sps = [r["speedup_pct"] for r in recs if r["speedup_pct"] is not None]
    ratios = [r["ratio"] for r in recs if r["ratio"] is not None]
    counts = {s: sum(1 for r in recs if r["status"] == s) for s in STATUSES}
    gm = math.exp(math.fsum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
    return {
        "shapes": len(recs),
        "compared": len(sps),
        **counts,
        "mean_speedup_pct": round(math.fsum(sps) / len(sps), 2) if sps else None,
        "min_speedup_pct": min(sps) if sps else None,
        "max_speedup_pct": max(sps) if sps else None,
        "geomean_speedup_pct": None if gm is None else round((gm - 1.0) * 100.0, 2),
        "_geomean_ratio": gm,
    }


def summarize(records, key_columns, metric, higher_is_better, noise_pct) -> dict[str, Any]:
    st = _stats(records)
    compared = [r for r in records if r["speedup_pct"] is not None]
    sps = sorted(r["speedup_pct"] for r in compared)
    median = None
    if sps:
        mid = len(sps) // 2
        median = sps[mid] if len(sps) % 2 else round((sps[mid - 1] + sps[mid]) / 2, 2)

    def pick(rec):
        if rec is None:
            return None
        return {"key": {c: rec[c] for c in key_columns}, "speedup_pct": rec["speedup_pct"]}

    best = max(compared, key=lambda r: r["speedup_pct"], default=None)
    worst = min(compared, key=lambda r: r["speedup_pct"], default=None)
    gm = st["_geomean_ratio"]
    return {
        "metric": metric,
        "direction": "higher is better" if higher_is_better else "lower is better",
        "higher_is_better": higher_is_better,
        "noise_pct": float(noise_pct),
        "shapes": st["shapes"],
        "compared": st["compared"],
        "improved": st["improved"],
        "regressed": st["regressed"],
        "unchanged": st["unchanged"],
        "missing": st["missing"],
        "only_before": sum(1 for r in records if r["_in_before"] and not r["_in_after"]),
        "only_after": sum(1 for r in records if r["_in_after"] and not r["_in_before"]),
        "repeated": sum(1 for r in records if r["before_n"] > 1 or r["after_n"] > 1),
        "avg_speedup_pct": st["mean_speedup_pct"],
        "median_speedup_pct": median,
        "min_speedup_pct": st["min_speedup_pct"],
        "max_speedup_pct": st["max_speedup_pct"],
        "geomean_ratio": round_or_none(gm, 6),
        "geomean_speedup_pct": st["geomean_speedup_pct"],
        "best": pick(best),
        "worst": pick(worst),
    }


def group_stats(records, group_columns, size_column) -> tuple[pd.DataFrame, pd.DataFrame]:
    order = [name for name, _, _ in SIZE_CLASSES] + [SIZE_CLASS_NA]
    grouped: dict[tuple, list[dict[str, Any]]] = {}
    for r in records:  # records are already in group order
        grouped.setdefault(tuple(r[c] for c in group_columns), []).append(r)
    by_rows, per_rows = [], []
    for g, recs in grouped.items():
        base = dict(zip(group_columns, g))
        for cls in order:
            sub = [r for r in recs if r["size_class"] == cls]
            if not sub:
                continue
            st = _stats(sub)
            st.pop("_geomean_ratio")
            by_rows.append({**base, "size_class": cls, "range": size_class_range(cls), **st})
        st = _stats(recs)
        st.pop("_geomean_ratio")
        per_rows.append({**base, "size_class": "all", "range": "", **st})
    return group_frame(by_rows, group_columns), group_frame(per_rows, group_columns)


def expected_gain_pct(rows, judged: bool, higher_is_better: bool) -> float:
    """Amdahl over the rows proven faster (issue 38): the sum of each row's ``time_share`` x the fraction of its
    time saved, in % of the profiled server's GPU time."""
    saved = 0.0
    for r in rows.to_dict("records"):
        before, after = r.get("before"), r.get("after")
        faster = r.get("verdict" if judged else "status") == "improved"
        if faster and before and after and not (math.isnan(before) or math.isnan(after)):
            ratio = (before / after) if higher_is_better else (after / before)
            saved += r["time_share"] * max(0.0, 1.0 - ratio)
    return round(100.0 * saved, 3)
