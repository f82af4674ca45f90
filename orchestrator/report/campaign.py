"""A campaign's report: the single job's report over each variant's merged comparison, then the campaign's own parts.

``campaign_report(facts, comparisons) -> (markdown, html)``, rendered by the single job's jinja2 machinery:
``campaign.md.j2`` includes ``report.md.j2`` and ``campaign.html.j2`` the body of ``report.html.j2`` once per
variant (summary with verdict counts, charts, the per-shape table with verdicts, ``node`` its first key column so
every row says which target measured it); the campaign's facts, its targets, the promotion across kinds and the
plan around them, in both files. ``facts`` is plain data (``campaign/merge.py``: ``campaign_facts``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import environment, finish_markdown
from .view import build_view


def _records(path: Path) -> list[dict]:
    import pandas as pd
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    if "node" in df:
        df = df[["node"] + [c for c in df.columns if c != "node"]]
    return df.to_dict("records")


_COPIED = ("verdict", "promoted", "noise_pct", "threshold_pct", "p_value", "before_n", "after_n", "before_err",
           "after_err", "err_worse", "gain_hl_pct", "gain_lo_pct", "gain_hi_pct", "gain_conf_pct")  # issue 37: last 4


def merged_comparison(rows: list[dict]):
    """The merged rows as a Comparison: ``node`` a key column (the table says which target measured each shape),
    the charts and group tables per key without it (one per (N,K) or MoE config over all targets), and the
    verdicts copied from the merged comparison.csv (each target judged its own samples; a shape measured again
    after the promotion across its kind carries that verdict), never recomputed here."""
    import math
    from ..outcome.compare import Comparison
    from ..outcome.compare_stats import group_stats
    from ..outcome.compare_values import VERDICT_STATUS, rows_frame
    from ..outcome.keys import norm_key_value
    cmp = Comparison.from_records(rows)
    if "verdict" not in (rows[0] if rows else {}):
        return cmp
    cols = cmp.key_columns
    by_key = {tuple(norm_key_value(r.get(c)) for c in cols): r for r in rows}
    groups = tuple(c for c in cmp.group_columns if c != "node")
    recs, order = [], {}
    for rec in cmp.rows.to_dict("records"):
        rec = {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in rec.items()}
        src = by_key.get(tuple(norm_key_value(rec[c]) for c in cols)) or {}
        rec.update({c: (src[c] if src[c] != "" else None) for c in _COPIED if c in src})
        verdict = str(rec.get("verdict") or "")
        rec["status"] = "missing" if rec.get("speedup_pct") is None else VERDICT_STATUS.get(verdict, rec["status"])
        rec["_in_before"], rec["_in_after"] = rec.get("before") is not None, rec.get("after") is not None
        order.setdefault(tuple(rec[c] for c in groups), len(order))
        recs.append(rec)
    size = cmp.size_column
    recs.sort(key=lambda r: (order[tuple(r[c] for c in groups)], float(r[size]) if size else 0, str(r["node"])))
    summary = dict(cmp.summary)
    counts = {s: sum(1 for r in recs if r["status"] == s) for s in ("improved", "regressed", "unchanged", "missing")}
    summary.update(counts, promoted=sum(1 for r in recs if str(r.get("promoted")) == "true"),
                   verdicts={v: sum(1 for r in recs if r.get("verdict") == v)
                             for v in dict.fromkeys([*VERDICT_STATUS, *(str(r.get("verdict")) for r in recs)])},
                   samples={"before": max((int(r.get("before_n") or 0) for r in recs), default=0),
                            "after": max((int(r.get("after_n") or 0) for r in recs), default=0)})
    by_group, per_group = group_stats(recs, groups, size)
    return Comparison(key_columns=cols, metric=cmp.metric, higher_is_better=cmp.higher_is_better,
                      noise_pct=cmp.noise_pct, size_column=size, group_columns=groups,
                      rows=rows_frame(recs, cols), summary=summary, by_group=by_group, per_group=per_group,
                      judged=True)


AGAIN_INTRO = ("Shapes whose own target found no kernel, or whose row another target replaced, were measured again "
               "on their target once the rows of the other targets of its kind were in its live table (the row that "
               "serves each is named); `after` in comparison.csv is that value")


def _utc(epoch: float | None = None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def campaign_view(facts: Mapping[str, Any]) -> dict:
    """The campaign's own parts, formatted for the templates."""
    targets = [{**t, "kind": t.get("kind") or "-", "report": t.get("report") or "-",
                "state": t["state"] + (f" ({t['error']})" if t.get("error") else "")} for t in facts["targets"]]
    results = [{"variant": r["variant"], "path": r["path"], "shapes": r["shapes"], "faster": r.get("faster", "-"),
                "slower": r.get("slower", "-"), "median": r.get("median", "-"),
                "verdicts": ", ".join(f"{k} {n}" for k, n in (r.get("verdicts") or {}).items())}
               for r in facts["results"]]
    return {"title": f"Campaign {facts['job_id']}", "generated_at": _utc(), "state": facts["state"],
            "error": facts.get("error"), "variants": facts["variants"], "target_count": facts["target_count"],
            "later": [{"at": _utc(c["at"]), "command": c["command"], "lines": c.get("lines") or []}
                      for c in facts.get("later") or []],
            "targets": targets, "lost": facts.get("lost") or [], "results": results,
            "spread": facts.get("spread") or [], "again": facts.get("again") or [], "again_intro": AGAIN_INTRO,
            "plan": facts.get("plan") or []}


def campaign_report(facts: Mapping[str, Any], comparisons: Mapping[str, Path]) -> tuple[str, str]:
    """Return (markdown, html): the campaign's facts, one job report per variant over all its targets, the rest."""
    views = []
    for variant, path in comparisons.items():
        rows = _records(path)
        views.append(build_view({"job": {"id": facts["job_id"], "state": facts["state"], "variant": variant},
                                 "comparison": merged_comparison(rows) if rows else None}))
    c = campaign_view(facts)
    md = finish_markdown(environment(False).get_template("campaign.md.j2").render(c=c, views=views), views)
    return md, environment(True).get_template("campaign.html.j2").render(c=c, views=views)
